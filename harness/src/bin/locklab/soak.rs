//! `locklab soak`: the selection round after round, and which cells differed
//! between rounds.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use locklab::report::Report;

use crate::cli::SoakArgs;
use crate::execute::execute;
use crate::output::{emit, exit_for};

/// Runs every selected cell `--rounds` times (as repeats) and prints each
/// cell that differed between rounds or failed. Exit code 1 if any did.
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
    Ok(exit_for(&report))
}

/// What `soak` prints: each cell that differed between rounds or failed, with
/// what differed, then one line with the counts.
fn soak_summary(report: &Report) -> String {
    let runs = &report.runs;
    let rounds = report.repeat;
    let mut text = String::new();
    for r in runs.iter().filter(|r| !r.passed()) {
        let _ = writeln!(text, "{} × {} × {}:", r.server, r.scenario, r.driver);
        if r.unstable.is_empty() {
            let _ = writeln!(text, "    failed: {}", r.failure.as_deref().unwrap_or_default());
        }
        for line in &r.unstable {
            let _ = writeln!(text, "    differs: {line}");
        }
    }
    let differing = runs.iter().filter(|r| !r.unstable.is_empty()).count();
    let failed = runs.iter().filter(|r| !r.passed() && r.unstable.is_empty()).count();
    let leaks = runs.iter().filter(|r| !r.backends_left.is_empty()).count();
    let versions: Vec<&str> = report.servers.iter().map(|s| s.version.as_str()).collect();
    // A cell that is not applicable is not run (its repeats agree trivially).
    let made = runs.iter().filter(|r| r.skipped.is_none()).count();
    let _ = writeln!(
        text,
        "soak: {rounds} rounds × {} cells ({} not applicable) = {} runs on {} in {:.0} s: \
         {differing} cell(s) differ between rounds, {failed} other cell(s) failed, {leaks} cell(s) with a leak",
        runs.len(),
        runs.len() - made,
        made * rounds,
        versions.join(", "),
        report.summary.elapsed_ms / 1e3
    );
    text
}
