//! apalis-postgres 1.0 (on sqlx 0.9): a worker's registration.
//!
//! From the crate's source: a worker registers when it starts
//! (`src/persistence.rs`, `register`: in a transaction of its pool), with
//! `INSERT INTO apalis.workers … ON CONFLICT (id) DO UPDATE … WHERE
//! pg_try_advisory_lock(hashtext(workers.id))` (`queries/worker/register.sql`):
//! the first registration of a name inserts its row and takes no lock; a
//! later one (a restart) takes a session-level lock on the pooled
//! connection it ran on, and no code unlocks it. No row updated means the
//! lock is held elsewhere: `WorkerAlreadyExists` (`src/queries/register_worker.rs`).
//! The lock stands for the worker's process: while it lives, another
//! worker of its name is refused.

use apalis_core::backend::TaskSink;
use apalis_core::error::BoxDynError;
use apalis_core::worker::builder::WorkerBuilder;
use apalis_core::worker::context::WorkerContext;
use apalis_postgres::{Config, PostgresStorage};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;

use super::process::{Life, Process, apart};
use super::{Side, finish, gate, short, started, unique};
use crate::libraries::QueueRun;
use crate::{ConnectSpec, DriverError};

#[derive(Clone, Serialize, Deserialize)]
struct Job {
    gate: String,
}

async fn handle(job: Job, worker: WorkerContext) -> Result<(), BoxDynError> {
    gate::pass(&job.gate).await;
    worker.stop()?;
    Ok(())
}

/// sqlx 0.9 connect options for `spec`, as `application_name` `name`.
pub(super) fn connect_options(spec: &ConnectSpec, name: &str) -> sqlx::postgres::PgConnectOptions {
    let mut options = sqlx::postgres::PgConnectOptions::new()
        .host(&spec.host)
        .port(spec.port)
        .username(&spec.user)
        .database(&spec.dbname)
        .application_name(name);
    if let Some(p) = &spec.password {
        options = options.password(p);
    }
    if !spec.options.is_empty() {
        options = options.options(spec.options.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    }
    options
}

/// Creates apalis' schema with the crate's migrations, once, from one
/// connection (sqlx's migration lock off: nothing else migrates).
async fn migrate(spec: &ConnectSpec) -> Result<(), String> {
    let spec = spec.clone();
    apart(move || async move {
        let p = PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(connect_options(&spec, "locklab-apalis-setup"));
        let mut migrator = PostgresStorage::<()>::migrations();
        migrator.set_locking(false);
        let r = migrator.run(&p).await.map_err(short);
        p.close().await;
        r
    })
    .await
}

/// A worker process named `worker` on queue `queue`: it registers, then
/// runs its one job, which waits at the gate; `registered` once the job
/// runs, the registration's error otherwise.
fn start(spec: &ConnectSpec, worker: &str) -> (Process, gate::Opened) {
    let token = unique("locklab-job");
    let mut g = gate::open(&token);
    let job_started = g.started();
    let (spec, worker, queue) = (spec.clone(), worker.to_owned(), unique("locklab-apalis"));
    let p = Process::spawn(move |mut life: Life| async move {
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_lazy_with(connect_options(&spec, "locklab-worker"));
        let mut storage = PostgresStorage::<Job>::new(&pool).with_config(Config::default().queue(&queue));
        if let Err(e) = storage.push(Job { gate: token }).await {
            return format!("failed ({})", short(e));
        }
        let running = WorkerBuilder::new(worker.as_str()).backend(storage).build(handle).run();
        tokio::pin!(running);
        tokio::select! {
            r = &mut running => {
                pool.close().await;
                return match r {
                    Ok(()) => "ended before its job ran".into(),
                    Err(e) if e.to_string().contains("WorkerAlreadyExists") => "worker already exists".into(),
                    Err(e) => format!("failed ({})", short(e)),
                };
            }
            () = job_started => life.started("registered"),
        }
        let _ = (&mut life.stop).await;
        let word = match running.await {
            Ok(()) => "stopped".into(),
            Err(e) => format!("failed ({})", short(e)),
        };
        pool.close().await;
        word
    });
    (p, g)
}

/// One worker name, four processes: `a` registers (its row inserted) and
/// stops; `a2` (its restart) registers again, which takes the lock; `b`, a
/// second worker of the name, registers while `a2` runs; `a2` ends as
/// `run` says; the server's advisory locks are counted; then `c` registers.
/// E.g. `a: registered; a: stopped; a2: registered; advisory locks while
/// it runs: 1; b: worker already exists; a2: killed; advisory locks left:
/// 0; c: registered`.
pub(super) async fn registration(spec: &ConnectSpec, run: &QueueRun, side: &Side) -> Result<String, DriverError> {
    if let Err(e) = migrate(spec).await {
        return Ok(format!("setup failed ({e})"));
    }
    let name = unique("locklab-worker");
    let mut words = Vec::new();
    let (mut a, mut ga) = start(spec, &name);
    words.push(format!("a: {}", started(&mut a).await));
    ga.release();
    words.push(format!("a: {}", a.stop().await));
    let (mut a2, mut ga2) = start(spec, &name);
    words.push(format!("a2: {}", started(&mut a2).await));
    words.push(format!("advisory locks while it runs: {}", side.held().await?));
    let (mut b, mut gb) = start(spec, &name);
    words.push(format!("b: {}", started(&mut b).await));
    if !b.ended() {
        gb.release();
        b.stop().await;
    }
    words.push(format!("a2: {}", finish(&mut a2, &mut ga2, run).await));
    words.push(format!("advisory locks left: {}", side.held_settled(0).await?));
    let (mut c, mut gc) = start(spec, &name);
    words.push(format!("c: {}", started(&mut c).await));
    if !c.ended() {
        gc.release();
        c.stop().await;
    }
    Ok(words.join("; "))
}
