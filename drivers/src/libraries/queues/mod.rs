//! Job queues through their own crates, each as a story of processes
//! (a worker's job, a scheduler's run, a worker's registration) told by one
//! `library` step (`queue: { end: stop | kill }`), whose text the
//! properties read:
//!
//! - `underway-worker` ([`underway`], underway 0.2 on sqlx 0.8): a worker
//!   runs one job; `pg_try_advisory_xact_lock(hashtext(task id))` in the
//!   transaction the job runs in (`src/worker.rs`, `process_next_task`;
//!   `src/queue.rs`, `try_acquire_advisory_xact_lock`).
//! - `underway-scheduler` ([`underway`]): schedulers of one queue started
//!   one after another; each holds sqlx's `PgAdvisoryLock` guard
//!   (`"{queue}-scheduler"`) on a pooled connection for its whole run and
//!   releases it (`release_now`) only on its shutdown token
//!   (`src/scheduler.rs`, `Scheduler::run`).
//! - `apalis-postgres` ([`apalis`], apalis-postgres 1.0 on sqlx 0.9): a
//!   worker registered, restarted, a second one of the same name, then a
//!   third; re-registration takes `pg_try_advisory_lock(hashtext(id))` in
//!   `INSERT … ON CONFLICT … DO UPDATE … WHERE`, through the pool, and no
//!   code unlocks it (`queries/worker/register.sql`).
//! - `graphile-worker` ([`graphile`], graphile_worker 0.14 on sqlx 0.9): a
//!   job with a `job_key` added and run; `add_jobs` takes
//!   `pg_advisory_xact_lock(hashtext(job_key))` (migration `m000022.sql`):
//!   transaction-level locks only.
//!
//! Each process has a thread, a runtime and a pool of its own
//! ([`process`]), pointed where the column points (the server, or the
//! pooler). What the server holds is read from `pg_locks` on a side
//! connection of the same route.

mod apalis;
mod gate;
mod graphile;
mod process;
mod underway;

use std::time::{Duration, Instant};

use super::{Library, QueueEnd, QueueRun};
use crate::{ConnectSpec, DriverError};

/// How long a process may take to start (connect, set up, take its job
/// or lock): a bound, past which the reading says so.
const START_BOUND: Duration = Duration::from_secs(20);

/// How long the server may take to let go of a process's locks after it
/// ended (its backends exit on the closed socket): a bound; the reading
/// gives the count at its end.
const SETTLE_BOUND: Duration = Duration::from_secs(3);

/// Runs `run` through `library` (a job queue) against `spec`.
///
/// # Errors
/// [`DriverError::Unsupported`] for a library that is not a job queue; a
/// failure of the side connection that reads `pg_locks`. A queue's own
/// errors are words of the reading, not errors.
pub(crate) async fn run(library: Library, spec: &ConnectSpec, run: &QueueRun) -> Result<String, DriverError> {
    let side = Side::connect(spec).await?;
    type Story<'a> = std::pin::Pin<Box<dyn Future<Output = Result<String, DriverError>> + Send + 'a>>;
    let story: Story<'_> = match library {
        Library::UnderwayWorker => Box::pin(underway::worker(spec, run, &side)),
        Library::UnderwayScheduler => Box::pin(underway::scheduler(spec, run, &side)),
        Library::ApalisPostgres => Box::pin(apalis::registration(spec, run, &side)),
        Library::GraphileWorker => Box::pin(graphile::worker(spec, run, &side)),
        other => {
            return Err(DriverError::Unsupported(format!(
                "{} is not a job queue",
                other.as_str()
            )));
        }
    };
    let r = story.await;
    side.close().await;
    r
}

/// Ends `p` as `run` says: its own shutdown (`stop`) or killed.
async fn end(p: &mut process::Process, run: &QueueRun) -> String {
    match run.end {
        QueueEnd::Stop => p.stop().await,
        QueueEnd::Kill => p.kill().await,
    }
}

/// Ends `p`, whose job waits at gate `g`, as `run` says: the job let
/// through and the queue's own shutdown (`stop`), or killed mid-job.
async fn finish(p: &mut process::Process, g: &mut gate::Opened, run: &QueueRun) -> String {
    match run.end {
        QueueEnd::Stop => {
            g.release();
            p.stop().await
        }
        QueueEnd::Kill => p.kill().await,
    }
}

/// The word a process said on start, or that it said nothing in time.
async fn started(p: &mut process::Process) -> String {
    match p.started(START_BOUND).await {
        Some(w) => w,
        None => format!("not started within {} s", START_BOUND.as_secs()),
    }
}

/// A side connection (sqlx 0.8, one connection, simple query protocol)
/// that reads what the server holds.
struct Side(sqlx08::PgPool);

impl Side {
    async fn connect(spec: &ConnectSpec) -> Result<Side, DriverError> {
        let pool = sqlx08::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(super::sqlx08_conn::connect_options(
                spec,
                &format!("{}-observer", spec.application_name),
            ));
        Ok(Side(pool))
    }

    /// How many advisory locks of the run's database are granted, whoever
    /// holds them (behind a pooler: a server connection it keeps).
    async fn held(&self) -> Result<i64, DriverError> {
        use sqlx08::Row;
        let row = sqlx08::raw_sql(
            "select count(*) from pg_locks where locktype = 'advisory' and granted \
             and database = (select oid from pg_database where datname = current_database())",
        )
        .fetch_one(&self.0)
        .await
        .map_err(super::sqlx08_conn::sqlx_error)?;
        row.try_get::<i64, _>(0).map_err(super::sqlx08_conn::sqlx_error)
    }

    /// [`Side::held`] once it has reached `to` or [`SETTLE_BOUND`] has passed.
    async fn held_settled(&self, to: i64) -> Result<i64, DriverError> {
        let deadline = Instant::now() + SETTLE_BOUND;
        loop {
            let n = self.held().await?;
            if n <= to || Instant::now() >= deadline {
                return Ok(n);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn close(self) {
        self.0.close().await;
    }
}

/// A name unique to this call, for a queue, a worker or a job's gate:
/// `prefix` and a counter of the test process.
fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// The first line of an error's text, at most 120 characters.
fn short(e: impl std::fmt::Display) -> String {
    let s = e.to_string();
    s.lines().next().unwrap_or("").chars().take(120).collect()
}
