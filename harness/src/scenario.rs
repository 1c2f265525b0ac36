//! Scenario files: the YAML format (v1), loading, and validation into a [`Scenario`].
//!
//! A scenario names its actors (connections) and lists steps that run in order.
//! Every error found while loading names `file:line:column`. The format is
//! documented for users in the README ("Scenario format").

use std::collections::HashMap;

use indexmap::IndexMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use serde_saphyr::Spanned;

use crate::keys::AdvisoryKey;

/// Default deadline of one step, in ms (10 s).
pub const DEFAULT_STEP_DEADLINE_MS: u64 = 10_000;
/// Default maximum pool size, in connections.
pub const DEFAULT_POOL_MAX_SIZE: u32 = 4;
/// Largest deadline a scenario may ask for, in ms (10 min).
pub const MAX_STEP_DEADLINE_MS: u64 = 600_000;

/// A position in a scenario file: 1-based line and column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
}

impl Pos {
    fn of(loc: &serde_saphyr::Location) -> Pos {
        Pos {
            line: loc.line(),
            column: loc.column(),
        }
    }
}

/// An error in a scenario file, with the place it was found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}:{}:{}: {message}", file.display(), pos.line, pos.column)]
pub struct ScenarioError {
    /// The file.
    pub file: PathBuf,
    /// Where in it.
    pub pos: Pos,
    /// What is wrong, in one sentence.
    pub message: String,
}

// ---------------------------------------------------------------------------
// The file format (what serde reads). Unknown keys are errors everywhere.
// ---------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Spanned<String>,
    description: String,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    pool: RawPool,
    #[serde(default)]
    step_deadline_ms: Option<Spanned<i64>>,
    actors: Spanned<IndexMap<String, Spanned<RawActor>>>,
    steps: Spanned<Vec<Spanned<RawStep>>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPool {
    #[serde(default)]
    max_size: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawActor {
    via: Via,
}

/// How an actor gets its connection.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// A checkout from the driver under test (`checkout` / `return` steps).
    Pool,
    /// A dedicated tokio-postgres connection the harness owns for the whole run,
    /// never pooled: the observer.
    Direct,
}

/// Transaction and pool control steps (`do:`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Check a connection out of the pool (direct driver: open one).
    Checkout,
    /// Give the connection back with no cleanup (direct driver: close it).
    Return,
    /// `BEGIN`.
    Begin,
    /// `COMMIT`.
    Commit,
    /// `ROLLBACK`.
    Rollback,
}

impl Action {
    /// The SQL a transaction-control action sends, `None` for checkout/return.
    pub fn transaction_sql(self) -> Option<&'static str> {
        match self {
            Action::Begin => Some("begin"),
            Action::Commit => Some("commit"),
            Action::Rollback => Some("rollback"),
            Action::Checkout | Action::Return => None,
        }
    }
}

/// What an observer can snapshot (`observe:`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ObserveKind {
    /// `pg_locks` (advisory rows of the run's database) joined to `pg_stat_activity`.
    AdvisoryLocks,
}

/// Which driver kinds a step applies to (`when:`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum When {
    /// Only drivers that pool connections.
    Pooled,
    /// Only the direct (unpooled) driver.
    Direct,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    #[serde(default)]
    actor: Option<Spanned<String>>,
    #[serde(default)]
    id: Option<Spanned<String>>,
    #[serde(default)]
    sql: Option<String>,
    #[serde(default, rename = "do")]
    action: Option<Action>,
    #[serde(default)]
    observe: Option<ObserveKind>,
    #[serde(default)]
    key: Option<AdvisoryKey>,
    #[serde(default)]
    blocked: Option<Spanned<String>>,
    #[serde(default, rename = "await")]
    await_step: Option<Spanned<String>>,
    #[serde(default)]
    background: bool,
    #[serde(default)]
    deadline_ms: Option<Spanned<i64>>,
    #[serde(default)]
    expect: Option<Spanned<RawExpect>>,
    #[serde(default)]
    record: Option<Spanned<String>>,
    #[serde(default)]
    save: Option<Spanned<String>>,
    #[serde(default)]
    when: Option<When>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    #[serde(default, deserialize_with = "present")]
    value: Option<Scalar>,
    #[serde(default)]
    rows: Option<u64>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    elapsed_ms: Option<Bounds>,
    #[serde(default)]
    held: Option<bool>,
    #[serde(default)]
    holders: Option<RawHolders>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHolders {
    #[serde(default)]
    pid: Option<String>,
    #[serde(default)]
    state: Option<String>,
}

