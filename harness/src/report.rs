//! The driver matrix report: `reports/matrix.json` (schema below),
//! `reports/matrix.md` (rendered from `templates/matrix.md.j2`) and the
//! self-contained `reports/index.html` (`templates/index.html.j2`, see [`html`]).
//!
//! One writer each: `report/json.rs` serialises the [`Report`];
//! `report/markdown.rs` and `report/html.rs` write the same view of it
//! (`report/view.rs`: columns with headers and, per scenario file, the
//! observation rows, the locks-left row and the expectations row, each cell
//! with its text, status and evidence), computed once per document.
//!
//! `matrix.json`, schema version 9:
//! - `schema_version` (9), `generated_at` (RFC 3339), `locklab_version`, `repeat`
//!   (runs per cell, `--repeat`)
//! - `shard` (`"2/4"`): present only in a shard's file (`--shard I/N`): the
//!   part of the matrix its `runs` hold (the header lists the whole
//!   selection); `locklab merge` puts the shards together
//! - `environment`: `os` (`/etc/os-release` PRETTY_NAME, else the Rust target OS),
//!   `kernel`, `arch`, `cpus` (available parallelism), `git_commit` (HEAD of the
//!   workspace when the report was written, null outside a git checkout),
//!   `git_dirty` (tracked files modified then)
//! - `servers[]`: one per PostgreSQL version, in column-group order: `id` (`pg17`),
//!   `major` (17), `version` (PostgreSQL `version()`), `backend` (`container`/`local`/`external`),
//!   `image` (the container image, else null), `startup_ms` (start request to ready,
//!   without `image_ms`), `image_ms` (finding, pulling or building the image)
//! - `drivers[]`: `id`, `crate_name`, `crate_version` (from Cargo.lock), `configuration`, `kind` (`direct`/`pooled`),
//!   `pooler` (`session`/`transaction` for configurations behind PgBouncer, else null)
//! - `scenarios[]`: one per scenario run of a file (one per parameter set): `name`
//!   (`extreme-keys[key=-1,fn=pg_try_advisory_lock]`), `family` (the file's name),
//!   `params` (`[[name, value], …]`), `description`, `source`, `file`, `observations`
//!   (record names in step order), `observation_steps` (the step that records each, with its SQL)
//! - `runs[]`: one per server × scenario × driver cell: `server` (a `servers[].id`), `scenario`,
//!   `driver`, `failure` (null when passed), `deviation` (behind transaction
//!   pooling: the expectation that did not hold, recorded rather than failed;
//!   absent otherwise), `skipped` (why the run was not made; absent otherwise),
//!   `cleaned_backends` (pids the harness ended after the run because they
//!   still held or waited for an advisory lock, or, in a failed run, were
//!   still in a statement; absent when none), `backends_left` (the leak
//!   guard: `pid N (application_name, state)` / `lock KEY (pid N)` still in the
//!   run's database 5 s after the run was over, which fails the cell; absent when none),
//!   `observations[]` (`name`, `step`, `value` (typed: `{"kind": KIND, "value": …}`,
//!   see [`crate::outcome::Value`]; in a race cell the first trial's), `sqlstate`, `elapsed_ms`,
//!   `waited_ms` for `await` steps (the part of `elapsed_ms` spent at the await),
//!   `notices` when the server sent any (`SEVERITY: message`), `notices_read:
//!   "shown"` when they are a pool actor's (read, not part of the reading;
//!   absent: a direct actor's, compared: [`crate::outcome::NoticesRead`]),
//!   `elapsed_stats`/`waited_stats`:
//!   `{n, min, p50, p95, max}` over the repeats; in a race cell
//!   `distribution`: `[{"kind", "value", "notice", "trials"}]`, each
//!   [`crate::outcome::Reading`] and in how many trials it was seen),
//!   `steps[]` (failed runs only: `step`, `label`, `elapsed_ms`, `outcome`), `locks_left[]` (`key`, `mode`,
//!   `granted`, `pid`, `state`, `application_name`), `elapsed_ms`, `phases_ms` (phase → ms),
//!   `trials` (race cells: `n`, `outcomes[]` (`values`: name → reading,
//!   `trials`), `invariants[]`) and `ran_on` (fault cells), `repeats`,
//!   `elapsed_stats`, `varied` (what the repeats read differently; absent when they agreed),
//!   `variants[]` (each way they read: `repeats` and the outcome's `status`, `observations[]`
//!   (`name`, `seen`, `sqlstate`), `locks_left`, `cleaned_backends`, `backends_left`)
//! - `summary`: `runs` (cells), `passed` (including `deviated`, `not_applicable` and `varied`), `deviated`,
//!   `not_applicable`, `failed`, `varied`, `varied_why[]` (`why`, `cells`), `elapsed_ms`
//! - `properties[]` ([`crate::properties::Property`]): `id`, `rule`, `source`, `severity`
//!   (`unsafe`/`surprising`/`informational`), `scope` (`column`/`server`), `advice`,
//!   `decided_by[]` (`scenario`, `record`, `readings[]`: `when`, `reads`, `says`, `advice`), `file`
//! - `verdicts[]` (written for the file's readers; locklab judges a file it
//!   reads anew with the properties of its checkout): per server, `server` (a `servers[].id`) and `properties[]`: `id`,
//!   `severity`, `scope`, `columns[]`: `driver`, `verdict` (`holds`/`violated`/`n/a`/`undecided`),
//!   `reasons` (why n/a or undecided), `evidence[]` (`scenario`, `record`, `reading` as the
//!   report shows it, `reads`, `says`, `advice`, for a race row `trials`: `{violated, of}`, and for a
//!   cell whose repeats read differently `repeats`: `{violated, of}`)
//!
//! All times are in ms. With `repeat` > 1 a cell's values are its first
//! repeat's (its first failing one's, if any failed). Version 9 called
//! `varied` `unstable` (in `runs[]` and `summary`, where it counted as
//! failed), and had no `variants` (`report --from` reads it). Version 8 had no
//! `properties` and `verdicts` (`report --from` reads it and evaluates them). Version 7 kept each
//! observation's report text (`display`) and keyed a race's `distribution`
//! and `trials.outcomes` by text. Version 6 wrote a
//! value as plain JSON (`true`, `7`, `null`, `{"checkout": "ok"}`), which lost
//! which kind of `null`, a number's written form, a bound's ms and why no
//! cancel request was sent. Version 5 had no
//! `backends_left`. Version 4 had no `repeat`,
//! `environment`, `observation_steps`, `*_stats`, `repeats`, `unstable`;
//! version 3 had no `drivers[].pooler` and no `runs[].deviation`/`skipped`/`cleaned_backends`;
//! version 2 had no `scenarios[].family`/`params` and no `observations[].notices`;
//! version 1 had a single `server` object and no `runs[].server`.

