//! Scenario files: the YAML format (v1), loading, and validation into a [`Scenario`].
//!
//! A scenario names its actors (connections) and lists steps that run in order.
//! Every error found while loading names `file:line:column`. The format is
//! documented for users in the book (`docs/src/scenario-format.md`).
//!
//! The pieces, in the order a file goes through them: [`raw`] (what serde
//! reads, and the JSON Schema), `params` (one instance per parameter
//! combination), [`template`] (the one `${name}` scanner), `validate` (typed
//! steps, or located errors), [`steps`] (each step kind in a file of its
//! own: its raw fields, its checks, its typed step and how it runs).

mod params;
pub mod raw;
mod scalar;
pub mod steps;
pub mod template;
pub mod trials;
pub mod user_report;
pub(crate) mod validate;
pub(crate) mod yaml;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// An error in a scenario file, with the place it was found.
pub use locklab_core::FileError as ScenarioError;
/// A position in a scenario file (1-based line and column).
pub use locklab_core::Pos;
pub use raw::{Action, Bounds, Network, OnTimeout, Process, RowsExpect, Scalar, Via, When, json_schema};
pub use steps::fault::Fault;
pub use steps::library::{LibraryCallRaw, MigrateRaw};
pub use steps::lock_guard::GuardEndRaw;
pub use steps::observe::{ObserveDetail, ObserveKind};
pub use steps::restart::RestartMode;
pub use steps::transaction::Transaction;
pub use steps::{
    AbandonStep, AwaitStep, BackgroundStep, BlockedStep, CheckoutStep, ClientBound, Declaration, DisconnectStep,
    FaultStep, GrantedStep, GuardStep, HeldCountStep, LibraryStep, ObserveExpect, ObserveStep, OrderStep, Placement,
    RestartStep, ReturnStep, SqlExpect, SqlStep, Step, StepKind, TransactionStep,
};
pub use trials::{Invariant, InvariantCheck, Possible, RandomValue, Trials, row_name};

use params::{expand_params, instance_suffix, neutralize_placeholders, substitute_params, without_params_and_comments};
use raw::{ParamsOnly, RawScenario};
use validate::Validator;
use yaml::yaml_error;

/// Default deadline of one step, in ms (10 s).
pub const DEFAULT_STEP_DEADLINE_MS: u64 = 10_000;
/// Default maximum pool size, in connections.
pub const DEFAULT_POOL_MAX_SIZE: u32 = 4;
/// Largest deadline a scenario may ask for, in ms (10 min).
pub const MAX_STEP_DEADLINE_MS: u64 = 600_000;

/// The tags a scenario may carry (`tags:`), with what each set is for.
pub const TAGS: &[(&str, &str)] = &[
    (
        "pooler",
        "the pooler conformance kit: what a pooler must do with advisory locks (locklab pooler-check)",
    ),
    (
        REFUSAL_TAG,
        "proves the lock crate's refusal of session-level locks behind transaction pooling: its session-level \
         steps run on the crate's columns there, where the crate's other session-level scenarios are n/a",
    ),
];

/// The tag of the scenario whose session-level lock-crate steps run behind
/// transaction pooling, to prove the crate refuses them ([`TAGS`]).
pub const REFUSAL_TAG: &str = "refusal";

