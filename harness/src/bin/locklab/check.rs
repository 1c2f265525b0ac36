//! `locklab check`: a fresh run compared with the baseline directory
//! (`reports/baseline/`, one file per scenario); what differs is written as
//! pending files for `locklab review`, or (`--update`) into the accepted
//! files, scenario by scenario and only where cells differ.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};
use locklab::baseline::{self, Baseline, BaselineDir, ScenarioBaseline, Tolerance, dir, family, short_version};
use locklab::outcome::RunResult;
use locklab::report::Report;
use locklab::server;

use crate::cli::{CheckArgs, RunArgs};
use crate::execute::execute;
use crate::output::emit;

/// What `check` was asked to do, from its options.
struct CheckPlan<'a> {
    /// The selection and the server.
    run: &'a RunArgs,
    /// The baseline directory.
    path: PathBuf,
    /// The scenarios are this repository's `scenarios/`.
    default_dir: bool,
    /// `--baseline` was given.
    explicit: bool,
    /// `--update`: write accepted files rather than pending ones.
    update: bool,
    /// Timing tolerance.
    tolerance: Tolerance,
    /// Diff lines to print (`None` with `--full`).
    max_lines: Option<usize>,
    /// How race shares compare (`--compare-shares`: by the race rule).
    shares: baseline::Shares,
    /// The report is read from a file (`--from`), not run.
    from_file: bool,
}

impl CheckPlan<'_> {
    /// ` --baseline DIR` when the directory is not the default one.
    fn baseline_arg(&self) -> String {
        if self.explicit {
            format!(" --baseline {}", self.path.display())
        } else {
            String::new()
        }
    }
}

/// Compares a fresh run of the scenarios in `dir` (or, with `--from`, a
/// report's `matrix.json`) with the baseline directory and writes each
/// differing scenario's cells as a pending file, or (`--update`) into its
/// accepted file; with `--review`, reviews the pending files in a terminal
/// afterwards. `given_dir` is the directory `--scenarios` /
/// `LOCKLAB_SCENARIOS` named, if any. Exit code 1 on a difference (a
/// pending file written or left unreviewed) or a failed cell.
///
/// # Errors
/// Another scenario directory or a user's column without `--baseline`;
/// several versions or backends; no default baseline directory; a baseline
/// file that does not load; a `--from` file that is not a matrix.json of one
/// server; as [`execute`]; a file cannot be written.
pub fn check(dir: &Path, given_dir: Option<&Path>, args: &CheckArgs) -> Result<ExitCode> {
    let explicit = args.baseline.is_some();
    let default_dir = match given_dir {
        None => true,
        Some(d) => crate::output::same_dir(d, &server::workspace_root().join("scenarios")),
    };
    let run = &args.run;
    let plan = CheckPlan {
        run,
        path: args.baseline.clone().unwrap_or_else(crate::cli::default_baseline),
        default_dir,
        explicit,
        update: args.update,
        tolerance: Tolerance {
            factor: args.timing_factor,
            slack_ms: args.timing_slack_ms,
        },
        max_lines: (!args.full).then_some(crate::cli::DIFF_LINES),
        shares: if args.compare_shares {
            baseline::Shares::ByPressure
        } else {
            baseline::Shares::ANOTHER_MACHINE
        },
        from_file: args.from.is_some(),
    };
    one_server(run)?;
    if let Some(pair) = &args.upgrade {
        return upgrade(&plan, dir, args.from.as_deref(), &pair[0], &pair[1]);
    }
    if !explicit {
        if !default_dir {
            bail!(
                "the scenarios of {} are not locklab's: compare them with a baseline directory of your own, \
                 --baseline DIR (`check --baseline DIR` writes a pending file per scenario, `review --baseline DIR \
                 --accept-all` accepts them)",
                dir.display()
            );
        }
        user_columns_need_a_baseline(run)?;
    }
    // Read the baseline before the runs: a broken one is an error at once.
    let accepted = if explicit && !plan.path.exists() {
        if plan.path.extension().is_some_and(|e| e == "json") {
            bail!(
                "--baseline {}: no such file or directory; a baseline is a directory of one NAME.json per scenario \
                 (a whole-matrix baseline.json of before is split with `locklab migrate-baseline FILE DIR`)",
                plan.path.display()
            );
        }
        eprintln!(
            "locklab: note: {} does not exist yet: no scenario has an accepted file there; this run's cells are \
             written there as pending files{}",
            plan.path.display(),
            if args.update { " (accepted, with --update)" } else { "" }
        );
        BaselineDir::empty(&plan.path)
    } else {
        BaselineDir::load(&plan.path)?
    };
    let report = match &args.from {
        Some(file) => locklab::judge::load(file)?,
        None => execute(dir, run)?,
    };
    let fresh = Baseline::from_report(&report)?;
    let (mut code, written) = compare(&plan, &report, &accepted, &fresh)?;
    if args.review && written > 0 {
        use std::io::IsTerminal;
        if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
            eprintln!(
                "locklab: note: --review needs a terminal; review by name: `locklab review{} --accept NAME` \
                 (or --accept-all, --reject NAME)",
                plan.baseline_arg()
            );
            return Ok(code);
        }
        crate::review::interactive(&plan.path, plan.max_lines)?;
        if BaselineDir::pending(&plan.path)?.is_empty() && failed_runs(&report).is_empty() {
            code = ExitCode::SUCCESS;
        }
    }
    Ok(code)
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
                 only; compare it with a baseline directory of your own, --baseline DIR (`check --update --baseline DIR \
                 -d {id}` writes one){}",
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
        Some(file) => locklab::judge::load(file)?,
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