mod chart;
pub mod html;
mod json;
mod markdown;
mod merge;
pub mod regions;
pub mod verdicts;
mod view;

pub use crate::outcome::DriverColumn;
pub use merge::{merge_shards, read};

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use locklab_drivers::Driver;
use serde::{Deserialize, Serialize};

use crate::outcome::cell::BaselineCell;
use crate::outcome::{Phase, RunResult, Status};
use crate::properties::dimensions::Column;
use crate::properties::{Property, ServerVerdicts};
use crate::scenario::Scenario;
use crate::server::Server;

/// Version of the `matrix.json` layout; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 10;

/// Everything one `locklab report` produced.
#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// When the report was made (RFC 3339, UTC).
    pub generated_at: String,
    /// Version of the locklab harness.
    pub locklab_version: String,
    /// Runs per cell (`--repeat`).
    pub repeat: usize,
    /// The part of the matrix this report holds (`--shard I/N`); `None` for
    /// the whole matrix (also after [`merge`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<crate::shard::Shard>,
    /// Where the report was made.
    pub environment: Environment,
    /// The servers the runs used, one per PostgreSQL version (column groups).
    pub servers: Vec<ServerInfo>,
    /// Driver columns, in order.
    pub drivers: Vec<DriverColumn>,
    /// Scenarios, in order.
    pub scenarios: Vec<ScenarioInfo>,
    /// Every run, scenario-major.
    pub runs: Vec<RunResult>,
    /// Totals.
    pub summary: Summary,
    /// The properties the verdicts judge ([`crate::properties`]), in
    /// severity order; empty when none could be read. Not read back from a
    /// file: a report read back is judged anew ([`Report::judged_by`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty", skip_deserializing)]
    pub properties: Vec<crate::properties::Property>,
    /// Each property's verdict per column, per server (not read back either).
    #[serde(default, skip_serializing_if = "Vec::is_empty", skip_deserializing)]
    pub verdicts: Vec<crate::properties::ServerVerdicts>,
}

