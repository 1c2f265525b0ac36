//! PostgreSQL advisory locks taken right through connection pools and
//! poolers.
//!
//! The patterns of taking advisory locks from a service, done so that
//! locklab (the workspace this crate lives in) measures them holding on every pool and
//! pooler it runs (its `pg-advisory-lock` columns):
//!
//! - **A transaction-level lock tied to your transaction** ([`lock_xact`]):
//!   taken in the transaction you write in, it ends when that transaction
//!   commits or rolls back, so the lock and the writes end together. It is
//!   the only kind that works behind transaction pooling.
//! - **Bounded waits** ([`Wait::Within`]): `lock_timeout` set for the wait
//!   alone; not getting the lock in time is an outcome
//!   ([`XactLock::Busy`], [`Lock::Busy`]), not an error.
//! - **A session-level lock on a connection the guard owns**
//!   ([`SessionLock`]): released before that connection can be reused, on
//!   [`SessionLock::release`], on drop and on a panic; and an error from
//!   the lock call means the lock is not held — PostgreSQL can grant the
//!   lock as `lock_timeout`, `statement_timeout` or a cancel request fires
//!   and raise the error all the same (`LockErrorCleanup` in
//!   src/backend/storage/lmgr/proc.c), so the crate unlocks after the error,
//!   counting re-entrant holds, and retries that if a late cancel hits it.
//!   A dropped acquire future leaves no lock: its wait runs to its bound,
//!   and the crate unlocks whatever it was granted before the connection
//!   can be reused.
//! - **Keys** ([`Key`]): the `bigint` and the two-`integer` key spaces, and
//!   string keys through a stable, documented, namespaced hash
//!   ([`Key::named`]).
//! - **Transaction pooling** ([`Pooling::Transaction`]): session-level
//!   locks are refused there with an error that says why.
//!
//! The clients are features: `tokio-postgres` (the default:
//! `Client`, `Transaction`), `deadpool-postgres`, `bb8-postgres`,
//! `mobc-postgres`, `sqlx` (0.9), `sqlx-0-8` and `diesel-async`. Each
//! implements [`Session`] for its connection types; a session-level guard
//! needs an owned connection (deadpool's `Object`, bb8's
//! `Pool::get_owned`, sqlx's `PoolConnection`).
//!
//! ```no_run
//! # #[cfg(feature = "deadpool-postgres")]
//! # async fn f(pool: deadpool_postgres::Pool) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use pg_advisory_lock::{Key, Wait, XactLock, lock_xact};
//!
//! let mut client = pool.get().await?;
//! let mut tx = client.transaction().await?;
//! let key = Key::named("billing", "invoice-run")?;
//! match lock_xact(&mut tx, key, Wait::Within(Duration::from_secs(2))).await? {
//!     XactLock::Held => {
//!         tx.execute("UPDATE invoices SET run = now() WHERE run IS NULL", &[]).await?;
//!         tx.commit().await?; // the lock ends with the writes
//!     }
//!     XactLock::Busy => { /* another instance runs it: skip */ }
//! }
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

mod clients;
mod error;
mod guard;
mod key;
mod session;
mod sql;
mod xact;

use std::time::Duration;

pub use error::Error;
pub use guard::{Lock, SessionLock};
pub use key::{Key, KeyError};
pub use session::{ClientError, Session};
pub use xact::{XactLock, lock_xact};

/// How long a lock call waits for a lock another session holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Not at all: take it only if it is free (`pg_try_advisory_lock`).
    Try,
    /// At most this long (`lock_timeout`, in whole milliseconds, at least
    /// 1 ms), set for the wait alone. There is no unbounded wait: a wait
    /// whose caller went away must end on its own for the clean-up after
    /// it to run.
    Within(Duration),
}

impl Wait {
    /// The bound, `None` for [`Wait::Try`].
    fn bound(self) -> Option<Duration> {
        match self {
            Wait::Try => None,
            Wait::Within(d) => Some(d),
        }
    }
}

/// How the connection reaches the server, as far as session state goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pooling {
    /// Its session is its own for as long as the caller has it: a direct
    /// connection, a client-side pool's, or a pooler in session mode.
    #[default]
    Session,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`,
    /// pgagroal, Odyssey, Supavisor): between transactions the server
    /// connection serves other clients, so session-level locks are
    /// refused ([`Error::TransactionPooling`]). A client cannot detect
    /// this (the pooler announces no mode), so it is declared.
    Transaction,
}
