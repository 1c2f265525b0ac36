//! `locklab`: run advisory-lock scenarios through Rust pools and write the driver matrix.
//!
//! Exit codes: 0 no run failed (or all files valid); 1 a run failed (or
//! `validate`, `check`, `soak` found what they look for); 2
//! nothing could run (bad arguments, invalid scenario files, no server, …);
//! 130 / 143 stopped by SIGINT / SIGTERM, after cleaning up.

mod adapter;
mod bench;
mod check;
mod cli;
mod doctor;
mod execute;
mod gate;
mod list;
mod merge;
mod output;
mod pooler_check;
mod progress;
mod report;
mod repro;
mod review;
mod run;
mod schema;
mod selection;
mod servers;
mod soak;
mod stress;
mod try_build;
mod try_cmd;
mod validate;
mod verdict;
mod words;

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Result;
use locklab::server;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    // A `process: child` actor's connection (not a user command).
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == locklab::faults::child::COMMAND)
    {
        return locklab::faults::child::serve_main();
    }
    // A Rust pool in a process of its own (`pool.process: child`).
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == locklab::faults::host::COMMAND)
    {
        return locklab::faults::host::host_main();
    }
    // sqlx warns (and r2d2 logs errors) about connections the harness terminates or restarts on purpose, and about
    // statements that wait on a lock for over a second: both expected here. The job queues
    // log the outcomes their cells record (a refused registration, a scheduler that found
    // its lock taken, a killed worker's lost connection): those are readings, not news.
    let filter = tracing_subscriber::EnvFilter::try_from_env("LOCKLAB_LOG").unwrap_or_else(|_| {
        "warn,sqlx=error,deadpool=error,r2d2=off,apalis_core=off,apalis_postgres=off,underway=off,graphile_worker=off,graphile_worker_queries=off,graphile_worker_utils=off,graphile_worker_migrations=off,graphile_worker_recovery=off".into()
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0, argument errors to stderr with 2.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => match locklab_core::signals::interrupted(&e) {
            Some(signal) => signal.exit_code(),
            None => {
                eprintln!("locklab: error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

/// Runs the command; the scenario directory is `--scenarios` /
/// `LOCKLAB_SCENARIOS`, else this repository's `scenarios/`.
fn dispatch(cli: Cli) -> Result<ExitCode> {
    for file in cli.columns.iter().filter(|f| !f.as_os_str().is_empty()) {
        locklab_drivers::external::add_columns_file(file).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let given = cli.scenarios.as_deref();
    let dir = given.map_or_else(|| server::workspace_root().join("scenarios"), ToOwned::to_owned);
    match &cli.command {
        Command::List => list::list(&dir),
        Command::Validate { files } => validate::validate(&dir, files),
        Command::Schema { of } => schema::schema(*of),
        Command::Run { run, json } => run::run(&dir, run, *json),
        Command::Report(args) => report::report(&dir, given.is_some(), args),
        Command::Verdict(args) => verdict::verdict(&dir, args),
        Command::Doctor(args) => doctor::doctor(&dir, args),
        Command::Soak(args) => soak::soak(&dir, args),
        Command::Check(args) => check::check(&dir, given, args),
        Command::Review(args) => review::review(args),
        Command::MigrateBaseline { file, dir } => review::migrate(file, dir),
        Command::Try(args) => try_cmd::try_crates(&dir, args),
        Command::Merge(args) => merge::merge(args),
        Command::PoolerCheck(args) => pooler_check::pooler_check(&dir, args),
        Command::Repro(args) => repro::repro(&dir, args),
        Command::Adapter(cli::AdapterCommand::Check(args)) => adapter::check(args),
        Command::Holders(args) => locklab_holders::cli::holders(args),
        Command::Stress(args) => stress::stress(args),
        Command::LoadReport(args) => stress::load_report(args),
        Command::Bench(args) => bench::bench(&dir, args),
    }
}
