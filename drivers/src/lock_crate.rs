//! The columns of the `pg-advisory-lock` crate (this workspace's lock
//! crate): each wraps one of locklab's columns — an in-process pool, or a
//! pool through a pooler — and runs the crate's own calls
//! (`library: pg-advisory-lock` and `pg-advisory-lock-xact` steps) on that
//! column's connections, as a service using the crate with that pool would.
//! Raw-SQL scenarios are the wrapped column's business: on a crate column
//! they are `n/a` (the runner's placement), so its verdicts are the
//! crate's.
//!
//! The crate runs on a checked-out connection of the wrapped column
//! ([`Conn`], which is a [`Session`] here): its statements go through that
//! pool's own client, and its releases end with the connection dropped,
//! which returns it to that pool, as application code's drop does. Behind a pooler in
//! transaction mode the column declares [`Pooling::Transaction`], so
//! session-level calls are refused there, as the crate documents.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use pg_advisory_lock::{ClientError, Error, Key, Lock, Pooling, Session, SessionLock, Wait, XactLock, lock_xact};

use crate::libraries::{Library, LibraryCall};
use crate::{Conn, ConnectSpec, Driver, DriverError, DriverInfo, Pool, PoolOptions, PoolerMode};

use crate::libraries::LOCK_CRATE as CRATE;

/// The bound of an `acquire` whose step sets no `wait_ms` (the crate has
/// no unbounded wait): 30 s, in ms.
pub const DEFAULT_WAIT_MS: u64 = 30_000;

/// What ending a lock records when no call left one (a refused, busy or
/// dropped acquire): the application has no guard or transaction to end.
const NOTHING_HELD: &str = "no lock held";

/// Each crate column: its id, and the id of the column it wraps: each
/// in-process pool locklab runs but r2d2 (a blocking pool: the crate is
/// async), and a deadpool-postgres pool through each pooler and mode. A
/// plain tokio-postgres connection has no column: nothing reuses it, so
/// what the crate guards against cannot happen there (its `Client` and
/// `Transaction` are checked in harness/tests/lock_crate.rs).
pub const COLUMNS: &[(&str, &str)] = &[
    ("pg-advisory-lock+deadpool", "deadpool-fast"),
    ("pg-advisory-lock+bb8", "bb8"),
    ("pg-advisory-lock+sqlx", "sqlx"),
    ("pg-advisory-lock+sqlx-0.8", "sqlx-0.8"),
    ("pg-advisory-lock+mobc", "mobc"),
    ("pg-advisory-lock+diesel-async", "diesel-async"),
    ("pg-advisory-lock+pgbouncer-session", "pgbouncer-session+deadpool"),
    (
        "pg-advisory-lock+pgbouncer-transaction",
        "pgbouncer-transaction+deadpool",
    ),
    ("pg-advisory-lock+pgpool", "pgpool+deadpool"),
    ("pg-advisory-lock+pgagroal-session", "pgagroal-session+deadpool"),
    ("pg-advisory-lock+pgagroal-transaction", "pgagroal-transaction+deadpool"),
    ("pg-advisory-lock+odyssey-session", "odyssey-session+deadpool"),
    ("pg-advisory-lock+odyssey-transaction", "odyssey-transaction+deadpool"),
];

/// The crate columns, each over its wrapped column taken from `base` (a
/// fresh set of the registry's Rust columns); a wrapped column `base`
/// lacks is skipped.
pub(crate) fn columns(mut base: Vec<Box<dyn Driver>>) -> Vec<Box<dyn Driver>> {
    let mut out: Vec<Box<dyn Driver>> = Vec::new();
    for &(id, inner) in COLUMNS {
        if let Some(at) = base.iter().position(|d| d.info().id == inner) {
            out.push(Box::new(LockCrateColumn {
                id,
                inner: base.swap_remove(at),
            }));
        }
    }
    out
}

/// A crate column: the crate's calls on the connections of `inner`.
struct LockCrateColumn {
    id: &'static str,
    inner: Box<dyn Driver>,
}

#[async_trait]
impl Driver for LockCrateColumn {
    fn info(&self) -> DriverInfo {
        let inner = self.inner.info();
        DriverInfo {
            id: self.id,
            crate_name: CRATE,
            crate_version: crate::crate_version(CRATE),
            // (Leaked once per column and process: a `&'static str` the
            // report's column header reads.)
            configuration: configuration_of(self.id, &inner),
            kind: inner.kind,
            pooler: inner.pooler,
            notices: inner.notices,
        }
    }

