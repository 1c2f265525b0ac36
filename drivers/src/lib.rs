//! Pool implementations under test, each behind one [`Driver`] trait.
//!
//! A driver turns a [`ConnectSpec`] into a [`Pool`]; a pool hands out [`Conn`]s
//! (a *checkout*); giving a [`Conn`] back ([`Conn::give_back`]) is a *return*
//! with no cleanup of our own, exactly what application code does when it drops
//! a pooled connection. Whatever the pool does on return or on the next checkout
//! (reset, recycle, nothing) is the behaviour locklab measures.
//!
//! Adding a driver: write one module with a type implementing [`Driver`] and add
//! one line to [`registry`].

#![deny(missing_docs)]

mod bb8_pg;
mod deadpool_pg;
mod diesel_async_pg;
mod direct;
pub mod external;
#[doc(hidden)]
pub mod kit;
pub mod libraries;
#[cfg(feature = "columns")]
pub mod lock_crate;
mod mobc_pg;
mod poolers;
mod r2d2_pg;
mod sqlx_pg;
pub mod try_kit;
mod versions;

use std::fmt;
use std::path::Path;
use std::time::Duration;

/// bb8 with bb8-postgres as a column, with [`Bb8Postgres::configured`] for a
/// configuration of your own.
#[cfg(feature = "columns")]
pub use bb8_pg::Bb8Postgres;
/// deadpool-postgres 0.14 as a column, with [`Deadpool::configured`] for a
/// pool built as yours is.
pub use deadpool_pg::Deadpool;
/// diesel-async's deadpool pool as a column, with
/// [`DieselAsyncDeadpool::configured`] for a `ManagerConfig` of your own.
#[cfg(feature = "columns")]
pub use diesel_async_pg::DieselAsyncDeadpool;
pub use direct::{
    BeforeReturn, CLOSE_WAIT, CONNECT_TIMEOUT, DirectConn, TokioPostgresFactory, extended_query_rows, simple_query_rows,
};
pub use locklab_core::{ConnectSpec, with_sources};
/// mobc with mobc-postgres as a column, with [`MobcPostgres::configured`].
#[cfg(feature = "columns")]
pub use mobc_pg::MobcPostgres;
pub use poolers::{
    CancelRequests, CheckIn, Column as PoolerColumn, Facts as PoolerFacts, Modelled, Pooled as PooledPoolerColumn,
    Pooler, PoolerKind, PoolerMode, models_of,
};
/// r2d2 with r2d2_postgres as a column, with [`R2d2Postgres::configured`].
#[cfg(feature = "columns")]
pub use r2d2_pg::R2d2Postgres;
/// sqlx 0.8's `PgPool` as a column (the crate renamed `sqlx08` here), as [`SqlxPgPool`].
#[cfg(feature = "columns")]
pub use sqlx_pg::v08::SqlxPgPool as Sqlx08PgPool;
/// sqlx 0.9's `PgPool` as a column, with [`SqlxPgPool::configured`] for a
/// configuration of your own (a project testing its own pool settings).
#[cfg(feature = "columns")]
pub use sqlx_pg::v09::SqlxPgPool;
pub use versions::{crate_version, crate_version_matching, use_lockfile};

/// Pool sizing requested by a scenario.
#[derive(Clone, Copy, Debug)]
pub struct PoolOptions {
    /// Maximum number of connections the pool may open (≥ 1).
    pub max_size: u32,
    /// How long a checkout may wait for a free connection before failing.
    pub checkout_timeout: Duration,
}

/// Whether a driver pools connections or opens one per checkout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverKind {
    /// Every checkout opens a new connection and every return closes it (the baseline).
    Direct,
    /// Checkouts are served from a pool and returns give the connection back to it.
    Pooled,
}

impl DriverKind {
    /// `"direct"` or `"pooled"`.
    pub fn as_str(self) -> &'static str {
        match self {
            DriverKind::Direct => "direct",
            DriverKind::Pooled => "pooled",
        }
    }
}

