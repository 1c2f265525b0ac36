//! Lock libraries and a migration runner, as application code calls them:
//! `distributed-lock-postgres` (its session-level and its transaction-level
//! mode), `prax-sqlx`'s `AdvisoryLock`, and sqlx's migrator
//! (`sqlx::migrate::Migrator`). All three take a sqlx 0.8 `PgPool`, so they
//! run on the sqlx 0.8 columns (on the column's own pool) and behind every
//! pooler (on a sqlx 0.8 pool of the scenario's size pointed at the pooler);
//! elsewhere a `library` step records `n/a`. A scenario's `library` step
//! reaches them through [`crate::Pool::library`].
//!
//! What each call sends, from the crates' source:
//! - `distributed-lock-postgres` 0.2.0 `src/lock.rs` (`acquire_internal`):
//!   one pooled connection; `BEGIN`, `SAVEPOINT`, `SET LOCAL lock_timeout`,
//!   `SELECT pg_advisory_lock(key)` (`pg_advisory_xact_lock` in the
//!   transaction-level mode), then `COMMIT` in the session-level mode; the
//!   handle keeps the connection. `src/handle.rs`: `release()` runs
//!   `pg_advisory_unlock` (session) or `ROLLBACK` (transaction) on it and
//!   ignores the result; dropping the handle returns the connection to the
//!   pool as it is.
//! - `prax-sqlx` 0.12.5 `src/postgres.rs` (`AdvisoryLock`): `acquire(pool,
//!   key)`, `try_acquire` and `release(pool, key)` each run one statement on
//!   `&PgPool`, so each takes whichever connection the pool hands out;
//!   `release` discards `pg_advisory_unlock`'s result.
//! - sqlx-core 0.8 `src/migrate/migrator.rs` (`Migrator::run`) with
//!   sqlx-postgres 0.8 `src/migrate.rs` (`lock`, `unlock`): one connection;
//!   `SELECT pg_advisory_lock($1)` with a key derived from the database's
//!   name, each migration in a transaction, then `SELECT
//!   pg_advisory_unlock($1)`, whose result is discarded.

//!
//! Job queues through their own crates (underway on sqlx 0.8,
//! apalis-postgres and graphile_worker on sqlx 0.9) run as processes of
//! their own: see `queues/mod.rs`. They run on the columns of their sqlx
//! line and behind every pooler ([`Library::applies_to`]).
//!
//! The calls live in `on_sqlx08.rs` and `queues/` (feature `columns`); without that
//! feature (the kit `locklab try` builds a driver from) no pool has them
//! and [`LibraryPool`] is a stand-in that has none.

#[cfg(feature = "columns")]
mod on_sqlx08;
#[cfg(feature = "columns")]
mod queues;
#[cfg(feature = "columns")]
mod sqlx08_conn;

#[cfg(feature = "columns")]
pub use on_sqlx08::LibraryPool;
#[cfg(feature = "columns")]
pub(crate) use on_sqlx08::{on_sqlx08, on_sqlx09};

use crate::ConnectSpec;

/// The lock crate's name: the `crate_name` of its columns.
pub const LOCK_CRATE: &str = "pg-advisory-lock";
#[cfg(not(feature = "columns"))]
use crate::{DriverError, PoolOptions};

