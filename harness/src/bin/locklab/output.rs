//! What every command shares for its output: stdout that tolerates a closed
//! pipe ([`emit`], from `locklab-core`), the exit code for a set of runs,
//! and whether an output directory is a given one ([`same_dir`]).

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

/// Whether two paths name the same directory (by their canonical paths).
pub fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
