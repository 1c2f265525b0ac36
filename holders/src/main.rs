//! `locklab-holders`: who holds and who awaits advisory locks on a running
//! server, with a verdict per lock (leaked, stuck, waiting, expected); once,
//! every few seconds (`--watch`), into a node_exporter textfile, or served as
//! Prometheus metrics (`locklab-holders serve`). Read-only; never ends a
//! backend. The same command as `locklab holders`, without the lab.
//!
//! Exit codes: 0 the snapshot was taken (and nothing `--fail-on` names was
//! found); 1 `--fail-on` found something; 2 no snapshot (bad arguments, a
//! broken `--keys` file, an unreachable server, a refused role); 130 / 143
//! stopped by SIGINT / SIGTERM.

use std::process::ExitCode;

use clap::Parser;
use locklab_holders::cli::{HoldersArgs, holders};

/// Who holds and who awaits advisory locks on a running server, with a
/// verdict per lock (leaked, stuck, waiting, expected); or serve them as
/// Prometheus metrics (`serve`). Read-only; never ends a backend.
#[derive(Parser)]
#[command(name = "locklab-holders", version)]
struct Cli {
    #[command(flatten)]
    args: HoldersArgs,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0, argument errors to stderr with 2.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match holders(&cli.args) {
        Ok(code) => code,
        Err(e) => match locklab_core::signals::interrupted(&e) {
            Some(signal) => signal.exit_code(),
            None => {
                eprintln!("locklab-holders: error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}