/// What the report says about a driver configuration.
#[derive(Clone, Debug)]
pub struct DriverInfo {
    /// Stable identifier used on the command line and as the report column, e.g. `deadpool-clean`.
    pub id: &'static str,
    /// The crate under test, e.g. `deadpool-postgres`.
    pub crate_name: &'static str,
    /// Exact version of that crate resolved in the workspace `Cargo.lock`.
    pub crate_version: String,
    /// The configuration this column uses, in the crate's own terms,
    /// e.g. `RecyclingMethod::Clean`.
    pub configuration: &'static str,
    /// Direct or pooled.
    pub kind: DriverKind,
    /// The pooler and mode this configuration connects through, if any: the
    /// harness starts that pooler in front of the server and points the
    /// driver's [`ConnectSpec`] at it.
    pub pooler: Option<Pooler>,
    /// Whether the column's pooled connections hand the server's notices to
    /// their caller ([`Rows::notices`]); a scenario that expects notices on a
    /// pool actor is `n/a` on a column whose library does not.
    pub notices: Notices,
}

/// Whether a client library hands the server's notices (`WARNING`, `NOTICE`:
/// PostgreSQL protocol, NoticeResponse) to the code that ran the statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notices {
    /// They are in [`Rows::notices`] of the statement that drew them.
    PassedOn,
    /// The library keeps them from its callers (it logs or drops them):
    /// where, with the source, as a sentence.
    NotPassedOn(&'static str),
}

impl Notices {
    /// Why not, if the notices are not passed on.
    pub fn not_passed_on(self) -> Option<&'static str> {
        match self {
            Notices::PassedOn => None,
            Notices::NotPassedOn(why) => Some(why),
        }
    }
}

/// Why a pool built on tokio-postgres (deadpool-postgres, bb8-postgres,
/// mobc-postgres) passes no notices on: its manager spawns the
/// `Connection` future, which logs each notice at `info` and drops it
/// (tokio-postgres `src/connection.rs`, `impl Future for Connection`).
pub const TOKIO_POSTGRES_SPAWNED: &str = "the pool's manager spawns tokio-postgres' Connection future, which logs notices and drops them \
     (tokio-postgres src/connection.rs)";

impl DriverInfo {
    /// The mode of the pooler this configuration goes through, if any.
    pub fn pooler_mode(&self) -> Option<PoolerMode> {
        self.pooler.map(|p| p.mode)
    }
}

/// A server-side error: SQLSTATE and message as PostgreSQL sent them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbError {
    /// Five-character SQLSTATE, e.g. `55P03` (lock_not_available); empty when
    /// the driver does not pass it on (diesel-async for most codes).
    pub sqlstate: String,
    /// The server's primary message.
    pub message: String,
}

/// Why a driver operation failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum DriverError {
    /// PostgreSQL answered with an error.
    #[error("server error {}: {}", .0.sqlstate, .0.message)]
    Db(DbError),
    /// The client library failed without a server error (I/O, closed connection,
    /// pool timeout, protocol error).
    #[error("{0}")]
    Client(String),
    /// The driver has no API for what was asked (e.g. no cancel request, no
    /// advisory-lock guard); the text says what is missing.
    #[error("not supported: {0}")]
    Unsupported(String),
}

impl DriverError {
    /// The SQLSTATE, when the server sent one and the driver passed it on
    /// (a [`DriverError::Db`] with an empty `sqlstate` gives `None`).
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            DriverError::Db(e) => Some(e.sqlstate.as_str()).filter(|c| !c.is_empty()),
            DriverError::Client(_) | DriverError::Unsupported(_) => None,
        }
    }
}

impl From<tokio_postgres::Error> for DriverError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            Some(db) => DriverError::Db(DbError {
                sqlstate: db.code().code().to_owned(),
                message: db.message().to_owned(),
            }),
            None => DriverError::Client(with_sources(&e)),
        }
    }
}

/// Rows returned by a statement, every value in PostgreSQL's text format
/// (`t`/`f` for booleans, decimal for numbers), `None` for NULL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rows {
    /// Column names of the last result set that had columns.
    pub columns: Vec<String>,
    /// Data rows of every statement in the string, in order.
    pub rows: Vec<Vec<Option<String>>>,
    /// Server notices received while the statement ran, as `SEVERITY: message`
    /// (e.g. `WARNING: you don't own a lock of type ExclusiveLock`), where the
    /// library passes them on ([`DriverInfo::notices`]); empty otherwise.
    pub notices: Vec<String>,
}

impl Rows {
    /// First column of the first row: `None` when there is no row,
    /// `Some(None)` for SQL NULL.
    pub fn first_value(&self) -> Option<Option<&str>> {
        self.rows.first().map(|r| r.first().and_then(|v| v.as_deref()))
    }
}

