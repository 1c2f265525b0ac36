//! `locklab`: run advisory-lock scenarios through Rust pools and write the driver matrix.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use locklab::matrix::{self, DEFAULT_JOBS};
use locklab::report::Report;
use locklab::runner::RunResult;
use locklab::scenario::{self, Scenario};
use locklab::server::{self, Server, ServerOptions};
use locklab_drivers::Driver;

#[derive(Parser)]
#[command(
    name = "locklab",
    version,
    about = "Behavioural conformance suite for PostgreSQL advisory locks through Rust connection pools"
)]
struct Cli {
    /// Directory of scenario files (*.yaml).
    #[arg(long, global = true, env = "LOCKLAB_SCENARIOS")]
    scenarios: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List scenarios and driver configurations.
    List,
    /// Check scenario files (default: every file in the scenario directory).
    Validate {
        /// Files to check.
        files: Vec<PathBuf>,
    },
    /// Run scenarios × drivers and print the results.
    Run(RunArgs),
    /// Run every scenario × driver and write reports/matrix.md and matrix.json.
    Report {
        #[command(flatten)]
        run: RunArgs,
        /// Where to write the report.
        #[arg(long, default_value = "reports")]
        out: PathBuf,
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
    /// Scenario × driver runs in flight at once.
    #[arg(long, default_value_t = DEFAULT_JOBS)]
    jobs: usize,
    /// Also print the full results as JSON on stdout.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LOCKLAB_LOG")
        .unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
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
        Command::List => {
            let scenarios = load(&dir)?;
            println!("scenarios ({}):", dir.display());
            for s in &scenarios {
                println!("  {:<28} {}", s.name, first_sentence(&s.description));
            }
            println!("drivers:");
            for d in locklab_drivers::registry() {
                let i = d.info();
                println!(
                    "  {:<28} {} {} — {}",
                    i.id, i.crate_name, i.crate_version, i.configuration
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Validate { files } => {
            let result = if files.is_empty() {
                scenario::load_dir(&dir).map(|v| v.len())
            } else {
                let mut errors = Vec::new();
                for f in &files {
                    if let Err(mut e) = scenario::load_file(f) {
                        errors.append(&mut e);
                    }
                }
                if errors.is_empty() {
                    Ok(files.len())
                } else {
                    Err(errors)
                }
            };
            match result {
                Ok(n) => {
                    println!("{n} scenario file(s) valid");
                    Ok(ExitCode::SUCCESS)
                }
                Err(errors) => {
                    for e in &errors {
                        eprintln!("{e}");
                    }
                    eprintln!("locklab: {} error(s)", errors.len());
                    Ok(ExitCode::from(1))
                }
            }
        }
        Command::Run(args) => {
            let (report, _) = execute(&dir, &args)?;
            print_summary(&report.runs);
            if args.json {
                print!("{}", report.to_json()?);
            }
            Ok(exit_for(&report.runs))
        }
        Command::Report { run, out } => {
            let (report, _) = execute(&dir, &run)?;
            let out = if out.is_relative() && !out.exists() && out == Path::new("reports") {
                server::workspace_root().join(out)
            } else {
                out
            };
            for p in report.write(&out)? {
                println!("wrote {}", p.display());
            }
            print_summary(&report.runs);
            Ok(exit_for(&report.runs))
        }
    }
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

fn select<T>(
    all: Vec<T>,
    wanted: &[String],
    name: impl Fn(&T) -> String,
    what: &str,
) -> Result<Vec<T>> {
    if wanted.is_empty() {
        return Ok(all);
    }
    let names: Vec<String> = all.iter().map(&name).collect();
    for w in wanted {
        if !names.contains(w) {
            bail!("unknown {what} '{w}'; known {what}s: {}", names.join(", "));
        }
    }
    Ok(all
        .into_iter()
        .filter(|x| wanted.contains(&name(x)))
        .collect())
}

fn execute(dir: &Path, args: &RunArgs) -> Result<(Report, Vec<Box<dyn Driver>>)> {
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
        "locklab: starting PostgreSQL ({})",
        if opts.dsn.is_some() {
            "external server"
        } else {
            "throw-away local cluster"
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let total = (scenarios.len() * drivers.len()) as u64;
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} runs {msg}").expect("static template"),
    );
    let began = Instant::now();
    let runs = rt.block_on(matrix::run_all(
        &server,
        &scenarios,
        &drivers,
        args.jobs,
        |r: &RunResult| {
            bar.set_message(format!("{} × {}", r.scenario, r.driver));
            bar.inc(1);
        },
    ));
    bar.finish_and_clear();
    let report = Report::new(
        &server,
        &scenarios,
        &drivers,
        runs,
        began.elapsed().as_secs_f64() * 1e3,
    );
    drop(rt);
    drop(server);
    Ok((report, drivers))
}

fn print_summary(runs: &[RunResult]) {
    for r in runs {
        let status = if r.passed() { "pass" } else { "FAIL" };
        println!(
            "{status}  {:<28} {:<16} {:>8.1} ms",
            r.scenario, r.driver, r.elapsed_ms
        );
        for o in &r.observations {
            match o.elapsed_ms {
                Some(ms) => println!("        {:<34} {} ({ms:.1} ms)", o.name, o.display),
                None => println!("        {:<34} {}", o.name, o.display),
            }
        }
        if !r.locks_left.is_empty() {
            let keys: Vec<String> = r
                .locks_left
                .iter()
                .map(|l| format!("{} ({})", l.key, l.state.as_deref().unwrap_or("?")))
                .collect();
            println!("        {:<34} {}", "locks left after run", keys.join(", "));
        }
        if let Some(f) = &r.failure {
            println!("        {f}");
        }
    }
    let failed = runs.iter().filter(|r| !r.passed()).count();
    println!("{} passed, {} failed", runs.len() - failed, failed);
}

fn exit_for(runs: &[RunResult]) -> ExitCode {
    if runs.iter().all(RunResult::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
