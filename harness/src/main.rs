//! `locklab`: run advisory-lock scenarios through Rust pools and write the driver matrix.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use locklab::baseline::{self, Baseline, Tolerance, short_version};
use locklab::matrix::{self, DEFAULT_JOBS};
use locklab::outcome::{RunResult, Status};
use locklab::report::{Format, Report, describe_locks_left};
use locklab::runner;
use locklab::scenario::{self, Scenario};
use locklab::server::{self, Backend, BackendChoice, DEFAULT_PG_MAJOR, DEFAULT_START_TIMEOUT, Server, ServerOptions};

#[derive(Parser)]
#[command(
    name = "locklab",
    version,
    about = "Behavioural conformance suite for PostgreSQL advisory locks through Rust connection pools"
)]
struct Cli {
    /// Directory of scenario files (*.yaml) [env: LOCKLAB_SCENARIOS; default: scenarios/ of this repository]
    #[arg(long, global = true)]
    scenarios: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List scenarios and driver configurations.
    List,
    /// Check scenario files or directories (default: the scenario directory).
    Validate {
        /// Files or directories to check.
        files: Vec<PathBuf>,
    },
    /// Print the JSON Schema of scenario files (shipped as scenarios/scenario.schema.json).
    Schema,
    /// Run scenarios × drivers and print the results.
    Run {
        #[command(flatten)]
        run: RunArgs,
        /// Also print the full results as JSON on stdout (the summary then goes to stderr).
        #[arg(long)]
        json: bool,
    },
    /// Run scenarios × drivers (default: all) and write matrix.json, matrix.md and index.html.
    Report {
        #[command(flatten)]
        run: RunArgs,
        /// Where to write the report (default: reports/ of this repository).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Also print the full results as JSON on stdout (the summary then goes to stderr).
        #[arg(long)]
        json: bool,
        /// Which files to write, comma-separated: json (matrix.json), md
        /// (matrix.md), html (index.html).
        #[arg(long, value_enum, value_delimiter = ',', default_value = "json,md,html")]
        format: Vec<Format>,
        /// Also screenshot index.html in headless Chromium into index.png
        /// (needs the html format and Chromium: LOCKLAB_CHROMIUM or chromium on PATH).
        #[arg(long)]
        screenshot: bool,
    },
    /// Run the whole matrix (or a selection) round after round and count the
    /// cells whose outcome differs between rounds; exit 1 if any differs or fails.
    Soak {
        #[command(flatten)]
        run: RunArgs,
        /// How many rounds (1-1000): each runs every selected cell once.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=1000))]
        rounds: u16,
        /// Also write the folded results as JSON to this file.
        #[arg(long)]
        json_out: Option<PathBuf>,
    },
    /// Run scenarios × drivers and compare the outcomes with the committed
    /// baseline (reports/baseline.json); exit 1 with a per-cell diff on any change.
    Check {
        #[command(flatten)]
        run: RunArgs,
        /// The baseline file (default: reports/baseline.json of this repository).
        #[arg(long)]
        baseline: Option<PathBuf>,
        /// Rewrite the baseline from this run instead of comparing (every cell must pass).
        #[arg(long)]
        update: bool,
        /// Timing tolerance: a p50 time t against the baseline's b passes when
        /// b/F - S <= t <= b*F + S, with F this factor (>= 1) ...
        #[arg(long, default_value_t = Tolerance::default().factor, value_parser = parse_factor)]
        timing_factor: f64,
        /// ... and S this slack in ms (>= 0).
        #[arg(long, default_value_t = Tolerance::default().slack_ms, value_parser = parse_slack)]
        timing_slack_ms: f64,
        /// Print every changed cell (default: about one screen, then a count of the rest).
        #[arg(long)]
        full: bool,
    },
}

fn parse_factor(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f >= 1.0 => Ok(f),
        _ => Err(format!("'{s}' is not a number >= 1")),
    }
}

fn parse_slack(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f >= 0.0 => Ok(f),
        _ => Err(format!("'{s}' is not a number of ms >= 0")),
    }
}

