//! underway 0.2 (on sqlx 0.8): a worker's job and a scheduler's run.
//!
//! From the crate's source: `Worker::process_next_task` (`src/worker.rs`)
//! dequeues a task, begins a transaction, takes
//! `pg_try_advisory_xact_lock(hashtext(task id or concurrency key))` in it
//! (`src/queue.rs`, `try_acquire_advisory_xact_lock`), runs the task in a
//! savepoint and commits. `Scheduler::run` (`src/scheduler.rs`) acquires a
//! pooled connection, takes sqlx's `PgAdvisoryLock::new("{queue}-scheduler")`
//! with `try_acquire` on it (returning at once when another holds it),
//! reads the queue's schedule on another connection, and holds the guard
//! until its shutdown token is cancelled (`release_now`); dropped any other
//! way, the guard's unlock waits for the connection's next use or return
//! (sqlx-postgres `src/advisory_lock.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};
use sqlx08::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;
use underway::{Queue, Scheduler, Task, Worker};

use super::process::{Life, Process, apart};
use super::{Side, end, finish, gate, short, started, unique};
use crate::libraries::QueueRun;
use crate::libraries::sqlx08_conn::connect_options;
use crate::{ConnectSpec, DriverError};

/// The job: its handler passes the call's gate (see [`gate`]).
#[derive(Clone)]
struct Job;

#[derive(Clone, Serialize, Deserialize)]
struct Input {
    gate: String,
}

impl Task for Job {
    type Input = Input;
    type Output = ();

    async fn execute(
        &self,
        _tx: sqlx08::Transaction<'_, sqlx08::Postgres>,
        input: Input,
    ) -> underway::task::Result<()> {
        gate::pass(&input.gate).await;
        Ok(())
    }
}

/// A pool of `size` connections of a process named `name`, through `spec`.
fn pool(spec: &ConnectSpec, name: &str, size: u32) -> sqlx08::PgPool {
    PgPoolOptions::new()
        .max_connections(size)
        .connect_lazy_with(connect_options(spec, name))
}

/// Creates underway's schema (its migrations run in one transaction, with
/// sqlx's migration lock inside it: `run_migrations`, `src/lib.rs`).
async fn migrate(spec: &ConnectSpec) -> Result<(), String> {
    let spec = spec.clone();
    apart(move || async move {
        let p = pool(&spec, "locklab-underway-setup", 1);
        let r = underway::run_migrations(&p).await.map_err(short);
        p.close().await;
        r
    })
    .await
}

/// A worker process runs one job (enqueued first); the job waits at its
/// gate while the server's advisory locks are counted; then the process
/// ends as `run` says. E.g. `worker: running; advisory locks while the
/// job runs: 1; worker: done; advisory locks left: 0; the job ran 1×`.
pub(super) async fn worker(spec: &ConnectSpec, run: &QueueRun, side: &Side) -> Result<String, DriverError> {
    if let Err(e) = migrate(spec).await {
        return Ok(format!("setup failed ({e})"));
    }
    let queue_name = unique("locklab-underway");
    let token = unique("locklab-job");
    let mut g = gate::open(&token);
    let job_started = g.started();
    let spec2 = spec.clone();
    let mut p = Process::spawn(move |mut life: Life| async move {
        let pool = pool(&spec2, "locklab-worker", 2);
        let queue = match Queue::builder().name(queue_name).pool(pool.clone()).build().await {
            Ok(q) => q,
            Err(e) => return format!("failed ({})", short(e)),
        };
        if let Err(e) = queue.enqueue(&pool, &Job, &Input { gate: token }).await {
            return format!("failed ({})", short(e));
        }
        let worker = Worker::new(Arc::new(queue), Job);
        let work = worker.process_next_task();
        tokio::pin!(work);
        tokio::select! {
            r = &mut work => return match r {
                Ok(Some(_)) => "done before it was seen running".into(),
                Ok(None) => "found no job".into(),
                Err(e) => format!("failed ({})", short(e)),
            },
            () = job_started => life.started("running"),
        }
        let _ = (&mut life.stop).await;
        let word = match work.await {
            Ok(Some(_)) => "done".into(),
            Ok(None) => "found no job".into(),
            Err(e) => format!("failed ({})", short(e)),
        };
        pool.close().await;
        word
    });
    let mut words = vec![format!("worker: {}", started(&mut p).await)];
    let during = side.held().await?;
    words.push(format!("advisory locks while the job runs: {during}"));
    words.push(format!("worker: {}", finish(&mut p, &mut g, run).await));
    let left = side.held_settled(0).await?;
    words.push(format!("advisory locks left: {left}"));
    words.push(format!("the job ran {}×", g.runs()));
    Ok(words.join("; "))
}