/// The machine and checkout a report was made on.
#[derive(Debug, Serialize, Deserialize)]
pub struct Environment {
    /// Operating system: `/etc/os-release` PRETTY_NAME, else the Rust target OS.
    pub os: String,
    /// Kernel release (`/proc/sys/kernel/osrelease`), when readable.
    pub kernel: Option<String>,
    /// CPU architecture, e.g. `x86_64`.
    pub arch: String,
    /// CPUs available to the process (`std::thread::available_parallelism`).
    pub cpus: usize,
    /// `git rev-parse HEAD` of the workspace when the process assembled its
    /// first report (`locklab report`: at the end of the runs), `None`
    /// outside a git checkout.
    pub git_commit: Option<String>,
    /// Whether tracked files differed from that commit.
    pub git_dirty: bool,
}

impl Environment {
    /// Reads the environment of this process. The git facts (`git` run in
    /// the workspace) are read on the first call and kept for the process:
    /// the tests assemble a report per cell, thousands per run, and two
    /// `git` processes each were about 4 % of the machine's CPU there.
    pub fn current() -> Environment {
        static GIT: std::sync::OnceLock<(Option<String>, bool)> = std::sync::OnceLock::new();
        let (git_commit, git_dirty) = GIT.get_or_init(git_facts).clone();
        let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        let os = os_release
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_owned())
            .unwrap_or_else(|| std::env::consts::OS.to_owned());
        Environment {
            os,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|k| k.trim().to_owned()),
            arch: std::env::consts::ARCH.to_owned(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            git_commit,
            git_dirty,
        }
    }
}

/// `git rev-parse HEAD` of the workspace (`None` outside a git checkout) and
/// whether tracked files differ from it.
fn git_facts() -> (Option<String>, bool) {
    let root = crate::server::workspace_root();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let git_commit = git(&["rev-parse", "HEAD"]).filter(|c| !c.is_empty());
    let git_dirty =
        git_commit.is_some() && git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    (git_commit, git_dirty)
}

/// The report files `locklab report --format` can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `matrix.json` (the schema above).
    Json,
    /// `matrix.md` (GitHub-flavoured Markdown).
    Md,
    /// `index.html` (self-contained: inline CSS and SVG, no scripts or external assets).
    Html,
}

/// A server (column group) in the report header.
#[derive(Debug, Serialize, Deserialize)]
pub struct ServerInfo {
    /// Column-group id, e.g. `pg17`.
    pub id: String,
    /// Major version, e.g. 17.
    pub major: u32,
    /// PostgreSQL `version()`.
    pub version: String,
    /// `container`, `local` or `external`.
    pub backend: String,
    /// The container image (as given to Docker), for the container backend.
    pub image: Option<String>,
    /// Start-up time of the server in ms, from the start request until it
    /// answered `select version()`, not counting `image_ms` (for an external
    /// one: the connect time).
    pub startup_ms: f64,
    /// Time in ms spent finding, pulling or building the container image (0
    /// for other backends).
    pub image_ms: f64,
}

impl ServerInfo {
    /// The header entry for a running server.
    pub fn of(server: &Server) -> ServerInfo {
        ServerInfo {
            id: server.id(),
            major: server.major(),
            version: server.version().to_owned(),
            backend: server.backend().as_str().to_owned(),
            image: server.image().map(str::to_owned),
            startup_ms: server.startup().as_secs_f64() * 1e3,
            image_ms: server.image_time().as_secs_f64() * 1e3,
        }
    }
}

