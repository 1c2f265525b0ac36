//! `locklab run`: a selection's results on stdout; and the per-run summary
//! that `run` and `report` print.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use locklab::outcome::{LocksLeft, RunResult, Status};

use crate::cli::RunArgs;
use crate::execute::execute;
use crate::output::{emit, exit_for};

/// Runs the selection and prints the summary; with `json` the full results
/// go to stdout as JSON and the summary to stderr. Exit code 1 when a cell
/// failed (one whose repeats read differently did not).
///
/// # Errors
/// As [`execute`]; writing to stdout failed.
pub fn run(dir: &Path, args: &RunArgs, json: bool) -> Result<ExitCode> {
    let report = execute(dir, args)?;
    if json {
        eprint!("{}", summary(&report));
        emit(&report.to_json()?)?;
    } else {
        emit(&summary(&report))?;
    }
    Ok(exit_for(&report))
}

/// The per-run summary printed by `run` and `report`: one line per cell, its
/// observations, what it left behind, then one line with the counts (and
/// one for the cells whose repeats read differently, with why, when there
/// are any).
pub fn summary(report: &locklab::report::Report) -> String {
    let runs = &report.runs[..];
    let mut lines = Vec::new();
    let several = runs.iter().any(|r| r.server != runs[0].server);
    let width = runs
        .iter()
        .map(|r| r.scenario.chars().count())
        .max()
        .unwrap_or(0)
        .max(28);
    let obs_width = runs
        .iter()
        .flat_map(|r| r.observations.iter().map(|o| o.name.chars().count()))
        .max()
        .unwrap_or(0)
        .max(34);
    for r in runs {
        cell_lines(&mut lines, r, several, width, obs_width);
    }
    let summary = locklab::report::Summary::of(runs, &report.drivers, 0.0);
    let (failed, deviated, skipped) = (summary.failed, summary.deviated, summary.not_applicable);
    let repeats = runs.iter().map(|r| r.repeats).max().unwrap_or(1);
    let each = if repeats > 1 {
        format!(" (cells, each run {repeats} times)")
    } else {
        String::new()
    };
    lines.push(format!(
        "{} passed, {deviated} deviated (behind transaction pooling, Pgpool-II or pgagroal), {skipped} not applicable, \
         {failed} failed{each}",
        runs.len() - failed - deviated - skipped
    ));
    if summary.varied > 0 {
        lines.push(summary.varied_text());
    }
    lines.join("\n") + "\n"
}

/// The summary's lines for cell `r`: its status line (with the server when
/// `several` servers ran), then its observations and notes.
fn cell_lines(lines: &mut Vec<String>, r: &RunResult, several: bool, width: usize, obs_width: usize) {
    let status = match r.status() {
        Status::Varies => "vary",
        Status::Fail => "FAIL",
        Status::NotApplicable => "n/a ",
        Status::Deviates => "dev ",
        Status::Pass => "pass",
    };
    let server = if several {
        format!("{:<16} ", r.server)
    } else {
        String::new()
    };
    lines.push(format!(
        "{status}  {server}{:<width$} {:<30} {:>8.1} ms{}",
        r.scenario,
        r.driver,
        r.elapsed_stats.filter(|s| s.n > 1).map_or(r.elapsed_ms, |s| s.p50),
        if r.repeats > 1 { " p50 per run" } else { "" }
    ));
    for o in &r.observations {
        match o.timing() {
            Some(t) => lines.push(format!("        {:<obs_width$} {} ({t})", o.name, o.seen())),
            None => lines.push(format!("        {:<obs_width$} {}", o.name, o.seen())),
        }
        for n in &o.notices {
            lines.push(format!("        {:<obs_width$}   {n}", ""));
        }
    }
    if !r.locks_left.is_empty() {
        lines.push(format!(
            "        {:<obs_width$} {}",
            "locks left after run",
            LocksLeft::of(&r.locks_left)
        ));
    }
    if !r.cleaned_backends.is_empty() {
        lines.push(format!(
            "        {:<obs_width$} ended backend(s) {:?}",
            "cleaned after run", r.cleaned_backends
        ));
    }
    if !r.backends_left.is_empty() {
        lines.push(format!(
            "        {:<obs_width$} {}",
            "LEAK: left once over",
            r.backends_left.join(", ")
        ));
    }
    for note in [&r.failure, &r.deviation, &r.skipped].into_iter().flatten() {
        lines.push(format!("        {note}"));
    }
}