/// What happened to a connection on [`Conn::give_back`] (on the driver
/// protocol's wire: `to_pool`, `closed`, `to_pooler`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Returned {
    /// The connection went back to the pool (still open).
    ToPool,
    /// The connection was closed (direct driver, or a pool that discarded it).
    Closed,
    /// The client connection to a pooler was closed; its server connection
    /// went back to the pooler's pool (which, in session mode, resets it with
    /// `server_reset_query`, asynchronously).
    ToPooler,
}

/// A way to send a cancel request (PostgreSQL protocol §55.2.8 "Canceling
/// Requests in Progress": a new connection carrying the backend pid and secret
/// key) for the statement running on a connection, obtained before the
/// statement starts, as application code would (tokio-postgres
/// `Client::cancel_token`, postgres `Client::cancel_token`).
pub type Canceller = Box<dyn FnOnce() -> futures::future::BoxFuture<'static, Result<(), DriverError>> + Send>;

/// How a test of an advisory-lock guard API ends (sqlx `PgAdvisoryLockGuard`,
/// sqlx-postgres `src/advisory_lock.rs`); on the driver protocol's wire:
/// `release_now`, `drop`, `leak`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuardEnd {
    /// `release_now()`: runs `pg_advisory_unlock` and waits for it.
    ReleaseNow,
    /// The guard is dropped: sqlx queues `pg_advisory_unlock` to run the next
    /// time the connection is used.
    Drop,
    /// `leak()`: the lock stays held and the connection is handed back.
    Leak,
}

/// How a test of an advisory-lock guard API takes the lock (sqlx
/// `PgAdvisoryLock::acquire` or `try_acquire`, sqlx-postgres
/// `src/advisory_lock.rs`); on the driver protocol's wire: `wait`, `try`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuardAcquire {
    /// `acquire`: waits for the lock (`pg_advisory_lock`).
    #[default]
    Wait,
    /// `try_acquire`: takes the lock only if it is free
    /// (`pg_try_advisory_lock`), else hands the connection back.
    Try,
}

impl GuardAcquire {
    /// Whether it is [`GuardAcquire::Wait`] (the protocol leaves it out then).
    pub fn is_wait(&self) -> bool {
        *self == GuardAcquire::Wait
    }
}

/// Transaction control, for [`Conn::transaction`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxControl {
    /// `begin`.
    Begin,
    /// `commit`.
    Commit,
    /// `rollback`.
    Rollback,
}

impl TxControl {
    /// The statement: `begin`, `commit` or `rollback`.
    pub fn sql(self) -> &'static str {
        match self {
            TxControl::Begin => "begin",
            TxControl::Commit => "commit",
            TxControl::Rollback => "rollback",
        }
    }
}

/// A checked-out connection.
#[async_trait::async_trait]
pub trait Conn: Send {
    /// Runs `sql` with the simple query protocol (so it may hold several
    /// statements and transaction control) and returns its rows as text.
    /// Several statements are one implicit transaction, as PostgreSQL runs
    /// the statements of one Query message (PostgreSQL docs §55.2.2.1,
    /// "Multiple Statements in a Simple Query"); the rows of all of them
    /// come in order (diesel-async's `batch_execute` returns none).
    ///
    /// # Errors
    /// [`DriverError::Db`] with the SQLSTATE when the server rejects a statement,
    /// [`DriverError::Client`] when the connection fails.
    async fn simple_query(&mut self, sql: &str) -> Result<Rows, DriverError>;

    /// Runs `sql`, one statement, with the extended query protocol (Parse,
    /// Bind, Execute, Sync; PostgreSQL docs §55.2.3, "Extended Query") and
    /// `params` bound to `$1`, `$2`, …, and returns its rows as text (a
    /// `void` result as an empty text). A pooler sees a Parse message, not
    /// a Query: what a pooler that pins on lock calls must read too.
    ///
    /// # Errors
    /// As [`Conn::simple_query`]; [`DriverError::Unsupported`] (the
    /// default) for a client that sends the simple protocol only
    /// ([`Driver::extended_protocol`]).
    async fn extended_query(&mut self, sql: &str, params: &[Param]) -> Result<Rows, DriverError> {
        let _ = (sql, params);
        Err(DriverError::Unsupported(
            "the column's client sends statements with the simple query protocol only in locklab".into(),
        ))
    }

