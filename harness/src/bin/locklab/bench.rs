//! `locklab bench`: what a cell costs next to its floor, the same SQL from a
//! bare client on the same server ([`locklab::floor`]), per kind of cell and
//! backend: wall time per run and per cell, CPU per cell (all processes,
//! locklab, PostgreSQL, the rest), and the matrix's cells per second at the
//! default concurrency. A benchmark, not a test: it judges nothing; its
//! output, with the date and machine, is what `docs/src/speed.md` keeps.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use locklab::cpu::Usage;
use locklab::matrix;
use locklab::outcome::{Phase, RunResult};
use locklab::runner::{self, Sharing};
use locklab::scenario::Scenario;
use locklab::server::{BackendChoice, Server};
use locklab_core::signals::Interrupts;
use locklab_drivers::Driver;

use crate::cli::{BenchArgs, ServerArgs};
use crate::selection::load;
use crate::servers::start_servers;

/// One benchmarked cell: what kind of cell it stands for, and its scenario
/// and column.
struct BenchCell {
    kind: &'static str,
    scenario: &'static str,
    driver: &'static str,
}

/// The fixed set: a plain scenario through a column of each family, a race
/// cell and a fault cell. `xact-lock-competition` is plain: two pool actors,
/// checkouts, transactions, three `pg_try_advisory_xact_lock` calls, nothing
/// that waits, so its floor is all connections and statements.
const CELLS: &[BenchCell] = &[
    BenchCell {
        kind: "plain, no pool",
        scenario: "xact-lock-competition",
        driver: "tokio-postgres",
    },
    BenchCell {
        kind: "plain, Rust pool in process",
        scenario: "xact-lock-competition",
        driver: "deadpool-fast",
    },
    BenchCell {
        kind: "plain, Rust pool in process",
        scenario: "xact-lock-competition",
        driver: "sqlx",
    },
    BenchCell {
        kind: "plain, pool through the driver protocol",
        scenario: "xact-lock-competition",
        driver: "psycopg-pool",
    },
    BenchCell {
        kind: "plain, pooler (PgBouncer 1.18, transaction)",
        scenario: "xact-lock-competition",
        driver: "pgbouncer-transaction",
    },
    BenchCell {
        kind: "race (per trial)",
        scenario: "lock-timeout-races-release[level=xact]",
        driver: "tokio-postgres",
    },
    BenchCell {
        kind: "fault (crash of a child process)",
        scenario: "crash-xact-holder",
        driver: "deadpool-fast",
    },
];

/// What one cell measured on one server.
struct Measured {
    server: String,
    kind: &'static str,
    scenario: String,
    driver: String,
    /// Per run (`elapsed_ms`), ms: median.
    run_p50: f64,
    /// Wall time of the timed runs over their count, ms.
    cell_ms: f64,
    cpu: CpuShare,
    phases: Vec<(Phase, f64)>,
    floor: Result<Floor, String>,
}

/// The floor of a cell: its SQL from a bare client.
struct Floor {
    p50: f64,
    cell_ms: f64,
    cpu: CpuShare,
}

/// CPU per cell, ms: every process (the machine's busy time), locklab
/// itself, PostgreSQL's processes, and the rest (adapters, poolers,
/// `docker-proxy`, the kernel, other load).
#[derive(Clone, Copy, Default)]
struct CpuShare {
    all: f64,
    locklab: f64,
    postgres: f64,
}

impl CpuShare {
    /// Between two readings, over `n` cells.
    fn between(a: &Usage, b: &Usage, n: f64) -> CpuShare {
        let by = a.by_command(b, |_| None);
        let postgres = by.get("postgres").copied().unwrap_or(0.0);
        CpuShare {
            all: (b.machine_busy - a.machine_busy) * 1e3 / n,
            locklab: (b.own - a.own) * 1e3 / n,
            postgres: postgres * 1e3 / n,
        }
    }

    fn rest(&self) -> f64 {
        (self.all - self.locklab - self.postgres).max(0.0)
    }
}

