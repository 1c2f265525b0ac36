//! `library: NAME`: calls a lock library (`call` on `key`) or the sqlx
//! migrator (`migrate`) on the pool under test (sqlx 0.8 columns) or on a
//! sqlx 0.8 pool through the column's pooler; elsewhere the step records
//! `n/a`.

use std::time::{Duration, Instant};

use locklab_drivers::libraries::{Library, LibraryCall, MigrateRun, QueueRun};
use locklab_drivers::{Conn, DirectConn, DriverError, Pool};
use schemars::JsonSchema;
use serde::Deserialize;

use super::context::StepCx;
use super::declaration::{BASE, Connection, Declaration, Side};
use super::statement::late;
use super::{Checking, Kind, RawStep, Step};
use crate::keys::AdvisoryKey;
use crate::outcome::Value;
use crate::scenario::steps::error::StepResult;
use crate::scenario::validate::validator::Validator;
use crate::scenario::{Actor, Pos};

macro_rules! raw_fields {
    ($next:ident [$($f:tt)*] $($rest:tt)*) => {
        $next! { @collect [$($f)*
            /// Call a lock library or the sqlx migrator on the pool under test (sqlx
            /// 0.8 columns) or on a sqlx 0.8 pool through the column's pooler;
            /// elsewhere the step records `n/a`. With `call` and `key`, or (for
            /// `sqlx-migrator`) `migrate`.
            #[serde(default)]
            #[schemars(with = "Option<crate::scenario::raw::step::OrParam<locklab_drivers::libraries::Library>>")]
            pub(crate) library: Option<locklab_drivers::libraries::Library>,
            /// For `library`: `acquire`, `try_acquire`, `release` or `drop_handle` on `key`.
            #[serde(default)]
            #[schemars(with = "Option<crate::scenario::raw::step::OrParam<crate::scenario::steps::library::LibraryCallRaw>>")]
            pub(crate) call: Option<$crate::scenario::steps::library::LibraryCallRaw>,
            /// For `library: sqlx-migrator`: the migrators to run.
            #[serde(default)]
            pub(crate) migrate: Option<$crate::scenario::steps::library::MigrateRaw>,
            /// For a job queue (`underway-worker`, `underway-scheduler`,
            /// `apalis-postgres`, `graphile-worker`): its story's run.
            #[serde(default)]
            pub(crate) queue: Option<$crate::scenario::steps::library::QueueRaw>,
            /// For `call: acquire` of the lock crate (`pg-advisory-lock`,
            /// `pg-advisory-lock-xact`): its own bound, in ms (`Wait::Within`,
            /// a `lock_timeout` for the wait alone; default 30000).
            #[serde(default)]
            #[schemars(with = "Option<crate::scenario::raw::step::OrParam<u64>>", range(min = 1, max = 600000))]
            pub(crate) wait_ms: Option<u64>,
        ] $($rest)* }
    };
}
pub(crate) use raw_fields;

/// What a `library` step asks of a lock library (`call:`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LibraryCallRaw {
    /// Take the lock on `key`, waiting as long as it takes.
    Acquire,
    /// Take it if it is free.
    TryAcquire,
    /// Release it as the library does.
    Release,
    /// Drop the library's handle without releasing.
    DropHandle,
}

/// A `library: sqlx-migrator` step's run (`migrate:`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MigrateRaw {
    /// How many migrators run at once (1–8), each with a pool of its own.
    #[schemars(range(min = 1, max = 8))]
    pub runners: u32,
    /// How long the migration runs, in ms (a `pg_sleep`).
    #[schemars(range(min = 0, max = 60000))]
    pub migration_ms: u64,
    /// Kill the first migrator while its migration runs, before the others start.
    #[serde(default)]
    #[schemars(with = "Option<crate::scenario::raw::step::OrParam<bool>>")]
    pub kill_first: bool,
    /// Each migrator gives up after this many ms (its future dropped, the
    /// process gone); below the step's deadline.
    #[schemars(range(min = 1, max = 600000))]
    pub give_up_ms: u64,
}

/// A job queue's run (`queue:`): its processes, each with a pool of its own,
/// as `docs/src/lock-libraries.md` ("Job queues") tells.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueRaw {
    /// How the process whose lock is in question ends: `stop` (the queue's
    /// own shutdown) or `kill` (its runtime dropped, its sockets closed).
    #[schemars(with = "crate::scenario::raw::step::OrParam<locklab_drivers::libraries::QueueEnd>")]
    pub end: locklab_drivers::libraries::QueueEnd,
}