/// A validated scenario (one instance of a file: a file with `params` gives one
/// instance per combination).
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Unique name: the file stem, plus `[param=value,…]` for a parameterised
    /// instance, e.g. `extreme-keys[key=-1]`.
    pub name: String,
    /// The file's `name:` (equal to the file stem), shared by all its instances.
    pub family: String,
    /// This instance's parameters in file order, as text (empty without `params`).
    pub params: Vec<(String, String)>,
    /// One or two sentences: the behaviour this file states.
    pub description: String,
    /// Where the claim comes from (guide section, PostgreSQL docs section).
    pub source: Option<String>,
    /// Why its readings vary from run to run by nature (`readings_vary:`):
    /// its cells compare with the baseline by status alone
    /// ([`crate::outcome::RunResult::readings_vary`]).
    pub readings_vary: Option<String>,
    /// The user's report it re-enacts (`report:`; every `report-*` file
    /// has one): where it was filed, what the user saw, which readings show it.
    pub report: Option<user_report::UserReport>,
    /// The sets it belongs to (`tags:`), each one of [`TAGS`].
    pub tags: Vec<String>,
    /// The file it was loaded from.
    pub file: PathBuf,
    /// Where `name:` is in the file.
    pub name_pos: Pos,
    /// Maximum pool size for pooled actors (connections).
    pub pool_max_size: u32,
    /// Connection settings of every pooled connection.
    pub pool_settings: Settings,
    /// `pooler.server_connections`: behind a transaction-mode pooler, the
    /// most server connections it may hold for the cell's database (1–16);
    /// the cell gets a pooler instance of its own started with that limit
    /// ([`crate::server::Server::route_capped`]). `None`: the column's
    /// usual pooler.
    pub pooler_server_connections: Option<u32>,
    /// Where the pool under test lives: `Harness` (in the harness's own
    /// process) or `Child` (`pool.process: child`: in a process of its own,
    /// which `do: crash` on a pool actor kills with SIGKILL).
    pub pool_process: Process,
    /// `ALTER DATABASE … SET` settings of the run's database.
    pub server_settings: Settings,
    /// SQL run before the actors connect, each with its place in the file.
    pub setup: Vec<(String, Pos)>,
    /// SQL run after the last step, each with its place in the file.
    pub teardown: Vec<(String, Pos)>,
    /// Actors in file order.
    pub actors: Vec<Actor>,
    /// Steps in execution order.
    pub steps: Vec<Step>,
    /// Run the steps many times within the cell (`trials:`), with what
    /// varies per trial and what must hold in each.
    pub trials: Option<Trials>,
}

impl Scenario {
    /// Whether it is one of the lock crate's scenarios (a `library:
    /// pg-advisory-lock…` step): those run on the crate's columns only, and
    /// the others not there (`runner/place.rs`).
    pub fn uses_lock_crate(&self) -> bool {
        self.steps
            .iter()
            .any(|s| matches!(&s.kind, StepKind::Library(l) if l.library.is_lock_crate()))
    }

    /// Whether a step of a pool actor expects notices (`expect: notices:`)
    /// on a pooling column (a `when: direct` step runs on the unpooled
    /// column only, whose connections pass notices on): such a scenario is
    /// `n/a` on a column whose library does not pass notices on
    /// ([`locklab_drivers::Notices`]).
    pub fn expects_pool_notices(&self) -> bool {
        let pooled = |actor: usize| self.actors[actor].via == Via::Pool;
        let notices = |e: &Option<SqlExpect>| e.as_ref().is_some_and(|e| e.notices.is_some());
        self.steps.iter().any(|s| match &s.kind {
            StepKind::Sql(q) => pooled(q.actor) && q.when != Some(When::Direct) && notices(&q.expect),
            StepKind::Await(a) => pooled(a.actor) && notices(&a.expect),
            StepKind::Transaction(t) => pooled(t.actor) && notices(&t.expect),
            _ => false,
        })
    }

    /// The names of its report rows, in step order: each step's `record:`,
    /// then one row per invariant of a race scenario (`invariant NAME`).
    pub fn records(&self) -> Vec<String> {
        self.steps
            .iter()
            .filter_map(|st| st.record.clone())
            .chain(
                self.trials
                    .iter()
                    .flat_map(|t| t.invariants.iter())
                    .map(|i| row_name(&i.name)),
            )
            .collect()
    }

    /// Where each cell of the scenario runs, from its steps' declarations
    /// ([`Declaration::placement`]) and its actors: on a local cluster of its
    /// own, started for it and removed after it, when a step restarts the
    /// server; on the fault cells' server ([`crate::faults::server`]) when
    /// an actor has `network: namespace` (the shared one cannot be reached
    /// from the namespace); else on the column's server. (The validator
    /// refuses a scenario that would need both servers of its own.)
    pub fn placement(&self) -> Placement {
        let steps = self.steps.iter().map(|s| s.kind.declaration().placement);
        let actors = self
            .actors
            .iter()
            .filter(|a| a.network == Network::Namespace)
            .map(|_| Placement::FaultServer);
        steps.chain(actors).max().unwrap_or(Placement::ColumnServer)
    }

    /// Whether each cell of the scenario runs on a local cluster of its own
    /// ([`Placement::OwnCluster`]).
    pub fn needs_own_cluster(&self) -> bool {
        self.placement() == Placement::OwnCluster
    }

    /// Whether the scenario runs on the fault cells' server
    /// ([`Placement::FaultServer`]).
    pub fn needs_fault_server(&self) -> bool {
        self.placement() == Placement::FaultServer
    }

