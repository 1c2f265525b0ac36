//! `locklab`: run advisory-lock scenarios through Rust pools and write the driver matrix.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use locklab::matrix::{self, DEFAULT_JOBS};
use locklab::report::{Report, describe_locks_left};
use locklab::runner::RunResult;
use locklab::scenario::{self, Scenario};
use locklab::server::{self, Server, ServerOptions};

#[derive(Parser)]
#[command(
    name = "locklab",
    version,
    about = "Behavioural conformance suite for PostgreSQL advisory locks through Rust connection pools"
)]
struct Cli {
    /// Directory of scenario files (*.yaml); default: scenarios/ of this repository.
    #[arg(long, global = true, env = "LOCKLAB_SCENARIOS")]
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
    /// Run scenarios × drivers and print the results.
    Run(RunArgs),
    /// Run every scenario × driver and write matrix.md and matrix.json.
    Report {
        #[command(flatten)]
        run: RunArgs,
        /// Where to write the report (default: reports/ of this repository).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Args)]
struct RunArgs {
    /// Only these scenarios (repeatable; default: all).
    #[arg(short, long = "scenario")]
    scenario: Vec<String>,
    /// Only these drivers (repeatable; default: all).
    #[arg(short, long = "driver")]
    driver: Vec<String>,
    /// Use this running server instead of starting a local one (the role needs CREATEDB).
    #[arg(long, env = "LOCKLAB_DSN", hide_env_values = true)]
    dsn: Option<String>,
    /// Directory with postgres and initdb for the local server.
    #[arg(long, env = "LOCKLAB_PG_BIN")]
    pg_bin: Option<PathBuf>,
    /// Scenario × driver runs in flight at once (1-256).
    #[arg(long, default_value_t = DEFAULT_JOBS as u16, value_parser = clap::value_parser!(u16).range(1..=256))]
    jobs: u16,
    /// Print the full results as JSON on stdout (the summary then goes to stderr).
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    // sqlx warns about connections the harness terminates on purpose and about
    // statements that wait on a lock for over a second: both expected here.
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("LOCKLAB_LOG").unwrap_or_else(|_| "warn,sqlx=error".into());
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

fn real_main(cli: Cli) -> Result<ExitCode> {
    let dir = cli
        .scenarios
        .clone()
        .unwrap_or_else(|| server::workspace_root().join("scenarios"));
    match cli.command {
        Command::List => list(&dir),
        Command::Validate { files } => validate(&dir, &files),
        Command::Run(args) => {
            let report = execute(&dir, &args)?;
            if args.json {
                print_summary(&report.runs, &mut std::io::stderr());
                print!("{}", report.to_json()?);
            } else {
                print_summary(&report.runs, &mut std::io::stdout());
            }
            Ok(exit_for(&report.runs))
        }
        Command::Report { run, out } => {
            let out = match out {
                Some(out) => out,
                None if !run.scenario.is_empty() || !run.driver.is_empty() => bail!(
                    "`report --scenario/--driver` would replace the full matrix in reports/ with a \
                     partial one; give --out DIR for a partial report, or use `run`"
                ),
                None => server::workspace_root().join("reports"),
            };
            let report = execute(&dir, &run)?;
            for p in report.write(&out)? {
                println!("wrote {}", p.display());
            }
            print_summary(&report.runs, &mut std::io::stdout());
            Ok(exit_for(&report.runs))
        }
    }
}

fn list(dir: &Path) -> Result<ExitCode> {
    println!("scenarios ({}):", dir.display());
    let loaded = load(dir);
    for s in loaded.as_deref().unwrap_or_default() {
        println!("  {:<28} {}", s.name, first_sentence(&s.description));
    }
    if let Err(e) = &loaded {
        println!("  (not listed: {e:#})");
    }
    println!("drivers:");
    for d in locklab_drivers::registry() {
        let i = d.info();
        println!(
            "  {:<28} {} {} — {}",
            i.id, i.crate_name, i.crate_version, i.configuration
        );
    }
    Ok(if loaded.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn validate(dir: &Path, paths: &[PathBuf]) -> Result<ExitCode> {
    let paths = if paths.is_empty() {
        vec![dir.to_path_buf()]
    } else {
        paths.to_vec()
    };
    let (mut valid, mut errors) = (0, Vec::new());
    for p in &paths {
        let loaded = if p.is_dir() {
            scenario::load_dir(p).map(|v| v.len())
        } else {
            scenario::load_file(p).map(|_| 1)
        };
        match loaded {
            Ok(n) => valid += n,
            Err(mut e) => errors.append(&mut e),
        }
    }
    if errors.is_empty() {
        println!("{valid} scenario file(s) valid");
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

fn execute(dir: &Path, args: &RunArgs) -> Result<Report> {
    let scenarios = select(load(dir)?, &args.scenario, |s| s.name.clone(), "scenario")?;
    let drivers = select(
        locklab_drivers::registry(),
        &args.driver,
        |d| d.info().id.to_owned(),
        "driver",
    )?;
    let opts = ServerOptions {
        dsn: args.dsn.clone(),
        pg_bin: args.pg_bin.clone(),
        pg_major: None,
    };
    eprintln!(
        "locklab: {}",
        if opts.dsn.is_some() {
            "connecting to PostgreSQL (external server)"
        } else {
            "starting PostgreSQL (throw-away local cluster)"
        }
    );
    let server = Server::start(&opts).context("no PostgreSQL server")?;
    match (server.data_dir(), server.postmaster_pid()) {
        (Some(dir), Some(pid)) => eprintln!(
            "locklab: {} ready in {} ms (local cluster in {}, postmaster pid {pid})",
            server.version(),
            server.startup().as_millis(),
            dir.display()
        ),
        _ => eprintln!(
            "locklab: {} ready in {} ms",
            server.version(),
            server.startup().as_millis()
        ),
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let bar = ProgressBar::new((scenarios.len() * drivers.len()) as u64);
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} runs {msg}").expect("static template"));
    let began = Instant::now();
    let runs = rt.block_on(matrix::run_all(
        &server,
        &scenarios,
        &drivers,
        args.jobs.into(),
        |r: &RunResult| {
            bar.set_message(format!("{} × {}", r.scenario, r.driver));
            bar.inc(1);
        },
    ));
    bar.finish_and_clear();
    let report = Report::new(&server, &scenarios, &drivers, runs, began.elapsed().as_secs_f64() * 1e3);
    drop(rt);
    drop(server);
    Ok(report)
}

fn print_summary(runs: &[RunResult], w: &mut dyn Write) {
    let mut lines = Vec::new();
    for r in runs {
        let status = if r.passed() { "pass" } else { "FAIL" };
        lines.push(format!(
            "{status}  {:<28} {:<16} {:>8.1} ms",
            r.scenario, r.driver, r.elapsed_ms
        ));
        for o in &r.observations {
            match o.elapsed_ms {
                Some(ms) => lines.push(format!("        {:<34} {} ({ms:.1} ms)", o.name, o.display)),
                None => lines.push(format!("        {:<34} {}", o.name, o.display)),
            }
        }
        if !r.locks_left.is_empty() {
            lines.push(format!(
                "        {:<34} {}",
                "locks left after run",
                describe_locks_left(&r.locks_left)
            ));
        }
        if let Some(f) = &r.failure {
            lines.push(format!("        {f}"));
        }
    }
    let failed = runs.iter().filter(|r| !r.passed()).count();
    lines.push(format!("{} passed, {} failed", runs.len() - failed, failed));
    let _ = writeln!(w, "{}", lines.join("\n"));
}

fn exit_for(runs: &[RunResult]) -> ExitCode {
    if runs.iter().all(RunResult::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
