//! The crate's errors. "Busy" (the lock was taken, or not granted within
//! the wait's bound) is not among them: it is an outcome
//! ([`crate::Lock::Busy`], [`crate::XactLock::Busy`]).

use crate::{ClientError, Key};

/// Why a lock call failed. After every variant but
/// [`Error::LockStateUnknown`], the caller holds no lock on the key through
/// this call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A session-level lock was asked for on a connection declared to be
    /// behind transaction pooling ([`crate::Pooling::Transaction`]): the
    /// pooler hands the server connection to other clients between
    /// transactions, so a session-level lock would stay on a server
    /// connection other clients use, and its unlock could reach another
    /// (PgBouncer docs, "Feature matrix for pooling modes": session-level
    /// advisory locks are not supported in transaction pooling). Take a
    /// transaction-level lock ([`crate::lock_xact`]) instead.
    #[error(
        "a session-level advisory lock on key {key} refused: the connection is behind transaction pooling, \
         where a session-level lock outlives the transaction on a server connection other clients get; \
         take a transaction-level lock (lock_xact) in your transaction instead"
    )]
    TransactionPooling {
        /// The key asked for.
        key: Key,
    },
    /// A transaction-level lock was asked for outside a transaction block:
    /// it would be released when the statement's own implicit transaction
    /// ends, before the caller's writes. (The crate's `SAVEPOINT` failed.)
    #[error("a transaction-level advisory lock on key {key} needs a transaction block (BEGIN first): {source}")]
    NotInTransaction {
        /// The key asked for.
        key: Key,
        /// The server's error for the `SAVEPOINT`.
        source: ClientError,
    },
    /// The connection is gone; with it, its session and every lock it held
    /// are gone too once the server notices (at once for a closed socket;
    /// after the TCP keepalive for a silent peer: PostgreSQL docs §20.3.1,
    /// `tcp_keepalives_idle`).
    #[error("the connection is lost (and with it any lock on key {key}): {source}")]
    ConnectionLost {
        /// The key.
        key: Key,
        /// The client's error.
        source: ClientError,
    },
    /// The lock call failed on a live connection (cancelled by a cancel
    /// request or `statement_timeout`: 57014; any other server error). The
    /// crate made sure afterwards that the connection holds no lock on the
    /// key: PostgreSQL may grant a session-level lock as the cancel or the
    /// timeout lands and still raise the error (`LockErrorCleanup`,
    /// src/backend/storage/lmgr/proc.c), so the crate rolled back, read
    /// its own backend's locks and unlocked every hold it found.
    #[error("the advisory lock call on key {key} failed, and the connection holds no lock on it: {source}")]
    Failed {
        /// The key.
        key: Key,
        /// The error of the lock call.
        source: ClientError,
    },
    /// The lock call, or a release, failed, and so did every attempt to
    /// make sure the lock is not held: three clean-ups (each may meet a late
    /// cancel) and then ending the connection's own session
    /// (`pg_terminate_backend(pg_backend_pid())`), each failing on a live
    /// connection. The crate has dropped the connection, which hands it
    /// back to its pool as it is (the crate does not know the pool, so it
    /// cannot detach it): it may still hold the lock until that pool
    /// recycles or closes it. Report it; it has not been seen in locklab's
    /// runs.
    #[error("could not make sure key {key} is not held after an error: {source}")]
    LockStateUnknown {
        /// The key.
        key: Key,
        /// The last clean-up error.
        source: ClientError,
    },
}
