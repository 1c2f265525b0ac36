//! Load runs: many workers contending for advisory locks through the pool
//! under test, every critical section recorded on the server, and checkers
//! over that history afterwards ([`history`]); and pgbench running the same
//! SQL with as many clients against the same server, for the ratio.
//!
//! A load run ([`run`]) has a database of its own on a server of its own
//! ([`start_server`]: a local cluster whose `max_connections` fits the
//! workers). W workers ([`LoadSpec::workers`]) each loop: pick a key
//! uniformly in 1..=K, run one attempt of the [`Pattern`] (the statements of
//! [`sql::attempt`]), note its latency. Pooled drivers check out a
//! connection for every attempt (pool size W), except where the pattern
//! keeps one; the direct driver (tokio-postgres) keeps one connection per
//! worker for the whole run. The run ends after [`LoadSpec::seconds`] or
//! [`LoadSpec::count`] attempts; then the history is read back and checked.

pub mod history;
pub mod pgbench;
pub mod render;
pub mod sql;
pub mod suite;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use locklab_drivers::{Conn, DirectConn, Driver, DriverError, DriverKind, Pool, PoolOptions};
use serde::{Deserialize, Serialize};

use self::history::{Claim, DoubleClaim, LostUpdate, Overlap, Section, Verdict};
use crate::server::{BackendChoice, Server, ServerOptions};

/// How a worker takes the lock around its critical section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// `pg_try_advisory_xact_lock` in a transaction; the section runs only
    /// when it returned true (else the attempt counts as busy).
    XactTry,
    /// `pg_advisory_xact_lock` in a transaction, bounded by `lock_timeout`
    /// (a timeout is SQLSTATE 55P03, counted apart).
    XactWait,
    /// `pg_advisory_lock` and `pg_advisory_unlock` around the section, on a
    /// connection the worker keeps for the whole run (for a pool: checked
    /// out once).
    SessionDedicated,
    /// A queue: each attempt claims the first job not done with `FOR UPDATE
    /// SKIP LOCKED` (no advisory lock); checked for double claims.
    SkipLocked,
    /// Wrong on purpose: `pg_advisory_lock` on one checkout, the section on
    /// the next, `pg_advisory_unlock` on a third. A session-level lock
    /// belongs to the connection, not to the worker (PostgreSQL docs
    /// §13.3.5), so the worker that next checks that connection out is
    /// granted the same key again while the first one's section runs.
    SessionAcrossCheckouts,
}

impl Pattern {
    /// The pattern's name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::XactTry => "xact-try",
            Pattern::XactWait => "xact-wait",
            Pattern::SessionDedicated => "session-dedicated",
            Pattern::SkipLocked => "skip-locked",
            Pattern::SessionAcrossCheckouts => "session-across-checkouts",
        }
    }

    /// Whether the pattern is one that must keep mutual exclusion (all but
    /// [`Pattern::SessionAcrossCheckouts`]).
    pub fn is_right(self) -> bool {
        self != Pattern::SessionAcrossCheckouts
    }
}

/// What a load run does.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadSpec {
    /// The locking pattern.
    pub pattern: Pattern,
    /// Concurrent workers (1–256); also the pool's `max_size`.
    pub workers: u32,
    /// Keys (1–100,000): each attempt picks one uniformly in 1..=keys.
    pub keys: u32,
    /// How long the workers run, in s (whole seconds: pgbench's `-T`).
    pub seconds: u32,
    /// When set, the run ends after this many attempts in all instead.
    pub count: Option<u64>,
    /// `lock_timeout` of every connection, in ms (bounds the blocking lock calls).
    pub lock_timeout_ms: u32,
    /// Work inside each section, in µs, between its read and its write
    /// (server-side `pg_sleep`; 0: none).
    #[serde(default)]
    pub hold_us: u32,
}

/// Latency percentiles of the attempts, in ms (client clock; for pgbench,
/// its per-transaction log).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median, ms.
    pub p50: f64,
    /// 95th percentile, ms.
    pub p95: f64,
    /// 99th percentile, ms.
    pub p99: f64,
    /// The slowest attempt, ms.
    pub max: f64,
}