/// Schedulers of one queue, each a process of its own: `a` starts, then
/// `b` while `a` runs; `b` is stopped if it runs; `a` ends as `run` says;
/// the server's advisory locks are counted; then `c` starts. E.g. `a:
/// running; b: not acquired; a: stopped; advisory locks left: 0; c:
/// running`. A scheduler reads `running` once it has read its schedule
/// (past the lock: a second connection of its pool was taken) and `not
/// acquired` when `run` returned at once.
pub(super) async fn scheduler(spec: &ConnectSpec, run: &QueueRun, side: &Side) -> Result<String, DriverError> {
    if let Err(e) = migrate(spec).await {
        return Ok(format!("setup failed ({e})"));
    }
    let queue_name = unique("locklab-underway");
    // The schedule: once a year, so no task is enqueued while the call runs.
    let (spec2, name2) = (spec.clone(), queue_name.clone());
    let r = apart(move || async move {
        let p = pool(&spec2, "locklab-underway-setup", 1);
        let r = async {
            let queue: Queue<Job> = Queue::builder()
                .name(name2)
                .pool(p.clone())
                .build()
                .await
                .map_err(short)?;
            let schedule = underway::ZonedSchedule::new("0 0 0 1 1 *", "UTC").map_err(short)?;
            queue
                .schedule(&p, &schedule, &Input { gate: String::new() })
                .await
                .map_err(short)
        }
        .await;
        p.close().await;
        r
    })
    .await;
    if let Err(e) = r {
        return Ok(format!("setup failed ({e})"));
    }
    let start = |name: &'static str| {
        let spec = spec.clone();
        let queue_name = queue_name.clone();
        Process::spawn(move |mut life: Life| async move {
            // Connections taken from the pool (opened or reused): the
            // scheduler takes a second one only once it holds the lock.
            let taken = Arc::new(AtomicU32::new(0));
            let (t1, t2) = (taken.clone(), taken.clone());
            let pool = PgPoolOptions::new()
                .max_connections(2)
                .after_connect(move |_, _| {
                    t1.fetch_add(1, Ordering::SeqCst);
                    Box::pin(async { Ok(()) })
                })
                .before_acquire(move |_, _| {
                    t2.fetch_add(1, Ordering::SeqCst);
                    Box::pin(async { Ok(true) })
                })
                .connect_lazy_with(connect_options(&spec, &format!("locklab-scheduler-{name}")));
            let queue = match Queue::builder().name(queue_name).pool(pool.clone()).build().await {
                Ok(q) => q,
                Err(e) => return format!("failed ({})", short(e)),
            };
            let base = taken.load(Ordering::SeqCst);
            let token = CancellationToken::new();
            let mut scheduler = Scheduler::new(Arc::new(queue), Job);
            scheduler.set_shutdown_token(token.clone());
            let running = scheduler.run();
            tokio::pin!(running);
            loop {
                tokio::select! {
                    r = &mut running => {
                        pool.close().await;
                        return match r {
                            Ok(()) => "not acquired".into(),
                            Err(e) => format!("failed ({})", short(e)),
                        };
                    }
                    () = tokio::time::sleep(std::time::Duration::from_millis(2)) => {
                        if taken.load(Ordering::SeqCst) >= base + 2 {
                            break;
                        }
                    }
                }
            }
            life.started("running");
            let stop = &mut life.stop;
            tokio::select! {
                r = &mut running => {
                    pool.close().await;
                    return match r {
                        Ok(()) => "ended by itself".into(),
                        Err(e) => format!("failed ({})", short(e)),
                    };
                }
                _ = stop => {}
            }
            token.cancel();
            let word = match running.await {
                Ok(()) => "stopped".into(),
                Err(e) => format!("failed ({})", short(e)),
            };
            pool.close().await;
            word
        })
    };
    let mut words = Vec::new();
    let mut a = start("a");
    words.push(format!("a: {}", started(&mut a).await));
    let mut b = start("b");
    let b_word = started(&mut b).await;
    words.push(format!("b: {b_word}"));
    if !b.ended() {
        words.push(format!("b: {}", b.stop().await));
    }
    words.push(format!("a: {}", end(&mut a, run).await));
    let left = side.held_settled(0).await?;
    words.push(format!("advisory locks left: {left}"));
    let mut c = start("c");
    words.push(format!("c: {}", started(&mut c).await));
    if !c.ended() {
        c.stop().await;
    }
    Ok(words.join("; "))
}
