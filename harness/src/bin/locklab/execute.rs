//! Running a selection: start the servers, run every scenario × driver ×
//! repeat on them, stop them, and assemble the [`Report`]. SIGINT and SIGTERM
//! are handled throughout and come back as [`Interrupted`].

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use locklab::matrix;
use locklab::outcome::RunResult;
use locklab::report::Report;
use locklab::runner;
use locklab::server::{self, Server};
use locklab::shard::Shard;
use tokio::runtime::Runtime;

use crate::cli::RunArgs;
use crate::progress::Progress;
use crate::selection::{load, select, select_scenarios, select_tagged};
use crate::servers::start_servers;
use locklab_core::signals::{Interrupted, Interrupts};

/// Starts the servers, runs the selection on them and assembles the report.
/// The servers are stopped (and what they started removed) before it returns.
///
/// # Errors
/// Invalid scenario files, an unknown scenario or driver, servers that do
/// not start (see [`start_servers`]); [`Interrupted`] on SIGINT or SIGTERM,
/// after cleaning up: during start-up image builds are stopped (the
/// watchdogs remove what was started), during the runs the run databases are
/// dropped and the servers stopped.
pub fn execute(dir: &Path, args: &RunArgs) -> Result<Report> {
    let scenarios = select_tagged(select_scenarios(load(dir)?, &args.scenario)?, &args.tag)?;
    let drivers = select(
        locklab_drivers::registry(),
        &args.driver,
        |d| d.info().id.to_owned(),
        "driver",
    )?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    // Signals are handled from before the first server starts: an interrupted
    // start-up stops image builds and exits; the watchdogs remove what was started.
    let mut interrupts = {
        let _guard = rt.enter();
        Interrupts::install()
    };
    let servers = match start(&rt, &mut interrupts, args) {
        Ok(started) => started?,
        Err(signal) => {
            eprintln!("locklab: {} during server start-up: cleaning up", signal.what);
            server::container::stop_builds();
            // The start-up thread may still be waiting on a server: not waited for.
            rt.shutdown_background();
            return Err(signal.into());
        }
    };
    // Printed once the servers are ours: from here a signal drops them (and
    // removes what they started) before we exit.
    for s in &servers {
        eprintln!("locklab: {}: {}", s.id(), s.describe());
    }
    let repeat = usize::from(args.repeat);
    locklab::runner::set_max_trials(args.trials);
    // A race cell (`trials:`) runs once, whatever the repeat.
    let shard = args.shard.unwrap_or(Shard::ALL);
    let cells = matrix::cells(&servers, &scenarios, &drivers, shard);
    let per_round: Vec<u64> = (1..=repeat.max(1))
        .map(|round| cells.iter().filter(|(_, s, _)| matrix::runs_in_round(s, round)).count() as u64)
        .collect();
    if let Some(shard) = args.shard {
        eprintln!(
            "locklab: shard {shard}: {} of the {} cells",
            matrix::cells(&servers, &scenarios, &drivers, shard).len(),
            servers.len() * scenarios.len() * drivers.len()
        );
    }
    let began = Instant::now();
    let mut progress = Progress::new(&per_round, began);
    let runs = rt.block_on(async {
        let jobs = args.jobs.into();
        let on_done = |round: usize, r: &RunResult| progress.step(round, r);
        tokio::select! {
            runs = matrix::run_shard(&servers, &scenarios, &drivers, shard, jobs, repeat, on_done) => Ok(runs),
            signal = interrupts.next() => Err(signal),
        }
    });
    progress.finish();
    let runs = match runs {
        Ok(runs) => runs,
        Err(signal) => return Err(clean_up_after(signal, rt, servers).into()),
    };
    let mut report = locklab::judge::report(
        &servers,
        &scenarios,
        &drivers,
        runs,
        began.elapsed().as_secs_f64() * 1e3,
    );
    report.shard = args.shard;
    drop(rt);
    drop(servers);
    Ok(report)
}

/// Starts the servers on a blocking thread of `rt`, unless a signal comes first.
fn start(rt: &Runtime, interrupts: &mut Interrupts, args: &RunArgs) -> Result<Result<Vec<Server>>, Interrupted> {
    rt.block_on(async {
        let start_args = args.clone();
        let start = tokio::task::spawn_blocking(move || start_servers(&start_args.server));
        tokio::select! {
            r = start => Ok(r.map_err(|e| anyhow::anyhow!("server start-up failed: {e}")).and_then(|r| r)),
            signal = interrupts.next() => Err(signal),
        }
    })
}

/// After a signal during the runs: the runs in flight were cancelled mid-way,
/// so their databases are dropped (this matters on an external server), then
/// the runtime and the servers go. Returns `signal`, for the caller to return.
pub fn clean_up_after(signal: Interrupted, rt: Runtime, servers: Vec<Server>) -> Interrupted {
    eprintln!("locklab: {}: cleaning up", signal.what);
    for server in &servers {
        let dropped = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(20), runner::drop_own_databases(server)).await
        });
        if let Ok(Ok(n)) = dropped
            && n > 0
        {
            eprintln!("locklab: dropped {n} run database(s) on {}", server.id());
        }
    }
    drop(rt);
    drop(servers);
    signal
}
