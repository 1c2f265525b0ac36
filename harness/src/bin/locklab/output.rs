//! What every command shares for its output: stdout that tolerates a closed
//! pipe, and the exit code for a set of runs.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};
use locklab::outcome::RunResult;

/// Writes `text` to stdout. A reader that went away (`locklab list | head -1`)
/// is not an error; any other write failure is.
///
/// # Errors
/// Writing or flushing stdout failed (other than a broken pipe).
pub fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("cannot write to stdout"),
        _ => Ok(()),
    }
}

/// 0 when every run passed, else 1.
pub fn exit_for(runs: &[RunResult]) -> ExitCode {
    if runs.iter().all(RunResult::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