/// A lock library or migration runner a scenario's `library:` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Library {
    /// `distributed-lock-postgres` 0.2 with `use_transaction(false)`: a
    /// session-level advisory lock held on the handle's pooled connection.
    DistributedLockPostgres,
    /// `distributed-lock-postgres` 0.2 with `use_transaction(true)`: a
    /// transaction-level advisory lock inside a transaction the handle keeps open.
    DistributedLockPostgresXact,
    /// `prax-sqlx` 0.12 `AdvisoryLock`: every call on `&PgPool`.
    PraxSqlx,
    /// sqlx 0.8's migrator (`Migrator::run` on a pool).
    SqlxMigrator,
    /// underway 0.2's worker (`Worker::process_next_task`), a job queue on sqlx 0.8.
    UnderwayWorker,
    /// underway 0.2's scheduler (`Scheduler::run`), a job queue on sqlx 0.8.
    UnderwayScheduler,
    /// apalis-postgres 1.0's worker registration, a job queue on sqlx 0.9.
    ApalisPostgres,
    /// graphile_worker 0.14's worker (`add_job` with a `job_key`, `run_once`), a job queue on sqlx 0.9.
    GraphileWorker,
    /// Rails' migrator (ActiveRecord's `Migrator` with `with_advisory_lock`),
    /// run by the activerecord column's adapter (the driver protocol's
    /// `library` request) in processes of its own.
    RailsMigrator,
    /// This workspace's lock crate, `pg-advisory-lock`: its session-level
    /// guard (`SessionLock::acquire_with`, with the bound `wait_ms`), on a
    /// connection of the column it wraps; `release` is
    /// `SessionLock::release`, `drop_handle` drops the guard. It runs on
    /// the crate's own columns (`crate::lock_crate`).
    PgAdvisoryLock,
    /// The lock crate's transaction-level lock (`lock_xact`) in a
    /// transaction the step opens on a connection of the wrapped column;
    /// `release` commits it, `drop_handle` rolls it back (what
    /// tokio-postgres' and sqlx's `Transaction` do when dropped).
    PgAdvisoryLockXact,
}

impl Library {
    /// The name a scenario uses, e.g. `prax-sqlx`.
    pub fn as_str(self) -> &'static str {
        match self {
            Library::DistributedLockPostgres => "distributed-lock-postgres",
            Library::DistributedLockPostgresXact => "distributed-lock-postgres-xact",
            Library::PraxSqlx => "prax-sqlx",
            Library::SqlxMigrator => "sqlx-migrator",
            Library::UnderwayWorker => "underway-worker",
            Library::UnderwayScheduler => "underway-scheduler",
            Library::ApalisPostgres => "apalis-postgres",
            Library::GraphileWorker => "graphile-worker",
            Library::RailsMigrator => "rails-migrator",
            Library::PgAdvisoryLock => "pg-advisory-lock",
            Library::PgAdvisoryLockXact => "pg-advisory-lock-xact",
        }
    }

    /// Whether it is a migration runner (a `library` step with `migrate:`).
    pub fn is_migrator(self) -> bool {
        matches!(self, Library::SqlxMigrator | Library::RailsMigrator)
    }

    /// Whether it is a job queue (a `library` step with `queue:`).
    pub fn is_queue(self) -> bool {
        matches!(
            self,
            Library::UnderwayWorker | Library::UnderwayScheduler | Library::ApalisPostgres | Library::GraphileWorker
        )
    }

    /// Whether it is this workspace's lock crate (either of its calls).
    pub fn is_lock_crate(self) -> bool {
        matches!(self, Library::PgAdvisoryLock | Library::PgAdvisoryLockXact)
    }

    /// The sqlx release line whose `PgPool` it takes: `0.8` or `0.9`.
    pub fn sqlx_line(self) -> &'static str {
        match self {
            Library::ApalisPostgres | Library::GraphileWorker => "0.9",
            _ => "0.8",
        }
    }

    /// Whether it runs through the column `info`: a sqlx pool of its line
    /// (the column's own, or for a job queue its processes' pools on the
    /// column's server), or a pooler (a pool of its line through it).
    /// Elsewhere a cell with its `library` step is `n/a`
    /// ([`Library::not_applicable`]), and so it is on a column `locklab try`
    /// built ([`crate::kit::TRIED`] in its id): its pool lives in a program
    /// of its own, out of the libraries' reach.
    pub fn applies_to(self, info: &crate::DriverInfo) -> bool {
        if self.is_lock_crate() || info.crate_name == LOCK_CRATE {
            return self.is_lock_crate() && info.crate_name == LOCK_CRATE;
        }
        if self == Library::RailsMigrator {
            return info.crate_name == "activerecord" && info.pooler.is_none();
        }
        info.pooler.is_some()
            || (info.crate_name == "sqlx"
                && info.crate_version.starts_with(self.sqlx_line())
                && !info.id.contains(crate::kit::TRIED))
    }

    /// Why a cell with its `library` step does not run through a column it
    /// does not apply to ([`Library::applies_to`]).
    pub fn not_applicable(self) -> String {
        if self.is_lock_crate() {
            return format!(
                "{} is the lock crate's call: it runs on the crate's own columns ({LOCK_CRATE}+…), each over one of locklab's pools",
                self.as_str()
            );
        }
        if self == Library::RailsMigrator {
            return "rails-migrator is Rails' own migrator: it runs through the activerecord column's adapter".into();
        }
        format!(
            "{} takes a sqlx {} PgPool: it runs on the sqlx {} columns and behind the poolers",
            self.as_str(),
            self.sqlx_line(),
            self.sqlx_line()
        )
    }
}