/// How the reason of a cell that needs a Docker engine starts
/// (`locklab::server::poolers::unavailable`).
const NEEDS_DOCKER: &str = "needs Docker";

/// Compares `fresh`, the run's baseline, with the accepted files and prints
/// the differences, then writes each scenario that differs (or has no
/// accepted file) as a pending file, or with `--update` into its accepted
/// file ([`ScenarioBaseline::settle`]: only its differing cells change). A
/// scenario with a failed cell is not written. Returns the exit code (1 if
/// anything differs or a cell failed; with `--update`, only if a cell
/// failed) and how many pending files were written.
fn compare(plan: &CheckPlan, report: &Report, accepted: &BaselineDir, fresh: &Baseline) -> Result<(ExitCode, usize)> {
    let run = plan.run;
    let path = plan.path.as_path();
    let before = accepted.whole();
    let server = &report.servers[0];
    let failed = failed_runs(report);
    if !accepted.files.is_empty() && before.server.major != server.major {
        eprintln!(
            "locklab: note: the baseline was measured on PostgreSQL {}, this run is on {}",
            before.server.major, server.major
        );
    }
    // A baseline cell is expected in this run unless the selection left out
    // its scenario (-s, or another scenario directory) or its driver (-d), or
    // it is in another shard than this run's (--shard: the run's cells are its shard's).
    let ran: Vec<&str> = report.scenarios.iter().map(|s| s.name.as_str()).collect();
    let scenarios_partial = !run.scenario.is_empty() || !run.tag.is_empty() || !plan.default_dir;
    let in_shard: HashSet<(&str, &str)> = report
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
    let not_here: HashSet<(&str, &str)> = report
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
    let mut comparison = baseline::compare_with(&before, &fresh, plan.tolerance, plan.shares, &expected);
    match locklab::properties::shipped_cached() {
        Ok(properties) => comparison.judge(properties, &before, &fresh),
        Err(e) => eprintln!("locklab: note: verdicts not compared: the property files do not load:\n{e}"),
    }
    let mut text = comparison.render(&before, path, &server_label(report), plan.max_lines);
    let written = write_files(plan, report, accepted, &fresh, &comparison, &failed, &mut text)?;
    if !failed.is_empty() {
        let _ = writeln!(text, "\n{} cell(s) failed:", failed.len());
        for r in &failed {
            let _ = writeln!(text, "  {}", r.failure.as_deref().unwrap_or_default());
        }
    }
    emit(&text)?;
    let clean = if plan.update {
        true
    } else {
        comparison.is_clean() && written.pending == 0 && written.stale.is_empty()
    };
    Ok((
        if clean && failed.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
        written.pending,
    ))
}

/// What [`write_files`] did.
#[derive(Default)]
struct Written {
    /// Pending files written.
    pending: usize,
    /// Accepted files whose scenario file is gone (a full run's).
    stale: Vec<String>,
}

