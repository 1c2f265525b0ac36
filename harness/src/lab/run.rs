//! [`Lab`]: a started server and the runtime its cells run on, and the
//! helpers that choose what runs (the shipped scenarios, a scenario file or
//! directory, drivers by id).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use locklab_drivers::Driver;

use super::{Cell, Report, Scenario, ServerOptions};
use crate::outcome::RunResult;
use crate::server::Server;

/// The directory of the scenarios this crate ships (`scenarios/` of its
/// workspace).
pub fn shipped_scenarios() -> PathBuf {
    crate::server::workspace_root().join("scenarios")
}

/// The scenarios of a scenario file, or of every `*.yaml` file of a
/// directory: one per parameter combination of a file with `params`.
///
/// # Errors
/// Every error of every file, each with its file, line and column, in one
/// message (see docs/src/scenario-format.md).
pub fn load_scenarios(path: &Path) -> Result<Vec<Scenario>> {
    Ok(load(path)?.into_iter().map(Scenario).collect())
}

/// [`load_scenarios`], as the lab's machinery takes them.
pub(crate) fn load(path: &Path) -> Result<Vec<crate::scenario::Scenario>> {
    let loaded = if path.is_dir() {
        crate::scenario::load_dir(path)
    } else {
        crate::scenario::load_file(path)
    };
    loaded.map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        anyhow!("{}", lines.join("\n"))
    })
}

/// The registered drivers (the columns: in-process Rust pools, poolers,
/// other languages' pools through their adapters) with these ids, in this
/// order; `locklab list` prints the ids.
///
/// # Errors
/// An id that is not registered, with the ids that are.
pub fn drivers(ids: &[&str]) -> Result<Vec<Box<dyn Driver>>> {
    ids.iter()
        .map(|id| locklab_drivers::find(id).map_err(|e| anyhow!("{e}")))
        .collect()
}

/// A started server and the runtime the cells run on.
pub struct Lab {
    server: Server,
    runtime: tokio::runtime::Runtime,
    jobs: usize,
    repeat: usize,
    /// Wall time of the last [`Lab::run`], in ms.
    last_run_ms: std::sync::Mutex<f64>,
}

impl Lab {
    /// Starts the server `options` describe (for the local backend, a
    /// cluster of its own in a temporary directory, as an unprivileged user
    /// when run as root; the binaries are installed on first use). It stops
    /// when the `Lab` is dropped, and is removed even when the process is
    /// killed (a watchdog process).
    ///
    /// # Errors
    /// The runtime or the server does not start (the message says why, e.g.
    /// no Docker engine for the container backend).
    pub fn start(options: &ServerOptions) -> Result<Lab> {
        Lab::start_with(&options.0)
    }

    /// [`Lab::start`] with the machinery's options.
    pub(crate) fn start_with(options: &crate::server::ServerOptions) -> Result<Lab> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        let server = Server::start(options)?;
        Ok(Lab {
            server,
            runtime,
            jobs: crate::matrix::DEFAULT_JOBS,
            repeat: 1,
            last_run_ms: std::sync::Mutex::new(0.0),
        })
    }

    /// A libpq key/value connection string for the started server's
    /// administration database (`host=… port=… user=… dbname=…`, with
    /// `password=…` where the server has one), for a project's own tests
    /// that need a server of their own: tokio-postgres parses it
    /// (`"…".parse::<tokio_postgres::Config>()`), and so do libpq and
    /// sqlx (`PgConnectOptions::from_str`). Values are quoted as libpq
    /// quotes them (PostgreSQL docs §32.1.1.1, "Keyword/Value Connection
    /// Strings").
    pub fn connection_string(&self) -> String {
        let s = self.server.admin_spec("locklab-lab");
        let quote = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
        let mut out = format!(
            "host={} port={} user={} dbname={}",
            quote(&s.host),
            s.port,
            quote(&s.user),
            quote(&s.dbname)
        );
        if let Some(p) = &s.password {
            out.push_str(&format!(" password={}", quote(p)));
        }
        out
    }

    /// At most `jobs` cells at once (default 8).
    #[must_use]
    pub fn jobs(mut self, jobs: usize) -> Lab {
        self.jobs = jobs.max(1);
        self
    }

    /// Runs every cell `repeat` times and folds the repeats into one result
    /// with timing statistics (default 1); a cell whose repeats read
    /// differently varies (not a failure: its variants are kept and judged,
    /// the variation rule in docs/src/faults-and-races.md). A race cell (`trials:`) runs once: its trials are its repeats.
    #[must_use]
    pub fn repeat(mut self, repeat: usize) -> Lab {
        self.repeat = repeat.max(1);
        self
    }

    /// Runs every scenario with every driver and returns one result per
    /// cell, scenario-major, in the order given. Blocks: call it from
    /// outside an async runtime.
    ///
    /// # Errors
    /// Called from inside an async runtime. A cell that fails is not an
    /// error: its [`Cell::status`] and [`Cell::failure`] say why.
    pub fn run(&self, scenarios: &[Scenario], drivers: &[Box<dyn Driver>]) -> Result<Vec<Cell>> {
        let scenarios: Vec<crate::scenario::Scenario> = scenarios.iter().map(|s| s.0.clone()).collect();
        Ok(self.run_all(&scenarios, drivers)?.into_iter().map(Cell).collect())
    }

    /// [`Lab::run`], in the machinery's types.
    pub(crate) fn run_all(
        &self,
        scenarios: &[crate::scenario::Scenario],
        drivers: &[Box<dyn Driver>],
    ) -> Result<Vec<RunResult>> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(anyhow!("Lab::run blocks: call it from outside an async runtime"));
        }
        let servers = std::slice::from_ref(&self.server);
        let began = Instant::now();
        let results = self.runtime.block_on(crate::matrix::run_all(
            servers,
            scenarios,
            drivers,
            self.jobs,
            self.repeat,
            |_, _| {},
        ));
        *self.last_run_ms.lock().unwrap_or_else(|p| p.into_inner()) = began.elapsed().as_secs_f64() * 1e3;
        Ok(results)
    }

    /// The matrix report of `cells` (from the last [`Lab::run`], with
    /// these `scenarios` and `drivers`; its wall time is the report's),
    /// judged by the shipped properties, to write with [`Report::write`].
    pub fn report(&self, scenarios: &[Scenario], drivers: &[Box<dyn Driver>], cells: Vec<Cell>) -> Report {
        let scenarios: Vec<crate::scenario::Scenario> = scenarios.iter().map(|s| s.0.clone()).collect();
        Report(self.report_all(&scenarios, drivers, cells.into_iter().map(|c| c.0).collect()))
    }

    /// [`Lab::report`], in the machinery's types.
    pub(crate) fn report_all(
        &self,
        scenarios: &[crate::scenario::Scenario],
        drivers: &[Box<dyn Driver>],
        results: Vec<RunResult>,
    ) -> crate::report::Report {
        let elapsed_ms = *self.last_run_ms.lock().unwrap_or_else(|p| p.into_inner());
        crate::judge::report(
            std::slice::from_ref(&self.server),
            scenarios,
            drivers,
            results,
            elapsed_ms,
        )
    }
}