/// Runs the benchmark and prints its tables (Markdown) on stdout, progress
/// on stderr. Exit 1 when a benchmarked run failed (its figures would not
/// be the cell's).
///
/// # Errors
/// Invalid scenario files, a cell of the set that the scenarios or drivers
/// lack, servers that do not start, SIGINT or SIGTERM.
pub fn bench(dir: &Path, args: &BenchArgs) -> Result<ExitCode> {
    let scenarios = load(dir)?;
    let drivers = locklab_drivers::registry();
    let cells: Vec<&BenchCell> = CELLS
        .iter()
        .filter(|c| {
            args.only.is_empty()
                || args.only.iter().any(|o| {
                    c.kind.contains(o.as_str()) || c.scenario.contains(o.as_str()) || c.driver.contains(o.as_str())
                })
        })
        .collect();
    if cells.is_empty() {
        bail!("--only selects none of the benchmark's cells");
    }
    for c in &cells {
        if !scenarios.iter().any(|s| s.name == c.scenario) {
            bail!("the benchmark's scenario '{}' is not in {}", c.scenario, dir.display());
        }
        if !drivers.iter().any(|d| d.info().id == c.driver) {
            bail!("the benchmark's column '{}' is not registered", c.driver);
        }
    }
    let server_args = with_default_backends(&args.server)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut interrupts = {
        let _guard = rt.enter();
        Interrupts::install()
    };
    let servers = start_servers(&server_args)?;
    for s in &servers {
        eprintln!("locklab: {}: {}", s.id(), s.describe());
    }
    runner::set_max_trials(Some(args.trials));
    let began = Instant::now();
    let outcome = rt.block_on(async {
        tokio::select! {
            r = measure_all(&servers, &scenarios, &drivers, &cells, args) => Ok(r),
            signal = interrupts.next() => Err(signal),
        }
    });
    let (measured, throughput, failed) = match outcome {
        Ok(r) => r?,
        Err(signal) => return Err(crate::execute::clean_up_after(signal, rt, servers).into()),
    };
    drop(rt);
    drop(servers);
    println!("{}", render(&measured, &throughput, args, began.elapsed()));
    if failed > 0 {
        eprintln!("locklab bench: {failed} run(s) failed; their cells' figures are not the cells' own");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--backend` as given, or else the local cluster and, when a Docker engine
/// answers, a container: each backend's floor is measured on it.
fn with_default_backends(args: &ServerArgs) -> Result<ServerArgs> {
    if !args.backends().is_empty() {
        return Ok(args.clone());
    }
    let mut backends = vec![BackendChoice::Local];
    match locklab::server::container::docker_answers() {
        Ok(()) => backends.push(BackendChoice::Container),
        Err(e) => eprintln!("locklab bench: the local cluster only: {e:#}"),
    }
    Ok(args.with_backends(backends))
}

/// Cells per second at `--jobs`, per server: the plain cells run together.
struct Throughput {
    server: String,
    cells: usize,
    seconds: f64,
    cpu: CpuShare,
}

/// Every cell on every server, then the throughput; and how many runs failed.
async fn measure_all(
    servers: &[Server],
    scenarios: &[Scenario],
    drivers: &[Box<dyn Driver>],
    cells: &[&BenchCell],
    args: &BenchArgs,
) -> Result<(Vec<Measured>, Vec<Throughput>, usize)> {
    let mut out = Vec::new();
    let mut throughput = Vec::new();
    let mut failed = 0;
    for server in servers {
        let sharing = Sharing::new();
        for c in cells {
            let scenario = scenarios.iter().find(|s| s.name == c.scenario).context("scenario")?;
            let driver = drivers.iter().find(|d| d.info().id == c.driver).context("driver")?;
            eprintln!(
                "locklab bench: {} · {} × {}: {} runs",
                server.id(),
                c.scenario,
                c.driver,
                args.runs
            );
            let (m, f) = measure(
                server,
                scenario,
                driver.as_ref(),
                c.kind,
                usize::from(args.runs),
                &sharing,
            )
            .await;
            failed += f;
            out.push(m);
        }
        // The plain cells together, as the matrix runs them.
        let plain: Vec<&BenchCell> = cells.iter().copied().filter(|c| c.kind.starts_with("plain")).collect();
        if !plain.is_empty() {
            let rounds = usize::from(args.runs);
            eprintln!(
                "locklab bench: {} · the plain cells together, {rounds} times over, {} at once",
                server.id(),
                args.jobs
            );
            let scenario: Vec<Scenario> = scenarios
                .iter()
                .filter(|s| s.name == plain[0].scenario)
                .cloned()
                .collect();
            let chosen: Vec<Box<dyn Driver>> = locklab_drivers::registry()
                .into_iter()
                .filter(|d| plain.iter().any(|c| c.driver == d.info().id))
                .collect();
            let before = Usage::now();
            let t = Instant::now();
            let runs = matrix::run_all(
                std::slice::from_ref(server),
                &scenario,
                &chosen,
                usize::from(args.jobs),
                rounds,
                |_, r: &RunResult| {
                    if r.failure.is_some() {
                        eprintln!("locklab bench: failed: {}", r.failure.as_deref().unwrap_or_default());
                    }
                },
            )
            .await;
            let seconds = t.elapsed().as_secs_f64();
            let n = runs.len() * rounds;
            throughput.push(Throughput {
                server: server.id(),
                cells: n,
                seconds,
                cpu: CpuShare::between(&before, &Usage::now(), n as f64),
            });
        }
        if let Err(e) = sharing.finish([server]).await {
            eprintln!("locklab bench: {e}");
        }
    }
    Ok((out, throughput, failed))
}

/// `runs` timed runs of one cell after two untimed ones, then its floor the
/// same number of times; and how many of the cell's runs failed.
async fn measure(
    server: &Server,
    scenario: &Scenario,
    driver: &dyn Driver,
    kind: &'static str,
    runs: usize,
    sharing: &Sharing,
) -> (Measured, usize) {
    let mut failed = 0;
    let mut note = |r: &RunResult| {
        if let Some(f) = &r.failure {
            eprintln!("locklab bench: failed: {f}");
            failed += 1;
        }
    };
    for _ in 0..2 {
        let r = runner::run_sharing_databases(server, scenario, driver, sharing).await;
        note(&r);
        // A cell this machine cannot run (a column's toolchain missing, a
        // pooler without Docker) has no figures: said, not measured.
        if let Some(why) = r.skipped {
            let measured = Measured {
                server: server.id(),
                kind,
                scenario: scenario.name.clone(),
                driver: driver.info().id.to_owned(),
                run_p50: 0.0,
                cell_ms: 0.0,
                cpu: CpuShare::default(),
                phases: Vec::new(),
                floor: Err(format!("not run here: {why}")),
            };
            eprintln!("locklab bench: not run here: {why}");
            return (measured, failed);
        }
    }
    let before = Usage::now();
    let t = Instant::now();
    let mut results = Vec::with_capacity(runs);
    for _ in 0..runs {
        let r = runner::run_sharing_databases(server, scenario, driver, sharing).await;
        note(&r);
        results.push(r);
    }
    let wall = t.elapsed().as_secs_f64() * 1e3;
    let after = Usage::now();
    // A race cell's figures are per trial.
    let per = match &scenario.trials {
        Some(_) => {
            (runs as f64)
                * f64::from(runner::effective_trials(
                    scenario.trials.as_ref().map_or(1, |t| t.count),
                ))
        }
        None => runs as f64,
    };
    let mut elapsed: Vec<f64> = results.iter().map(|r| r.elapsed_ms).collect();
    let phases = Phase::ALL
        .iter()
        .map(|p| {
            let mut v: Vec<f64> = results.iter().filter_map(|r| r.phases_ms.get(p).copied()).collect();
            (*p, median(&mut v))
        })
        .collect();
    let measured = Measured {
        server: server.id(),
        kind,
        scenario: scenario.name.clone(),
        driver: driver.info().id.to_owned(),
        run_p50: median(&mut elapsed) * runs as f64 / per,
        cell_ms: wall / per,
        cpu: CpuShare::between(&before, &after, per),
        phases,
        floor: floor(server, scenario, driver, runs).await,
    };
    (measured, failed)
}

/// The floor of `scenario` on `server`, `runs` times after two untimed
/// ones, in a database of its own, through the column's pooler if it has one.
async fn floor(server: &Server, scenario: &Scenario, driver: &dyn Driver, runs: usize) -> Result<Floor, String> {
    if let Some(why) = locklab::floor::why_not(scenario) {
        return Err(why);
    }
    // Named as run databases are (`ll_…_PID_N`), so that an interrupted
    // bench drops it with them (`runner::drop_own_databases`).
    let db = format!("ll_bench_floor_{}_0", std::process::id());
    let admin = server.admin().await.map_err(|e| format!("{e:#}"))?;
    admin
        .client()
        .simple_query(&format!("create database \"{db}\""))
        .await
        .map_err(|e| format!("cannot create {db}: {e}"))?;
    let mut spec = server.spec(&db, "locklab-floor");
    let pooler = driver.info().pooler;
    let measured = async {
        if let Some(p) = pooler {
            server.route(p, &mut spec).await.map_err(|e| format!("{e:#}"))?;
        }
        for _ in 0..2 {
            locklab::floor::replay(&spec, scenario).await?;
        }
        let before = Usage::now();
        let t = Instant::now();
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            times.push(locklab::floor::replay(&spec, scenario).await?.as_secs_f64() * 1e3);
        }
        let wall = t.elapsed().as_secs_f64() * 1e3;
        let cpu = CpuShare::between(&before, &Usage::now(), runs as f64);
        Ok(Floor {
            p50: median(&mut times),
            cell_ms: wall / runs as f64,
            cpu,
        })
    }
    .await;
    if let Some(p) = pooler {
        let _ = server.pooler_close_database(p, &db, false, None).await;
    }
    let _ = admin
        .client()
        .simple_query(&format!("drop database if exists \"{db}\" with (force)"))
        .await;
    admin.close().await;
    measured
}

/// The median of `v` (sorted in place); 0 when empty.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The benchmark's output: what ran where, the table per cell, the phases,
/// the throughput.
fn render(measured: &[Measured], throughput: &[Throughput], args: &BenchArgs, took: Duration) -> String {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = format!(
        "locklab bench, {} runs per cell (after 2 untimed), one at a time; {cpus} CPUs; race cell at {} trials; {:.0} s\n\n",
        args.runs,
        args.trials,
        took.as_secs_f64()
    );
    out.push_str(
        "| server | kind of cell | scenario × column | per run, ms (p50) | per cell, ms | floor per run, ms (p50) | floor per cell, ms | × floor, run | × floor, cell | CPU per cell, ms: all (locklab + postgres + rest) | floor CPU, ms: all | × floor, CPU |\n\
         | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n",
    );
    for m in measured {
        let cpu = format!(
            "{:.1} ({:.1} + {:.1} + {:.1})",
            m.cpu.all,
            m.cpu.locklab,
            m.cpu.postgres,
            m.cpu.rest()
        );
        match &m.floor {
            Ok(f) => out.push_str(&format!(
                "| {} | {} | {} × {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {cpu} | {:.1} | {:.2} |\n",
                m.server,
                m.kind,
                m.scenario,
                m.driver,
                m.run_p50,
                m.cell_ms,
                f.p50,
                f.cell_ms,
                m.run_p50 / f.p50.max(1e-9),
                m.cell_ms / f.cell_ms.max(1e-9),
                f.cpu.all,
                m.cpu.all / f.cpu.all.max(1e-9),
            )),
            Err(why) if m.phases.is_empty() => out.push_str(&format!(
                "| {} | {} | {} × {} | — | — | {why} | | | | | | |\n",
                m.server, m.kind, m.scenario, m.driver,
            )),
            Err(why) => out.push_str(&format!(
                "| {} | {} | {} × {} | {:.1} | {:.1} | no floor: {why} | | | | {cpu} | | |\n",
                m.server, m.kind, m.scenario, m.driver, m.run_p50, m.cell_ms,
            )),
        }
    }
    out.push_str("\nWhere a run's time goes, ms (medians per phase):\n\n| server | scenario × column |");
    for p in Phase::ALL {
        out.push_str(&format!(" {} |", p.as_str()));
    }
    out.push_str("\n| --- | --- |");
    for _ in Phase::ALL {
        out.push_str(" ---: |");
    }
    out.push('\n');
    for m in measured.iter().filter(|m| !m.phases.is_empty()) {
        out.push_str(&format!("| {} | {} × {} |", m.server, m.scenario, m.driver));
        for (_, ms) in &m.phases {
            out.push_str(&format!(" {ms:.1} |"));
        }
        out.push('\n');
    }
    if !throughput.is_empty() {
        out.push_str(&format!(
            "\nThe plain cells together, {} at once:\n\n| server | cells | s | cells per s | CPU per cell, ms: all (locklab + postgres + rest) |\n| --- | ---: | ---: | ---: | --- |\n",
            args.jobs
        ));
        for t in throughput {
            out.push_str(&format!(
                "| {} | {} | {:.1} | {:.1} | {:.1} ({:.1} + {:.1} + {:.1}) |\n",
                t.server,
                t.cells,
                t.seconds,
                t.cells as f64 / t.seconds.max(1e-9),
                t.cpu.all,
                t.cpu.locklab,
                t.cpu.postgres,
                t.cpu.rest()
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The benchmark's cells name shipped scenarios and registered columns,
    /// and the plain ones have a floor: a renamed scenario or column, or a
    /// plain scenario given a step the bare client cannot replay, fails here
    /// rather than when someone runs `locklab bench`.
    #[test]
    fn every_cell_is_shipped_and_every_plain_cell_has_a_floor() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
        let scenarios = load(&dir).expect("the shipped scenarios load");
        let drivers = locklab_drivers::registry();
        for c in CELLS {
            let s = scenarios
                .iter()
                .find(|s| s.name == c.scenario)
                .unwrap_or_else(|| panic!("no scenario {}", c.scenario));
            assert!(
                drivers.iter().any(|d| d.info().id == c.driver),
                "no column {}",
                c.driver
            );
            let floor = locklab::floor::why_not(s);
            if c.kind.starts_with("plain") {
                assert_eq!(floor, None, "{}", c.scenario);
            } else {
                assert!(
                    floor.is_some(),
                    "{} is not plain: the bare client cannot replay it",
                    c.scenario
                );
            }
        }
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut [5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&mut []), 0.0);
    }
}