/// Writes, per scenario file of the run or of the differences, what
/// differs: a pending file (`NAME.json.new`), or with `--update` the
/// accepted one; removes a pending file this run found nothing for, when
/// the run compared every cell it holds; and appends to `text` what it wrote
/// and how to review it.
fn write_files(
    plan: &CheckPlan,
    report: &Report,
    accepted: &BaselineDir,
    fresh: &Baseline,
    comparison: &baseline::Comparison,
    failed: &[&RunResult],
    text: &mut String,
) -> Result<Written> {
    let path = plan.path.as_path();
    let mut differ: BTreeMap<String, HashSet<(String, String)>> = BTreeMap::new();
    for d in &comparison.diffs {
        differ
            .entry(family(&d.scenario).to_owned())
            .or_default()
            .insert((d.scenario.clone(), d.driver.clone()));
    }
    let mut names: BTreeSet<String> = report.scenarios.iter().map(|s| s.family.clone()).collect();
    names.extend(differ.keys().cloned());
    let failed_names: BTreeSet<&str> = failed.iter().map(|r| family(&r.scenario)).collect();
    let files = ScenarioBaseline::split(fresh);
    let compared: HashSet<(&str, &str)> = fresh
        .cells
        .iter()
        .map(|c| (c.scenario.as_str(), c.driver.as_str()))
        .collect();
    let mut lines: Vec<String> = Vec::new();
    let mut done = Written::default();
    let mut kept_total = 0;
    let known = accepted.whole().drivers;
    for name in &names {
        let acc = accepted.files.get(name);
        let none = HashSet::new();
        let changed = differ.get(name).unwrap_or(&none);
        let pending = dir::pending_path(path, name);
        if acc.is_some() && changed.is_empty() {
            // Nothing differs: a pending file of an earlier run whose every
            // cell this run compared is stale.
            if pending.is_file()
                && let Ok(p) = ScenarioBaseline::load(&pending)
                && p.cells
                    .iter()
                    .chain(acc.iter().flat_map(|a| a.cells.iter()))
                    .all(|c| compared.contains(&(c.scenario.as_str(), c.driver.as_str())))
            {
                std::fs::remove_file(&pending)?;
                lines.push(format!(
                    "removed {}: this run reads as the accepted file",
                    pending.display()
                ));
            }
            continue;
        }
        if failed_names.contains(name.as_str()) {
            lines.push(format!(
                "not written: {name}: a cell failed (a baseline records passing behaviour)"
            ));
            continue;
        }
        let Some(file) = files.get(name) else {
            if acc.is_some() && !report.scenarios.iter().any(|s| &s.family == name) {
                if plan.update {
                    let gone = dir::accepted_path(path, name);
                    std::fs::remove_file(&gone)?;
                    lines.push(format!("removed {}: no such scenario", gone.display()));
                } else {
                    lines.push(format!(
                        "{}: no such scenario any more (`check --update` removes its file)",
                        dir::accepted_path(path, name).display()
                    ));
                    done.stale.push(name.clone());
                }
            }
            continue;
        };
        let (mut settled, kept) = ScenarioBaseline::settle(acc, file, changed);
        settled.keep_entries_of_columns_not_run(&known);
        kept_total += kept;
        let what = match acc {
            None => format!("no baseline for scenario {name}: {} new cell(s)", settled.cells.len()),
            Some(_) => format!("{name}: {} cell(s) differ", changed.len()),
        };
        if plan.update {
            let target = dir::accepted_path(path, name);
            settled.save(&target)?;
            if pending.is_file() {
                std::fs::remove_file(&pending)?;
            }
            lines.push(format!("{what}: wrote {}", target.display()));
        } else {
            settled.save(&pending)?;
            done.pending += 1;
            lines.push(format!("{what}: wrote {}", pending.display()));
        }
    }
    if lines.is_empty() {
        if plan.update {
            let _ = writeln!(text, "\nno accepted file changed in {}", path.display());
        }
        return Ok(done);
    }
    let _ = writeln!(text);
    for l in &lines {
        let _ = writeln!(text, "{l}");
    }
    if kept_total > 0 {
        let _ = writeln!(
            text,
            "kept {kept_total} race reading(s) the accepted files knew and this run did not read, at count 0"
        );
    }
    if done.pending > 0 {
        let b = plan.baseline_arg();
        let _ = writeln!(
            text,
            "\nIf the change is intended, accept it: `cargo locklab review{b}` (a terminal: a accept, r reject, s skip), \
             `cargo locklab review{b} --accept NAME` (or --accept-all), or rewrite a scenario's accepted file \
             directly with `cargo locklab check --update{b} -s NAME`."
        );
    }
    Ok(done)
}