/// Inclusive bounds on a step's elapsed time, in ms.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Bounds {
    /// Lower bound in ms (default 0).
    #[serde(default)]
    pub min: Option<f64>,
    /// Upper bound in ms (default: none).
    #[serde(default)]
    pub max: Option<f64>,
}

/// An expected scalar: the first column of the first row, compared with
/// PostgreSQL's text output (`true` ↔ `t`, numbers as decimal, `null` ↔ SQL NULL).
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    /// SQL NULL.
    Null,
    /// A boolean (`t`/`f` on the wire).
    Bool(bool),
    /// An integer.
    Int(i128),
    /// A floating-point number, compared numerically.
    Float(f64),
    /// Text, compared exactly.
    Text(String),
}

impl Scalar {
    /// Whether the server's text value `actual` (`None` for NULL) equals this.
    pub fn matches(&self, actual: Option<&str>) -> bool {
        match (self, actual) {
            (Scalar::Null, None) => true,
            (_, None) | (Scalar::Null, Some(_)) => false,
            (Scalar::Bool(b), Some(a)) => a == if *b { "t" } else { "f" },
            (Scalar::Int(i), Some(a)) => a.parse::<i128>() == Ok(*i),
            (Scalar::Float(f), Some(a)) => a.parse::<f64>().is_ok_and(|x| x == *f),
            (Scalar::Text(t), Some(a)) => a == t,
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Null => f.write_str("NULL"),
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x}"),
            Scalar::Text(t) => write!(f, "{t:?}"),
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a scalar (null, boolean, number or string)")
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_none<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v.into()))
            }
            fn visit_i128<E>(self, v: i128) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

/// `value:` present (even as `null`) → `Some`, absent → `None` (via `#[serde(default)]`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Scalar>, D::Error> {
    Scalar::deserialize(d).map(Some)
}

// ---------------------------------------------------------------------------
// The validated model the runner executes.
// ---------------------------------------------------------------------------

/// A validated scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Unique name (also the file stem by convention), e.g. `xact-lock-competition`.
    pub name: String,
    /// One or two sentences: the behaviour this file states.
    pub description: String,
    /// Where the claim comes from (guide section, PostgreSQL docs section).
    pub source: Option<String>,
    /// The file it was loaded from.
    pub file: PathBuf,
    /// Where `name:` is in the file.
    pub name_pos: Pos,
    /// Maximum pool size for pooled actors (connections).
    pub pool_max_size: u32,
    /// Actors in file order.
    pub actors: Vec<Actor>,
    /// Steps in execution order.
    pub steps: Vec<Step>,
}

/// An actor: a named connection.
#[derive(Clone, Debug)]
pub struct Actor {
    /// Name used in steps.
    pub name: String,
    /// Pooled or direct.
    pub via: Via,
}

/// What a step does.
#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    /// Run SQL (simple query protocol). `${name}` is replaced by a saved value.
    Sql(String),
    /// Pool or transaction control.
    Do(Action),
    /// Snapshot advisory locks, optionally only those on `key`.
    Observe(ObserveKind, Option<AdvisoryKey>),
    /// Wait until actor index `.0` is blocked on a lock, seen from the server
    /// (`pg_blocking_pids`); fails if its background step finishes first.
    Blocked(usize),
    /// Wait for background step index `.0` to finish and check its expectation.
    Await(usize),
}