impl Latency {
    /// Percentiles of `samples_us` (µs; sorted here), nearest rank.
    pub fn of(samples_us: &mut [u64]) -> Latency {
        if samples_us.is_empty() {
            return Latency::default();
        }
        samples_us.sort_unstable();
        let at = |q: f64| {
            let i = ((q * samples_us.len() as f64).ceil() as usize).clamp(1, samples_us.len()) - 1;
            samples_us[i] as f64 / 1e3
        };
        Latency {
            p50: at(0.50),
            p95: at(0.95),
            p99: at(0.99),
            max: samples_us[samples_us.len() - 1] as f64 / 1e3,
        }
    }
}

/// What one client (a driver column, or pgbench) did in a load run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadResult {
    /// The driver's id, or `pgbench`.
    pub client: String,
    /// The run's parameters.
    pub spec: LoadSpec,
    /// How long the workers ran, s.
    pub elapsed_s: f64,
    /// Attempts made (all patterns; for pgbench, its transactions).
    pub attempts: u64,
    /// Critical sections completed (rows of the history; for the queue,
    /// claims).
    pub sections: u64,
    /// Completed sections per second.
    pub throughput: f64,
    /// Attempt latency.
    pub latency_ms: Latency,
    /// Sections whose lock call waited 1 ms or more by the server's clock
    /// (from the transaction's start to the section's entry); `None` for
    /// the patterns without a blocking lock call in the section's
    /// transaction (try-lock, the queue, the wrong pattern).
    pub lock_waits: Option<u64>,
    /// Busy try-locks, timeouts and errors.
    #[serde(flatten)]
    pub counts: Counts,
    /// No two sections on one key overlapped.
    pub mutual_exclusion: Verdict<Overlap>,
    /// Each key's counter equals its number of sections.
    pub lost_updates: Verdict<LostUpdate>,
    /// No job claimed twice (the queue pattern only).
    pub double_claims: Option<Verdict<DoubleClaim>>,
}

impl LoadResult {
    /// The number of violations the checkers found, all together.
    pub fn violations(&self) -> u64 {
        self.mutual_exclusion.violations
            + self.lost_updates.violations
            + self.double_claims.as_ref().map_or(0, |v| v.violations)
    }
}

/// The most workers a load run takes.
pub const MAX_WORKERS: u32 = 256;
/// The most keys a load run takes.
pub const MAX_KEYS: u32 = 100_000;

/// Starts the load runs' own server: a local cluster of PostgreSQL `major`
/// with `max_connections` = `workers` + 20 (the workers, the harness's own
/// connections, pgbench's), nothing else on it. The lock table needs no
/// more than the default: a worker holds one advisory lock at a time
/// (`max_locks_per_transaction` × `max_connections` slots, docs §20.12).
///
/// # Errors
/// The cluster cannot start (binaries cannot be installed, `initdb` fails…).
pub fn start_server(major: u32, workers: u32) -> Result<Server> {
    let mut opts = ServerOptions::new(BackendChoice::Local, major);
    opts.settings = vec![format!("max_connections={}", workers + 20)];
    Server::start(&opts).context("cannot start the load run's local cluster")
}

/// Who makes the load: a driver column, or pgbench (the bin directory that
/// holds it).
pub enum Client<'a> {
    /// A driver of the registry.
    Driver(&'a dyn Driver),
    /// pgbench from this directory.
    Pgbench(std::path::PathBuf),
}

/// Runs `spec` with `client` on `server` in a database of its own, then
/// reads the history back and checks it.
///
/// # Errors
/// Bad parameters, the database or its tables cannot be made, the pool
/// cannot be built, pgbench cannot run, the history cannot be read. Errors
/// of single attempts are counted, not returned.
pub async fn run(server: &Server, client: Client<'_>, spec: &LoadSpec) -> Result<LoadResult> {
    check_spec(spec)?;
    let db = format!("locklab_load_{}_{}", std::process::id(), next_id());
    let admin = server.admin().await?;
    admin
        .client()
        .simple_query(&format!("create database \"{db}\""))
        .await
        .with_context(|| format!("cannot create database {db}"))?;
    let result = run_in(server, &db, client, spec).await;
    let _ = admin
        .client()
        .simple_query(&format!("drop database if exists \"{db}\" with (force)"))
        .await;
    result
}