    fn extended_protocol(&self) -> Result<(), &'static str> {
        self.inner.extended_protocol()
    }

    async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
        let info = self.inner.info();
        let pooling = match info.pooler_mode() {
            Some(PoolerMode::Transaction) => Pooling::Transaction,
            _ => Pooling::Session,
        };
        Ok(Box::new(CratePool {
            inner: self.inner.pool(spec, opts).await?,
            pooling,
            handles: Mutex::new(HashMap::new()),
        }))
    }

    fn in_own_process(&self, _host: &std::path::Path) -> Option<Box<dyn Driver>> {
        // The crate's handles live in this process, with the pool.
        None
    }
}

/// "pg-advisory-lock 0.1.0 on deadpool-fast (deadpool-postgres
/// RecyclingMethod::Fast (default))", once per column id.
fn configuration_of(id: &'static str, inner: &DriverInfo) -> &'static str {
    static MADE: Mutex<Vec<(&'static str, &'static str)>> = Mutex::new(Vec::new());
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = made.iter().find(|(i, _)| *i == id) {
        return c;
    }
    let text: &'static str = Box::leak(
        format!(
            "pg-advisory-lock's calls on {}'s connections ({} {}: {}){}",
            inner.id,
            inner.crate_name,
            inner.crate_version,
            inner.configuration,
            match inner.pooler_mode() {
                Some(PoolerMode::Transaction) => "; declared Pooling::Transaction",
                _ => "",
            }
        )
        .into_boxed_str(),
    );
    made.push((id, text));
    text
}

/// What a crate call left held, by key, until the step that ends it.
enum Handle {
    /// A session-level guard on its connection.
    Session(SessionLock<CrateConn>),
    /// A connection in a transaction that holds the transaction-level lock.
    Xact(CrateConn),
}

/// The wrapped column's pool, and the crate's handles on it.
struct CratePool {
    inner: Box<dyn Pool>,
    pooling: Pooling,
    handles: Mutex<HashMap<i64, Handle>>,
}

impl CratePool {
    fn keep(&self, key: i64, h: Handle) {
        self.handles.lock().unwrap_or_else(|e| e.into_inner()).insert(key, h);
    }

    fn take(&self, key: i64) -> Result<Handle, DriverError> {
        self.handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key)
            .ok_or_else(|| DriverError::Client(format!("no lock of the crate on key {key} to end")))
    }

    /// Whether a call left a handle on `key` (a refused, busy or dropped
    /// acquire leaves none: the application has nothing to end then).
    fn holds(&self, key: i64) -> bool {
        self.handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&key)
    }

    /// One call of the crate: `acquire` and `try_acquire` at the
    /// library's level; `release` and `drop_handle` end what the key's
    /// handle holds (a guard: `release` or a drop; a transaction: `COMMIT`,
    /// or `ROLLBACK` as a dropped `Transaction` of tokio-postgres or sqlx
    /// does), or record that nothing is held.
    async fn call(&self, xact: bool, call: &LibraryCall) -> Result<String, DriverError> {
        let (key, wait) = match *call {
            LibraryCall::Acquire { key, timeout_ms } => (
                key,
                Wait::Within(Duration::from_millis(timeout_ms.unwrap_or(DEFAULT_WAIT_MS))),
            ),
            LibraryCall::TryAcquire { key } => (key, Wait::Try),
            LibraryCall::Release { key } | LibraryCall::DropHandle { key } => {
                let release = matches!(call, LibraryCall::Release { .. });
                if !self.holds(key) {
                    return Ok(NOTHING_HELD.into());
                }
                return self.end(key, release).await;
            }
            _ => {
                return Err(DriverError::Unsupported(
                    "the lock crate takes acquire, try_acquire, release and drop_handle".into(),
                ));
            }
        };
        if xact {
            self.xact_acquire(key, wait).await
        } else {
            self.session_acquire(key, wait).await
        }
    }

    /// Ends what the handle of `key` holds.
    async fn end(&self, key: i64, release: bool) -> Result<String, DriverError> {
        match (self.take(key)?, release) {
            (Handle::Session(g), true) => {
                drop(g.release().await.map_err(crate_error)?);
                Ok("released".into())
            }
            (Handle::Session(g), false) => {
                drop(g);
                Ok("dropped".into())
            }
            (Handle::Xact(mut conn), true) => {
                conn.0.simple_query("commit").await?;
                Ok("released (commit)".into())
            }
            (Handle::Xact(mut conn), false) => {
                conn.0.simple_query("rollback").await?;
                Ok("dropped (rollback)".into())
            }
        }
    }

    async fn session_acquire(&self, key: i64, wait: Wait) -> Result<String, DriverError> {
        let conn = CrateConn(self.inner.checkout().await?);
        match SessionLock::acquire_with(conn, Key::new(key), wait, self.pooling).await {
            Ok(Lock::Held(g)) => {
                self.keep(key, Handle::Session(g));
                Ok("acquired".into())
            }
            Ok(Lock::Busy(conn)) => {
                drop(conn);
                Ok("busy".into())
            }
            Err(Error::TransactionPooling { .. }) => Ok("refused (transaction pooling)".into()),
            Err(e) => Err(crate_error(e)),
        }
    }

    async fn xact_acquire(&self, key: i64, wait: Wait) -> Result<String, DriverError> {
        let mut tx = Transaction(Some(CrateConn(self.inner.checkout().await?)));
        let conn = tx.0.as_mut().expect("open until it ends");
        conn.0.simple_query("begin").await?;
        match lock_xact(conn, Key::new(key), wait).await {
            Ok(XactLock::Held) => {
                let conn = tx.0.take().expect("open until it ends");
                self.keep(key, Handle::Xact(conn));
                Ok("acquired".into())
            }
            Ok(XactLock::Busy) => {
                conn.0.simple_query("rollback").await?;
                drop(tx.0.take());
                Ok("busy".into())
            }
            Err(e) => {
                let _ = conn.0.simple_query("rollback").await;
                drop(tx.0.take());
                Err(crate_error(e))
            }
        }
    }
}

