//! The driver matrix report: `reports/matrix.json` (schema below) and
//! `reports/matrix.md` (rendered from `templates/matrix.md.j2`).
//!
//! `matrix.json`, schema version 1:
//! - `schema_version` (1), `generated_at` (RFC 3339), `locklab_version`
//! - `server`: `version` (PostgreSQL `version()`), `backend` (`local`/`external`), `startup_ms`
//! - `drivers[]`: `id`, `crate_name`, `crate_version` (from Cargo.lock), `configuration`, `kind` (`direct`/`pooled`)
//! - `scenarios[]`: `name`, `description`, `source`, `file`, `observations` (record names in step order)
//! - `runs[]`: one per scenario × driver: `scenario`, `driver`, `failure` (null when passed),
//!   `observations[]` (`name`, `step`, `value`, `display`, `sqlstate`, `elapsed_ms`),
//!   `steps[]` (`step`, `label`, `elapsed_ms`, `outcome`), `locks_left[]` (`key`, `mode`,
//!   `granted`, `pid`, `state`, `application_name`), `elapsed_ms`
//! - `summary`: `runs`, `passed`, `failed`, `elapsed_ms`
//!
//! All times are in ms.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use locklab_drivers::Driver;
use serde::Serialize;

use crate::runner::RunResult;
use crate::scenario::Scenario;
use crate::server::Server;

/// Version of the `matrix.json` layout; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Everything one `locklab report` produced.
#[derive(Debug, Serialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// When the report was made (RFC 3339, UTC).
    pub generated_at: String,
    /// Version of the locklab harness.
    pub locklab_version: String,
    /// The server the runs used.
    pub server: ServerInfo,
    /// Driver columns, in order.
    pub drivers: Vec<DriverColumn>,
    /// Scenarios, in order.
    pub scenarios: Vec<ScenarioInfo>,
    /// Every run, scenario-major.
    pub runs: Vec<RunResult>,
    /// Totals.
    pub summary: Summary,
}

/// The server in the report header.
#[derive(Debug, Serialize)]
pub struct ServerInfo {
    /// PostgreSQL `version()`.
    pub version: String,
    /// `local` or `external`.
    pub backend: String,
    /// Start-up time of the server in ms (0 for an external one: connect time).
    pub startup_ms: f64,
}

/// A driver column.
#[derive(Debug, Serialize)]
pub struct DriverColumn {
    /// Column id.
    pub id: String,
    /// Crate under test.
    pub crate_name: String,
    /// Exact version from Cargo.lock.
    pub crate_version: String,
    /// Configuration in the crate's terms.
    pub configuration: String,
    /// `direct` or `pooled`.
    pub kind: String,
}

/// A scenario section.
#[derive(Debug, Serialize)]
pub struct ScenarioInfo {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Source of the claim.
    pub source: Option<String>,
    /// File, relative to the workspace when possible.
    pub file: PathBuf,
    /// `record:` names in step order.
    pub observations: Vec<String>,
}

/// Totals.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// Number of runs.
    pub runs: usize,
    /// Runs that passed.
    pub passed: usize,
    /// Runs that failed.
    pub failed: usize,
    /// Wall time of all runs together, in ms.
    pub elapsed_ms: f64,
}