    /// [`Conn::simple_query`] with a client-side bound, given up the way the
    /// client's language gives up on a call: `None` once `bound` has
    /// elapsed. For Rust: the call's future is dropped
    /// (`tokio::time::timeout`); an out-of-process driver gives up inside
    /// its adapter (asyncio: the task is cancelled, as `asyncio.wait_for` does).
    async fn simple_query_within(&mut self, sql: &str, bound: Duration) -> Option<Result<Rows, DriverError>> {
        tokio::time::timeout(bound, self.simple_query(sql)).await.ok()
    }

    /// `begin`, `commit` or `rollback`, through the library's transaction
    /// API where it has one that fits (asyncpg's `Transaction`); as SQL
    /// through [`Conn::simple_query`] otherwise (every Rust driver).
    ///
    /// # Errors
    /// As [`Conn::simple_query`].
    async fn transaction(&mut self, action: TxControl) -> Result<Rows, DriverError> {
        self.simple_query(action.sql()).await
    }

    /// How long the last call on this connection took as the driver measured
    /// it, where that is closer to the library call than the harness's own
    /// clock (an out-of-process driver measures inside its adapter, so the
    /// protocol's round trip does not count as lock wait). `None`: the
    /// harness times the call itself.
    fn last_elapsed(&self) -> Option<Duration> {
        None
    }

    /// Gives the connection back: to its pool for a pooled driver, closing it for
    /// the direct driver. No cleanup is done by the harness; what the pool does is
    /// what is measured. Returns once the pool has taken the connection back
    /// (some pools finish a return in a background task: this waits for it).
    async fn give_back(self: Box<Self>) -> Returned;

    /// Gives the connection back the way application code does, by
    /// dropping it, without waiting for a return that the pool finishes in
    /// a task of its own (sqlx, mobc), so a load run does not count the
    /// harness's wait as the pool's cost. The matrix uses
    /// [`Conn::give_back`], whose wait makes the next step see the return
    /// done. Default: [`Conn::give_back`].
    async fn release(self: Box<Self>) {
        self.give_back().await;
    }

    /// [`Conn::give_back`] bounded by `bound` on the client side (as
    /// [`Conn::simple_query_within`]): `None` when it had not finished.
    async fn give_back_within(self: Box<Self>, bound: Duration) -> Option<Returned> {
        tokio::time::timeout(bound, self.give_back()).await.ok()
    }

    /// A cancel request for whatever statement runs on this connection later,
    /// or `None` when the driver offers no cancel API (sqlx) or locklab does
    /// not send one (through PgBouncer, see `pgbouncer.rs`).
    fn canceller(&self) -> Option<Canceller> {
        None
    }

    /// Why [`Conn::canceller`] gives `None`, for the report.
    fn no_cancel_reason(&self) -> &'static str {
        "the driver has no cancel API"
    }

    /// Takes the session-level advisory lock on `key` (i64) through the
    /// driver's own guard API, waiting for it or trying once as `acquire`
    /// says, then ends the guard as `end` says. Returns `true` once the
    /// guard is acquired and ended, `false` when a try found the lock taken
    /// (no guard was made).
    ///
    /// # Errors
    /// [`DriverError::Unsupported`] for drivers without such an API (all but
    /// sqlx); the server's or client's error otherwise.
    async fn advisory_lock_guard(
        &mut self,
        key: i64,
        acquire: GuardAcquire,
        end: GuardEnd,
    ) -> Result<bool, DriverError> {
        let _ = (key, acquire, end);
        Err(DriverError::Unsupported(
            "this driver has no advisory-lock guard API".into(),
        ))
    }
}

/// A pool (or, for the direct driver, a connection factory) for one scenario run.
#[async_trait::async_trait]
pub trait Pool: Send + Sync {
    /// Checks out a connection.
    ///
    /// # Errors
    /// [`DriverError`] when no connection can be had within
    /// [`PoolOptions::checkout_timeout`] or connecting fails.
    async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError>;

    /// [`Pool::checkout`] bounded by `bound` on the client side (as
    /// [`Conn::simple_query_within`]): `None` when it gave up.
    async fn checkout_within(&self, bound: Duration) -> Option<Result<Box<dyn Conn>, DriverError>> {
        tokio::time::timeout(bound, self.checkout()).await.ok()
    }