fn next_id() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn check_spec(spec: &LoadSpec) -> Result<()> {
    if !(1..=MAX_WORKERS).contains(&spec.workers) {
        anyhow::bail!("workers must be 1-{MAX_WORKERS}, not {}", spec.workers);
    }
    if !(1..=MAX_KEYS).contains(&spec.keys) {
        anyhow::bail!("keys must be 1-{MAX_KEYS}, not {}", spec.keys);
    }
    if spec.seconds == 0 && spec.count.is_none() {
        anyhow::bail!("a load run needs seconds ≥ 1 or a count");
    }
    Ok(())
}

async fn run_in(server: &Server, db: &str, client: Client<'_>, spec: &LoadSpec) -> Result<LoadResult> {
    let mut conn = DirectConn::connect(&server.spec(db, "locklab-load")).await?;
    let jobs = if spec.pattern == Pattern::SkipLocked {
        spec.count.unwrap_or(u64::from(spec.seconds) * 60_000).max(1)
    } else {
        0
    };
    conn.client()
        .batch_execute(&sql::schema(spec.keys, jobs))
        .await
        .context("cannot create the load run's tables")?;
    let mut spec_conn = server.spec(db, "locklab-load-worker");
    spec_conn.options = vec![("lock_timeout".into(), format!("{}ms", spec.lock_timeout_ms))];
    let (name, tally) = match client {
        Client::Driver(driver) => {
            let info = driver.info();
            if let Some(pooler) = info.pooler {
                server.route(pooler, &mut spec_conn).await?;
            }
            let opts = PoolOptions {
                max_size: spec.workers,
                checkout_timeout: Duration::from_secs(30),
            };
            let pool: Arc<dyn Pool> = Arc::from(
                driver
                    .pool(&spec_conn, opts)
                    .await
                    .map_err(|e| anyhow!("cannot build the {} pool: {e}", info.id))?,
            );
            let tally = drive(pool.clone(), info.kind, spec).await;
            pool.close().await;
            // A pooler started for this database alone stops with the run.
            if let Some(pooler) = info.pooler
                && pooler.kind.one_instance_per_database()
            {
                server.pooler_close_database(pooler, db, false, None).await?;
            }
            (info.id.to_owned(), tally)
        }
        Client::Pgbench(bin) => {
            let out = pgbench::run(&bin, &spec_conn, spec).await?;
            ("pgbench".to_owned(), out)
        }
    };
    let sections = read_sections(&mut conn).await?;
    let counters = read_counters(&mut conn).await?;
    let claims = if spec.pattern == Pattern::SkipLocked {
        Some(read_claims(&mut conn).await?)
    } else {
        None
    };
    let done = claims.as_ref().map_or(sections.len(), Vec::len) as u64;
    let lock_waits = matches!(spec.pattern, Pattern::XactWait | Pattern::SessionDedicated)
        .then(|| sections.iter().filter(|(_, waited)| *waited >= 1000).count() as u64);
    // pgbench does not count the try-locks that found the key taken: every
    // transaction without a section is one.
    let busy = if name == "pgbench" && spec.pattern == Pattern::XactTry {
        tally.attempts.saturating_sub(done + tally.counts.errors)
    } else {
        tally.counts.busy
    };
    let sections: Vec<Section> = sections.into_iter().map(|(s, _)| s).collect();
    let mut latencies = tally.latencies_us;
    Ok(LoadResult {
        client: name,
        spec: spec.clone(),
        elapsed_s: tally.elapsed_s,
        attempts: tally.attempts,
        sections: done,
        throughput: if tally.elapsed_s > 0.0 {
            done as f64 / tally.elapsed_s
        } else {
            0.0
        },
        latency_ms: Latency::of(&mut latencies),
        lock_waits,
        counts: Counts { busy, ..tally.counts },
        mutual_exclusion: history::mutual_exclusion(&sections),
        lost_updates: history::lost_updates(&sections, &counters),
        double_claims: claims.as_deref().map(history::double_claims),
    })
}