/// The application's transaction on a connection, as a client's
/// transaction object is: dropped before it ends (the acquire's future
/// dropped mid-wait), it rolls back before the connection goes back to its
/// pool, as tokio-postgres' `Transaction` (its `Drop` sends `ROLLBACK`)
/// and sqlx's (a rollback queued for the connection's next use) do.
struct Transaction(Option<CrateConn>);

impl Drop for Transaction {
    fn drop(&mut self) {
        if let Some(mut conn) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = conn.0.simple_query("rollback").await;
                drop(conn);
            });
        }
    }
}

/// A crate error as a step records it: a failed lock call as the server
/// error it was, with its SQLSTATE (e.g. 57014) where the client passed it
/// on; anything else as the client's.
fn crate_error(e: Error) -> DriverError {
    match &e {
        // (A client that passes no SQLSTATE on, diesel-async, gives an
        // empty one: a server error all the same.)
        Error::Failed { source, .. } => DriverError::Db(crate::DbError {
            sqlstate: source.sqlstate.clone().unwrap_or_default(),
            message: format!("{e}"),
        }),
        _ => DriverError::Client(e.to_string()),
    }
}

#[async_trait]
impl Pool for CratePool {
    async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError> {
        self.inner.checkout().await
    }

    async fn checkout_within(&self, bound: Duration) -> Option<Result<Box<dyn Conn>, DriverError>> {
        self.inner.checkout_within(bound).await
    }

    async fn library(&self, library: Library, call: &LibraryCall) -> Result<String, DriverError> {
        match library {
            Library::PgAdvisoryLock => self.call(false, call).await,
            Library::PgAdvisoryLockXact => self.call(true, call).await,
            other => Err(DriverError::Unsupported(format!(
                "{} does not run on a column of the lock crate",
                other.as_str()
            ))),
        }
    }

    async fn close(&self) {
        // Guards still held end as a dropped guard does, before the pool closes.
        let held: Vec<Handle> = self
            .handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, h)| h)
            .collect();
        for h in held {
            match h {
                Handle::Session(g) => drop(g.release().await),
                Handle::Xact(mut c) => drop(c.0.simple_query("rollback").await),
            }
        }
        self.inner.close().await;
    }
}

/// A checked-out connection of the wrapped column, as the crate's
/// [`Session`]: its statements go through that column's client with the
/// simple query protocol ([`Conn::simple_query`]), and dropping it
/// returns the connection to that column's pool as application code's
/// drop does.
struct CrateConn(Box<dyn Conn>);

impl Session for CrateConn {
    async fn execute(&mut self, sql: &str) -> Result<(), ClientError> {
        self.0.simple_query(sql).await.map(|_| ()).map_err(|e| match e {
            DriverError::Db(db) => ClientError::server(db.message, Some(db.sqlstate).filter(|c| !c.is_empty())),
            // No server error: I/O, a closed connection, a pool's or
            // protocol error (DriverError::Client).
            other => ClientError::lost(other.to_string()),
        })
    }
}
