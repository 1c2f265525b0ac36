//! The transaction-level lock, taken in the caller's transaction.

use crate::{Error, Key, Session, Wait, sql};

/// The outcome of a transaction-level lock call that did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "Busy means the lock is not held"]
pub enum XactLock {
    /// The lock is held until the transaction ends, by `COMMIT` or
    /// `ROLLBACK` alike: the writes it protects and the lock end together.
    Held,
    /// Another session holds the key (a [`Wait::Try`]), or held it for the
    /// whole bound. The caller's transaction goes on as it was, holding no
    /// lock on the key.
    Busy,
}

/// How many times rolling back to the crate's savepoint is tried (a late
/// cancel request fails one try).
const ROLLBACK_TRIES: usize = 3;

/// Takes the transaction-level advisory lock on `key` in the transaction
/// `tx` is in (`pg_advisory_xact_lock` under a `lock_timeout` of the wait's
/// bound, or `pg_try_advisory_xact_lock`), so that the lock is released
/// when that transaction commits or rolls back, together with the writes
/// it protects, and never earlier (PostgreSQL docs §13.3.5, "Advisory
/// Locks"). Works on any connection, a pool's, and behind transaction
/// pooling alike.
///
/// The call runs under a savepoint: its `lock_timeout` lasts for the wait
/// alone (put back after it), and when the lock is not granted — even when
/// PostgreSQL granted it as the timeout fired — rolling back to the
/// savepoint releases whatever was granted (a subtransaction's locks go
/// with it) and leaves the caller's transaction usable.
///
/// If the returned future is dropped mid-wait, the wait goes on on the
/// server until its bound, and a lock granted meanwhile is held until the
/// caller's transaction ends; no cancel request is sent, since it could
/// land on the caller's next statement instead.
///
/// # Errors
/// - [`Error::NotInTransaction`] outside a transaction block (the
///   savepoint fails);
/// - [`Error::Failed`] when the call fails on a live connection: the
///   crate rolled back to its savepoint, so no lock on the key is held
///   through this call (if even that failed, the caller's transaction is
///   aborted and can only roll back, which releases the lock);
/// - [`Error::ConnectionLost`].
pub async fn lock_xact<S: Session>(tx: &mut S, key: impl Into<Key>, wait: Wait) -> Result<XactLock, Error> {
    let key = key.into();
    if let Err(source) = tx.execute(&format!("SAVEPOINT {}", sql::SAVEPOINT)).await {
        return Err(if source.connection_lost {
            Error::ConnectionLost { key, source }
        } else {
            Error::NotInTransaction { key, source }
        });
    }
    let e = match tx.execute(&sql::xact_lock(key, wait.bound())).await {
        Ok(()) => return Ok(XactLock::Held),
        Err(e) if e.connection_lost => return Err(Error::ConnectionLost { key, source: e }),
        Err(e) => e,
    };
    let back = format!("ROLLBACK TO SAVEPOINT {s}; RELEASE SAVEPOINT {s}", s = sql::SAVEPOINT);
    for _ in 0..ROLLBACK_TRIES {
        match tx.execute(&back).await {
            Ok(()) => {
                return if e.is_busy() {
                    Ok(XactLock::Busy)
                } else {
                    Err(Error::Failed { key, source: e })
                };
            }
            Err(r) if r.connection_lost => return Err(Error::ConnectionLost { key, source: r }),
            // A late cancel request, or the transaction was already aborted
            // by the failed call: try again; in the end the caller's
            // transaction can only roll back, which releases the lock.
            Err(_) => {}
        }
    }
    Err(Error::Failed { key, source: e })
}