/// One step.
#[derive(Clone, Debug)]
pub struct Step {
    /// 0-based index in the file's `steps` list.
    pub index: usize,
    /// Where the step starts in the file.
    pub pos: Pos,
    /// Actor index (for `Await`, the awaited step's actor).
    pub actor: usize,
    /// Optional id (needed to `await` a background step).
    pub id: Option<String>,
    /// What it does.
    pub kind: StepKind,
    /// Start it and go on; finish it with an `await` step.
    pub background: bool,
    /// Deadline in ms, after which the scenario fails.
    pub deadline_ms: u64,
    /// What must hold afterwards.
    pub expect: Option<Expect>,
    /// Observation name for the matrix.
    pub record: Option<String>,
    /// Variable name to store the first value of the first row in.
    pub save: Option<String>,
    /// Only for some driver kinds.
    pub when: Option<When>,
}

impl Step {
    /// A short human label, e.g. `step 4 (b: select pg_advisory_xact_lock(7))`.
    pub fn label(&self, actors: &[Actor]) -> String {
        let what = match &self.kind {
            StepKind::Sql(s) => s.split_whitespace().collect::<Vec<_>>().join(" "),
            StepKind::Do(a) => format!("{a:?}").to_lowercase(),
            StepKind::Observe(..) => "observe advisory_locks".into(),
            StepKind::Blocked(t) => format!("blocked: {}", actors[*t].name),
            StepKind::Await(s) => format!("await step {}", s + 1),
        };
        format!("step {} ({}: {})", self.index + 1, actors[self.actor].name, what)
    }
}

/// Validated expectations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expect {
    /// First column of the first row.
    pub value: Option<Scalar>,
    /// Number of rows.
    pub rows: Option<u64>,
    /// SQLSTATE the step must fail with (five characters, e.g. `55P03`).
    pub error: Option<String>,
    /// Elapsed-time bounds in ms.
    pub elapsed_ms: Option<Bounds>,
    /// Observe: whether any granted advisory lock matched.
    pub held: Option<bool>,
    /// Observe: every granted lock's backend pid equals this saved variable.
    pub holder_pid: Option<String>,
    /// Observe: every granted lock's backend is in this `pg_stat_activity.state`.
    pub holder_state: Option<String>,
}

/// Values of `pg_stat_activity.state` (PostgreSQL docs, "pg_stat_activity").
const STATES: &[&str] = &[
    "active",
    "idle",
    "idle in transaction",
    "idle in transaction (aborted)",
    "fastpath function call",
    "disabled",
];

/// SQLSTATE condition names accepted in `expect.error` (PostgreSQL docs, Appendix A).
const CONDITIONS: &[(&str, &str)] = &[
    ("lock_not_available", "55P03"),
    ("deadlock_detected", "40P01"),
    ("query_canceled", "57014"),
    ("admin_shutdown", "57P01"),
    ("idle_in_transaction_session_timeout", "25P03"),
    ("in_failed_sql_transaction", "25P02"),
    ("undefined_function", "42883"),
    ("syntax_error", "42601"),
    ("numeric_value_out_of_range", "22003"),
];

fn sqlstate_of(s: &str) -> Option<String> {
    if s.len() == 5 && s.chars().all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()) {
        return Some(s.to_owned());
    }
    CONDITIONS.iter().find(|(n, _)| *n == s).map(|(_, c)| (*c).to_owned())
}

// ---------------------------------------------------------------------------
// Loading and validation.
// ---------------------------------------------------------------------------

/// Loads and validates every `*.yaml` file in `dir`, sorted by file name.
/// Other files are ignored.
///
/// # Errors
/// Every problem found, across all files (an unreadable directory is one error
/// at 1:1 of the directory).
pub fn load_dir(dir: &Path) -> Result<Vec<Scenario>, Vec<ScenarioError>> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        vec![ScenarioError {
            file: dir.to_owned(),
            pos: Pos { line: 1, column: 1 },
            message: format!("cannot read scenario directory: {e}"),
        }]
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        match load_file(&f) {
            Ok(s) => out.push(s),
            Err(mut e) => errors.append(&mut e),
        }
    }
    let mut seen: HashMap<&str, &Path> = HashMap::new();
    for s in &out {
        if let Some(first) = seen.insert(&s.name, &s.file) {
            errors.push(ScenarioError {
                file: s.file.clone(),
                pos: Pos { line: 1, column: 1 },
                message: format!("scenario name '{}' is also used by {}", s.name, first.display()),
            });
        }
    }
    if errors.is_empty() { Ok(out) } else { Err(errors) }
}

