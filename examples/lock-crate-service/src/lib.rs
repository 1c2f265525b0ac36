//! Two jobs of a service that must not run twice at once, through a
//! deadpool-postgres pool, with `pg-advisory-lock`:
//!
//! - [`run_invoices`]: short work in one transaction, under a
//!   transaction-level lock that ends with the transaction's writes
//!   (behind PgBouncer in transaction mode too);
//! - [`lead`]: long work that must not hold a transaction open, under a
//!   session-level lock on a connection the guard owns, released before
//!   the pool can hand that connection to anyone else.

use std::time::Duration;

use deadpool_postgres::Pool;
use pg_advisory_lock::{Key, Lock, SessionLock, Wait, XactLock, lock_xact};

/// What a job did.
#[derive(Debug, PartialEq, Eq)]
pub enum Ran {
    /// It ran.
    Done,
    /// Another instance holds the lock: this one did nothing.
    Skipped,
}

/// The lock of the invoice run, by name (a stable hash, namespaced).
pub fn invoice_key() -> Key {
    Key::named("billing", "invoice-run").expect("a namespace without NUL")
}

/// Marks every unbilled row of `invoices` billed, if no other instance is
/// doing it: a try-lock (`Wait::Try`) in the transaction that writes, so the
/// lock ends exactly when the writes commit.
///
/// # Errors
/// The pool's, the server's or the lock crate's error.
pub async fn run_invoices(pool: &Pool) -> Result<Ran, Box<dyn std::error::Error + Send + Sync>> {
    let mut client = pool.get().await?;
    let mut tx = client.transaction().await?;
    match lock_xact(&mut tx, invoice_key(), Wait::Try).await? {
        XactLock::Busy => Ok(Ran::Skipped),
        XactLock::Held => {
            tx.execute("UPDATE invoices SET billed = true WHERE NOT billed", &[]).await?;
            tx.commit().await?;
            Ok(Ran::Done)
        }
    }
}

/// Runs `work` as the leader (one instance at a time), waiting at most
/// `wait` for the lock. The guard owns its pooled connection for the whole
/// work and unlocks before the pool gets it back — also when `work` fails
/// or panics.
///
/// # Errors
/// The pool's, the lock crate's, or `work`'s error.
pub async fn lead<F, Fut>(pool: &Pool, wait: Duration, work: F) -> Result<Ran, Box<dyn std::error::Error + Send + Sync>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>>,
{
    let conn = pool.get().await?;
    let Lock::Held(guard) = SessionLock::acquire(conn, Key::named("jobs", "leader")?, Wait::Within(wait)).await?
    else {
        return Ok(Ran::Skipped);
    };
    work().await?;
    drop(guard.release().await?);
    Ok(Ran::Done)
}
