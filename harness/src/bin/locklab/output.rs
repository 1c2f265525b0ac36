//! What every command shares for its output: stdout that tolerates a closed
//! pipe ([`emit`], from `locklab-core`), the exit code for a set of runs,
//! and whether an output directory is a given one ([`same_dir`]).

use std::process::ExitCode;

use locklab::outcome::RunResult;
use locklab::report::Report;
pub use locklab_core::output::emit;

/// 0 when every run of `report` passed, or was unstable over its repeats in
/// a column or a scenario whose readings vary by nature (behind pgagroal or
/// Odyssey: `PoolerKind::readings_vary`; a scenario's `readings_vary:`),
/// else 1.
pub fn exit_for(report: &Report) -> ExitCode {
    if report.runs.iter().all(|r| r.passed() || varies_by_nature(report, r)) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Whether run `r` of `report` was unstable in a column or a scenario whose
/// readings vary by nature (`PoolerKind::readings_vary`, a scenario's
/// `readings_vary:`).
pub fn varies_by_nature(report: &Report, r: &RunResult) -> bool {
    r.status() == locklab::outcome::Status::Unstable
        && (r.readings_vary || report.drivers.iter().any(|d| d.id == r.driver && d.readings_vary()))
}

/// Whether two paths name the same directory (by their canonical paths).
pub fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