    /// What the driver is still waiting for, for the message of a step that
    /// missed its deadline (an out-of-process driver: the requests its
    /// adapter has not answered and the end of its stderr). `None`: nothing to add.
    fn stalled(&self) -> Option<String> {
        None
    }

    /// Waits, at most `within`, until what dropping a connection of this
    /// pool mid-call set going inside the driver has finished: an adapter's
    /// `abandon` (its language cancels the call and returns the connection,
    /// as leaving an `async with` block on cancellation does). A Rust drop
    /// finishes within the drop itself, so the default returns at once.
    async fn settle(&self, within: Duration) {
        let _ = within;
    }

    /// Kills the process the pool lives in with SIGKILL and returns once it
    /// has exited: a crashed application process, whose every connection
    /// the kernel closes (no Terminate message). Only a pool built by a
    /// driver from [`Driver::in_own_process`] has a process of its own.
    ///
    /// # Errors
    /// [`DriverError::Unsupported`] for a pool in the harness's process (the
    /// default); the signal or the wait failing otherwise.
    async fn crash(&self) -> Result<(), DriverError> {
        Err(DriverError::Unsupported(
            "the pool lives in the harness's own process".into(),
        ))
    }

    /// Runs a lock library's or migration runner's `call`
    /// ([`libraries`]) on this pool: on the column's own pool for sqlx 0.8,
    /// on a sqlx 0.8 pool pointed at the pooler behind a pooler.
    ///
    /// # Errors
    /// [`DriverError::Unsupported`] (the default) where the library does
    /// not apply: it takes a sqlx 0.8 `PgPool`; the library's or the
    /// server's error otherwise.
    async fn library(&self, library: libraries::Library, call: &libraries::LibraryCall) -> Result<String, DriverError> {
        let _ = call;
        Err(DriverError::Unsupported(format!(
            "{} takes a sqlx 0.8 PgPool",
            library.as_str()
        )))
    }

    /// Closes the pool and every idle connection in it.
    async fn close(&self);
}

/// A statement's parameter for [`Conn::extended_query`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Param {
    /// A `bigint` (`int8`).
    Int(i64),
    /// A `text`.
    Text(String),
}

/// One driver configuration: a column of the matrix.
#[async_trait::async_trait]
pub trait Driver: Send + Sync {
    /// Identity and version for the report.
    fn info(&self) -> DriverInfo;

    /// Builds a pool for `spec` sized by `opts`.
    ///
    /// # Errors
    /// [`DriverError`] when the pool cannot be built or its first connection fails.
    async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError>;

    /// What the column's client runs on a new connection before the
    /// caller's first statement, if anything, as a phrase with its source
    /// (e.g. a type map's `pg_type` queries): a race cell bounded by a pool
    /// `statement_timeout` is `n/a` on such a column, since that bound can
    /// cancel them before the race starts. The default: nothing (the Rust
    /// clients send none; an adapter's columns file declares its own,
    /// `queries_at_connect`).
    fn queries_at_connect(&self) -> Option<&str> {
        None
    }

    /// Why this column cannot send a statement with the extended query
    /// protocol ([`Conn::extended_query`]), if it cannot: a scenario step
    /// with `protocol: extended` is then `n/a` here with this reason. The
    /// default: it cannot (its connections send the simple query protocol
    /// only, [`Conn::simple_query`]).
    fn extended_protocol(&self) -> Result<(), &'static str> {
        Err("the column's client sends statements with the simple query protocol only in locklab")
    }

    /// Why this column cannot run on this machine, if it cannot: a
    /// toolchain its adapter needs is missing (the text names it and the
    /// command that installs it). Its cells are then `n/a` with this
    /// reason, not failed; under `CI` the run fails instead unless
    /// `LOCKLAB_ALLOW_MISSING` names the column (see the runner). `None`
    /// (the default): it can run.
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// Makes the column ready to run on this machine, once per process (an
    /// out-of-process column runs its `install`: a virtual environment, or
    /// Debian's packages fetched and built into `.cache/`), and says why it
    /// cannot run if it cannot: [`Driver::unavailable`], or an install that
    /// failed (no network, not root where it must be), named with its last
    /// line and the command that installs it. Its cells are then `n/a`, as
    /// for a missing toolchain. The default: [`Driver::unavailable`].
    async fn prepare(&self) -> Option<String> {
        self.unavailable()
    }

    /// This configuration with each pool in a process of its own, which
    /// [`Pool::crash`] can kill with SIGKILL. `host` is the program that
    /// serves a Rust driver over the driver protocol as `host pool-adapter
    /// ID` (the `locklab` binary; [`external::serve`]). The default hosts
    /// this driver there ([`external::ExternalDriver::hosting`]); an
    /// out-of-process driver starts an adapter per pool. `None`: not possible.
    ///
    /// A column behind a user's own pooler ([`PoolerKind::External`]) is
    /// not hosted: `locklab pool-adapter ID` knows locklab's own columns
    /// only, not those of a user's columns file.
    fn in_own_process(&self, host: &Path) -> Option<Box<dyn Driver>> {
        let info = self.info();
        if info.pooler.is_some_and(|p| p.kind == PoolerKind::External) {
            return None;
        }
        Some(Box::new(external::ExternalDriver::hosting(info, host)))
    }
}

