//! `locklab soak`: the selection round after round, and which cells differed
//! between rounds.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use locklab::report::Report;

use crate::cli::SoakArgs;
use crate::execute::execute;
use crate::output::{declared_to_vary, emit, exit_for};

/// Runs every selected cell `--rounds` times (as repeats) and prints each
/// cell that failed or differed between rounds. Exit code 1 if a cell failed,
/// or differed between rounds where neither its scenario nor its column
/// declares that its readings vary (`readings_vary:`, pgagroal and Odyssey):
/// a soak looks for the variation a report takes as a reading.
///
/// # Errors
/// `--repeat` given (the rounds are the repeats); as [`execute`]; the
/// `--json-out` file cannot be written.
pub fn soak(dir: &Path, args: &SoakArgs) -> Result<ExitCode> {
    let mut run = args.run.clone();
    if run.repeat != 1 {
        bail!("soak: give the number of rounds with --rounds, not --repeat");
    }
    run.repeat = args.rounds;
    let report = execute(dir, &run)?;
    if let Some(path) = &args.json_out {
        std::fs::write(path, report.to_json()?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let text = soak_summary(&report);
    emit(&text)?;
    let undeclared = report
        .runs
        .iter()
        .any(|r| !r.varied.is_empty() && !declared_to_vary(&report, r));
    Ok(if undeclared {
        ExitCode::from(1)
    } else {
        exit_for(&report)
    })
}

/// What `soak` prints: each cell that failed or differed between rounds,
/// with what differed, then one line with the counts.
fn soak_summary(report: &Report) -> String {
    let runs = &report.runs;
    let rounds = report.repeat;
    let mut text = String::new();
    for r in runs.iter().filter(|r| !r.passed() || !r.varied.is_empty()) {
        let declared = if declared_to_vary(report, r) {
            " (its readings vary by declared nature)"
        } else {
            ""
        };
        let _ = writeln!(text, "{} × {} × {}{declared}:", r.server, r.scenario, r.driver);
        if let Some(f) = &r.failure {
            let _ = writeln!(text, "    failed: {f}");
        }
        for line in &r.varied {
            let _ = writeln!(text, "    differs: {line}");
        }
    }
    let differing = runs.iter().filter(|r| !r.varied.is_empty()).count();
    let declared = runs
        .iter()
        .filter(|r| !r.varied.is_empty() && declared_to_vary(report, r))
        .count();
    let failed = runs.iter().filter(|r| !r.passed()).count();
    let leaks = runs.iter().filter(|r| !r.backends_left.is_empty()).count();
    let versions: Vec<&str> = report.servers.iter().map(|s| s.version.as_str()).collect();
    // A cell that is not applicable is not run (its repeats agree trivially).
    let made = runs.iter().filter(|r| r.skipped.is_none()).count();
    let _ = writeln!(
        text,
        "soak: {rounds} rounds × {} cells ({} not applicable) = {} runs on {} in {:.0} s: \
         {differing} cell(s) differ between rounds ({declared} of them declared to vary), {failed} cell(s) failed, \
         {leaks} cell(s) with a leak",
        runs.len(),
        runs.len() - made,
        made * rounds,
        versions.join(", "),
        report.summary.elapsed_ms / 1e3
    );
    text
}