/// A `library` step: a lock library's or the sqlx migrator's call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryStep {
    /// Actor index (a pool actor; the library uses the actor's pool, not a
    /// checked-out connection).
    pub actor: usize,
    /// Which library.
    pub library: Library,
    /// What it is asked to do.
    pub call: LibraryCall,
    /// Give up on the call after this many ms: its future is dropped (the
    /// lock crate's steps only), and `dropped at N ms` recorded.
    pub client_timeout_ms: Option<u64>,
}

impl Kind for LibraryStep {
    const KEY: &'static str = "library";
    const FORMS: &'static [Declaration] = &[Declaration {
        word: "library",
        side: Side::Pool(
            "'library' calls a lock library on the pool under test, so it runs on a pool actor, not on direct actor '{actor}'",
        ),
        key: true,
        bounded: true,
        connection: Connection::Nothing,
        ..BASE
    }];

    fn has_key(raw: &RawStep) -> bool {
        raw.library.is_some()
    }

    fn stray(raw: &RawStep, v: &mut Validator<'_>, n: usize, pos: Pos) {
        if raw.call.is_some() || raw.migrate.is_some() || raw.queue.is_some() || raw.wait_ms.is_some() {
            v.err(pos, format!("step {n}: 'call', 'migrate', 'queue' and 'wait_ms' only apply to 'library' steps"));
        }
    }

    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        let library = raw.library?;
        // (The step's deadline: its own, or the scenario's.)
        let deadline_ms = raw
            .deadline_ms
            .as_ref()
            .and_then(|d| u64::try_from(d.value).ok())
            .unwrap_or(cx.walk.step_deadline);
        let call = call(cx.v, cx.n, cx.pos, raw, library, deadline_ms)?;
        let client_timeout_ms = cx.bound.map(|b| b.ms);
        if client_timeout_ms.is_some() && !library.is_lock_crate() {
            cx.v.err(
                cx.pos,
                format!("step {}: 'client_timeout_ms' on a 'library' step goes with the lock crate (pg-advisory-lock, pg-advisory-lock-xact): its future is dropped then", cx.n),
            );
        }
        Some(LibraryStep {
            actor: cx.actor,
            library,
            call,
            client_timeout_ms,
        })
    }

    fn actor(&self) -> Option<usize> {
        Some(self.actor)
    }

    fn describe(&self, _: &[Actor], _: &[Step]) -> String {
        format!("library {}: {:?}", self.library.as_str(), self.call).to_lowercase()
    }

    /// Runs the call within the step's deadline and records what the
    /// library reported (`acquired`, `released`, …), the error it returned,
    /// or `n/a (why)`. The backends of the run's database no actor has had
    /// are then the library's: a lock snapshot names them after the step's
    /// actor (as a checkout's `select pg_backend_pid()` names an actor's).
    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, pool: &dyn Pool, monitor: &mut DirectConn) -> StepResult {
        let deadline = Duration::from_millis(step.deadline_ms);
        let t0 = Instant::now();
        let bound = self.client_timeout_ms.map_or(deadline, Duration::from_millis);
        let r = match tokio::time::timeout(bound, pool.library(self.library, &self.call)).await {
            Ok(r) => r,
            Err(_) => match self.client_timeout_ms {
                Some(ms) => {
                    cx.name_library_backends(self.actor, monitor).await;
                    let value = Value::Dropped {
                        at_ms: ms,
                        cancel: crate::outcome::Cancel::None,
                    };
                    cx.record_note(step, value, Some(t0.elapsed()));
                    return Ok(());
                }
                None => return Err(late(step, "the library call did not return")),
            },
        };
        let took = t0.elapsed();
        cx.name_library_backends(self.actor, monitor).await;
        let value = match r {
            Ok(text) => Value::Text(text),
            Err(DriverError::Unsupported(why)) => {
                cx.record_note(step, Value::Unsupported(why), None);
                return Ok(());
            }
            Err(e) => Value::of_driver_error(&e),
        };
        cx.record_note(step, value, Some(took));
        Ok(())
    }
}

