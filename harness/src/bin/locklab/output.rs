//! What every command shares for its output: stdout that tolerates a closed
//! pipe ([`emit`], from `locklab-core`), the exit code for a set of runs,
//! and whether an output directory is a given one ([`same_dir`]).

use std::process::ExitCode;

use locklab::outcome::RunResult;
use locklab::report::Report;
pub use locklab_core::output::emit;

/// 0 when no cell of `report` failed, else 1. A cell whose repeats read
/// differently did not fail (the variation rule, docs/src/faults-and-races.md):
/// a cell fails only when it could not run, an `expect:` was not met outside
/// a declared deviation, or a step met an error its scenario did not allow.
pub fn exit_for(report: &Report) -> ExitCode {
    if report.runs.iter().all(RunResult::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Whether cell `r` of `report` reads differently from run to run by
/// declared nature: its column's (behind pgagroal or Odyssey:
/// `PoolerKind::readings_vary`) or its scenario's (`readings_vary:`).
pub fn declared_to_vary(report: &Report, r: &RunResult) -> bool {
    r.readings_vary || report.drivers.iter().any(|d| d.id == r.driver && d.readings_vary())
}

/// Whether two paths name the same directory (by their canonical paths).
pub fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
