//! `locklab check`: a fresh run compared with the committed baseline, or
//! (`--update`) written as the new baseline.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};
use locklab::baseline::{self, Baseline, Tolerance, short_version};
use locklab::outcome::RunResult;
use locklab::report::Report;
use locklab::server;

use crate::cli::{CheckArgs, RunArgs};
use crate::execute::execute;
use crate::output::emit;

/// Lines of cell diffs `check` prints without `--full`: about one screen.
const DIFF_LINES: usize = 30;

/// What `check` was asked to do, from its options.
struct CheckPlan<'a> {
    /// The selection and the server.
    run: &'a RunArgs,
    /// The baseline file.
    path: PathBuf,
    /// Only some scenarios or drivers run (-s, -d, another scenario directory).
    partial: bool,
    /// The scenarios are this repository's `scenarios/`.
    default_dir: bool,
    /// `--baseline` was given.
    explicit: bool,
    /// Timing tolerance.
    tolerance: Tolerance,
    /// Diff lines to print (`None` with `--full`).
    max_lines: Option<usize>,
    /// How race shares compare (`--compare-shares`: by the race rule).
    shares: baseline::Shares,
    /// The report is read from a file (`--from`), not run.
    from_file: bool,
}

/// Compares a fresh run of the scenarios in `dir` (or, with `--from`, a
/// report's `matrix.json`) with the baseline, or (`--update`) rewrites the
/// baseline from it. `given_dir` is the directory
/// `--scenarios` / `LOCKLAB_SCENARIOS` named, if any. Exit code 1 on a
/// difference, a failed cell, or (`--update`) a failed cell not written.
///
/// # Errors
/// `--update` of a selection without `--baseline`; several versions or
/// backends; no baseline file; a `--from` file that is not a matrix.json of
/// one server; as [`execute`]; the baseline cannot be written.
pub fn check(dir: &Path, given_dir: Option<&Path>, args: &CheckArgs) -> Result<ExitCode> {
    let explicit = args.baseline.is_some();
    let default_dir = match given_dir {
        None => true,
        Some(d) => crate::output::same_dir(d, &server::workspace_root().join("scenarios")),
    };
    let run = &args.run;
    let plan = CheckPlan {
        run,
        path: args
            .baseline
            .clone()
            .unwrap_or_else(|| server::workspace_root().join("reports").join("baseline.json")),
        partial: !run.scenario.is_empty() || !run.driver.is_empty() || !default_dir || run.shard.is_some(),
        default_dir,
        explicit,
        tolerance: Tolerance {
            factor: args.timing_factor,
            slack_ms: args.timing_slack_ms,
        },
        max_lines: (!args.full).then_some(DIFF_LINES),
        shares: if args.compare_shares {
            baseline::Shares::ByPressure
        } else {
            baseline::Shares::ANOTHER_MACHINE
        },
        from_file: args.from.is_some(),
    };
    if args.update && plan.partial && !explicit {
        bail!(
            "`check --update` with --scenario, --driver, --shard or another scenario directory would replace \
             the full baseline with a partial one; give --baseline FILE"
        );
    }
    one_server(run)?;
    if !explicit {
        user_columns_need_a_baseline(run)?;
    }
    if let Some(pair) = &args.upgrade {
        return upgrade(&plan, dir, args.from.as_deref(), &pair[0], &pair[1]);
    }
    // Read the baseline before the runs: a missing one is an error at once.
    let before = if args.update {
        None
    } else {
        Some(Baseline::load(&plan.path)?)
    };
    let report = match &args.from {
        Some(file) => {
            let report = locklab::report::load(file)?;
            if args.update && !explicit {
                whole_matrix(dir, file, &report)?;
            }
            report
        }
        None => execute(dir, run)?,
    };
    let fresh = Baseline::from_report(&report)?;
    match before {
        None => update(&plan, &report, &fresh),
        Some(before) => compare(&plan, &report, &before, &fresh),
    }
}