/// What the workers (or pgbench) counted on their side.
#[derive(Default)]
pub struct Tally {
    /// How long they ran, s.
    pub elapsed_s: f64,
    /// Attempts made.
    pub attempts: u64,
    /// Each attempt's latency, µs.
    pub latencies_us: Vec<u64>,
    /// Busy try-locks, timeouts and errors.
    pub counts: Counts,
}

/// How attempts ended other than with a section.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Counts {
    /// Try-lock attempts that found the key taken.
    pub busy: u64,
    /// Lock calls ended by `lock_timeout` (SQLSTATE 55P03).
    pub timeouts: u64,
    /// Other errors; the first one's text in `first_error`.
    pub errors: u64,
    /// The first error other than a timeout.
    pub first_error: Option<String>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.attempts += other.attempts;
        self.latencies_us.extend(other.latencies_us);
        let (c, o) = (&mut self.counts, other.counts);
        c.busy += o.busy;
        c.timeouts += o.timeouts;
        c.errors += o.errors;
        if c.first_error.is_none() {
            c.first_error = o.first_error;
        }
    }

    fn error(&mut self, e: &DriverError) {
        let c = &mut self.counts;
        if e.sqlstate() == Some("55P03") {
            c.timeouts += 1;
        } else {
            c.errors += 1;
            if c.first_error.is_none() {
                c.first_error = Some(e.to_string());
            }
        }
    }
}

/// Runs the workers through `pool` until the time or the count is up.
async fn drive(pool: Arc<dyn Pool>, kind: DriverKind, spec: &LoadSpec) -> Tally {
    let end = Instant::now() + Duration::from_secs(u64::from(spec.seconds.max(1)));
    let budget = Arc::new(AtomicU64::new(spec.count.unwrap_or(u64::MAX)));
    let stop = Arc::new(AtomicBool::new(false));
    let began = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..spec.workers {
        let worker = Worker {
            w,
            pool: pool.clone(),
            keep: spec.pattern == Pattern::SessionDedicated
                || (kind == DriverKind::Direct && spec.pattern != Pattern::SessionAcrossCheckouts),
            spec: spec.clone(),
            end: if spec.count.is_some() { None } else { Some(end) },
            budget: budget.clone(),
            stop: stop.clone(),
        };
        tasks.spawn(worker.run());
    }
    let mut tally = Tally::default();
    while let Some(t) = tasks.join_next().await {
        match t {
            Ok(t) => tally.merge(t),
            Err(e) => {
                tally.counts.errors += 1;
                tally
                    .counts
                    .first_error
                    .get_or_insert_with(|| format!("a worker panicked: {e}"));
            }
        }
    }
    tally.elapsed_s = began.elapsed().as_secs_f64();
    tally
}

/// One worker's loop.
struct Worker {
    w: u32,
    pool: Arc<dyn Pool>,
    /// Keep one connection for the whole run.
    keep: bool,
    spec: LoadSpec,
    end: Option<Instant>,
    budget: Arc<AtomicU64>,
    /// Set when the queue is empty.
    stop: Arc<AtomicBool>,
}

impl Worker {
    async fn run(self) -> Tally {
        let mut tally = Tally::default();
        let mut kept: Option<Box<dyn Conn>> = None;
        loop {
            if self.stop.load(Ordering::Relaxed) || self.end.is_some_and(|e| Instant::now() >= e) {
                break;
            }
            if self
                .budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                .is_err()
            {
                break;
            }
            let k = rand::random_range(1..=i64::from(self.spec.keys));
            let t = Instant::now();
            tally.attempts += 1;
            self.attempt(k, &mut kept, &mut tally).await;
            tally.latencies_us.push(t.elapsed().as_micros() as u64);
        }
        if let Some(c) = kept {
            c.release().await;
        }
        tally
    }

