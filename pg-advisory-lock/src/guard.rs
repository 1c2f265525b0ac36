//! The session-level lock: a guard that owns the connection it locked on,
//! and releases the lock before that connection can be reused.

use std::ops::{Deref, DerefMut};

use crate::{ClientError, Error, Key, Pooling, Session, Wait, sql};

/// How many times a clean-up is tried on a live connection before the crate
/// ends the connection's session: a cancel request the application sent
/// for the lock call can land late, on the clean-up statement, once.
const CLEAN_UP_TRIES: usize = 3;

/// The outcome of a session-level lock call that did not fail.
#[must_use = "a held lock is released when its guard is dropped"]
pub enum Lock<C: Session + 'static> {
    /// The lock is held, by the guard.
    Held(SessionLock<C>),
    /// Another session holds the key (a [`Wait::Try`]), or held it for the
    /// whole bound: the connection comes back as it was, holding no lock on
    /// the key.
    Busy(C),
}

impl<C: Session + 'static> Lock<C> {
    /// The guard, if the lock is held.
    pub fn held(self) -> Option<SessionLock<C>> {
        match self {
            Lock::Held(g) => Some(g),
            Lock::Busy(_) => None,
        }
    }
}

/// A session-level advisory lock held on a connection the guard owns.
///
/// The lock ends before the connection can be used by anyone else:
/// - [`SessionLock::release`] unlocks and hands the connection back;
/// - dropping the guard (going out of scope, an early return, `?`, a panic
///   unwinding) moves the connection into a task on the current Tokio
///   runtime that unlocks and only then drops the connection, which returns
///   it to its pool. Dropped outside a runtime (the runtime is shutting
///   down), the connection is dropped as it is: a tokio-postgres
///   connection's I/O task is gone with its runtime, so the server sees the
///   socket close and ends the session with its locks.
///
/// Every session-level hold of the key on this connection belongs to the
/// guard: a release unlocks the key as many times as this backend holds
/// it (`pg_advisory_unlock` is re-entrant, PostgreSQL docs §9.28.10), so a
/// hold an earlier user of a pooled connection leaked goes too.
///
/// The guard derefs to the connection, for the work the lock protects.
pub struct SessionLock<C: Session + 'static> {
    conn: Option<C>,
    key: Key,
}

impl<C: Session + 'static> SessionLock<C> {
    /// Takes the session-level lock on `key` on `conn`, waiting as `wait`
    /// says, on a direct connection, a pool's or behind session pooling.
    /// See [`SessionLock::acquire_with`].
    ///
    /// # Errors
    /// As [`SessionLock::acquire_with`].
    pub async fn acquire(conn: C, key: impl Into<Key>, wait: Wait) -> Result<Lock<C>, Error> {
        SessionLock::acquire_with(conn, key, wait, Pooling::Session).await
    }

    /// Takes the session-level lock on `key` on `conn` (`pg_advisory_lock`
    /// under a `lock_timeout` of the wait's bound, set for the wait alone,
    /// or `pg_try_advisory_lock`), where `conn` is reached as `pooling`
    /// says.
    ///
    /// Not granted (a try that found it taken, or a bound that ran out):
    /// [`Lock::Busy`], with the connection holding no lock on the key, even
    /// when PostgreSQL granted the lock as `lock_timeout` fired and raised
    /// 55P03 all the same (`LockErrorCleanup`,
    /// src/backend/storage/lmgr/proc.c): the crate's statement unlocks in
    /// its error handler.
    ///
    /// Dropping the returned future mid-wait (a `tokio::time::timeout`, a
    /// `select!`) leaves no lock behind: the connection moves into a task
    /// that waits for the lock call to end — at the latest at the wait's
    /// bound, so there is no waiter after it — unlocks whatever it was
    /// granted, and only then drops the connection. The crate sends no
    /// cancel request: PostgreSQL handles one asynchronously (tokio-postgres'
    /// `CancelToken::cancel_query` returns once the request is sent, before
    /// the server acts on it), so it can land on a later statement of the
    /// connection — through a pool, another request's (PostgreSQL protocol
    /// §55.2.8: "the cancellation signal might or might not have any
    /// effect"; locklab's `cancel-races-grant` measures such late cancels).
    ///
    /// # Errors
    /// - [`Error::TransactionPooling`] for [`Pooling::Transaction`], before
    ///   anything is sent;
    /// - [`Error::Failed`] when the call fails on a live connection (a
    ///   cancel request or `statement_timeout`: 57014): the crate has made
    ///   sure the connection holds no lock on the key;
    /// - [`Error::ConnectionLost`] when the connection is gone (and with it
    ///   the lock);
    /// - [`Error::LockStateUnknown`] when that could not be made sure.
    pub async fn acquire_with(conn: C, key: impl Into<Key>, wait: Wait, pooling: Pooling) -> Result<Lock<C>, Error> {
        let key = key.into();
        if pooling == Pooling::Transaction {
            return Err(Error::TransactionPooling { key });
        }
        let mut flight = InFlight::new(conn, key);
        let result = flight.conn().execute(&sql::session_lock(key, wait.bound())).await;
        match result {
            Ok(()) => Ok(Lock::Held(SessionLock {
                conn: Some(flight.land()),
                key,
            })),
            Err(e) if e.is_busy() => Ok(Lock::Busy(flight.land())),
            Err(e) => Err(flight.after_error(e).await),
        }
    }

    /// The key held.
    pub fn key(&self) -> Key {
        self.key
    }

    /// Releases the lock (every session-level hold of the key on the
    /// connection) and hands the connection back. Dropping the returned
    /// future before it ends leaves the clean-up to a task, as dropping
    /// the guard does.
    ///
    /// When the unlock fails on a live connection (a late cancel request
    /// meant for the lock call lands on it), the crate unlocks again, as
    /// after a failed lock call, and the release succeeds once that does.
    ///
    /// # Errors
    /// [`Error::ConnectionLost`] (the lock went with the session),
    /// [`Error::LockStateUnknown`].
    pub async fn release(mut self) -> Result<C, Error> {
        let conn = self.conn.take().expect("a guard holds its connection until it ends");
        let mut flight = InFlight::new(conn, self.key);
        let key = self.key;
        let e = match flight.conn().execute(&sql::session_unlock(key)).await {
            Ok(()) => return Ok(flight.land()),
            Err(e) if e.connection_lost => {
                drop(flight.land());
                return Err(Error::ConnectionLost { key, source: e });
            }
            Err(e) => e,
        };
        // A late cancel request (or another error) hit the unlock: the
        // clean-up unlocks again, and when it does, the release is done.
        match clean_up(flight.conn(), key).await {
            CleanUp::Unlocked => Ok(flight.land()),
            CleanUp::SessionEnded(end) => {
                drop(flight.land());
                Err(Error::ConnectionLost { key, source: end })
            }
            CleanUp::Unknown(last) => {
                drop(flight.land());
                let _ = e;
                Err(Error::LockStateUnknown { key, source: last })
            }
        }
    }
}