/// A user's columns (`--columns FILE`) are never compared with locklab's
/// committed baseline, which has no cells of them, nor written into it.
///
/// # Errors
/// A selected column (every column, when none is selected) that a user's
/// columns file declares, naming the file and the way out.
fn user_columns_need_a_baseline(run: &crate::cli::RunArgs) -> Result<()> {
    let selected: Vec<String> = if run.driver.is_empty() {
        locklab_drivers::ids().into_iter().map(str::to_owned).collect()
    } else {
        run.driver.clone()
    };
    for id in &selected {
        if let Some(file) = locklab_drivers::external::user_column_file(id) {
            bail!(
                "column '{id}' comes from your columns file {}: the committed baseline holds locklab's own columns \
                 only; compare it with a baseline of your own, --baseline FILE (`check --update --baseline FILE -d \
                 {id}` writes one){}",
                file.display(),
                if run.driver.is_empty() {
                    ", or select locklab's columns with -d"
                } else {
                    ""
                }
            );
        }
    }
    Ok(())
}

/// `--upgrade FROM TO`: the cells of column `to` compared with those of
/// column `from` of one run (both columns run now, or read from `file`),
/// printed as `check` prints a baseline diff. Exit 1 when a cell differs
/// or failed.
///
/// # Errors
/// An unknown column, or one missing from `file`; as [`execute`].
fn upgrade(plan: &CheckPlan, dir: &Path, file: Option<&Path>, from: &str, to: &str) -> Result<ExitCode> {
    for id in [from, to] {
        locklab_drivers::find(id).map_err(|e| anyhow::anyhow!("--upgrade: {e}"))?;
    }
    if from == to {
        bail!("--upgrade needs two different columns, not {from} twice");
    }
    let report = match file {
        Some(file) => locklab::report::load(file)?,
        None => {
            let mut run = plan.run.clone();
            run.driver = vec![from.to_owned(), to.to_owned()];
            execute(dir, &run)?
        }
    };
    let source = file.map_or("this run".to_owned(), |f| f.display().to_string());
    let (text, clean) = between_columns(&report, from, to, plan.tolerance, plan.max_lines, &source)?;
    emit(&text)?;
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The cells of column `to` of `report` compared with those of column
/// `from` (`check --upgrade`, `locklab try`): a line per column with its
/// crate, version and configuration, then the diff as `check` prints a
/// baseline's, property verdicts that changed first; and whether nothing
/// differs and no cell of either column failed. `source` names the report
/// in messages.
///
/// # Errors
/// A column missing from the report; a report of several servers.
pub fn between_columns(
    report: &Report,
    from: &str,
    to: &str,
    tolerance: Tolerance,
    max_lines: Option<usize>,
    source: &str,
) -> Result<(String, bool)> {
    let fresh = Baseline::from_report(report)?;
    let name = format!("{from} → {to}");
    let missing = |id: &str| anyhow::anyhow!("column {id} is not in {source}");
    let before = fresh.column(from, &name).ok_or_else(|| missing(from))?;
    let after = fresh.column(to, &name).ok_or_else(|| missing(to))?;
    let mut comparison = baseline::compare(&before, &after, tolerance, &|_| true);
    match locklab::properties::shipped_cached() {
        Ok(properties) => comparison.judge(properties, &before, &after),
        Err(e) => eprintln!("locklab: note: verdicts not compared: the property files do not load:\n{e}"),
    }
    let mut text = String::new();
    for id in [from, to] {
        if let Some(d) = report.drivers.iter().find(|d| d.id == id) {
            let _ = writeln!(
                text,
                "{id}: {} {}; {}{}",
                d.crate_name,
                d.crate_version,
                d.configuration,
                d.pooler_version
                    .as_deref()
                    .map(|v| format!("; {v}"))
                    .unwrap_or_default()
            );
        }
    }
    text.push_str(&comparison.render(
        &before,
        Path::new(&format!("column {from}")),
        &format!("column {to}"),
        max_lines,
    ));
    let failed: Vec<&RunResult> = report
        .runs
        .iter()
        .filter(|r| !r.passed() && (r.driver == from || r.driver == to))
        .collect();
    for r in &failed {
        let _ = writeln!(
            text,
            "\nfailed: {} × {}: {}",
            r.scenario,
            r.driver,
            r.failure.as_deref().unwrap_or_default()
        );
    }
    Ok((text, comparison.is_clean() && failed.is_empty()))
}

/// `--update --from FILE` without `--baseline`: FILE must hold the whole
/// matrix (every scenario of `dir`, every registered driver, no shard), or
/// it would replace the full baseline with a partial one.
fn whole_matrix(dir: &Path, file: &Path, report: &Report) -> Result<()> {
    let scenarios = crate::selection::load(dir)?.len();
    let drivers = locklab_drivers::registry().len();
    if report.shard.is_some() || report.scenarios.len() != scenarios || report.drivers.len() != drivers {
        bail!(
            "{} holds {} scenario(s) × {} driver(s){}, not the whole matrix ({scenarios} × {drivers}): \
             `check --update` would replace the full baseline with a partial one; give --baseline FILE",
            file.display(),
            report.scenarios.len(),
            report.drivers.len(),
            if report.shard.is_some() { " of one shard" } else { "" }
        );
    }
    Ok(())
}

/// One server: refuses several versions or backends before starting any.
fn one_server(run: &RunArgs) -> Result<()> {
    let mut majors = run.server.majors();
    majors.dedup();
    let mut backends = run.server.backends();
    backends.dedup();
    if majors.len() > 1 || backends.len() > 1 {
        bail!(
            "`check` compares one server with the baseline: give one --pg and one --backend (LOCKLAB_PG, LOCKLAB_BACKEND)"
        );
    }
    Ok(())
}

/// "17.5 (local)": the run's server, as the baseline names it.
fn server_label(report: &Report) -> String {
    let server = &report.servers[0];
    format!("{} ({})", short_version(&server.version), server.backend)
}

/// The runs that failed (a cell whose repeats read differently did not:
/// the variation rule).
fn failed_runs(report: &Report) -> Vec<&RunResult> {
    report.runs.iter().filter(|r| !r.passed()).collect()
}

/// `--update`: writes `fresh`, the run's baseline, unless a cell failed
/// (exit 1; a cell whose repeats read differently is recorded with each way
/// it read: `BaselineCell::variants`). Race rows keep the readings the file
/// being replaced knew for them ([`Baseline::keep_readings_of`]), when it is
/// of the same major version.
fn update(plan: &CheckPlan, report: &Report, fresh: &Baseline) -> Result<ExitCode> {
    let path = plan.path.as_path();
    let failed = failed_runs(report);
    if !failed.is_empty() {
        let mut text = format!(
            "locklab: not writing {}: {} cell(s) failed; a baseline records passing behaviour\n",
            path.display(),
            failed.len()
        );
        for r in &failed {
            let _ = writeln!(text, "  {}", r.failure.as_deref().unwrap_or_default());
        }
        eprint!("{text}");
        return Ok(ExitCode::from(1));
    }
    let mut fresh = fresh.clone();
    let kept = match path.exists().then(|| Baseline::load(path)) {
        Some(Ok(previous)) if previous.server.major == fresh.server.major => fresh.keep_readings_of(&previous),
        Some(Ok(_)) | None => 0,
        Some(Err(e)) => {
            eprintln!("locklab: note: the baseline being replaced is not read for its race readings: {e:#}");
            0
        }
    };
    fresh.save(path)?;
    emit(&format!(
        "wrote {} ({} cell(s), {}, {} run(s) per cell){}{}\n",
        path.display(),
        fresh.cells.len(),
        server_label(report),
        report.repeat,
        if kept > 0 {
            format!("; kept {kept} race reading(s) the file being replaced knew and this run did not read, at count 0")
        } else {
            String::new()
        },
        if plan.partial {
            "; a selection: the file now holds only these cells"
        } else {
            ""
        }
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// How the reason of a cell that needs a Docker engine starts
/// (`locklab::server::poolers::unavailable`).
const NEEDS_DOCKER: &str = "needs Docker";

/// Compares `fresh`, the run's baseline, with `before` and prints the
/// differences (exit 1 if any, or if a cell failed).
fn compare(plan: &CheckPlan, report: &Report, before: &Baseline, fresh: &Baseline) -> Result<ExitCode> {
    let (run, path) = (plan.run, plan.path.as_path());
    let server = &report.servers[0];
    let failed = failed_runs(report);
    if before.server.major != server.major {
        eprintln!(
            "locklab: note: the baseline was measured on PostgreSQL {}, this run is on {}",
            before.server.major, server.major
        );
    }
    // A baseline cell is expected in this run unless the selection left out
    // its scenario (-s, or another scenario directory) or its driver (-d), or
    // it is in another shard than this run's (--shard: the run's cells are its shard's).
    let ran: Vec<&str> = report.scenarios.iter().map(|s| s.name.as_str()).collect();
    let scenarios_partial = !run.scenario.is_empty() || !plan.default_dir;
    let in_shard: std::collections::HashSet<(&str, &str)> = report
        .runs
        .iter()
        .map(|r| (r.scenario.as_str(), r.driver.as_str()))
        .collect();
    // A report read from a file (--from) is compared for its own scenarios and drivers.
    let from_file = plan.from_file;
    let drivers: Vec<&str> = report.drivers.iter().map(|d| d.id.as_str()).collect();
    let expected = |cell: &baseline::BaselineCell| {
        if from_file {
            return ran.contains(&cell.scenario.as_str()) && drivers.contains(&cell.driver.as_str());
        }
        (!scenarios_partial || ran.contains(&cell.scenario.as_str()))
            && (run.driver.is_empty() || run.driver.contains(&cell.driver))
            && (run.shard.is_none() || in_shard.contains(&(cell.scenario.as_str(), cell.driver.as_str())))
    };
    // A cell that cannot run here for want of Docker (a pooler in a
    // container) is not applicable, never a difference: it is left out of
    // both sides.
    let not_here: std::collections::HashSet<(&str, &str)> = report
        .runs
        .iter()
        .filter(|r| r.skipped.as_deref().is_some_and(|why| why.starts_with(NEEDS_DOCKER)))
        .map(|r| (r.scenario.as_str(), r.driver.as_str()))
        .collect();
    if !not_here.is_empty() {
        eprintln!(
            "locklab: note: {} cell(s) not compared: not applicable here ({NEEDS_DOCKER})",
            not_here.len()
        );
    }
    let mut fresh = fresh.clone();
    fresh
        .cells
        .retain(|c| !not_here.contains(&(c.scenario.as_str(), c.driver.as_str())));
    let expected = |cell: &baseline::BaselineCell| {
        expected(cell) && !not_here.contains(&(cell.scenario.as_str(), cell.driver.as_str()))
    };
    let mut comparison = baseline::compare_with(before, &fresh, plan.tolerance, plan.shares, &expected);
    match locklab::properties::shipped_cached() {
        Ok(properties) => comparison.judge(properties, before, &fresh),
        Err(e) => eprintln!("locklab: note: verdicts not compared: the property files do not load:\n{e}"),
    }
    let mut text = comparison.render(before, path, &server_label(report), plan.max_lines);
    if !comparison.is_clean() {
        let _ = writeln!(
            text,
            "\nIf the change is intended, rewrite the baseline: {}",
            if plan.explicit || plan.partial {
                format!(
                    "`cargo locklab check --update --baseline {}` with the same selection",
                    path.display()
                )
            } else {
                "`cargo locklab check --update` (or `just baseline`)".to_owned()
            }
        );
    }
    if !failed.is_empty() {
        let _ = writeln!(text, "\n{} cell(s) failed:", failed.len());
        for r in &failed {
            let _ = writeln!(text, "  {}", r.failure.as_deref().unwrap_or_default());
        }
    }
    emit(&text)?;
    Ok(if comparison.is_clean() && failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