/// Loads and validates one scenario file.
///
/// # Errors
/// Syntax errors, type errors and unknown keys (first one found), or every
/// semantic error found by validation, each with `file:line:column`.
pub fn load_file(path: &Path) -> Result<Scenario, Vec<ScenarioError>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![ScenarioError {
            file: path.to_owned(),
            pos: Pos { line: 1, column: 1 },
            message: format!("cannot read file: {e}"),
        }]
    })?;
    let scenario = parse(path, &text)?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    if scenario.name != stem {
        return Err(vec![ScenarioError {
            file: path.to_owned(),
            pos: scenario.name_pos,
            message: format!(
                "scenario name '{}' differs from the file name; rename one of them to match ('{stem}')",
                scenario.name
            ),
        }]);
    }
    Ok(scenario)
}

/// Parses and validates scenario text; `path` is used in error messages only
/// (so, unlike [`load_file`], the name is not compared with the file name).
///
/// # Errors
/// As [`load_file`].
pub fn parse(path: &Path, text: &str) -> Result<Scenario, Vec<ScenarioError>> {
    let raw: RawScenario = serde_saphyr::from_str(text).map_err(|e| vec![yaml_error(path, &e)])?;
    Validator {
        file: path,
        errors: Vec::new(),
    }
    .run(raw)
}

fn yaml_error(path: &Path, e: &serde_saphyr::Error) -> ScenarioError {
    let pos = e
        .location()
        .map(|l| Pos::of(&l))
        .filter(|p| p.line > 0)
        .unwrap_or(Pos { line: 1, column: 1 });
    let opts = serde_saphyr::render_options! { snippets: serde_saphyr::SnippetMode::Off };
    let mut message = e.render_with_options(opts);
    // The plain rendering ends with " at line L, column C"; we print that in front.
    if let Some(i) = message.rfind(" at line ") {
        message.truncate(i);
    }
    // Advice meant for programs embedding the parser, not for scenario authors.
    if let Some(i) = message.find(", set DuplicateKeyPolicy") {
        message.truncate(i);
    }
    // "invalid i64" and the like: say it in words.
    if let Some(ty) = message.strip_prefix("invalid ")
        && matches!(
            ty,
            "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "i128" | "u128"
        )
    {
        message = format!("expected a whole number ({ty})");
    }
    ScenarioError {
        file: path.to_owned(),
        pos,
        message: message.trim().to_owned(),
    }
}

struct Validator<'a> {
    file: &'a Path,
    errors: Vec<ScenarioError>,
}

/// What the validator tracks per actor while walking the steps.
#[derive(Clone, Copy, PartialEq)]
enum Conn {
    None,
    Ready,
    /// A background step (index) is in flight.
    Busy(usize),
}