#[derive(Args, Clone)]
struct RunArgs {
    /// Only these scenarios (repeatable; default: all).
    #[arg(short, long = "scenario")]
    scenario: Vec<String>,
    /// Only these drivers (repeatable; default: all).
    #[arg(short, long = "driver")]
    driver: Vec<String>,
    /// Where PostgreSQL runs: a container (testcontainers), a local cluster from
    /// binaries, an external server (--dsn), or auto: external with a DSN, else
    /// container when a Docker engine answers, else local.
    /// Several, comma-separated, give one column group per backend × version.
    /// [env: LOCKLAB_BACKEND] [default: auto]
    #[arg(long, value_enum, value_delimiter = ',')]
    backend: Vec<BackendChoice>,
    /// PostgreSQL major versions, comma-separated (14-18); each is a column group
    /// in the report [env: LOCKLAB_PG] [default: 17]
    #[arg(long = "pg", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(14..=18))]
    pg: Vec<u32>,
    /// Container image; `{major}` is replaced by the version [env: LOCKLAB_PG_IMAGE]
    /// [default: postgres:{major}, else a local locklab/postgres:{major}]
    #[arg(long)]
    image: Option<String>,
    /// Seconds a server may take to start and accept connections (1-3600).
    #[arg(long, default_value_t = DEFAULT_START_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3600))]
    start_timeout: u64,
    /// Use this running server instead of starting one; the role needs CREATEDB [env: LOCKLAB_DSN]
    #[arg(long)]
    dsn: Option<String>,
    /// Directory with postgres and initdb for the local backend [env: LOCKLAB_PG_BIN]
    #[arg(long)]
    pg_bin: Option<PathBuf>,
    /// Scenario × driver runs in flight at once (1-256).
    #[arg(long, default_value_t = DEFAULT_JOBS as u16, value_parser = clap::value_parser!(u16).range(1..=256))]
    jobs: u16,
    /// Run each cell this many times (1-1000): timings become min / p50 / p95 /
    /// max, and a cell whose outcome differs between repeats is unstable (fails).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1000))]
    repeat: u16,
}

