//! `locklab stress`: a load run per driver (and pgbench) on a server of its
//! own, with the checkers' verdicts and the ratio to pgbench.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Args;
use comfy_table::Table;
use locklab::load::{self, Client, LoadResult, LoadSpec};

use crate::output::emit;
use locklab_core::signals::Interrupts;

/// `locklab stress`'s arguments.
#[derive(Args, Clone)]
pub struct StressArgs {
    /// Drivers to load (repeatable; default: tokio-postgres, deadpool-fast, bb8, sqlx).
    #[arg(short, long = "driver")]
    pub driver: Vec<String>,
    /// The locking pattern.
    #[arg(long, value_enum, default_value = "xact-wait")]
    pub pattern: crate::words::PatternWord,
    /// Concurrent workers (also the pool size), 1-256.
    #[arg(short, long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: u32,
    /// Keys the workers pick from uniformly, 1-100000.
    #[arg(short, long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub keys: u32,
    /// How long each client runs, s.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub seconds: u32,
    /// Run this many attempts in all instead of for a time.
    #[arg(long)]
    pub count: Option<u64>,
    /// `lock_timeout` of every connection, ms.
    #[arg(long, default_value_t = 1000)]
    pub lock_timeout_ms: u32,
    /// Work inside each critical section, µs (server-side pg_sleep between its read and its write).
    #[arg(long, default_value_t = 0)]
    pub hold_us: u32,
    /// PostgreSQL major version of the run's local cluster.
    #[arg(long = "pg", default_value_t = locklab::server::DEFAULT_PG_MAJOR)]
    pub pg: u32,
    /// Leave pgbench out.
    #[arg(long)]
    pub no_pgbench: bool,
    /// Print the results as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The drivers `stress` loads when none is named.
const DEFAULT_DRIVERS: [&str; 4] = ["tokio-postgres", "deadpool-fast", "bb8", "sqlx"];

/// Runs the load on each driver, then pgbench, and prints a table. Exit 1
/// when a right pattern showed a violation.
///
/// # Errors
/// An unknown driver, the server cannot start, a run cannot be made;
/// SIGINT/SIGTERM (after the server is removed).
pub fn stress(args: &StressArgs) -> Result<ExitCode> {
    let names: Vec<String> = if args.driver.is_empty() {
        DEFAULT_DRIVERS.iter().map(|s| (*s).to_owned()).collect()
    } else {
        args.driver.clone()
    };
    let registry = locklab_drivers::registry();
    let mut drivers = Vec::new();
    for n in &names {
        match registry.iter().find(|d| d.info().id == n) {
            Some(d) => drivers.push(d.as_ref()),
            None => bail!("unknown driver '{n}' (see `locklab list`)"),
        }
    }
    let spec = LoadSpec {
        pattern: args.pattern.0,
        workers: args.workers,
        keys: args.keys,
        seconds: args.seconds,
        count: args.count,
        lock_timeout_ms: args.lock_timeout_ms,
        hold_us: args.hold_us,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut interrupts = {
        let _guard = rt.enter();
        Interrupts::install()
    };
    let server = load::start_server(args.pg, args.workers)?;
    eprintln!("locklab: stress: {}", server.describe());
    let bin = locklab::server::resolve_binaries(&locklab::server::ServerOptions::new(
        locklab::server::BackendChoice::Local,
        args.pg,
    ))?;
    let results = rt.block_on(async {
        let all = async {
            let mut results = Vec::new();
            for d in &drivers {
                eprintln!(
                    "locklab: stress: {} × {} workers × {} keys, {}",
                    d.info().id,
                    spec.workers,
                    spec.keys,
                    spec.pattern.name()
                );
                results.push(load::run(&server, Client::Driver(*d), &spec).await?);
            }
            if !args.no_pgbench && load::sql::pgbench_script(spec.pattern, spec.hold_us).is_some() {
                eprintln!("locklab: stress: pgbench × {} clients", spec.workers);
                results.push(load::run(&server, Client::Pgbench(bin.clone()), &spec).await?);
            }
            anyhow::Ok(results)
        };
        tokio::select! {
            r = all => r,
            signal = interrupts.next() => Err(anyhow::Error::new(signal)),
        }
    });
    drop(rt);
    drop(server);
    let results = results?;
    if args.json {
        emit(&serde_json::to_string_pretty(&results)?)?;
    } else {
        emit(&table(&results))?;
    }
    let bad = results.iter().any(|r| r.spec.pattern.is_right() && r.violations() > 0);
    Ok(if bad { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// The results as a table, the ratio to pgbench, then each violation's evidence.
pub fn table(results: &[LoadResult]) -> String {
    let reference = results.iter().find(|r| r.client == "pgbench").map(|r| r.throughput);
    let mut t = Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    t.set_header([
        "client",
        "sections/s",
        "× pgbench",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "lock waits",
        "busy",
        "timeouts",
        "errors",
        "overlaps",
        "lost updates",
        "double claims",
    ]);
    for r in results {
        let ratio = reference
            .filter(|p| *p > 0.0)
            .map_or("-".to_owned(), |p| format!("{:.2}", r.throughput / p));
        t.add_row([
            r.client.clone(),
            format!("{:.0}", r.throughput),
            ratio,
            format!("{:.2}", r.latency_ms.p50),
            format!("{:.2}", r.latency_ms.p95),
            format!("{:.2}", r.latency_ms.p99),
            r.lock_waits.map_or("-".into(), |n| n.to_string()),
            r.counts.busy.to_string(),
            r.counts.timeouts.to_string(),
            r.counts.errors.to_string(),
            r.mutual_exclusion.violations.to_string(),
            r.lost_updates.violations.to_string(),
            r.double_claims
                .as_ref()
                .map_or("-".into(), |v| v.violations.to_string()),
        ]);
    }
    let mut text = format!("{t}\n");
    for r in results {
        if let Some(e) = &r.counts.first_error {
            let _ = writeln!(text, "{}: first error: {e}", r.client);
        }
        if let Some(o) = r.mutual_exclusion.evidence.first() {
            let _ = writeln!(text, "{}: overlapping sections {o}", r.client);
        }
    }
    let _ = writeln!(
        text,
        "pattern {}: {}",
        results.first().map_or("", |r| r.spec.pattern.name()),
        if results.first().is_some_and(|r| r.spec.pattern.is_right()) {
            "must show no violation"
        } else {
            "wrong on purpose: violations are the finding"
        }
    );
    text
}

/// `locklab load-report`'s arguments.
#[derive(Args, Clone)]
pub struct LoadReportArgs {
    /// Where to write load.json, load.md and the charts (default: reports/load of this repository).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Seconds per point of the curves (the headline runs take at least 5, the patterns' 3).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=60))]
    pub seconds: u32,
    /// PostgreSQL major version of the run's local cluster.
    #[arg(long = "pg", default_value_t = locklab::server::DEFAULT_PG_MAJOR)]
    pub pg: u32,
}

/// Runs the load report's suite ([`locklab::load::suite`]) and writes it.
/// Exit 1 when a right pattern showed a violation.
///
/// # Errors
/// The server cannot start, a run cannot be made, a file cannot be written;
/// SIGINT/SIGTERM (after the server is removed).
pub fn load_report(args: &LoadReportArgs) -> Result<ExitCode> {
    use locklab::load::suite;
    let durations = suite::Durations {
        headline: args.seconds.max(5),
        pattern: args.seconds.max(3),
        curve: args.seconds,
    };
    let (total, secs) = durations.plan();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut interrupts = {
        let _guard = rt.enter();
        Interrupts::install()
    };
    let server = load::start_server(args.pg, *suite::CURVE_WORKERS.last().unwrap_or(&64))?;
    eprintln!("locklab: load-report: {}", server.describe());
    eprintln!(
        "locklab: load-report: {total} runs, about {} min",
        (secs + total as u64 / 2).div_ceil(60)
    );
    let bin = locklab::server::resolve_binaries(&locklab::server::ServerOptions::new(
        locklab::server::BackendChoice::Local,
        args.pg,
    ))?;
    let mut done = 0;
    let progress = |r: &LoadResult| {
        done += 1;
        eprintln!(
            "[{done}/{total}] {} × {} × {} workers × {} keys: {:.0} sections/s, p99 {:.2} ms, {} violation(s)",
            r.client,
            r.spec.pattern.name(),
            r.spec.workers,
            r.spec.keys,
            r.throughput,
            r.latency_ms.p99,
            r.violations()
        );
    };
    let runs = rt.block_on(async {
        tokio::select! {
            r = suite::run(&server, &bin, durations, progress) => r,
            signal = interrupts.next() => Err(anyhow::Error::new(signal)),
        }
    });
    let description = server.describe();
    drop(rt);
    drop(server);
    let (headline, patterns, curves) = runs?;
    let env = locklab::report::Environment::current();
    let report = suite::LoadReport {
        server: description,
        written_at: jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        commit: env.git_commit.map(|c| c.chars().take(12).collect()),
        headline,
        patterns,
        curves,
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| locklab::server::workspace_root().join("reports/load"));
    locklab::load::render::write(&report, &out)?;
    eprintln!("locklab: load-report: wrote {}", out.join("load.md").display());
    let bad = report
        .headline
        .iter()
        .chain(&report.patterns)
        .chain(&report.curves)
        .any(|r| r.spec.pattern.is_right() && r.violations() > 0);
    Ok(if bad { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