/// A scenario (one parameter set of a file).
#[derive(Debug, Serialize, Deserialize)]
pub struct ScenarioInfo {
    /// Name, with the parameter set for a parameterised file: `extreme-keys[key=-1,fn=…]`.
    pub name: String,
    /// The file's scenario name (the Markdown section).
    pub family: String,
    /// This run's parameters (name, value), empty without `params`.
    pub params: Vec<(String, String)>,
    /// Description.
    pub description: String,
    /// Source of the claim.
    pub source: Option<String>,
    /// Its file's `tags:` (`pooler`: the pooler conformance kit).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The user's report it re-enacts (`report:`), with the readings that
    /// reproduce it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<crate::scenario::user_report::UserReport>,
    /// File, relative to the workspace when possible.
    pub file: PathBuf,
    /// `record:` names in step order.
    pub observations: Vec<String>,
    /// The step that records each observation, with its SQL
    /// (`step 3 (w: select pg_try_advisory_lock(42))`), aligned with `observations`.
    pub observation_steps: Vec<String>,
}

/// Totals.
#[derive(Debug, Serialize, Deserialize)]
pub struct Summary {
    /// Number of runs.
    pub runs: usize,
    /// Runs that passed (the two counts below included).
    pub passed: usize,
    /// Of the passed runs: those behind transaction pooling whose scenario's
    /// session assumption failed (`runs[].deviation`).
    pub deviated: usize,
    /// Of the passed runs: those not applicable to their configuration
    /// (`runs[].skipped`).
    pub not_applicable: usize,
    /// Runs that failed: could not run, an `expect:` not met outside a
    /// declared deviation, an error the scenario did not allow.
    pub failed: usize,
    /// Of the passed runs: cells whose repeats read differently
    /// (`runs[].varied`; files written before the variation rule call it
    /// `unstable`, and counted them as failed).
    #[serde(alias = "unstable")]
    pub varied: usize,
    /// Why they varied, with how many cells each ([`Varied`]); empty when
    /// none did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub varied_why: Vec<Varied>,
    /// Wall time of all runs together, in ms.
    pub elapsed_ms: f64,
}

/// A reason cells' repeats read differently, with how many cells
/// ([`Summary::varied_why`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Varied {
    /// The reason: the column's pooler hands out any of its server
    /// connections (pgagroal, Odyssey), the scenario declares that its
    /// readings vary (`readings_vary:`), or neither declares it (a race or a
    /// timing: the cell shows what differed).
    pub why: String,
    /// How many cells.
    pub cells: usize,
}

/// [`Varied::why`] for a cell behind a pooler whose readings vary by nature.
pub const VARIED_POOLER: &str = "behind pgagroal or Odyssey, which hand a client any of their server connections";
/// [`Varied::why`] for a cell of a scenario with `readings_vary:`.
pub const VARIED_SCENARIO: &str = "of a scenario that declares its readings vary (`readings_vary:`)";
/// [`Varied::why`] for a cell neither its column nor its scenario declares.
pub const VARIED_UNDECLARED: &str =
    "declared by neither column nor scenario: a race or a timing (each cell shows what its repeats read)";

impl Summary {
    /// The totals of `runs` of the columns `drivers`; `elapsed_ms` is the
    /// wall time of the whole matrix.
    pub fn of(runs: &[RunResult], drivers: &[DriverColumn], elapsed_ms: f64) -> Summary {
        let count = |want: Status| runs.iter().filter(|r| r.status() == want).count();
        let passed = runs.iter().filter(|r| r.status().passed()).count();
        let mut varied_why: Vec<Varied> = Vec::new();
        for r in runs.iter().filter(|r| r.status() == Status::Varies) {
            let why = if drivers.iter().any(|d| d.id == r.driver && d.readings_vary()) {
                VARIED_POOLER
            } else if r.readings_vary {
                VARIED_SCENARIO
            } else {
                VARIED_UNDECLARED
            };
            match varied_why.iter_mut().find(|v| v.why == why) {
                Some(v) => v.cells += 1,
                None => varied_why.push(Varied {
                    why: why.to_owned(),
                    cells: 1,
                }),
            }
        }
        Summary {
            runs: runs.len(),
            passed,
            deviated: count(Status::Deviates),
            not_applicable: count(Status::NotApplicable),
            failed: runs.len() - passed,
            varied: count(Status::Varies),
            varied_why,
            elapsed_ms,
        }
    }