impl Report {
    /// Assembles a report. `elapsed_ms` is the wall time of the whole matrix.
    pub fn new(
        server: &Server,
        scenarios: &[Scenario],
        drivers: &[Box<dyn Driver>],
        runs: Vec<RunResult>,
        elapsed_ms: f64,
    ) -> Report {
        let root = crate::server::workspace_root();
        let passed = runs.iter().filter(|r| r.passed()).count();
        Report {
            schema_version: SCHEMA_VERSION,
            generated_at: jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            locklab_version: env!("CARGO_PKG_VERSION").to_owned(),
            server: ServerInfo {
                version: server.version().to_owned(),
                backend: server.backend().as_str().to_owned(),
                startup_ms: server.startup().as_secs_f64() * 1e3,
            },
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
                    }
                })
                .collect(),
            scenarios: scenarios
                .iter()
                .map(|s| ScenarioInfo {
                    name: s.name.clone(),
                    description: s.description.clone(),
                    source: s.source.clone(),
                    file: s
                        .file
                        .strip_prefix(&root)
                        .map(Path::to_path_buf)
                        .unwrap_or_else(|_| s.file.clone()),
                    observations: s.steps.iter().filter_map(|st| st.record.clone()).collect(),
                })
                .collect(),
            summary: Summary {
                runs: runs.len(),
                passed,
                failed: runs.len() - passed,
                elapsed_ms,
            },
            runs,
        }
    }

    /// The report as pretty JSON.
    ///
    /// # Errors
    /// Serialisation failure (not expected).
    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }

    /// The report as GitHub-flavoured Markdown.
    ///
    /// # Errors
    /// A template error (a bug).
    pub fn to_markdown(&self) -> Result<String> {
        #[derive(Serialize)]
        struct Row {
            name: String,
            cells: Vec<String>,
        }
        #[derive(Serialize)]
        struct Table<'a> {
            name: &'a str,
            description: &'a str,
            source: Option<&'a str>,
            rows: Vec<Row>,
        }
        let run_of = |s: &str, d: &str| self.runs.iter().find(|r| r.scenario == s && r.driver == d);
        let esc = |s: &str| s.replace('|', "\\|").replace('\n', " ");
        let mut tables = Vec::new();
        for s in &self.scenarios {
            let mut rows = Vec::new();
            for name in &s.observations {
                let cells = self
                    .drivers
                    .iter()
                    .map(|d| match run_of(&s.name, &d.id).and_then(|r| r.observation(name)) {
                        Some(o) => match o.elapsed_ms {
                            Some(ms) => format!("{} ({ms:.1} ms)", esc(&o.display)),
                            None => esc(&o.display),
                        },
                        None => "—".to_owned(),
                    })
                    .collect();
                rows.push(Row {
                    name: format!("`{name}`"),
                    cells,
                });
            }
            let left = self
                .drivers
                .iter()
                .map(|d| match run_of(&s.name, &d.id) {
                    Some(r) if r.locks_left.is_empty() => "none".to_owned(),
                    Some(r) => describe_locks_left(&r.locks_left),
                    None => "—".to_owned(),
                })
                .collect();
            rows.push(Row {
                name: "locks left after run".into(),
                cells: left,
            });
            let result = self
                .drivers
                .iter()
                .map(|d| match run_of(&s.name, &d.id) {
                    Some(r) if r.passed() => "pass".to_owned(),
                    Some(_) => "**FAIL**".to_owned(),
                    None => "—".to_owned(),
                })
                .collect();
            rows.push(Row {
                name: "expectations".into(),
                cells: result,
            });
            tables.push(Table {
                name: &s.name,
                description: &s.description,
                source: s.source.as_deref(),
                rows,
            });
        }
        let failures: Vec<String> = self.runs.iter().filter_map(|r| r.failure.clone()).collect();
        let mut env = minijinja::Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .keep_trailing_newline(true)
                .build()?,
        );
        env.add_template("matrix.md", include_str!("../templates/matrix.md.j2"))?;
        let out = env.get_template("matrix.md")?.render(minijinja::context! {
            generated_at => &self.generated_at,
            server => minijinja::value::Serde(&self.server),
            summary => minijinja::value::Serde(&self.summary),
            drivers => minijinja::value::Serde(&self.drivers),
            tables => minijinja::value::Serde(&tables),
            failures => failures,
        })?;
        Ok(out)
    }

    /// Writes `matrix.json` and `matrix.md` into `dir` (created if missing) and
    /// returns their paths.
    ///
    /// # Errors
    /// I/O errors, with the path.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let json = dir.join("matrix.json");
        let md = dir.join("matrix.md");
        std::fs::write(&json, self.to_json()?).with_context(|| format!("cannot write {}", json.display()))?;
        std::fs::write(&md, self.to_markdown()?).with_context(|| format!("cannot write {}", md.display()))?;
        Ok(vec![json, md])
    }
}

/// `key 43 (idle), key (1, 2) (idle in transaction)`: the "locks left after run" cell.
pub fn describe_locks_left(locks: &[crate::observe::LockRow]) -> String {
    let each: Vec<String> = locks
        .iter()
        .map(|l| format!("key {} ({})", l.key, l.state.as_deref().unwrap_or("?")))
        .collect();
    each.join(", ")
}