/// What a `library` step asks the library to do. A key is an i64 (a
/// `distributed-lock-postgres` lock is named by the key's 16 hex digits,
/// which that crate parses back to the same key: `src/key.rs`, `from_name`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LibraryCall {
    /// Take the lock, waiting at most `timeout_ms` (ms; `None`: as long as
    /// it takes) where the library has a bound (`distributed-lock-postgres`
    /// sets `lock_timeout`); `prax-sqlx` has none.
    Acquire {
        /// The key.
        key: i64,
        /// The library's own bound, in ms.
        timeout_ms: Option<u64>,
    },
    /// Take the lock if it is free, without waiting.
    TryAcquire {
        /// The key.
        key: i64,
    },
    /// Release it as the library releases it.
    Release {
        /// The key.
        key: i64,
    },
    /// Drop the library's handle without releasing (a `distributed-lock-postgres`
    /// handle going out of scope); `prax-sqlx` has no handle.
    DropHandle {
        /// The key.
        key: i64,
    },
    /// Run sqlx's migrator from several processes at once.
    Migrate(MigrateRun),
    /// Run a job queue's story (see `queues/mod.rs`).
    Queue(QueueRun),
}

/// A `queue:` step's run: how its process whose lock is in question ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueRun {
    /// Its own shutdown, or killed.
    pub end: QueueEnd,
}

/// How a job queue's process ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum QueueEnd {
    /// The queue's own shutdown: its job let finish, its scheduler's token
    /// cancelled, its worker stopped.
    Stop,
    /// Killed: its runtime dropped with everything in flight (its sockets
    /// closed with no Terminate and no `ROLLBACK`, as a killed process's).
    Kill,
}

/// A `call: migrate` step: `runners` migrators, each with a pool of one
/// connection of its own (as separate processes have), run the same single
/// migration, which takes `migration_ms` (a `pg_sleep`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrateRun {
    /// How many migrators (≥ 1).
    pub runners: u32,
    /// How long the migration runs, in ms.
    pub migration_ms: u64,
    /// Kill the first migrator while its migration runs, before the others
    /// start: its runtime is dropped with the migration in flight, so its
    /// sockets close with no Terminate message and no `ROLLBACK`, as the
    /// kernel closes a killed process's.
    pub kill_first: bool,
    /// Each migrator gives up (its future dropped) after this many ms.
    pub give_up_ms: u64,
}

/// No libraries on this pool: for a sqlx pool of another version than
/// 0.8 (the libraries take a sqlx 0.8 `PgPool`), of any type `P`.
pub fn none<P>(_: &P, _: &ConnectSpec) -> Option<LibraryPool> {
    None
}

/// Without the `columns` feature: no library, ever (a pool of a driver
/// built by `locklab try` answers every `library` step `n/a`).
#[cfg(not(feature = "columns"))]
pub enum LibraryPool {}

#[cfg(not(feature = "columns"))]
impl LibraryPool {
    /// Never made: see [`LibraryPool`].
    pub fn connecting(_: &ConnectSpec, _: PoolOptions) -> Option<LibraryPool> {
        None
    }

    /// Never called: there is no value.
    pub async fn call(&self, _: Library, _: &LibraryCall) -> Result<String, DriverError> {
        match *self {}
    }

    /// Never called: there is no value.
    pub async fn close(&self, _: bool) {
        match *self {}
    }
}