    /// `36 cell(s) read differently between repeats, …: 29 behind pgagroal
    /// or Odyssey, …; 7 …`.
    pub fn varied_text(&self) -> String {
        let why: Vec<String> = self
            .varied_why
            .iter()
            .map(|v| format!("{} {}", v.cells, v.why))
            .collect();
        let mut text = format!(
            "{} cell(s) read differently between repeats, judged over every repeat, not a failure",
            self.varied
        );
        if !why.is_empty() {
            text = format!("{text}: {}", why.join("; "));
        }
        text
    }
}

/// The template environment of the Markdown writers: a template's
/// trailing newline is kept.
///
/// # Errors
/// A syntax configuration error (a bug).
fn markdown_environment() -> Result<minijinja::Environment<'static>> {
    let mut env = minijinja::Environment::new();
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder()
            .keep_trailing_newline(true)
            .build()?,
    );
    Ok(env)
}

impl Report {
    /// Assembles a report from what it is given: the servers, scenarios and
    /// drivers of the run, its cells, the wall time of the whole matrix
    /// (`elapsed_ms`) and the machine it ran on (`environment`:
    /// [`Environment::current`] for this process). It has no verdicts until
    /// [`Report::judged_by`] (`locklab::judge::report` does both, with the
    /// shipped properties).
    pub fn new(
        servers: &[Server],
        scenarios: &[Scenario],
        drivers: &[Box<dyn Driver>],
        runs: Vec<RunResult>,
        elapsed_ms: f64,
        environment: Environment,
    ) -> Report {
        let root = crate::server::workspace_root();
        let mut report = Report {
            schema_version: SCHEMA_VERSION,
            generated_at: jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            locklab_version: env!("CARGO_PKG_VERSION").to_owned(),
            repeat: runs.iter().map(|r| r.repeats).max().unwrap_or(1),
            shard: None,
            environment,
            servers: servers.iter().map(ServerInfo::of).collect(),
            drivers: drivers
                .iter()
                .map(|d| {
                    let i = d.info();
                    DriverColumn {
                        id: i.id.to_owned(),
                        crate_name: i.crate_name.to_owned(),
                        crate_version: i.crate_version,
                        configuration: i.configuration.to_owned(),
                        kind: i.kind.as_str().to_owned(),
                        pooler: i.pooler.map(|p| p.mode.as_str().to_owned()),
                        pooler_kind: i.pooler.map(|p| p.kind.as_str().to_owned()),
                        pooler_version: i.pooler.and_then(|p| {
                            let mut v: Vec<String> =
                                servers.iter().filter_map(|s| s.pooler_versions().remove(&p)).collect();
                            v.dedup();
                            (!v.is_empty()).then(|| v.join(", "))
                        }),
                    }
                })
                .collect(),
            scenarios: scenarios
                .iter()
                .map(|s| ScenarioInfo {
                    name: s.name.clone(),
                    family: s.family.clone(),
                    params: s.params.clone(),
                    description: s.description.clone(),
                    source: s.source.clone(),
                    tags: s.tags.clone(),
                    report: s.report.clone(),
                    file: s
                        .file
                        .strip_prefix(&root)
                        .map(Path::to_path_buf)
                        .unwrap_or_else(|_| s.file.clone()),
                    // Then one row per invariant of a race scenario.
                    observations: s.records(),
                    observation_steps: s
                        .steps
                        .iter()
                        .filter(|st| st.record.is_some())
                        .map(|st| st.label(&s.actors, &s.steps))
                        .chain(invariants(s).map(crate::scenario::Invariant::describe))
                        .collect(),
                })
                .collect(),
            summary: Summary::of(&[], &[], elapsed_ms),
            runs,
            properties: Vec::new(),
            verdicts: Vec::new(),
        };
        report.summary = Summary::of(&report.runs, &report.drivers, elapsed_ms);
        report
    }