    /// Whether the scenario's cells mostly wait for the server's timers
    /// rather than use CPU: each restarts a cluster of its own, cuts a
    /// connection ([`Placement::FaultServer`]), or waits in a `granted` step
    /// for a fault's effect (seconds). The matrix runs them in a lane of
    /// their own (`matrix::Lane`).
    pub fn mostly_waits(&self) -> bool {
        self.placement() != Placement::ColumnServer
            || self.steps.iter().any(|st| matches!(st.kind, StepKind::Granted(_)))
    }

    /// Whether the scenario's SQL (setup, steps, teardown) may leave
    /// something in the run's database beyond its sessions: a statement with
    /// a word that creates, changes or removes objects or rows, or changes
    /// settings or privileges (`create`, `alter`, `drop`, `insert`,
    /// `update`, `comment`, …; `for update` counts too). Such a cell gets a
    /// database of its own, created for it and dropped after it; the others
    /// may run in one an earlier cell left clean (see the runner's phase 1).
    /// A `library: sqlx-migrator` step counts too (it makes tables). Errs on
    /// the side of `true`: a word in a string literal counts.
    pub fn may_change_the_database(&self) -> bool {
        static WORDS: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
        let words = WORDS.get_or_init(|| {
            regex::Regex::new(
                r"(?i)\b(create|alter|drop|grant|revoke|comment|security|truncate|insert|update|delete|merge|copy|vacuum|analyze|cluster|reindex|import|refresh|call|do|lo_\w+|nextval|setval)\b",
            )
            .expect("a valid regex")
        });
        self.setup
            .iter()
            .chain(&self.teardown)
            .map(|(sql, _)| sql.as_str())
            .chain(self.steps.iter().filter_map(|st| match &st.kind {
                StepKind::Sql(SqlStep { sql, .. }) | StepKind::Background(BackgroundStep { sql, .. }) => Some(sql.as_str()),
                _ => None,
            }))
            .any(|sql| words.is_match(sql))
            // `held_count` installs its probe function (`crate::held_count`).
            || self.steps.iter().any(|st| matches!(st.kind, StepKind::HeldCount(_)))
            // sqlx's migrator makes its table and the migration's.
            || self.steps.iter().any(|st| {
                matches!(&st.kind, StepKind::Library(l)
                    if matches!(l.call, locklab_drivers::libraries::LibraryCall::Migrate(_)))
            })
    }

    /// `file:line:column` of `pos` in this scenario's file; a file of this
    /// workspace by its path from the workspace's root
    /// (`scenarios/unlock-all.yaml:9:13`, as reports and baselines keep it:
    /// no machine's path), another by the path it was loaded from.
    pub fn at(&self, pos: Pos) -> String {
        let root = crate::server::workspace_root();
        let file = self.file.strip_prefix(&root).unwrap_or(&self.file);
        format!("{}:{}:{}", file.display(), pos.line, pos.column)
    }
}

/// An actor: a named connection.
#[derive(Clone, Debug)]
pub struct Actor {
    /// Name used in steps.
    pub name: String,
    /// Pooled or direct.
    pub via: Via,
    /// Connection settings of a direct actor; empty for pool actors.
    pub settings: Settings,
    /// Where a direct actor's connection lives (pool actors: `Harness`).
    pub process: Process,
    /// How a direct actor reaches the server (pool actors: `Loopback`).
    pub network: Network,
}

/// Settings (`pool.settings`, an actor's `settings`, `server_settings`): name
/// and value as PostgreSQL text, in file order, and where the map is in the
/// file (for run-time errors such as an unknown parameter name).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    /// (name, value) pairs, e.g. `("lock_timeout", "200ms")`.
    pub list: Vec<(String, String)>,
    /// Where the map starts in the file.
    pub pos: Pos,
}

impl Settings {
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// Loads and validates every `*.yaml` file in `dir`, sorted by file name.
/// Other files are ignored.
///
/// # Errors
/// Every problem found, across all files (an unreadable directory is one error
/// at 1:1 of the directory).
pub fn load_dir(dir: &Path) -> Result<Vec<Scenario>, Vec<ScenarioError>> {
    let files = locklab_core::located::yaml_files(dir, "scenario").map_err(|e| vec![e])?;
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        match load_file(&f) {
            Ok(mut s) => out.append(&mut s),
            Err(mut e) => errors.append(&mut e),
        }
    }
    let mut seen: HashMap<&str, &Path> = HashMap::new();
    for s in &out {
        if let Some(first) = seen.insert(&s.name, &s.file)
            && first != s.file
        {
            errors.push(ScenarioError::at_start(
                &s.file,
                format!("scenario name '{}' is also used by {}", s.name, first.display()),
            ));
        }
    }
    if errors.is_empty() { Ok(out) } else { Err(errors) }
}