    /// One attempt on key `k`: its statements, each on the kept connection,
    /// or on a connection checked out for the attempt (the wrong pattern:
    /// for each statement).
    async fn attempt(&self, k: i64, kept: &mut Option<Box<dyn Conn>>, tally: &mut Tally) {
        let statements = sql::attempt(self.spec.pattern, self.w, k, self.spec.hold_us);
        let per_statement = self.spec.pattern == Pattern::SessionAcrossCheckouts;
        let mut conn = match kept.take() {
            Some(c) => c,
            None => match self.pool.checkout().await {
                Ok(c) => c,
                Err(e) => return tally.error(&e),
            },
        };
        let mut broken = false;
        for (i, sql) in statements.iter().enumerate() {
            if per_statement && i > 0 {
                conn.release().await;
                conn = match self.pool.checkout().await {
                    Ok(c) => c,
                    Err(e) => return tally.error(&e),
                };
            }
            match conn.simple_query(sql).await {
                Ok(rows) => match self.spec.pattern {
                    Pattern::XactTry if i == 0 && rows.first_value().flatten() != Some("1") => {
                        tally.counts.busy += 1;
                        if let Err(e) = conn.simple_query(sql::TRY_BUSY).await {
                            tally.error(&e);
                            broken = matches!(e, DriverError::Client(_));
                        }
                        break;
                    }
                    Pattern::SkipLocked if rows.rows.is_empty() => {
                        // Every job is done.
                        self.stop.store(true, Ordering::Relaxed);
                    }
                    _ => {}
                },
                Err(e) => {
                    tally.error(&e);
                    broken = matches!(e, DriverError::Client(_));
                    if !broken {
                        // A failed statement of a transaction leaves it aborted.
                        let _ = conn.simple_query("rollback").await;
                    }
                    break;
                }
            }
        }
        if self.keep && !broken {
            *kept = Some(conn);
        } else {
            conn.release().await;
        }
    }
}

/// The rows of `query` (every column a number), for `what` in errors.
async fn numbers(conn: &mut DirectConn, query: &str, what: &str) -> Result<Vec<Vec<i64>>> {
    let rows = conn
        .client()
        .simple_query(query)
        .await
        .with_context(|| format!("cannot read the {what}"))?;
    let mut out = Vec::new();
    for m in rows {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            let row = (0..r.len())
                .map(|i| {
                    r.get(i)
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(|| anyhow!("{what}: column {i} is not a number"))
                })
                .collect::<Result<Vec<i64>>>()?;
            out.push(row);
        }
    }
    Ok(out)
}

/// Each section with its lock wait (µs, server clock).
async fn read_sections(conn: &mut DirectConn) -> Result<Vec<(Section, i64)>> {
    numbers(conn, sql::SECTIONS, "sections")
        .await?
        .into_iter()
        .map(|n| {
            let s = Section {
                worker: u32::try_from(n[0])?,
                key: n[1],
                backend_pid: i32::try_from(n[2])?,
                start_us: n[4],
                end_us: n[5],
                read: n[6],
            };
            let waited = s.start_us - n[3];
            Ok((s, waited))
        })
        .collect()
}

async fn read_counters(conn: &mut DirectConn) -> Result<BTreeMap<i64, i64>> {
    Ok(numbers(conn, sql::COUNTERS, "counters")
        .await?
        .into_iter()
        .map(|n| (n[0], n[1]))
        .collect())
}

async fn read_claims(conn: &mut DirectConn) -> Result<Vec<Claim>> {
    numbers(conn, sql::CLAIMS, "claims")
        .await?
        .into_iter()
        .map(|n| {
            Ok(Claim {
                job: n[0],
                worker: u32::try_from(n[1])?,
                backend_pid: i32::try_from(n[2])?,
                at_us: n[3],
            })
        })
        .collect()
}