    /// With [`Report::properties`] and [`Report::verdicts`] evaluated from
    /// its runs by `properties`: each server's cells as the baseline keeps
    /// them ([`BaselineCell::of`]), judged per column
    /// ([`crate::properties::evaluate`]). Nothing is read from disk
    /// (`locklab::judge` loads the shipped properties).
    pub fn judged_by(mut self, properties: &[Property]) -> Report {
        let drivers: Vec<Column> = self.drivers.iter().map(Column::of).collect();
        self.verdicts = self
            .servers
            .iter()
            .map(|s| {
                let cells: Vec<BaselineCell> = self
                    .runs
                    .iter()
                    .filter(|r| r.server == s.id)
                    .map(BaselineCell::of)
                    .collect();
                ServerVerdicts {
                    server: s.id.clone(),
                    properties: crate::properties::evaluate(properties, &cells, &drivers),
                }
            })
            .collect();
        self.properties = properties.to_vec();
        self
    }

    /// Where a cell's time goes, per column (server × driver, as the
    /// matrix's columns): the median over the column's cells of each phase
    /// of [`RunResult::phases_ms`] and of the whole cell, in ms; a phase no
    /// cell of the column reached is `None`. The phases in run order.
    pub fn phase_medians(&self) -> (Vec<&'static str>, Vec<PhaseRow>) {
        let several = self.servers.len() > 1;
        let mut rows = Vec::new();
        for server in &self.servers {
            for driver in &self.drivers {
                let runs: Vec<&RunResult> = self
                    .runs
                    .iter()
                    .filter(|r| r.server == server.id && r.driver == driver.id && r.skipped.is_none())
                    .collect();
                if runs.is_empty() {
                    continue;
                }
                let median = |v: Vec<f64>| crate::outcome::Stats::of(&v).map(|s| s.p50);
                rows.push(PhaseRow {
                    column: if several {
                        format!("{} · {}", server.id, driver.id)
                    } else {
                        driver.id.clone()
                    },
                    cells: runs.len(),
                    phases_ms: Phase::ALL
                        .iter()
                        .map(|p| median(runs.iter().filter_map(|r| r.phases_ms.get(p).copied()).collect()))
                        .collect(),
                    cell_ms: median(runs.iter().map(|r| r.elapsed_ms).collect()).unwrap_or(0.0),
                });
            }
        }
        (Phase::ALL.iter().map(|p| p.as_str()).collect(), rows)
    }

    /// What both templates show: the header fields, servers, drivers, summary
    /// and the failures.
    fn template_context(&self) -> minijinja::Value {
        let failures: Vec<String> = self.runs.iter().filter_map(|r| r.failure.clone()).collect();
        let (phase_names, phase_rows) = self.phase_medians();
        minijinja::context! {
            generated_at => &self.generated_at,
            locklab_version => &self.locklab_version,
            repeat => self.repeat,
            environment => minijinja::value::Serde(&self.environment),
            servers => minijinja::value::Serde(&self.servers),
            summary => minijinja::value::Serde(&self.summary),
            drivers => minijinja::value::Serde(&self.drivers),
            failures => failures,
            shard => self.shard.map(|s| s.to_string()),
            phase_names => phase_names,
            phase_rows => minijinja::value::Serde(&phase_rows),
        }
    }

    /// Writes the chosen formats into `dir` (created if missing):
    /// `matrix.json`, `matrix.md`, `index.html`; returns their paths.
    ///
    /// # Errors
    /// I/O errors, with the path; template errors (bugs).
    pub fn write(&self, dir: &Path, formats: &[Format]) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut written = Vec::new();
        for f in formats {
            let (name, text) = match f {
                Format::Json => ("matrix.json", self.to_json()?),
                Format::Md => ("matrix.md", self.to_markdown()?),
                Format::Html => ("index.html", self.to_html()?),
            };
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
            written.push(path);
        }
        Ok(written)
    }
}

/// One column's row of [`Report::phase_medians`].
#[derive(Debug, Serialize)]
pub struct PhaseRow {
    /// The column's header (the driver, or `server · driver` with several servers).
    pub column: String,
    /// How many of its cells ran (not `n/a`).
    pub cells: usize,
    /// Median ms of each of [`Phase::ALL`] over those cells (`None`: no cell reached it).
    pub phases_ms: Vec<Option<f64>>,
    /// Median ms of a whole cell.
    pub cell_ms: f64,
}

/// The invariants of `s`'s trials, in file order (none without `trials`).
fn invariants(s: &Scenario) -> impl Iterator<Item = &crate::scenario::Invariant> {
    s.trials.iter().flat_map(|t| t.invariants.iter())
}
