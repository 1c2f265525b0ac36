//! Your own pool under test, from your own `cargo test`: [`Suite`] runs
//! locklab's scenario library (or a subset, or your own scenario directory)
//! through a [`Driver`] of yours, one test per scenario, on a server locklab
//! starts (or `LOCKLAB_DSN`), with the properties you require as
//! assertions. docs/src/own-stack.md walks through it; `examples/own-pool/`
//! of the repository is a project that uses it.
//!
//! A test of a scenario fails when its cell fails (the pool could not be
//! built, a step's deadline passed, a server error the scenario did not
//! expect) or when a required property (`properties/ID.yaml`) that the
//! scenario decides is violated or cannot be judged: the message names the
//! property, the deciding cell (scenario and record) and what it read. A
//! scenario whose expectations the pool does not meet (`deviates`) is
//! reported, not failed: what a pool should do is what the properties say.
//!
//! ```text
//! // tests/locklab.rs, with `[[test]] name = "locklab" harness = false`
//! fn main() -> std::process::ExitCode {
//!     let pool = locklab::lab::SqlxPgPool::configured("our-sqlx", "after_release: pg_advisory_unlock_all()", |o| {
//!         o.after_release(|conn, _| Box::pin(async move {
//!             sqlx::query("select pg_advisory_unlock_all()").execute(&mut *conn).await?;
//!             Ok(true)
//!         }))
//!     });
//!     locklab::lab::Suite::new(pool)
//!         .only(&["session-lock-pool-return", "xact-lock-competition"])
//!         .require(&["session-lock-released-on-return"])
//!         .main()
//! }
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

use anyhow::{Result, anyhow, bail};
use locklab_drivers::{ConnectSpec, Driver, DriverError, DriverInfo, Pool, PoolOptions};

use super::Cell;
use super::run::Lab;
use crate::baseline::BaselineCell;
use crate::outcome::{RunResult, Status};
use crate::properties::{Mark, Property, Scope};
use crate::scenario::{Process, Scenario};
use crate::server::{BackendChoice, ServerOptions};

/// The PostgreSQL major version a [`Suite`] starts when neither
/// [`Suite::server`] nor `LOCKLAB_DSN` says otherwise.
pub const SUITE_PG_MAJOR: u32 = 17;

/// locklab's scenarios through one pool of yours, as tests.
pub struct Suite {
    driver: Arc<dyn Driver>,
    scenarios: PathBuf,
    only: Vec<String>,
    require: Vec<String>,
    properties: Option<PathBuf>,
    server: ServerOptions,
    baseline: Option<PathBuf>,
}

/// What went wrong in a [`Suite::check`].
#[derive(Debug)]
pub enum SuiteError {
    /// The suite could not run: a scenario or property file does not load,
    /// a name in [`Suite::only`] or [`Suite::require`] matches nothing, the
    /// server does not start.
    Setup(anyhow::Error),
    /// It ran, and these did not hold (at least one).
    Unmet(Vec<Unmet>),
}

/// Serialises the writes of pending baseline files by a suite's tests,
/// which run at once and may share a scenario file.
static PENDING_WRITES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One thing that did not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unmet {
    /// A cell failed: the harness could not run the scenario through the pool.
    CellFailed {
        /// The scenario run (`NAME` or `NAME[k=v]`).
        scenario: String,
        /// Why, as the report says it.
        failure: String,
    },
    /// A required property is violated (or, `undecided`, cannot be judged:
    /// a cell deciding it failed or read something no rule of it reads).
    Property {
        /// The property's id (`properties/ID.yaml`).
        property: String,
        /// Its severity: `unsafe`, `surprising`, `informational`.
        severity: String,
        /// `violated` or `undecided`.
        verdict: String,
        /// The deciding cell's scenario run.
        scenario: String,
        /// The record read (`None`: the cell's status).
        record: Option<String>,
        /// What it read, in the property's words where it has them.
        says: String,
        /// What to do about it (the property's advice).
        advice: String,
    },
    /// The scenario's cells differ from your accepted baseline file
    /// ([`Suite::baseline`]), or it has none; the cells were written as a
    /// pending file for `locklab review --baseline DIR`.
    Baseline {
        /// The scenario run (`NAME` or `NAME[k=v]`).
        scenario: String,
        /// The diff as `locklab check` prints it, and what was written.
        diff: String,
    },
}