impl Validator<'_> {
    fn err(&mut self, pos: Pos, message: impl Into<String>) {
        self.errors.push(ScenarioError {
            file: self.file.to_owned(),
            pos,
            message: message.into(),
        });
    }

    fn run(mut self, raw: RawScenario) -> Result<Scenario, Vec<ScenarioError>> {
        let name_pos = Pos::of(&raw.name.referenced);
        let name = raw.name.value.trim().to_owned();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            self.err(
                name_pos,
                format!("scenario name '{name}' must be non-empty and use only letters, digits, '-' and '_'"),
            );
        }
        let step_deadline = match &raw.step_deadline_ms {
            Some(d) => self.deadline(d),
            None => DEFAULT_STEP_DEADLINE_MS,
        };
        let pool_max_size = match &raw.pool.max_size {
            Some(s) if !(1..=100).contains(&s.value) => {
                self.err(
                    Pos::of(&s.referenced),
                    format!("pool.max_size must be between 1 and 100, got {}", s.value),
                );
                DEFAULT_POOL_MAX_SIZE
            }
            Some(s) => s.value as u32,
            None => DEFAULT_POOL_MAX_SIZE,
        };

        let actors: Vec<Actor> = raw
            .actors
            .value
            .iter()
            .map(|(n, a)| Actor {
                name: n.clone(),
                via: a.value.via,
            })
            .collect();
        if actors.is_empty() {
            self.err(Pos::of(&raw.actors.referenced), "a scenario needs at least one actor");
        }
        if actors.len() > 64 {
            self.err(
                Pos::of(&raw.actors.referenced),
                format!("{} actors; at most 64 are allowed", actors.len()),
            );
        }
        let actor_index: HashMap<&str, usize> = actors.iter().enumerate().map(|(i, a)| (a.name.as_str(), i)).collect();
        if raw.steps.value.is_empty() {
            self.err(Pos::of(&raw.steps.referenced), "a scenario needs at least one step");
        }

        let mut steps = Vec::new();
        let mut state = vec![Conn::None; actors.len()];
        for (i, a) in actors.iter().enumerate() {
            if a.via == Via::Direct {
                state[i] = Conn::Ready;
            }
        }
        let mut ids: HashMap<String, usize> = HashMap::new();
        let mut saved: Vec<String> = Vec::new();
        let mut records: HashMap<String, Pos> = HashMap::new();

        for (index, spanned) in raw.steps.value.into_iter().enumerate() {
            let pos = Pos::of(&spanned.referenced);
            let s = spanned.value;
            let Some(step) = self.step(
                index,
                pos,
                s,
                step_deadline,
                &actors,
                &actor_index,
                &mut state,
                &mut ids,
                &mut saved,
                &mut records,
            ) else {
                continue;
            };
            steps.push(step);
        }
        for (i, st) in state.iter().enumerate() {
            if let Conn::Busy(b) = st {
                let pos = steps.iter().find(|s| s.index == *b).map(|s| s.pos).unwrap_or_default();
                self.err(
                    pos,
                    format!("background step of actor '{}' is never awaited", actors[i].name),
                );
            }
        }
        if self.errors.is_empty() {
            Ok(Scenario {
                name,
                name_pos,
                description: raw.description.trim().to_owned(),
                source: raw.source,
                file: self.file.to_owned(),
                pool_max_size,
                actors,
                steps,
            })
        } else {
            Err(self.errors)
        }
    }

    fn deadline(&mut self, d: &Spanned<i64>) -> u64 {
        match u64::try_from(d.value) {
            Ok(v) if (1..=MAX_STEP_DEADLINE_MS).contains(&v) => v,
            _ => {
                self.err(
                    Pos::of(&d.referenced),
                    format!(
                        "deadline must be between 1 and {MAX_STEP_DEADLINE_MS} ms, got {}",
                        d.value
                    ),
                );
                DEFAULT_STEP_DEADLINE_MS
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn step(
        &mut self,
        index: usize,
        pos: Pos,
        s: RawStep,
        step_deadline: u64,
        actors: &[Actor],
        actor_index: &HashMap<&str, usize>,
        state: &mut [Conn],
        ids: &mut HashMap<String, usize>,
        saved: &mut Vec<String>,
        records: &mut HashMap<String, Pos>,
    ) -> Option<Step> {
        let n = index + 1;
        let kinds = [
            s.sql.is_some(),
            s.action.is_some(),
            s.observe.is_some(),
            s.blocked.is_some(),
            s.await_step.is_some(),
        ];
        let count = kinds.iter().filter(|k| **k).count();
        if count != 1 {
            self.err(
                pos,
                format!("step {n} must have exactly one of 'sql', 'do', 'observe', 'blocked', 'await' (found {count})"),
            );
            return None;
        }
        let deadline_ms = match &s.deadline_ms {
            Some(d) if s.await_step.is_some() => {
                self.err(
                    Pos::of(&d.referenced),
                    format!(
                        "step {n}: an 'await' step runs within the background step's deadline; set 'deadline_ms' there"
                    ),
                );
                step_deadline
            }
            Some(d) => self.deadline(d),
            None => step_deadline,
        };
        if s.key.is_some() && s.observe.is_none() {
            self.err(pos, format!("step {n}: 'key' only applies to 'observe' steps"));
        }

        // Resolve the actor.
        let actor = if let Some(aw) = &s.await_step {
            if s.actor.is_some() {
                self.err(
                    pos,
                    format!("step {n}: an 'await' step takes the actor of the awaited step; remove 'actor'"),
                );
            }
            let Some(&target) = ids.get(&aw.value) else {
                self.err(
                    Pos::of(&aw.referenced),
                    format!("step {n} awaits '{}', which is not the id of an earlier step", aw.value),
                );
                return None;
            };
            let Some(a) = state.iter().position(|c| *c == Conn::Busy(target)) else {
                self.err(
                    Pos::of(&aw.referenced),
                    format!(
                        "step {n} awaits '{}', which is not a background step in flight",
                        aw.value
                    ),
                );
                return None;
            };
            a
        } else {
            let Some(a) = &s.actor else {
                self.err(pos, format!("step {n} has no 'actor'"));
                return None;
            };
            match actor_index.get(a.value.as_str()) {
                Some(&i) => i,
                None => {
                    let known: Vec<&str> = actors.iter().map(|a| a.name.as_str()).collect();
                    self.err(
                        Pos::of(&a.referenced),
                        format!(
                            "step {n}: unknown actor '{}'; actors are: {}",
                            a.value,
                            known.join(", ")
                        ),
                    );
                    return None;
                }
            }
        };
        let an = actors[actor].name.clone();

        let kind = if let Some(sql) = s.sql {
            if sql.trim().is_empty() {
                self.err(pos, format!("step {n}: 'sql' is empty"));
            }
            for var in placeholders(&sql) {
                if !saved.contains(&var) {
                    self.err(pos, format!("step {n}: '${{{var}}}' is not saved by an earlier step"));
                }
            }
            StepKind::Sql(sql)
        } else if let Some(a) = s.action {
            StepKind::Do(a)
        } else if let Some(o) = s.observe {
            StepKind::Observe(o, s.key)
        } else if let Some(b) = &s.blocked {
            match actor_index.get(b.value.as_str()) {
                Some(&t) if matches!(state[t], Conn::Busy(_)) => StepKind::Blocked(t),
                Some(_) => {
                    self.err(
                        Pos::of(&b.referenced),
                        format!(
                            "step {n}: 'blocked: {}' needs a background step of '{}' in flight",
                            b.value, b.value
                        ),
                    );
                    return None;
                }
                None => {
                    self.err(
                        Pos::of(&b.referenced),
                        format!("step {n}: unknown actor '{}' in 'blocked'", b.value),
                    );
                    return None;
                }
            }
        } else {
            let aw = s.await_step.as_ref()?;
            StepKind::Await(ids[&aw.value])
        };

        // Connection-state rules.
        match (&kind, state[actor]) {
            (StepKind::Await(_), _) => state[actor] = Conn::Ready,
            (_, Conn::Busy(b)) => {
                self.err(
                    pos,
                    format!(
                        "step {n}: actor '{an}' is still running background step {} (await it first)",
                        b + 1
                    ),
                );
            }
            (StepKind::Do(Action::Checkout), Conn::Ready) => {
                let msg = if actors[actor].via == Via::Direct {
                    format!(
                        "step {n}: '{an}' is a direct actor, connected for the whole run; 'checkout' is for pool actors"
                    )
                } else {
                    format!("step {n}: '{an}' already has a connection checked out")
                };
                self.err(pos, msg);
            }
            (StepKind::Do(Action::Checkout), Conn::None) => state[actor] = Conn::Ready,
            (StepKind::Do(Action::Return), _) if actors[actor].via == Via::Direct => {
                self.err(
                    pos,
                    format!("step {n}: '{an}' is a direct actor; 'return' is for pool actors"),
                );
            }
            (StepKind::Do(Action::Return), Conn::Ready) => state[actor] = Conn::None,
            (_, Conn::None) => {
                self.err(
                    pos,
                    format!("step {n}: actor '{an}' has no connection (add a 'do: checkout' step before it)"),
                );
            }
            (_, Conn::Ready) => {}
        }
        if s.background {
            match kind {
                StepKind::Sql(_) => state[actor] = Conn::Busy(index),
                _ => self.err(pos, format!("step {n}: only 'sql' steps can run in the background")),
            }
            if s.id.is_none() {
                self.err(pos, format!("step {n}: a background step needs an 'id' to await it by"));
            }
        }
        if matches!(kind, StepKind::Observe(..) | StepKind::Blocked(_)) && actors[actor].via != Via::Direct {
            self.err(
                pos,
                format!("step {n}: observations run on a direct actor (the observer), not on pool actor '{an}'"),
            );
        }
        if let Some(id) = &s.id
            && ids.insert(id.value.clone(), index).is_some()
        {
            self.err(
                Pos::of(&id.referenced),
                format!("step {n}: id '{}' is used twice", id.value),
            );
        }
        if let Some(v) = &s.save {
            if !matches!(kind, StepKind::Sql(_)) || s.background {
                self.err(
                    Pos::of(&v.referenced),
                    format!("step {n}: 'save' works on foreground 'sql' steps only"),
                );
            }
            // Later steps rely on the value: the step must run everywhere and succeed.
            if s.when.is_some() {
                self.err(
                    Pos::of(&v.referenced),
                    format!("step {n}: 'save' cannot be combined with 'when'"),
                );
            }
            if s.expect.as_ref().is_some_and(|e| e.value.error.is_some()) {
                self.err(
                    Pos::of(&v.referenced),
                    format!("step {n}: 'save' on a step expected to fail saves nothing"),
                );
            }
            saved.push(v.value.clone());
        }
        if let Some(r) = &s.record {
            if matches!(
                kind,
                StepKind::Do(Action::Checkout | Action::Return) | StepKind::Blocked(_)
            ) || s.background
            {
                self.err(
                    Pos::of(&r.referenced),
                    format!("step {n}: 'record' works on 'sql', 'observe', 'await' and transaction steps"),
                );
            }
            if let Some(first) = records.insert(r.value.clone(), Pos::of(&r.referenced)) {
                self.err(
                    Pos::of(&r.referenced),
                    format!(
                        "step {n}: record name '{}' is already used at line {}",
                        r.value, first.line
                    ),
                );
            }
        }
        let foreground_sql_or_observe = matches!(kind, StepKind::Sql(_) | StepKind::Observe(..)) && !s.background;
        if s.when.is_some() && !foreground_sql_or_observe {
            self.err(
                pos,
                format!("step {n}: 'when' applies to foreground 'sql' and 'observe' steps only"),
            );
        }
        let expect = match s.expect {
            Some(e) => self.expect(n, e, &kind, s.background, saved),
            None => None,
        };

        Some(Step {
            index,
            pos,
            actor,
            id: s.id.map(|i| i.value),
            kind,
            background: s.background,
            deadline_ms,
            expect,
            record: s.record.map(|r| r.value),
            save: s.save.map(|v| v.value),
            when: s.when,
        })
    }

    fn expect(
        &mut self,
        n: usize,
        e: Spanned<RawExpect>,
        kind: &StepKind,
        background: bool,
        saved: &[String],
    ) -> Option<Expect> {
        let pos = Pos::of(&e.referenced);
        let e = e.value;
        let is_observe = matches!(kind, StepKind::Observe(..));
        let runs_sql = matches!(
            kind,
            StepKind::Sql(_) | StepKind::Await(_) | StepKind::Do(Action::Begin | Action::Commit | Action::Rollback)
        );
        if background {
            self.err(
                pos,
                format!("step {n}: put 'expect' on the 'await' step of a background step"),
            );
            return None;
        }
        let observe_keys = e.held.is_some() || e.holders.is_some();
        let sql_keys = e.value.is_some() || e.rows.is_some() || e.error.is_some();
        if !observe_keys && !sql_keys && e.elapsed_ms.is_none() {
            self.err(
                pos,
                format!("step {n}: 'expect' is empty; give one of value, rows, error, elapsed_ms, held, holders"),
            );
            return None;
        }
        if observe_keys && !is_observe {
            self.err(
                pos,
                format!("step {n}: 'held' and 'holders' apply to 'observe' steps only"),
            );
        }
        if sql_keys && !runs_sql {
            self.err(
                pos,
                format!("step {n}: 'value', 'rows' and 'error' apply to steps that run SQL"),
            );
        }
        if e.elapsed_ms.is_some() && !runs_sql {
            self.err(pos, format!("step {n}: 'elapsed_ms' applies to steps that run SQL"));
        }
        if e.error.is_some() && (e.value.is_some() || e.rows.is_some()) {
            self.err(
                pos,
                format!("step {n}: 'error' cannot be combined with 'value' or 'rows'"),
            );
        }
        if let Some(b) = e.elapsed_ms {
            let (min, max) = (b.min.unwrap_or(0.0), b.max.unwrap_or(f64::INFINITY));
            let finite = !min.is_nan() && !max.is_nan() && min.is_finite() && (b.max.is_none() || max.is_finite());
            if !finite || min < 0.0 || max < min || (b.min.is_none() && b.max.is_none()) {
                self.err(pos, format!("step {n}: elapsed_ms needs 0 ≤ min ≤ max (ms)"));
            }
        }
        if let Some(Scalar::Text(t)) = &e.value {
            for var in placeholders(t) {
                if !saved.contains(&var) {
                    self.err(
                        pos,
                        format!("step {n}: '${{{var}}}' in 'expect.value' is not saved by an earlier step"),
                    );
                }
            }
        }
        let error = match &e.error {
            Some(code) => match sqlstate_of(code) {
                Some(c) => Some(c),
                None => {
                    let names: Vec<&str> = CONDITIONS.iter().map(|(n, _)| *n).collect();
                    self.err(pos, format!("step {n}: '{code}' is neither a SQLSTATE (five characters such as 55P03) nor a known condition name ({})", names.join(", ")));
                    None
                }
            },
            None => None,
        };
        let (holder_pid, holder_state) = match e.holders {
            Some(h) => {
                if let Some(p) = &h.pid
                    && !saved.contains(p)
                {
                    self.err(
                        pos,
                        format!("step {n}: holders.pid names '{p}', which no earlier step saves"),
                    );
                }
                if let Some(st) = &h.state
                    && !STATES.contains(&st.as_str())
                {
                    self.err(
                        pos,
                        format!(
                            "step {n}: holders.state '{st}' is not a pg_stat_activity state ({})",
                            STATES.join(", ")
                        ),
                    );
                }
                if h.pid.is_none() && h.state.is_none() {
                    self.err(pos, format!("step {n}: 'holders' needs 'pid' or 'state'"));
                }
                (h.pid, h.state)
            }
            None => (None, None),
        };
        Some(Expect {
            value: e.value,
            rows: e.rows,
            error,
            elapsed_ms: e.elapsed_ms,
            held: e.held,
            holder_pid,
            holder_state,
        })
    }
}

/// Names of `${name}` placeholders in `sql`.
pub fn placeholders(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = sql;
    while let Some(i) = rest.find("${") {
        let after = &rest[i + 2..];
        match after.find('}') {
            Some(j) => {
                out.push(after[..j].to_owned());
                rest = &after[j + 1..];
            }
            None => break,
        }
    }
    out
}