/// Loads and validates one scenario file: one [`Scenario`], or one per
/// combination of its `params`.
///
/// # Errors
/// Syntax errors, type errors and unknown keys (first one found), or every
/// semantic error found by validation, each with `file:line:column`.
pub fn load_file(path: &Path) -> Result<Vec<Scenario>, Vec<ScenarioError>> {
    let fail = |message: String| vec![ScenarioError::at_start(path, message)];
    // Not read into memory when it is far too large to be a scenario.
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_FILE_BYTES as u64 + 1), &mut bytes))
        .map_err(|e| fail(format!("cannot read file: {e}")))?;
    if bytes.len() > MAX_FILE_BYTES {
        return Err(fail(format!(
            "the file has more than {MAX_FILE_BYTES} bytes, the most a scenario file may have"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        // Where the first byte that is not UTF-8 is.
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        // YAML's line breaks: \n, \r\n, or a lone \r.
        let line = good
            .iter()
            .enumerate()
            .filter(|&(i, &b)| b == b'\n' || (b == b'\r' && good.get(i + 1) != Some(&b'\n')))
            .count()
            + 1;
        let line_start = good
            .iter()
            .rposition(|&b| b == b'\n' || b == b'\r')
            .map_or(0, |i| i + 1);
        let column = String::from_utf8_lossy(&good[line_start..]).chars().count() + 1;
        vec![ScenarioError {
            file: path.to_owned(),
            pos: Pos {
                line: line as u64,
                column: column as u64,
            },
            message: "the file is not UTF-8 text (this byte starts an invalid sequence)".to_owned(),
        }]
    })?;
    let scenarios = parse(path, &text)?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    if let Some(s) = scenarios.first()
        && s.family != stem
    {
        return Err(vec![ScenarioError {
            file: path.to_owned(),
            pos: s.name_pos,
            message: format!(
                "scenario name '{}' differs from the file name; rename one of them to match ('{stem}')",
                s.family
            ),
        }]);
    }
    Ok(scenarios)
}

/// Largest scenario file, in bytes (1 MiB; the shipped ones have a few KiB).
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// Most instances one file may expand to through `params`.
pub const MAX_INSTANCES: usize = 64;

/// Parses and validates scenario text; `path` is used in error messages only
/// (so, unlike [`load_file`], the name is not compared with the file name).
/// A file with `params` yields one scenario per combination, in order.
///
/// # Errors
/// As [`load_file`]. An error that only some parameter combinations have is
/// prefixed with the combination, e.g. `with key=-1: …`.
pub fn parse(path: &Path, text: &str) -> Result<Vec<Scenario>, Vec<ScenarioError>> {
    if text.len() > MAX_FILE_BYTES {
        return Err(vec![ScenarioError::at_start(
            path,
            format!(
                "the file has {} bytes; a scenario file may have at most {MAX_FILE_BYTES}",
                text.len()
            ),
        )]);
    }
    if text.split(['\n', '\r']).all(|l| {
        let l = l.trim();
        l.is_empty() || l.starts_with('#') || l == "---" || l == "..."
    }) {
        return Err(vec![ScenarioError::at_start(
            path,
            "the file is empty; a scenario needs name, description, actors and steps",
        )]);
    }
    // Placeholders are not YAML everywhere (`{ value: ${key} }`): read `params`
    // from a copy where each `${name}` is letters of the same width.
    let head: ParamsOnly =
        serde_saphyr::from_str(&neutralize_placeholders(text)).map_err(|e| vec![yaml_error(path, &e)])?;
    let instances = match head.params {
        None => vec![Vec::new()],
        Some(p) => {
            let pos = Pos::of(&p.referenced);
            let combos = expand_params(path, p)?;
            let body = without_params_and_comments(text);
            for (name, _) in combos.first().into_iter().flatten() {
                if !body.contains(&format!("${{{name}}}")) {
                    return Err(vec![ScenarioError {
                        file: path.to_owned(),
                        pos,
                        message: format!("parameter '{name}' is never used as '${{{name}}}'"),
                    }]);
                }
            }
            combos
        }
    };
    let mut out = Vec::new();
    // Each parameter set's errors, positions mapped back to the file as written.
    let mut per_instance: Vec<Vec<ScenarioError>> = Vec::new();
    for params in &instances {
        let (expanded, shifts) = substitute_params(text, params);
        let result = serde_saphyr::from_str::<RawScenario>(&expanded)
            .map_err(|e| vec![yaml_error(path, &e)])
            .and_then(|raw| {
                Validator {
                    file: path,
                    errors: Vec::new(),
                    params,
                }
                .run(raw)
            });
        match result {
            Ok(s) => out.push(s),
            Err(mut errs) => {
                for e in &mut errs {
                    e.pos = shifts.original(e.pos);
                }
                per_instance.push(errs);
                continue;
            }
        }
        per_instance.push(Vec::new());
    }
    // An error every set has is reported once; one only some have names the set.
    let mut errors: Vec<ScenarioError> = Vec::new();
    let mut seen: Vec<(Pos, String)> = Vec::new();
    for (params, errs) in instances.iter().zip(&per_instance) {
        for e in errs {
            let key = (e.pos, e.message.clone());
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let every = per_instance
                .iter()
                .all(|other| other.iter().any(|x| x.pos == e.pos && x.message == e.message));
            let mut e = e.clone();
            if !every {
                e.message = format!("with {}: {}", instance_suffix(params), e.message);
            }
            errors.push(e);
        }
    }
    if errors.is_empty() { Ok(out) } else { Err(errors) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped scenarios whose SQL creates or writes something are the
    /// ones that must keep a database of their own; plain lock scenarios may share.
    #[test]
    fn scenarios_that_write_to_their_database_are_told_apart() {
        let all = load_dir(&crate::server::workspace_root().join("scenarios")).unwrap();
        let writes = |family: &str| {
            let s = all.iter().find(|s| s.family == family).unwrap();
            s.may_change_the_database()
        };
        // `create table jobs`, `update … for update skip locked`.
        assert!(writes("skip-locked-job-claim"));
        for family in [
            "xact-lock-competition",
            "session-lock-pool-return",
            "lock-timeout-200ms",
            "unlock-all",
        ] {
            assert!(!writes(family), "{family}");
        }
        let inline = |sql: &str| {
            let text = format!(
                "name: t\ndescription: d\nactors: {{ a: {{ via: direct }} }}\nsteps:\n  - {{ actor: a, sql: \"{sql}\" }}\n"
            );
            parse(Path::new("t.yaml"), &text)
                .unwrap()
                .remove(0)
                .may_change_the_database()
        };
        assert!(inline("create temp table x (i int)"));
        assert!(inline("ALTER DATABASE x SET lock_timeout = 1"));
        assert!(inline("select nextval('s')"));
        assert!(!inline("select pg_advisory_lock(1)"));
        assert!(!inline("select pg_try_advisory_xact_lock(7), pg_advisory_unlock_all()"));
    }

    /// A pool actor's `sql`, `await` or transaction step that expects
    /// notices makes the scenario need a column that passes them on; a
    /// direct actor's, or a `when: direct` step's, does not.
    #[test]
    fn the_steps_that_need_a_pool_actors_notices() {
        let needs = |step: &str| {
            let text = format!(
                "name: t\ndescription: d\nactors: {{ p: {{ via: pool }}, d: {{ via: direct }} }}\nsteps:\n  - {{ actor: p, do: checkout }}\n  - {step}\n  - {{ actor: p, do: return }}\n"
            );
            parse(Path::new("t.yaml"), &text)
                .unwrap_or_else(|e| panic!("{step}: {e:?}"))
                .remove(0)
                .expects_pool_notices()
        };
        let warning = r#"notices: ["^WARNING"]"#;
        assert!(needs(&format!(
            "{{ actor: p, sql: select pg_advisory_unlock(1), expect: {{ {warning} }} }}"
        )));
        assert!(needs(&format!("{{ actor: p, do: commit, expect: {{ {warning} }} }}")));
        assert!(!needs(&format!(
            "{{ actor: d, sql: select pg_advisory_unlock(1), expect: {{ {warning} }} }}"
        )));
        assert!(!needs(&format!(
            "{{ actor: p, sql: select pg_advisory_unlock(1), when: direct, expect: {{ {warning} }} }}"
        )));
        assert!(!needs(
            "{ actor: p, sql: select pg_advisory_unlock(1), expect: { value: false } }"
        ));
    }
}