/// Every driver configuration, in report column order: the Rust ones, then
/// the out-of-process ones declared in `drivers/adapters/adapters.yaml`
/// ([`external::declared`]), then a user's own columns
/// ([`external::add_columns_file`], `locklab --columns FILE`). Adding a
/// Rust driver is one line here; adding an out-of-process one is an entry
/// in that file.
pub fn registry() -> Vec<Box<dyn Driver>> {
    #[cfg_attr(not(feature = "columns"), allow(unused_mut))]
    let mut all: Vec<Box<dyn Driver>> = vec![Box::new(direct::TokioPostgresDirect)];
    #[cfg(feature = "columns")]
    all.extend([
        Box::new(deadpool_pg::Deadpool::fast()) as Box<dyn Driver>,
        Box::new(deadpool_pg::Deadpool::verified()),
        Box::new(deadpool_pg::Deadpool::clean()),
        Box::new(deadpool_pg::Deadpool::custom_unlock_all()),
        Box::new(deadpool_pg::v013::Deadpool::fast()),
        Box::new(deadpool_pg::v013::Deadpool::clean()),
        Box::new(bb8_pg::Bb8Postgres::defaults()),
        Box::new(sqlx_pg::v09::SqlxPgPool::defaults()),
        Box::new(sqlx_pg::v09::SqlxPgPool::after_release_unlock_all()),
        Box::new(sqlx_pg::v08::SqlxPgPool::defaults()),
        Box::new(sqlx_pg::v08::SqlxPgPool::after_release_unlock_all()),
        Box::new(mobc_pg::MobcPostgres::defaults()),
        Box::new(r2d2_pg::R2d2Postgres::defaults()),
        Box::new(diesel_async_pg::DieselAsyncDeadpool::defaults()),
    ]);
    all.extend(poolers::columns());
    #[cfg(feature = "columns")]
    {
        let mut base: Vec<Box<dyn Driver>> = vec![
            Box::new(deadpool_pg::Deadpool::fast()),
            Box::new(bb8_pg::Bb8Postgres::defaults()),
            Box::new(sqlx_pg::v09::SqlxPgPool::defaults()),
            Box::new(sqlx_pg::v08::SqlxPgPool::defaults()),
            Box::new(mobc_pg::MobcPostgres::defaults()),
            Box::new(diesel_async_pg::DieselAsyncDeadpool::defaults()),
        ];
        base.extend(poolers::columns());
        all.extend(lock_crate::columns(base));
    }
    all.extend(external::declared().into_iter().map(|d| Box::new(d) as Box<dyn Driver>));
    all.extend(external::user_columns());
    all
}

/// Looks a driver up by id.
///
/// # Errors
/// An [`UnknownDriver`] that lists the known ids.
pub fn find(id: &str) -> Result<Box<dyn Driver>, UnknownDriver> {
    registry()
        .into_iter()
        .find(|d| d.info().id == id)
        .ok_or_else(|| UnknownDriver {
            id: id.to_owned(),
            known: ids(),
        })
}

/// The ids of all registered drivers, in column order.
pub fn ids() -> Vec<&'static str> {
    registry().iter().map(|d| d.info().id).collect()
}

/// A driver id that is not registered.
#[derive(Debug, Clone)]
pub struct UnknownDriver {
    /// What was asked for.
    pub id: String,
    /// What exists.
    pub known: Vec<&'static str>,
}

impl fmt::Display for UnknownDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown driver '{}'; known drivers: {}",
            self.id,
            self.known.join(", ")
        )
    }
}

impl std::error::Error for UnknownDriver {}