impl fmt::Display for Unmet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unmet::CellFailed { scenario, failure } => write!(f, "the cell of {scenario} failed: {failure}"),
            Unmet::Property {
                property,
                severity,
                verdict,
                scenario,
                record,
                says,
                advice,
            } => write!(
                f,
                "property {property} ({severity}, required) is {verdict}: {scenario} · {}: {says}\n  advice: {advice}",
                record.as_deref().unwrap_or("status")
            ),
            Unmet::Baseline { scenario, diff } => write!(f, "{scenario} differs from your baseline:\n{diff}"),
        }
    }
}

impl fmt::Display for SuiteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SuiteError::Setup(e) => write!(f, "{e:#}"),
            SuiteError::Unmet(all) => {
                for (i, u) in all.iter().enumerate() {
                    if i > 0 {
                        writeln!(f)?;
                    }
                    write!(f, "{u}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for SuiteError {}

/// What a [`Suite::check`] ran.
#[derive(Debug)]
pub struct Checked {
    /// One cell per scenario run, in the order of the scenario files.
    pub results: Vec<Cell>,
}

impl Suite {
    /// A suite of every scenario locklab ships ([`crate::lab::shipped_scenarios`])
    /// through `driver`, requiring nothing, on a local PostgreSQL
    /// [`SUITE_PG_MAJOR`] cluster (installed into locklab's `.cache/` on
    /// first use), or on the server `LOCKLAB_DSN` names when it is set (its
    /// role must be allowed to create databases: each cell gets one).
    pub fn new(driver: impl Driver + 'static) -> Suite {
        Suite::with(Arc::new(driver))
    }

    fn with(driver: Arc<dyn Driver>) -> Suite {
        let server = if std::env::var("LOCKLAB_DSN").is_ok_and(|d| !d.is_empty()) {
            ServerOptions::new(BackendChoice::External, SUITE_PG_MAJOR)
        } else {
            ServerOptions::new(BackendChoice::Local, SUITE_PG_MAJOR)
        };
        Suite {
            driver,
            scenarios: super::run::shipped_scenarios(),
            only: Vec::new(),
            require: Vec::new(),
            properties: None,
            server,
            baseline: None,
        }
    }

    /// [`Suite::new`] for a column already boxed: one of [`columns_file`]'s,
    /// or one of locklab's own (`lab::drivers(&["sqlx"])`).
    pub fn column(driver: Box<dyn Driver>) -> Suite {
        Suite::with(Arc::from(driver))
    }

    /// Scenarios from `path` instead: a scenario file, or a directory of
    /// them (your own; docs/src/scenario-format.md).
    #[must_use]
    pub fn scenarios(mut self, path: impl Into<PathBuf>) -> Suite {
        self.scenarios = path.into();
        self
    }

    /// Only these scenarios: a file's name (every parameter set of it) or
    /// one run's name (`NAME[k=v]`). A name that matches none is an error.
    #[must_use]
    pub fn only(mut self, names: &[&str]) -> Suite {
        self.only = names.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// The properties that must hold (ids: `locklab verdict` lists them;
    /// `properties/ID.yaml`). A test fails when a required property that
    /// its scenario decides is violated or cannot be judged. A required id
    /// that no selected scenario decides is an error, naming the scenarios
    /// that do.
    #[must_use]
    pub fn require(mut self, ids: &[&str]) -> Suite {
        self.require = ids.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// Property files from `dir` instead of locklab's `properties/`.
    #[must_use]
    pub fn properties(mut self, dir: impl Into<PathBuf>) -> Suite {
        self.properties = Some(dir.into());
        self
    }

    /// Compare each scenario's cells with your own baseline directory
    /// (`DIR/NAME.json`, the layout of locklab's `reports/baseline/`): a
    /// test fails when a cell differs by `locklab check`'s rules (values
    /// equal, timings within the default tolerance, race shares as
    /// information) or its scenario has no accepted file; the run's cells
    /// are then written as `DIR/NAME.json.new`, which `locklab review
    /// --baseline DIR` accepts or rejects. A directory that does not exist
    /// yet has no accepted file.
    #[must_use]
    pub fn baseline(mut self, dir: impl Into<PathBuf>) -> Suite {
        self.baseline = Some(dir.into());
        self
    }

    /// The server to run on instead (e.g. `ServerOptions::new(BackendChoice::Container, 16)`).
    #[must_use]
    pub fn server(mut self, options: super::ServerOptions) -> Suite {
        self.server = options.0;
        self
    }

    /// The selected scenarios and the required properties, checked against
    /// each other.
    fn plan(&self) -> Result<(Vec<Scenario>, Vec<Property>)> {
        if !self.scenarios.exists() {
            bail!(
                "{}",
                locklab_core::home::missing("the scenario library", &self.scenarios)
            );
        }
        let all = super::run::load(&self.scenarios)?;
        for name in &self.only {
            if !all.iter().any(|s| s.name == *name || s.family == *name) {
                bail!(
                    "only({name:?}): no such scenario in {} (have: {})",
                    self.scenarios.display(),
                    families(&all).join(", ")
                );
            }
        }
        let selected: Vec<Scenario> = all
            .iter()
            .filter(|s| self.only.is_empty() || self.only.iter().any(|n| s.name == *n || s.family == *n))
            .cloned()
            .collect();
        if self.require.is_empty() {
            return Ok((selected, Vec::new()));
        }
        let dir = self.properties.clone().unwrap_or_else(crate::properties::shipped_dir);
        if !dir.exists() {
            bail!("{}", locklab_core::home::missing("the property files", &dir));
        }
        // A property may name any scenario of the library, not only the selected ones.
        let mut known = all.clone();
        if let Ok(shipped) = crate::scenario::load_dir(&super::run::shipped_scenarios()) {
            known.extend(shipped.into_iter().filter(|s| !all.iter().any(|a| a.name == s.name)));
        }
        let properties = crate::properties::load_dir(&dir, &known).map_err(|errors| {
            anyhow!(
                "the property files do not load:\n{}",
                errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
            )
        })?;
        let mut required = Vec::new();
        for id in &self.require {
            let Some(p) = properties.iter().find(|p| &p.id == id) else {
                bail!(
                    "require({id:?}): no such property in {} (have: {})",
                    dir.display(),
                    properties.iter().map(|p| p.id.as_str()).collect::<Vec<_>>().join(", ")
                );
            };
            if p.scope == Scope::Server {
                bail!("require({id:?}): a server property (PostgreSQL's own behaviour); it judges no pool");
            }
            if !selected.iter().any(|s| p.decided_by.iter().any(|d| d.covers(&s.name))) {
                let mut deciding: Vec<&str> = p.decided_by.iter().map(|d| d.scenario.as_str()).collect();
                deciding.dedup();
                bail!(
                    "require({id:?}): none of the selected scenarios decides it; select {}",
                    deciding.join(", ")
                );
            }
            required.push(p.clone());
        }
        Ok((selected, required))
    }

    /// Runs every selected scenario through the pool and judges the
    /// required properties over all of them. Blocks: call it from outside
    /// an async runtime (a plain `#[test]`).
    ///
    /// # Errors
    /// [`SuiteError::Setup`] when it cannot run; [`SuiteError::Unmet`] with
    /// every failed cell and every required property violated or undecided,
    /// each naming the deciding cell.
    pub fn check(&self) -> Result<Checked, SuiteError> {
        let (scenarios, properties) = self.plan().map_err(SuiteError::Setup)?;
        let runnable: Vec<Scenario> = scenarios.into_iter().filter(|s| self.cannot_run(s).is_none()).collect();
        let lab = Lab::start_with(&self.server).map_err(SuiteError::Setup)?;
        let drivers = [self.boxed()];
        let results = lab.run_all(&runnable, &drivers).map_err(SuiteError::Setup)?;
        let mut unmet = judge(
            &properties,
            &results,
            &crate::properties::Column::of_driver(&self.driver.info()),
        );
        for scenario in &runnable {
            let mine: Vec<RunResult> = results
                .iter()
                .filter(|r| r.scenario == scenario.name)
                .cloned()
                .collect();
            unmet.extend(self.against_baseline(&lab, scenario, mine).map_err(SuiteError::Setup)?);
        }
        if unmet.is_empty() {
            Ok(Checked {
                results: results.into_iter().map(Cell).collect(),
            })
        } else {
            Err(SuiteError::Unmet(unmet))
        }
    }

    /// Runs the suite as a test binary's `main` (a `[[test]]` target with
    /// `harness = false`): one test per scenario run, named after it,
    /// filtered and listed as `cargo test` does (libtest-mimic). The server
    /// starts with the first test and stops before this returns. A scenario
    /// this pool cannot run here (it crashes a pool process, which needs a
    /// driver locklab can host, or a child actor, which needs the `locklab`
    /// binary: `LOCKLAB_BIN`) is reported ignored, its reason as its kind
    /// (`[pool crash]`, `[needs LOCKLAB_BIN]`).
    pub fn main(self) -> ExitCode {
        let args = libtest_mimic::Arguments::from_args();
        let (scenarios, properties) = match self.plan() {
            Ok(plan) => plan,
            Err(e) => {
                eprintln!("locklab: error: {e:#}");
                return ExitCode::from(2);
            }
        };
        let suite = Arc::new(self);
        let properties = Arc::new(properties);
        let lab: Arc<OnceLock<Result<Lab, String>>> = Arc::new(OnceLock::new());
        let trials = scenarios
            .into_iter()
            .map(|scenario| {
                let ignored = suite.cannot_run(&scenario);
                let (suite, properties, lab) = (suite.clone(), properties.clone(), lab.clone());
                let name = scenario.name.clone();
                let trial = libtest_mimic::Trial::test(name, move || {
                    // The first test starts the server; the others wait for it.
                    let lab = lab
                        .get_or_init(|| Lab::start_with(&suite.server).map_err(|e| format!("{e:#}")))
                        .as_ref()
                        .map_err(|e| format!("the server did not start: {e}"))?;
                    let results = lab
                        .run_all(std::slice::from_ref(&scenario), &[suite.boxed()])
                        .map_err(|e| format!("{e:#}"))?;
                    let mut unmet = judge(
                        &properties,
                        &results,
                        &crate::properties::Column::of_driver(&suite.driver.info()),
                    );
                    unmet.extend(
                        suite
                            .against_baseline(lab, &scenario, results)
                            .map_err(|e| format!("{e:#}"))?,
                    );
                    if unmet.is_empty() {
                        Ok(())
                    } else {
                        Err(unmet
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("\n")
                            .into())
                    }
                });
                match ignored {
                    Some(why) => trial.with_ignored_flag(true).with_kind(why),
                    None => trial,
                }
            })
            .collect();
        let conclusion = libtest_mimic::run(&args, trials);
        // The server stops here, before the process exits.
        drop(Arc::try_unwrap(lab).ok());
        conclusion.exit_code()
    }

    /// `scenario`'s cells (`results`, of this run) compared with the
    /// accepted file of [`Suite::baseline`], if one was given; on a
    /// difference, or with no accepted file, the cells go into the pending
    /// file (on top of one an earlier test of this run wrote for another
    /// parameter set) and the difference is returned.
    ///
    /// # Errors
    /// A baseline file that does not load; the pending file cannot be written.
    fn against_baseline(&self, lab: &Lab, scenario: &Scenario, results: Vec<RunResult>) -> Result<Option<Unmet>> {
        use crate::baseline::{self, Baseline, BaselineDir, ScenarioBaseline, Tolerance, dir};
        let Some(path) = &self.baseline else {
            return Ok(None);
        };
        if results.is_empty() {
            return Ok(None);
        }
        let report = lab.report_all(std::slice::from_ref(scenario), &[self.boxed()], results);
        let fresh = Baseline::from_report(&report)?;
        let name = scenario.family.as_str();
        let _guard = PENDING_WRITES.lock().unwrap_or_else(|p| p.into_inner());
        let accepted = if path.exists() {
            BaselineDir::load_some(path, Some(&[name]))?
        } else {
            BaselineDir::empty(path)
        };
        let Some(fresh_file) = ScenarioBaseline::split(&fresh).remove(name) else {
            return Ok(None);
        };
        let pending_path = dir::pending_path(path, name);
        let review = format!(
            "`locklab review --baseline {} --accept {name}` accepts it",
            path.display()
        );
        let acc = accepted.files.get(name);
        // With no accepted file, every cell of the run is new.
        let before = acc.map_or_else(
            || Baseline {
                cells: Vec::new(),
                drivers: Default::default(),
                ..fresh.clone()
            },
            |a| a.as_baseline(a.race_rows()),
        );
        let expected = |c: &baseline::BaselineCell| {
            c.scenario == scenario.name && fresh.cells.iter().any(|f| f.driver == c.driver)
        };
        let comparison = baseline::compare_with(
            &before,
            &fresh,
            Tolerance::default(),
            baseline::Shares::ANOTHER_MACHINE,
            &expected,
        );
        if comparison.is_clean() {
            return Ok(None);
        }
        let differ = comparison
            .diffs
            .iter()
            .map(|d| (d.scenario.clone(), d.driver.clone()))
            .collect();
        // On top of a pending file an earlier test of this run wrote (another
        // parameter set), else of the accepted file.
        let pending = pending_path
            .is_file()
            .then(|| ScenarioBaseline::load(&pending_path))
            .transpose()?;
        ScenarioBaseline::settle(pending.as_ref().or(acc), &fresh_file, &differ)
            .0
            .save(&pending_path)?;
        if acc.is_none() {
            return Ok(Some(Unmet::Baseline {
                scenario: scenario.name.clone(),
                diff: format!(
                    "no baseline for scenario {name} in {}: wrote its cells to {}; {review}",
                    path.display(),
                    pending_path.display()
                ),
            }));
        }
        let text = comparison.render(&before, &dir::accepted_path(path, name), "this test", None);
        Ok(Some(Unmet::Baseline {
            scenario: scenario.name.clone(),
            diff: format!("{text}wrote {}; {review}", pending_path.display()),
        }))
    }

    /// The pool as the lab's column.
    fn boxed(&self) -> Box<dyn Driver> {
        Box::new(Yours(self.driver.clone()))
    }

    /// Why `scenario` cannot run through this pool here, if it cannot.
    fn cannot_run(&self, scenario: &Scenario) -> Option<&'static str> {
        if scenario.pool_process == Process::Child && !hostable(&self.driver.info()) {
            return Some("pool crash");
        }
        let child_actor = scenario.actors.iter().any(|a| a.process == Process::Child);
        if (child_actor || scenario.pool_process == Process::Child) && crate::faults::child::program().is_err() {
            return Some("needs LOCKLAB_BIN");
        }
        None
    }
}

/// Whether `locklab pool-adapter ID` can host this column's pool in a
/// process of its own: only a column locklab itself registers.
fn hostable(info: &DriverInfo) -> bool {
    locklab_drivers::find(info.id).is_ok()
}

/// The scenario files' names, once each.
fn families(all: &[Scenario]) -> Vec<&str> {
    let mut out: Vec<&str> = all.iter().map(|s| s.family.as_str()).collect();
    out.dedup();
    out
}

/// Every failed cell of `results` and every property of `required`
/// violated or undecided by them (each property judged on the cells of
/// `results` that decide it; one that none decides is skipped).
fn judge(required: &[Property], results: &[RunResult], column: &crate::properties::Column) -> Vec<Unmet> {
    let mut unmet: Vec<Unmet> = results
        .iter()
        .filter(|r| r.status() == Status::Fail)
        .map(|r| Unmet::CellFailed {
            scenario: r.scenario.clone(),
            failure: r.failure.clone().unwrap_or_default(),
        })
        .collect();
    let cells: Vec<BaselineCell> = results.iter().map(BaselineCell::of).collect();
    let Some(driver) = results.first().map(|r| r.driver.clone()) else {
        return unmet;
    };
    for p in required {
        let mut deciding = p.clone();
        deciding
            .decided_by
            .retain(|d| cells.iter().any(|c| d.covers(&c.scenario)));
        if deciding.decided_by.is_empty() {
            continue;
        }
        let column = crate::properties::Column {
            id: driver.clone(),
            ..column.clone()
        };
        let verdicts =
            crate::properties::evaluate(std::slice::from_ref(&deciding), &cells, std::slice::from_ref(&column));
        let Some(column) = verdicts.first().and_then(|v| v.of(&driver)) else {
            continue;
        };
        if !matches!(column.verdict, Mark::Violated | Mark::Undecided) {
            continue;
        }
        let evidence = column
            .evidence
            .iter()
            .find(|e| e.reads == column.verdict)
            .or_else(|| column.evidence.first());
        unmet.push(Unmet::Property {
            property: p.id.clone(),
            severity: p.severity.as_str().to_owned(),
            verdict: column.verdict.as_str().to_owned(),
            scenario: evidence.map_or_else(|| deciding.decided_by[0].scenario.clone(), |e| e.scenario.clone()),
            record: evidence.and_then(|e| e.record.clone()),
            says: evidence
                .map(|e| e.says.clone().unwrap_or_else(|| e.reading.clone()))
                .unwrap_or_else(|| column.reasons.join("; ")),
            advice: p.advice.clone(),
        });
    }
    unmet
}

/// A user's driver as a column: as it is, except that only a column
/// locklab registers can have its pool hosted in a process of its own.
struct Yours(Arc<dyn Driver>);

#[async_trait::async_trait]
impl Driver for Yours {
    fn info(&self) -> DriverInfo {
        self.0.info()
    }

    async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
        self.0.pool(spec, opts).await
    }

    fn unavailable(&self) -> Option<String> {
        self.0.unavailable()
    }

    async fn prepare(&self) -> Option<String> {
        self.0.prepare().await
    }

    fn in_own_process(&self, host: &Path) -> Option<Box<dyn Driver>> {
        if hostable(&self.0.info()) {
            self.0.in_own_process(host)
        } else {
            None
        }
    }
}

/// The columns a columns file declares (the format of
/// `drivers/adapters/adapters.yaml`, paths relative to the file), to pass
/// to [`Suite::column`] or [`crate::lab::Lab::run`]: an adapter of your
/// own, in any language, or a pooler you run.
///
/// # Errors
/// The file does not load (with its line), declares an id another column
/// has, declares no column, or was added already.
pub fn columns_file(path: &Path) -> Result<Vec<Box<dyn Driver>>> {
    let ids = locklab_drivers::external::add_columns_file(path).map_err(|e| anyhow!("{e}"))?;
    let mine: Vec<Box<dyn Driver>> = locklab_drivers::external::user_columns()
        .into_iter()
        .filter(|d| ids.iter().any(|i| i == d.info().id))
        .collect();
    if mine.is_empty() {
        bail!("{}: declares no column, or was added already", path.display());
    }
    Ok(mine)
}