impl<C: Session + 'static> Deref for SessionLock<C> {
    type Target = C;

    fn deref(&self) -> &C {
        self.conn.as_ref().expect("a guard holds its connection until it ends")
    }
}

impl<C: Session + 'static> DerefMut for SessionLock<C> {
    fn deref_mut(&mut self) -> &mut C {
        self.conn.as_mut().expect("a guard holds its connection until it ends")
    }
}

impl<C: Session + 'static> Drop for SessionLock<C> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            spawn_clean_up(conn, self.key);
        }
    }
}

/// A connection with a lock call in flight: if the call's future is
/// dropped before [`InFlight::land`], its drop hands the connection to a
/// clean-up task.
struct InFlight<C: Session + 'static> {
    conn: Option<C>,
    key: Key,
}

impl<C: Session + 'static> InFlight<C> {
    fn new(conn: C, key: Key) -> InFlight<C> {
        InFlight { conn: Some(conn), key }
    }

    fn conn(&mut self) -> &mut C {
        self.conn.as_mut().expect("in flight until landed")
    }

    /// The call ended: the connection back, with nothing left to clean up.
    fn land(mut self) -> C {
        self.conn.take().expect("in flight until landed")
    }

    /// After the call failed with `e`: a lost connection is dropped; on a
    /// live one the crate makes sure the key is not held, then drops the
    /// connection (returning it to its pool clean).
    async fn after_error(mut self, e: ClientError) -> Error {
        let key = self.key;
        if e.connection_lost {
            drop(self.land());
            return Error::ConnectionLost { key, source: e };
        }
        let outcome = clean_up(self.conn(), key).await;
        let conn = self.land();
        drop(conn);
        match outcome {
            CleanUp::Unlocked => Error::Failed { key, source: e },
            CleanUp::SessionEnded(end) => Error::ConnectionLost { key, source: end },
            CleanUp::Unknown(last) => Error::LockStateUnknown { key, source: last },
        }
    }
}

impl<C: Session + 'static> Drop for InFlight<C> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            spawn_clean_up(conn, self.key);
        }
    }
}

/// How a clean-up ended.
enum CleanUp {
    /// The connection holds no lock on the key.
    Unlocked,
    /// The clean-up ended the connection's own session (or found it gone):
    /// its locks went with it.
    SessionEnded(ClientError),
    /// Neither could be made sure.
    Unknown(ClientError),
}

/// Unlocks every session-level hold of `key`, up to [`CLEAN_UP_TRIES`]
/// times (a late cancel request fails one try), each try after the first
/// rolling back first (a transaction the connection was left in, aborted,
/// fails the unlock with 25P02); then, as a last resort, ends the
/// connection's own session.
async fn clean_up<S: Session>(conn: &mut S, key: Key) -> CleanUp {
    let unlock = sql::session_unlock(key);
    let rollback_first = format!("ROLLBACK; {unlock}");
    let mut last = None;
    for attempt in 0..CLEAN_UP_TRIES {
        let statement = if attempt == 0 { &unlock } else { &rollback_first };
        match conn.execute(statement).await {
            Ok(()) => return CleanUp::Unlocked,
            Err(e) if e.connection_lost => return CleanUp::SessionEnded(e),
            Err(e) => last = Some(e),
        }
    }
    match conn
        .execute("SELECT pg_catalog.pg_terminate_backend(pg_catalog.pg_backend_pid())")
        .await
    {
        // The server ends the session with FATAL 57P01: the client sees an
        // error, or a closed connection on its next use.
        Err(e) if e.connection_lost || e.sqlstate.as_deref() == Some("57P01") => CleanUp::SessionEnded(e),
        Err(e) => CleanUp::Unknown(e),
        Ok(()) => CleanUp::Unknown(last.unwrap_or_else(|| ClientError::server("the clean-up failed", None))),
    }
}

/// Moves `conn` into a task on the current Tokio runtime that cleans up
/// `key` (behind whatever call is still in flight on it) and then drops
/// the connection.
/// Outside a runtime the connection is dropped at once (see
/// [`SessionLock`]).
fn spawn_clean_up<C: Session + 'static>(mut conn: C, key: Key) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        drop(conn);
        return;
    };
    runtime.spawn(async move {
        let _ = clean_up(&mut conn, key).await;
        drop(conn);
    });
}
