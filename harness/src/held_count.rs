//! The `held_count` probe: how many times a session holds a session-level
//! advisory lock, i.e. how many `pg_advisory_unlock` calls it takes to
//! release it, read without changing what is held.
//!
//! # Why a probe
//!
//! PostgreSQL keeps the count in the backend's own lock table: each
//! `LOCALLOCK` has `nLocks` and one entry per owner (the session, or a
//! transaction's resource owner) with its own count (`LockAcquireExtended`
//! and `LockRelease` in `src/backend/storage/lmgr/lock.c`). The shared lock
//! table, and so `pg_locks`, has one row per lock mode and backend whatever
//! the count (docs, System Views, "pg_locks"; §13.3.5 "Advisory Locks": "If a
//! session already holds a given advisory lock, additional requests by it
//! will always succeed ... and will need to be released the same number of
//! times"). No function reads the count, so it has to be probed by
//! unlocking.
//!
//! # How the probe keeps the lock
//!
//! The probe is one call of a PL/pgSQL function, [`INSTALL_SQL`], that the
//! harness installs in the run's database when a scenario has a
//! `held_count` step. On the calling session it:
//!
//! 1. returns 0 at once unless `pg_locks` shows this backend granted the
//!    key in the mode counted: nothing is locked or unlocked;
//! 2. in a subtransaction (a `BEGIN … EXCEPTION` block), takes the same
//!    key and mode at transaction level (`pg_try_advisory_xact_lock`),
//!    granted at once as the backend already holds the lock (a request for
//!    a lock a backend holds is granted locally, `LOCKACQUIRE_ALREADY_HELD`).
//!    This guard keeps the `LOCALLOCK`'s total count above zero, so the
//!    shared lock is never released while the session's holds are counted:
//!    no waiter is granted, woken or sees it free (`LockRelease` returns
//!    before touching the shared table while `nLocks > 0`);
//! 3. calls `pg_advisory_unlock` until it answers false, counting the
//!    trues (the last call's `WARNING: you don't own a lock` is not sent:
//!    `client_min_messages` is set to `error` for the subtransaction only),
//!    then `pg_advisory_lock` as many times (granted locally, never waits);
//! 4. raises an error that the block catches, which rolls the
//!    subtransaction back: the guard, owned by it, is released, and the
//!    `client_min_messages` setting reverts. Session-level lock calls do not
//!    follow transaction semantics (§13.3.5: "an unlock is effective even
//!    if the calling transaction fails later"), so the re-taken holds stay.
//!
//! # Limits
//!
//! - Session-level holds only: transaction-level ones (`pg_advisory_xact_lock`)
//!   cannot be released before their transaction ends, so they cannot be
//!   counted; a key held only at transaction level counts 0.
//! - One mode per probe: exclusive (`pg_advisory_unlock`) or, with
//!   `shared`, shared (`pg_advisory_unlock_shared`); the two are separate
//!   locks with separate counts.
//! - It runs a statement on the actor's connection: in a failed transaction
//!   it fails (25P02) like any statement, and behind a transaction-mode
//!   pooler it counts the holds of whichever server connection runs it.
//! - It creates a function in the run's database, so such a scenario gets a
//!   database of its own ([`crate::scenario::Scenario::may_change_the_database`]).

use crate::keys::AdvisoryKey;

/// The name of the probe function (two overloads: a bigint key, two integers).
pub const FUNCTION: &str = "locklab_held_count";

/// The body shared by both overloads; `{args}` the key's parameters,
/// `{call}` the key as lock functions take it, `{key_match}` the `pg_locks`
/// condition for it (docs, "pg_locks": a bigint key's high half in `classid`, low
/// half in `objid`, `objsubid` 1; two integers in `classid`, `objid`,
/// `objsubid` 2).
const TEMPLATE: &str = r#"create or replace function locklab_held_count({args}, shared boolean) returns bigint
language plpgsql volatile as $locklab$
declare
  n bigint := 0;
begin
  if not exists (
    select 1 from pg_locks l
    where l.locktype = 'advisory' and l.pid = pg_backend_pid() and l.granted
      and l.database = (select oid from pg_database where datname = current_database())
      and l.mode = case when shared then 'ShareLock' else 'ExclusiveLock' end
      and {key_match}) then
    return 0;
  end if;
  begin
    perform set_config('client_min_messages', 'error', true);
    if shared then
      if not pg_try_advisory_xact_lock_shared({call}) then
        raise exception 'locklab_held_count: the guard was not granted';
      end if;
      while pg_advisory_unlock_shared({call}) loop n := n + 1; end loop;
      for i in 1..n loop perform pg_advisory_lock_shared({call}); end loop;
    else
      if not pg_try_advisory_xact_lock({call}) then
        raise exception 'locklab_held_count: the guard was not granted';
      end if;
      while pg_advisory_unlock({call}) loop n := n + 1; end loop;
      for i in 1..n loop perform pg_advisory_lock({call}); end loop;
    end if;
    raise sqlstate 'LKHC0';
  exception when sqlstate 'LKHC0' then
    null;
  end;
  return n;
end
$locklab$"#;

/// The statements that install the probe (both overloads), run by the
/// harness's own connection to the run's database before `setup`.
pub fn install_sql() -> Vec<String> {
    let big = TEMPLATE.replace("{args}", "k bigint").replace("{call}", "k").replace(
        "{key_match}",
        "l.objsubid = 1 and l.classid::bigint = ((k >> 32) & 4294967295) and l.objid::bigint = (k & 4294967295)",
    );
    let pair = TEMPLATE
        .replace("{args}", "k1 integer, k2 integer")
        .replace("{call}", "k1, k2")
        .replace(
            "{key_match}",
            "l.objsubid = 2 and l.classid::bigint = (k1::bigint & 4294967295) and l.objid::bigint = (k2::bigint & 4294967295)",
        );
    vec![big, pair]
}

/// The statement an actor runs for `held_count: key`: one row, one column,
/// the count (a non-negative bigint).
pub fn probe_sql(key: AdvisoryKey, shared: bool) -> String {
    match key {
        AdvisoryKey::Big(k) => format!("select {FUNCTION}(({k})::bigint, {shared})"),
        AdvisoryKey::Pair(a, b) => format!("select {FUNCTION}({a}, {b}, {shared})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe names the overload of its key's kind, with the mode.
    #[test]
    fn probes_call_the_overload_of_the_key() {
        assert_eq!(
            probe_sql(AdvisoryKey::Big(-7), false),
            "select locklab_held_count((-7)::bigint, false)"
        );
        assert_eq!(
            probe_sql(AdvisoryKey::Pair(1, -2), true),
            "select locklab_held_count(1, -2, true)"
        );
        let sql = install_sql();
        assert_eq!(sql.len(), 2);
        assert!(sql.iter().all(|s| !s.contains('{')), "a placeholder left: {sql:?}");
    }
}