/// A `library` step's call: `call` with a bigint `key` for a lock
/// library, `migrate` for `sqlx-migrator` (its `give_up_ms` below the
/// step's deadline, `deadline_ms`).
fn call(
v: &mut Validator<'_>,
n: usize,
pos: Pos,
s: &RawStep,
library: Library,
deadline_ms: u64,
) -> Option<LibraryCall> {
    if library.is_migrator() {
        let name = library.as_str();
        let Some(m) = s.migrate else {
            v.err(
                pos,
                format!("step {n}: 'library: {name}' needs 'migrate: {{ runners, migration_ms, give_up_ms }}'"),
            );
            return None;
        };
        if s.call.is_some() || s.key.is_some() {
            v.err(
                pos,
                format!("step {n}: 'library: {name}' takes 'migrate', not 'call' or 'key'"),
            );
        }
        if !(1..=8).contains(&m.runners) {
            v.err(
                pos,
                format!("step {n}: 'migrate.runners' must be between 1 and 8, got {}", m.runners),
            );
        }
        if m.kill_first && m.runners < 2 {
            v.err(pos, format!("step {n}: 'migrate.kill_first' needs at least 2 runners (the first is killed, the others run after)"));
        }
        if m.give_up_ms == 0 || m.give_up_ms >= deadline_ms {
            v.err(pos, format!("step {n}: 'migrate.give_up_ms' must be between 1 and the step's deadline ({deadline_ms} ms) minus 1, got {}", m.give_up_ms));
        }
        if m.migration_ms > 60_000 {
            v.err(
                pos,
                format!(
                    "step {n}: 'migrate.migration_ms' must be at most 60000, got {}",
                    m.migration_ms
                ),
            );
        }
        return Some(LibraryCall::Migrate(MigrateRun {
            runners: m.runners,
            migration_ms: m.migration_ms,
            kill_first: m.kill_first,
            give_up_ms: m.give_up_ms,
        }));
    }
    if s.migrate.is_some() {
        v.err(
            pos,
            format!("step {n}: 'migrate' goes with 'library: sqlx-migrator' or 'library: rails-migrator' only"),
        );
    }
    if library.is_queue() {
        let Some(q) = s.queue else {
            v.err(
                pos,
                format!("step {n}: 'library: {}' is a job queue: it needs 'queue: {{ end: stop | kill }}'", library.as_str()),
            );
            return None;
        };
        if s.call.is_some() || s.key.is_some() {
            v.err(
                pos,
                format!("step {n}: 'library: {}' takes 'queue', not 'call' or 'key'", library.as_str()),
            );
        }
        return Some(LibraryCall::Queue(QueueRun { end: q.end }));
    }
    if s.queue.is_some() {
        v.err(
            pos,
            format!("step {n}: 'queue' goes with a job queue's 'library' only (underway-worker, underway-scheduler, apalis-postgres, graphile-worker)"),
        );
    }
    let Some(call) = s.call else {
        v.err(
            pos,
            format!(
                "step {n}: 'library: {}' needs 'call: acquire | try_acquire | release | drop_handle'",
                library.as_str()
            ),
        );
        return None;
    };
    let key = match s.key {
        Some(AdvisoryKey::Big(k)) => k,
        Some(AdvisoryKey::Pair(..)) => {
            v.err(
                pos,
                format!("step {n}: a lock library's 'key' is one bigint, not two integers"),
            );
            return None;
        }
        None => {
            v.err(
                pos,
                format!("step {n}: 'library: {}' needs a bigint 'key'", library.as_str()),
            );
            return None;
        }
    };
    if s.wait_ms.is_some() && !(library.is_lock_crate() && call == LibraryCallRaw::Acquire) {
        v.err(
            pos,
            format!("step {n}: 'wait_ms' goes with 'call: acquire' of the lock crate (pg-advisory-lock, pg-advisory-lock-xact)"),
        );
    }
    if s.wait_ms == Some(0) {
        v.err(pos, format!("step {n}: 'wait_ms' must be at least 1"));
    }
    Some(match call {
        LibraryCallRaw::Acquire => LibraryCall::Acquire { key, timeout_ms: s.wait_ms },
        LibraryCallRaw::TryAcquire => LibraryCall::TryAcquire { key },
        LibraryCallRaw::Release => LibraryCall::Release { key },
        LibraryCallRaw::DropHandle => LibraryCall::DropHandle { key },
    })
}

impl StepCx<'_> {
    /// Names the backends of the run's database that no actor has had
    /// after `actor` (a library's pooled connections, which no checkout
    /// of the harness's saw). A failed query leaves them unnamed.
    async fn name_library_backends(&mut self, actor: usize, monitor: &mut DirectConn) {
        let sql = "select pid from pg_stat_activity where datname = current_database() \
                   and backend_type = 'client backend' and pid <> pg_backend_pid()";
        let Ok(rows) = monitor.simple_query(sql).await else {
            return;
        };
        let known: std::collections::HashSet<i32> = self.pids.values().copied().collect();
        for pid in rows
            .rows
            .iter()
            .filter_map(|r| r.first()?.as_deref()?.parse::<i32>().ok())
        {
            if !known.contains(&pid) && !self.last_user.contains_key(&pid) {
                self.last_user.insert(pid, actor);
            }
        }
    }
}
