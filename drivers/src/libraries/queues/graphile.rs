//! graphile_worker 0.14 (on sqlx 0.9): a job with a `job_key`, added and
//! run.
//!
//! From the crate's source: `add_job` calls the schema's `add_jobs`
//! function, which takes `pg_advisory_xact_lock(hashtext(job_key))` for
//! each key (migration `m000022.sql`); jobs are claimed by row
//! (`locked_at`, `locked_by`), not by advisory lock; the stale-worker
//! sweep takes `pg_try_advisory_xact_lock(…)` (`graphile_worker_queries`
//! `src/worker_heartbeat/lock.rs`). Transaction-level locks only: by
//! design they end with their transaction, behind transaction pooling too.

use graphile_worker::{IntoTaskHandlerResult, JobSpec, TaskHandler, WorkerContext, WorkerOptions};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;

use super::apalis::connect_options;
use super::process::{Life, Process};
use super::{Side, finish, gate, short, started, unique};
use crate::libraries::QueueRun;
use crate::{ConnectSpec, DriverError};

/// The job: its handler passes the call's gate (see [`gate`]).
#[derive(Serialize, Deserialize)]
struct Job {
    gate: String,
}

impl TaskHandler for Job {
    const IDENTIFIER: &'static str = "locklab_job";

    async fn run(self, _ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        gate::pass(&self.gate).await;
    }
}

/// A worker process adds one job with a `job_key` and runs the queue
/// once (`run_once`); the job waits at its gate while the server's
/// advisory locks are counted; then the process ends as `run` says. E.g.
/// `worker: running; advisory locks while the job runs: 0; worker: done;
/// advisory locks left: 0; the job ran 1×`.
pub(super) async fn worker(spec: &ConnectSpec, run: &QueueRun, side: &Side) -> Result<String, DriverError> {
    let token = unique("locklab-job");
    let mut g = gate::open(&token);
    let job_started = g.started();
    let spec2 = spec.clone();
    let mut p = Process::spawn(move |mut life: Life| async move {
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_lazy_with(connect_options(&spec2, "locklab-worker"));
        let worker = match WorkerOptions::default()
            .pg_pool(pool.clone())
            .schema("locklab_graphile_worker")
            .concurrency(1)
            .define_job::<Job>()
            .listen_os_shutdown_signals(false)
            .init()
            .await
        {
            Ok(w) => w,
            Err(e) => return format!("failed ({})", short(e)),
        };
        let spec = JobSpec::builder().job_key(&token).build();
        if let Err(e) = worker.create_utils().add_job(Job { gate: token.clone() }, spec).await {
            return format!("failed ({})", short(e));
        }
        let work = worker.run_once();
        tokio::pin!(work);
        tokio::select! {
            r = &mut work => return match r {
                Ok(()) => "done before it was seen running".into(),
                Err(e) => format!("failed ({})", short(e)),
            },
            () = job_started => life.started("running"),
        }
        let _ = (&mut life.stop).await;
        let word = match work.await {
            Ok(()) => "done".into(),
            Err(e) => format!("failed ({})", short(e)),
        };
        pool.close().await;
        word
    });
    let mut words = vec![format!("worker: {}", started(&mut p).await)];
    words.push(format!("advisory locks while the job runs: {}", side.held().await?));
    words.push(format!("worker: {}", finish(&mut p, &mut g, run).await));
    words.push(format!("advisory locks left: {}", side.held_settled(0).await?));
    words.push(format!("the job ran {}×", g.runs()));
    Ok(words.join("; "))
}
