//! The statements the crate sends. Each decides its outcome on the server
//! (PL/pgSQL blocks) and reports "busy" as an error with the message
//! [`BUSY`], which the crate wrote and the server does not translate.

use std::time::Duration;

use crate::Key;

/// The message of the crate's "busy" error (SQLSTATE 55P03,
/// `lock_not_available`).
pub(crate) const BUSY: &str = "pg-advisory-lock: busy";

/// The savepoint a transaction-level lock is taken under.
pub(crate) const SAVEPOINT: &str = "pg_advisory_lock";

/// A `lock_timeout` value for `bound`, in whole milliseconds, at least 1
/// (`0` would disable the timeout: PostgreSQL docs §20.11.1).
pub(crate) fn timeout_ms(bound: Duration) -> u128 {
    bound.as_millis().max(1)
}

/// Whether this backend holds `key` in exclusive mode, in the current
/// database (`pg_locks`, PostgreSQL docs §53.12).
fn held(key: Key) -> String {
    let (classid, objid, objsubid) = key.pg_locks_tag();
    format!(
        "EXISTS (SELECT FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid() \
         AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database()) \
         AND classid = {classid} AND objid = {objid} AND objsubid = {objsubid} AND mode = 'ExclusiveLock' AND granted)"
    )
}

/// PL/pgSQL that releases every session-level hold of `key` by this
/// backend: `pg_advisory_unlock` once per re-entrant hold, while `pg_locks`
/// shows the key held and the unlock succeeds (a transaction-level hold is
/// left to its transaction).
fn unlock_every_hold(key: Key) -> String {
    format!(
        "LOOP EXIT WHEN NOT {held}; EXIT WHEN NOT pg_catalog.pg_advisory_unlock({args}); END LOOP;",
        held = held(key),
        args = key.args()
    )
}

/// Takes the session-level lock on `key`, waiting at most `bound` (`None`:
/// only if free). When it is not granted, makes sure this backend does not
/// hold it — PostgreSQL may grant the lock as `lock_timeout` fires and still
/// raise 55P03 (`LockErrorCleanup`, src/backend/storage/lmgr/proc.c) — and
/// raises [`BUSY`].
pub(crate) fn session_lock(key: Key, bound: Option<Duration>) -> String {
    let args = key.args();
    let take = match bound {
        None => format!(
            "IF NOT pg_catalog.pg_try_advisory_lock({args}) THEN RAISE EXCEPTION USING ERRCODE = 'lock_not_available', MESSAGE = '{BUSY}'; END IF;"
        ),
        Some(b) => format!(
            "PERFORM pg_catalog.set_config('lock_timeout', '{}ms', true); PERFORM pg_catalog.pg_advisory_lock({args});",
            timeout_ms(b)
        ),
    };
    format!(
        "DO $pg_advisory_lock$ BEGIN {take} EXCEPTION WHEN lock_not_available THEN {unlock} \
         RAISE EXCEPTION USING ERRCODE = 'lock_not_available', MESSAGE = '{BUSY}'; END $pg_advisory_lock$",
        unlock = unlock_every_hold(key)
    )
}

/// Releases every session-level hold of `key` by this backend.
pub(crate) fn session_unlock(key: Key) -> String {
    format!(
        "DO $pg_advisory_lock$ BEGIN {} END $pg_advisory_lock$",
        unlock_every_hold(key)
    )
}

/// Takes the transaction-level lock on `key` in the current transaction,
/// under the savepoint [`SAVEPOINT`] (set by the caller), waiting at most
/// `bound` (`None`: only if free), with `lock_timeout` set for the wait
/// alone and put back after it; raises [`BUSY`] when not granted. On
/// success the savepoint is released, so the lock belongs to the caller's
/// transaction.
pub(crate) fn xact_lock(key: Key, bound: Option<Duration>) -> String {
    let args = key.args();
    let take = match bound {
        None => format!(
            "IF NOT pg_catalog.pg_try_advisory_xact_lock({args}) THEN RAISE EXCEPTION USING ERRCODE = 'lock_not_available', MESSAGE = '{BUSY}'; END IF;"
        ),
        Some(b) => format!(
            "PERFORM pg_catalog.set_config('lock_timeout', '{}ms', true); PERFORM pg_catalog.pg_advisory_xact_lock({args}); \
             PERFORM pg_catalog.set_config('lock_timeout', previous, true);",
            timeout_ms(b)
        ),
    };
    format!(
        "DO $pg_advisory_lock$ DECLARE previous text := pg_catalog.current_setting('lock_timeout'); BEGIN {take} \
         EXCEPTION WHEN lock_not_available THEN RAISE EXCEPTION USING ERRCODE = 'lock_not_available', MESSAGE = '{BUSY}'; \
         END $pg_advisory_lock$; RELEASE SAVEPOINT {SAVEPOINT}"
    )
}