fn main() -> ExitCode {
    // sqlx warns about connections the harness terminates on purpose and about
    // statements that wait on a lock for over a second: both expected here.
    let filter = tracing_subscriber::EnvFilter::try_from_env("LOCKLAB_LOG")
        .unwrap_or_else(|_| "warn,sqlx=error,deadpool=error".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("locklab: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Whether two paths name the same directory (by their canonical paths).
fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// A non-empty environment variable (empty counts as unset).
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn real_main(cli: Cli) -> Result<ExitCode> {
    let custom_dir = cli
        .scenarios
        .clone()
        .or_else(|| env_var("LOCKLAB_SCENARIOS").map(PathBuf::from));
    let dir = custom_dir
        .clone()
        .unwrap_or_else(|| server::workspace_root().join("scenarios"));
    match cli.command {
        Command::List => list(&dir),
        Command::Validate { files } => validate(&dir, &files),
        Command::Schema => {
            emit(&format!(
                "{}\n",
                serde_json::to_string_pretty(&scenario::json_schema())?
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { run: args, json } => {
            let report = execute(&dir, &args)?;
            if json {
                eprint!("{}", summary(&report.runs));
                emit(&report.to_json()?)?;
            } else {
                emit(&summary(&report.runs))?;
            }
            Ok(exit_for(&report.runs))
        }
        Command::Report {
            run,
            out,
            json,
            format,
            screenshot,
        } => {
            let partial = !run.scenario.is_empty() || !run.driver.is_empty() || custom_dir.is_some();
            let out = match out {
                Some(out) => out,
                None if partial => bail!(
                    "`report` with --scenario, --driver or another scenario directory would replace \
                     the full matrix in reports/ with a partial one; give --out DIR, or use `run`"
                ),
                None => server::workspace_root().join("reports"),
            };
            if screenshot && !format.contains(&Format::Html) {
                bail!("--screenshot needs the html format (--format …,html)");
            }
            if screenshot {
                // Fail before the runs, not after them.
                locklab::browser::find_chromium()?;
            }
            let report = execute(&dir, &run)?;
            let mut text = String::new();
            for p in report.write(&out, &format)? {
                let _ = writeln!(text, "wrote {}", p.display());
            }
            text.push_str(&summary(&report.runs));
            if json {
                eprint!("{text}");
                emit(&report.to_json()?)?;
            } else {
                emit(&text)?;
            }
            if screenshot {
                // After the results: a browser failure must not hide them.
                let png = out.join("index.png");
                take_screenshot(&out.join("index.html"), &png)
                    .context("no screenshot (the report files are written)")?;
                eprintln!("wrote {}", png.display());
            }
            Ok(exit_for(&report.runs))
        }
        Command::Soak {
            mut run,
            rounds,
            json_out,
        } => {
            if run.repeat != 1 {
                bail!("soak: give the number of rounds with --rounds, not --repeat");
            }
            run.repeat = rounds;
            let report = execute(&dir, &run)?;
            if let Some(path) = json_out {
                std::fs::write(&path, report.to_json()?).with_context(|| format!("cannot write {}", path.display()))?;
            }
            let text = soak_summary(&report);
            emit(&text)?;
            Ok(exit_for(&report.runs))
        }
        Command::Check {
            run,
            baseline,
            update,
            timing_factor,
            timing_slack_ms,
            full,
        } => {
            let explicit = baseline.is_some();
            let path = baseline.unwrap_or_else(|| server::workspace_root().join("reports").join("baseline.json"));
            let tolerance = Tolerance {
                factor: timing_factor,
                slack_ms: timing_slack_ms,
            };
            let default_dir = match &custom_dir {
                None => true,
                Some(d) => same_dir(d, &server::workspace_root().join("scenarios")),
            };
            let plan = CheckPlan {
                path,
                update,
                partial: !run.scenario.is_empty() || !run.driver.is_empty() || !default_dir,
                default_dir,
                explicit,
                tolerance,
                max_lines: (!full).then_some(DIFF_LINES),
            };
            check(&dir, &run, &plan)
        }
    }
}

/// Lines of cell diffs `check` prints without `--full`: about one screen.
const DIFF_LINES: usize = 30;

/// Size of the `index.png` screenshot, in CSS px: wide enough for the
/// overview's columns, tall enough for its rows.
const SHOT_WIDTH: u32 = 1800;
const SHOT_HEIGHT: u32 = 1700;

/// Screenshots `page` into `png` in headless Chromium; SIGINT or SIGTERM
/// meanwhile ends Chromium, removes its profile and exits (130 / 143).
fn take_screenshot(page: &Path, png: &Path) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (page, png) = (page.to_path_buf(), png.to_path_buf());
    rt.block_on(async move {
        let mut interrupts = Interrupts::install();
        let shot =
            tokio::task::spawn_blocking(move || locklab::browser::screenshot(&page, &png, SHOT_WIDTH, SHOT_HEIGHT));
        tokio::select! {
            r = shot => r.context("the screenshot task failed")?,
            (what, code) = interrupts.next() => {
                eprintln!("locklab: {what} during the screenshot: cleaning up");
                locklab::browser::kill_running();
                std::process::exit(code);
            }
        }
    })
}

/// What `check` was asked to do, from its options.
struct CheckPlan {
    /// The baseline file.
    path: PathBuf,
    /// Rewrite it instead of comparing (`--update`).
    update: bool,
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
}

/// `locklab check`: compares a fresh run with the baseline, or (`update`)
/// rewrites the baseline from it.
fn check(dir: &Path, run: &RunArgs, plan: &CheckPlan) -> Result<ExitCode> {
    let CheckPlan {
        path,
        update,
        partial,
        default_dir,
        explicit,
        tolerance,
        max_lines,
    } = plan;
    let (path, update, partial, default_dir, explicit) = (path.as_path(), *update, *partial, *default_dir, *explicit);
    if update && partial && !explicit {
        bail!(
            "`check --update` with --scenario, --driver or another scenario directory would replace \
             the full baseline with a partial one; give --baseline FILE"
        );
    }
    // One server: refuse several versions or backends before starting any.
    let mut majors: Vec<u32> = if run.pg.is_empty() {
        list_from_env("LOCKLAB_PG", |v| {
            v.parse::<u32>().map_err(|_| "a major version".to_owned())
        })?
    } else {
        run.pg.clone()
    };
    majors.dedup();
    let mut backends: Vec<String> = if run.backend.is_empty() {
        list_from_env("LOCKLAB_BACKEND", |v| Ok(v.to_lowercase()))?
    } else {
        run.backend.iter().map(|b| format!("{b:?}")).collect()
    };
    backends.dedup();
    if majors.len() > 1 || backends.len() > 1 {
        bail!(
            "`check` compares one server with the baseline: give one --pg and one --backend (LOCKLAB_PG, LOCKLAB_BACKEND)"
        );
    }
    // Read the baseline before the runs: a missing one is an error at once.
    let before = if update { None } else { Some(Baseline::load(path)?) };
    let report = execute(dir, run)?;
    let fresh = Baseline::from_report(&report)?;
    let server = &report.servers[0];
    let now = format!("{} ({})", short_version(&server.version), server.backend);
    let failed: Vec<&RunResult> = report.runs.iter().filter(|r| !r.passed()).collect();
    let Some(before) = before else {
        if !failed.is_empty() {
            let mut text = format!(
                "locklab: not writing {}: {} cell(s) failed or were unstable; a baseline records passing behaviour\n",
                path.display(),
                failed.len()
            );
            for r in &failed {
                let _ = writeln!(text, "  {}", r.failure.as_deref().unwrap_or_default());
            }
            eprint!("{text}");
            return Ok(ExitCode::from(1));
        }
        fresh.save(path)?;
        emit(&format!(
            "wrote {} ({} cell(s), {now}, {} run(s) per cell){}\n",
            path.display(),
            fresh.cells.len(),
            report.repeat,
            if partial {
                "; a selection: the file now holds only these cells"
            } else {
                ""
            }
        ))?;
        return Ok(ExitCode::SUCCESS);
    };
    if before.server.major != server.major {
        eprintln!(
            "locklab: note: the baseline was measured on PostgreSQL {}, this run is on {}",
            before.server.major, server.major
        );
    }
    // A baseline cell is expected in this run unless the selection left out
    // its scenario (-s, or another scenario directory) or its driver (-d).
    let ran: Vec<&str> = report.scenarios.iter().map(|s| s.name.as_str()).collect();
    let scenarios_partial = !run.scenario.is_empty() || !default_dir;
    let expected = |cell: &baseline::BaselineCell| {
        (!scenarios_partial || ran.contains(&cell.scenario.as_str()))
            && (run.driver.is_empty() || run.driver.contains(&cell.driver))
    };
    let comparison = baseline::compare(&before, &fresh, *tolerance, &expected);
    let mut text = comparison.render(&before, path, &now, *max_lines);
    if !comparison.is_clean() {
        let _ = writeln!(
            text,
            "\nIf the change is intended, rewrite the baseline: {}",
            if explicit || partial {
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
        let _ = writeln!(text, "\n{} cell(s) failed or were unstable:", failed.len());
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

fn list(dir: &Path) -> Result<ExitCode> {
    let mut text = format!("scenarios ({}):\n", dir.display());
    let loaded = load(dir);
    let mut families: Vec<(&str, usize, &str)> = Vec::new();
    for s in loaded.as_deref().unwrap_or_default() {
        match families.last_mut() {
            Some((f, n, _)) if *f == s.family => *n += 1,
            _ => families.push((&s.family, 1, first_sentence(&s.description))),
        }
    }
    let width = families.iter().map(|(f, _, _)| f.chars().count()).max().unwrap_or(0);
    for (family, n, what) in families {
        let runs = if n > 1 {
            format!(" ({n} parameter sets)")
        } else {
            String::new()
        };
        let what: String = if what.chars().count() > 100 {
            what.chars().take(99).chain(['…']).collect()
        } else {
            what.to_owned()
        };
        let _ = writeln!(text, "  {family:<width$}  {what}{runs}");
    }
    if let Err(e) = &loaded {
        let _ = writeln!(text, "  (not listed: {e:#})");
    }
    text.push_str("drivers:\n");
    let drivers: Vec<_> = locklab_drivers::registry().iter().map(|d| d.info()).collect();
    let id_width = drivers.iter().map(|i| i.id.chars().count()).max().unwrap_or(0);
    for i in drivers {
        let _ = writeln!(
            text,
            "  {:<id_width$}  {} {} — {}",
            i.id, i.crate_name, i.crate_version, i.configuration
        );
    }
    emit(&text)?;
    Ok(if loaded.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Writes `text` to stdout. A reader that went away (`locklab list | head -1`)
/// is not an error; any other write failure is.
fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("cannot write to stdout"),
        _ => Ok(()),
    }
}

fn validate(dir: &Path, paths: &[PathBuf]) -> Result<ExitCode> {
    let paths = if paths.is_empty() {
        vec![dir.to_path_buf()]
    } else {
        paths.to_vec()
    };
    let (mut files, mut instances, mut errors) = (0, 0, Vec::new());
    for p in &paths {
        let loaded = if p.is_dir() {
            scenario::load_dir(p)
        } else {
            scenario::load_file(p)
        };
        match loaded {
            Ok(v) => {
                let mut fams: Vec<&str> = v.iter().map(|s| s.family.as_str()).collect();
                fams.dedup();
                files += fams.len();
                instances += v.len();
            }
            Err(mut e) => errors.append(&mut e),
        }
    }
    if errors.is_empty() {
        emit(&format!(
            "{files} scenario file(s) valid ({instances} scenario(s) with their parameter sets)\n"
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    for e in &errors {
        eprintln!("{e}");
    }
    eprintln!("locklab: {} error(s)", errors.len());
    Ok(ExitCode::from(1))
}

fn load(dir: &Path) -> Result<Vec<Scenario>> {
    scenario::load_dir(dir).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        anyhow::anyhow!("invalid scenario files:\n{}", lines.join("\n"))
    })
}

fn first_sentence(s: &str) -> &str {
    s.split_once(". ").map(|(a, _)| a).unwrap_or(s)
}

fn select<T>(all: Vec<T>, wanted: &[String], name: impl Fn(&T) -> String, what: &str) -> Result<Vec<T>> {
    if wanted.is_empty() {
        return Ok(all);
    }
    let names: Vec<String> = all.iter().map(&name).collect();
    for w in wanted {
        if !names.contains(w) {
            bail!("unknown {what} '{w}'; known {what}s: {}", names.join(", "));
        }
    }
    Ok(all.into_iter().filter(|x| wanted.contains(&name(x))).collect())
}

/// The scenarios named by `-s`: a file's name selects all its parameter sets,
/// `name[param=value]` one of them.
fn select_scenarios(all: Vec<Scenario>, wanted: &[String]) -> Result<Vec<Scenario>> {
    if wanted.is_empty() {
        return Ok(all);
    }
    for w in wanted {
        if !all.iter().any(|s| &s.name == w || &s.family == w) {
            let family = w.split('[').next().unwrap_or_default();
            let sets: Vec<&str> = all
                .iter()
                .filter(|s| s.family == family && s.name != s.family)
                .map(|s| s.name.as_str())
                .collect();
            if !sets.is_empty() {
                bail!(
                    "unknown scenario '{w}'; the parameter sets of '{family}' are: {}",
                    sets.join(", ")
                );
            }
            let mut names: Vec<&str> = all.iter().map(|s| s.family.as_str()).collect();
            names.dedup();
            bail!("unknown scenario '{w}'; known scenarios: {}", names.join(", "));
        }
    }
    Ok(all
        .into_iter()
        .filter(|s| wanted.iter().any(|w| *w == s.name || *w == s.family))
        .collect())
}

/// Starts the servers, runs the selection on them and assembles the report.
fn execute(dir: &Path, args: &RunArgs) -> Result<Report> {
    let scenarios = select_scenarios(load(dir)?, &args.scenario)?;
    let drivers = select(
        locklab_drivers::registry(),
        &args.driver,
        |d| d.info().id.to_owned(),
        "driver",
    )?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    // Signals are handled from before the first server starts: an interrupted
    // start-up stops image builds and exits; the watchdogs remove what was started.
    let mut interrupts = {
        let _guard = rt.enter();
        Interrupts::install()
    };
    let started = rt.block_on(async {
        let start_args = args.clone();
        let start = tokio::task::spawn_blocking(move || start_servers(&start_args));
        tokio::select! {
            r = start => Ok(r),
            signal = interrupts.next() => Err(signal),
        }
    });
    let servers = match started {
        Ok(joined) => joined.map_err(|e| anyhow::anyhow!("server start-up failed: {e}"))??,
        Err((what, code)) => {
            eprintln!("locklab: {what} during server start-up: cleaning up");
            server::container::stop_builds();
            std::process::exit(code);
        }
    };
    // Printed once the servers are ours: from here a signal drops them (and
    // removes what they started) before we exit.
    for s in &servers {
        eprintln!("locklab: {}: {}", s.id(), s.describe());
    }
    let repeat = usize::from(args.repeat);
    let total = (servers.len() * scenarios.len() * drivers.len() * repeat) as u64;
    // A bar on a terminal; on CI (the `CI` variable set) or into a pipe or
    // file, nothing but the start and the summary lines.
    let bar = if env_var("CI").is_some() || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {elapsed} (about {eta} left) {wide_msg}")
            .expect("static template"),
    );
    let began = Instant::now();
    let per_round = total / repeat as u64;
    let mut done = 0u64;
    let progress = |round: usize, r: &RunResult| {
        let of = if repeat > 1 {
            format!("repeat {round}/{repeat}: ")
        } else {
            String::new()
        };
        bar.set_message(format!("{of}{} × {} × {}", r.server, r.scenario, r.driver));
        bar.inc(1);
        done += 1;
        // Without a bar, a long repeated run still says how far it got: one
        // line per finished round.
        if bar.is_hidden() && repeat > 1 && per_round > 0 && done % per_round == 0 {
            eprintln!(
                "locklab: repeat {round}/{repeat} done ({done} of {total} runs, {:.0} s)",
                began.elapsed().as_secs_f64()
            );
        }
    };
    let runs = rt.block_on(async {
        tokio::select! {
            runs = matrix::run_all(&servers, &scenarios, &drivers, args.jobs.into(), repeat, progress) => Ok(runs),
            signal = interrupts.next() => Err(signal),
        }
    });
    bar.finish_and_clear();
    let runs = match runs {
        Ok(runs) => runs,
        Err((what, code)) => {
            // The runs in flight were cancelled mid-way: drop their databases
            // (this matters on an external server), then stop the local one.
            eprintln!("locklab: {what}: cleaning up");
            for server in &servers {
                let dropped = rt.block_on(async {
                    tokio::time::timeout(std::time::Duration::from_secs(20), runner::drop_own_databases(server)).await
                });
                if let Ok(Ok(n)) = dropped
                    && n > 0
                {
                    eprintln!("locklab: dropped {n} run database(s) on {}", server.id());
                }
            }
            drop(rt);
            drop(servers);
            std::process::exit(code);
        }
    };
    let report = Report::new(
        &servers,
        &scenarios,
        &drivers,
        runs,
        began.elapsed().as_secs_f64() * 1e3,
    );
    drop(rt);
    drop(servers);
    Ok(report)
}

/// A comma-separated list in environment variable `name` (unset or empty: an
/// empty list; items are trimmed), each item checked by `parse`.
fn list_from_env<T>(name: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>> {
    let Some(value) = env_var(name) else {
        return Ok(Vec::new());
    };
    value
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| parse(v).map_err(|want| anyhow::anyhow!("{name}={value}: '{v}' is not {want}")))
        .collect()
}

/// Resolves each `--backend` once, then starts one server per backend ×
/// `--pg` version (concurrently), printing what it does. With more than one
/// backend, server ids carry the backend (`pg17-container`, `pg17-local`).
fn start_servers(args: &RunArgs) -> Result<Vec<Server>> {
    let pg = if args.pg.is_empty() {
        list_from_env("LOCKLAB_PG", |v| {
            v.parse::<u32>()
                .ok()
                .filter(|m| server::SUPPORTED_MAJORS.contains(m))
                .ok_or_else(|| "a PostgreSQL major version from 14 to 18".to_owned())
        })?
    } else {
        args.pg.clone()
    };
    let backend_arg = if args.backend.is_empty() {
        list_from_env("LOCKLAB_BACKEND", |v| {
            <BackendChoice as clap::ValueEnum>::from_str(v, true)
                .map_err(|_| "one of auto, container, local, external".to_owned())
        })?
    } else {
        args.backend.clone()
    };
    let mut majors: Vec<u32> = Vec::new();
    for m in &pg {
        if !majors.contains(m) {
            majors.push(*m);
        }
    }
    let base = ServerOptions {
        backend: BackendChoice::Auto,
        dsn: args.dsn.clone(),
        pg_bin: args.pg_bin.clone(),
        pg_major: None,
        image: args.image.clone(),
        start_timeout: std::time::Duration::from_secs(args.start_timeout),
    };
    let choices = if backend_arg.is_empty() {
        vec![BackendChoice::Auto]
    } else {
        backend_arg
    };
    let mut backends: Vec<Backend> = Vec::new();
    for choice in &choices {
        let (b, why) = ServerOptions {
            backend: *choice,
            ..base.clone()
        }
        .resolve_backend_with_reason()?;
        if let Some(why) = why {
            eprintln!("locklab: {why}");
        }
        if !backends.contains(&b) {
            backends.push(b);
        }
    }
    if backends == [Backend::External] && !majors.is_empty() {
        bail!(
            "--pg / LOCKLAB_PG picks versions for the container and local backends; \
             an external server (--dsn / LOCKLAB_DSN) is whatever version it runs"
        );
    }
    // Without --pg, binaries from --pg-bin or an image named without {major}
    // are taken at whatever version they are; with it, a mismatch is an error.
    let explicit = !majors.is_empty();
    if majors.is_empty() {
        majors.push(DEFAULT_PG_MAJOR);
    }
    if majors.len() > 1
        && backends.contains(&Backend::Local)
        && (base.pg_bin.is_some() || env_var("LOCKLAB_PG_BIN").is_some())
    {
        bail!("--pg-bin / LOCKLAB_PG_BIN names the binaries of one version; give a single --pg with it");
    }
    let versions: Vec<String> = majors.iter().map(u32::to_string).collect();
    let mut opts = Vec::new();
    for b in &backends {
        eprintln!(
            "locklab: {} ({} backend{})",
            match b {
                Backend::External => "connecting to PostgreSQL".to_owned(),
                _ => format!("starting PostgreSQL {}", versions.join(", ")),
            },
            b.as_str(),
            if choices == [BackendChoice::Auto] {
                ", chosen by --backend auto"
            } else {
                ""
            }
        );
        let choice = match b {
            Backend::Container => BackendChoice::Container,
            Backend::Local => BackendChoice::Local,
            Backend::External => BackendChoice::External,
        };
        let majors: &[u32] = if *b == Backend::External { &majors[..1] } else { &majors };
        for m in majors {
            opts.push(ServerOptions {
                backend: choice,
                pg_major: explicit.then_some(*m),
                ..base.clone()
            });
        }
    }
    let mut servers = server::start_all(&opts).context("no PostgreSQL server")?;
    let mut seen = std::collections::HashSet::new();
    let unique = servers.iter().all(|s| seen.insert(s.id()));
    for s in &mut servers {
        if backends.len() > 1 || !unique {
            let id = format!("{}-{}", s.id(), s.backend().as_str());
            s.set_id(id);
        }
    }
    Ok(servers)
}

/// SIGINT and SIGTERM listeners, installed once for the whole run (start-up
/// and runs), so that a signal arriving between the two phases is not lost.
struct Interrupts {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
}

impl Interrupts {
    /// Installs the listeners; must be called inside the tokio runtime.
    fn install() -> Interrupts {
        use tokio::signal::unix::{SignalKind, signal};
        Interrupts {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
        }
    }

    /// Resolves on SIGINT or SIGTERM with a description and the exit code a
    /// shell reports for that signal (128 + its number).
    async fn next(&mut self) -> (&'static str, i32) {
        async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = recv(&mut self.int) => ("interrupted (SIGINT)", 130),
            () = recv(&mut self.term) => ("terminated (SIGTERM)", 143),
        }
    }
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

/// The per-run summary printed by `run` and `report`.
fn summary(runs: &[RunResult]) -> String {
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
        let status = match r.status() {
            Status::Unstable => "UNST",
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
                Some(t) => lines.push(format!("        {:<obs_width$} {} ({t})", o.name, o.display)),
                None => lines.push(format!("        {:<obs_width$} {}", o.name, o.display)),
            }
        }
        if !r.locks_left.is_empty() {
            lines.push(format!(
                "        {:<obs_width$} {}",
                "locks left after run",
                describe_locks_left(&r.locks_left)
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
    let failed = runs.iter().filter(|r| !r.passed()).count();
    let deviated = runs.iter().filter(|r| r.passed() && r.deviation.is_some()).count();
    let skipped = runs.iter().filter(|r| r.passed() && r.skipped.is_some()).count();
    let unstable = runs.iter().filter(|r| !r.unstable.is_empty()).count();
    let repeats = runs.iter().map(|r| r.repeats).max().unwrap_or(1);
    let each = if repeats > 1 {
        format!(" (cells, each run {repeats} times)")
    } else {
        String::new()
    };
    lines.push(format!(
        "{} passed, {deviated} deviated (behind transaction pooling), {skipped} not applicable, \
         {failed} failed ({unstable} unstable){each}",
        runs.len() - failed - deviated - skipped
    ));
    lines.join("\n") + "\n"
}

fn exit_for(runs: &[RunResult]) -> ExitCode {
    if runs.iter().all(RunResult::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
