//! What every command shares for its output: stdout that tolerates a closed
//! pipe ([`emit`], from `locklab-core`), and the exit code for a set of runs.

use std::process::ExitCode;

use locklab::outcome::RunResult;
pub use locklab_core::output::emit;

/// 0 when every run passed, else 1.
pub fn exit_for(runs: &[RunResult]) -> ExitCode {
    if runs.iter().all(RunResult::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
