//! Server-side observation from the observer connection: advisory locks from
//! `pg_locks`, who is blocked (`pg_blocking_pids`), whether a backend is gone.
//! Waiting in the harness is always "poll the server until it says so", never
//! a bare sleep.

use std::time::{Duration, Instant};

use locklab_drivers::{Conn, DriverError, Rows};
use serde::{Deserialize, Serialize};

use crate::keys::AdvisoryKey;

/// Pause between the first polls of the server, in ms.
pub const POLL_INTERVAL_MS: u64 = 2;

/// The longest pause between two polls of the server, in ms: a wait that
/// has gone on for a while is polled less often (see [`poll_until`]).
pub const MAX_POLL_INTERVAL_MS: u64 = 10;

/// The shortest pause between polls for a backend to exit after its
/// connection was closed (the leak guard's wait for a closed pool's
/// backends, a closed connection's return): it usually takes a few ms, and
/// at [`POLL_INTERVAL_MS`] the leak guard's wait was a third of a short
/// cell's time (`locklab bench`, docs/src/speed.md).
pub const EXIT_FIRST_PAUSE: Duration = Duration::from_micros(500);

/// One advisory lock row of the run's database.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRow {
    /// The decoded key: i64 for `objsubid = 1`, (i32, i32) for `objsubid = 2`.
    #[serde(serialize_with = "key_text", deserialize_with = "key_from_text")]
    pub key: AdvisoryKey,
    /// `ExclusiveLock` or `ShareLock`.
    pub mode: String,
    /// Whether the lock is held (`true`) or waited for (`false`).
    pub granted: bool,
    /// Backend pid of the holder or waiter.
    pub pid: i32,
    /// `pg_stat_activity.state` of that backend (`idle`, `active`, `idle in transaction`, …).
    pub state: Option<String>,
    /// `pg_stat_activity.application_name`.
    pub application_name: Option<String>,
    /// What `pg_stat_activity` says the backend waits for and whether it
    /// holds a snapshot: only when [`advisory_locks`] was asked for it
    /// (`None` otherwise, and then not written to `matrix.json`'s
    /// `locks_left`, which never asks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<Activity>,
}

/// A backend's wait and snapshot, from its `pg_stat_activity` row
/// (PostgreSQL docs §27.2.3 "pg_stat_activity", and Table 27.4 "Wait Event
/// Types": a backend waiting for an advisory lock shows `Lock` /
/// `advisory`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    /// `wait_event_type:wait_event` (`Lock:advisory`, `Client:ClientRead`),
    /// `None` when the backend waits for nothing (it runs, or it is gone).
    pub wait_event: Option<String>,
    /// Whether `backend_xmin` is set: the backend holds a snapshot, which
    /// holds back the horizon below which `VACUUM` may remove dead rows
    /// (docs §24.1 "Routine Vacuuming"). A statement keeps its snapshot while it waits for a
    /// lock, and a `repeatable read` transaction its own until it ends.
    pub holds_xmin: bool,
}

/// Serialises a key as its text: `7`, `(1, 2)`.
pub(crate) fn key_text<S: serde::Serializer>(k: &AdvisoryKey, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(k)
}

/// Reads a key written by [`key_text`] (`7`, `(1, 2)`), e.g. from `matrix.json`.
pub(crate) fn key_from_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<AdvisoryKey, D::Error> {
    let text = String::deserialize(d)?;
    AdvisoryKey::from_text(&text).ok_or_else(|| serde::de::Error::custom(format!("not an advisory lock key: {text:?}")))
}

/// Advisory locks in the current database, pg_locks joined to pg_stat_activity.
/// Reads `classid`, `objid`, `objsubid` and decodes the key as the PostgreSQL
/// docs (System Views, pg_locks) describe, not just `objid`. Holders first,
/// then waiters roughly in the order they started waiting (`waitstart`,
/// PostgreSQL 14+: the start of the waiter's deadlock timer, stored just after
/// it joined the wait queue, so under load not always the queue's order; the
/// runner's recorded snapshots order waiters by actor instead).
const ADVISORY_LOCKS_SQL: &str = "\
select l.classid::oid::bigint, l.objid::oid::bigint, l.objsubid, l.mode, l.granted, l.pid, a.state, a.application_name,
  a.wait_event_type || ':' || a.wait_event, a.backend_xmin is not null
from pg_locks l
left join pg_stat_activity a on a.pid = l.pid
where l.locktype = 'advisory'
  and l.database = (select oid from pg_database where datname = current_database())
order by l.granted desc, l.waitstart, l.pid, l.classid, l.objid";

/// Snapshots the advisory locks of the observer's database, optionally only
/// `key`; with `activity`, each row's [`Activity`] too (the same query,
/// the same instant: one `pg_locks` / `pg_stat_activity` read).
///
/// # Errors
/// A failed query, or a row that cannot be decoded.
pub async fn advisory_locks(
    observer: &mut dyn Conn,
    key: Option<AdvisoryKey>,
    activity: bool,
) -> Result<Vec<LockRow>, DriverError> {
    let rows = observer.simple_query(ADVISORY_LOCKS_SQL).await?;
    let mut out = Vec::new();
    for r in rows.rows {
        let text = |i: usize| r.get(i).cloned().flatten();
        let num = |i: usize| -> Result<i64, DriverError> {
            text(i)
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| DriverError::Client(format!("pg_locks: column {i} is not a number")))
        };
        let decoded = AdvisoryKey::decode(num(0)? as u32, num(1)? as u32, num(2)? as i16)
            .ok_or_else(|| DriverError::Client("pg_locks: advisory row with objsubid other than 1 or 2".into()))?;
        if key.is_some_and(|k| k != decoded) {
            continue;
        }
        out.push(LockRow {
            key: decoded,
            mode: text(3).unwrap_or_default(),
            granted: text(4).as_deref() == Some("t"),
            pid: num(5)? as i32,
            state: text(6),
            application_name: text(7),
            activity: activity.then(|| Activity {
                wait_event: text(8),
                holds_xmin: text(9).as_deref() == Some("t"),
            }),
        });
    }
    Ok(out)
}

/// Whether backend `pid` is waiting for a lock held by another backend.
///
/// # Errors
/// A failed query.
pub async fn is_blocked(observer: &mut dyn Conn, pid: i32) -> Result<bool, DriverError> {
    let rows = observer
        .simple_query(&format!("select cardinality(pg_blocking_pids({pid})) > 0"))
        .await?;
    Ok(first_is_true(&rows))
}

/// Whether backend `pid` has left `pg_stat_activity` (its connection is closed
/// and its locks are released).
///
/// # Errors
/// A failed query.
pub async fn backend_gone(observer: &mut dyn Conn, pid: i32) -> Result<bool, DriverError> {
    let rows = observer
        .simple_query(&format!(
            "select not exists (select 1 from pg_stat_activity where pid = {pid})"
        ))
        .await?;
    Ok(first_is_true(&rows))
}

/// Whether backend `pid` is running a statement (`pg_stat_activity.state` is
/// `active`): a statement sent in the background has reached the server.
///
/// # Errors
/// A failed query.
pub async fn is_active(observer: &mut dyn Conn, pid: i32) -> Result<bool, DriverError> {
    let rows = observer
        .simple_query(&format!(
            "select exists (select 1 from pg_stat_activity where pid = {pid} and state = 'active')"
        ))
        .await?;
    Ok(first_is_true(&rows))
}

fn first_is_true(rows: &Rows) -> bool {
    rows.first_value().flatten() == Some("t")
}

/// Outcome of [`poll_until`].
pub enum Polled<T> {
    /// The condition held; the value it produced.
    Done(T),
    /// The deadline passed.
    TimedOut,
}

/// Calls `check` until it yields `Some`, or until `deadline`. The pause
/// between two calls is a tenth of the time waited so far, from
/// [`POLL_INTERVAL_MS`] (2 ms) up to [`MAX_POLL_INTERVAL_MS`] (10 ms): what
/// the server says is seen within 10 % of the wait (at most 10 ms late),
/// and a long wait does not keep a backend busy answering polls (about
/// a tenth of a short cell's cost on the server was polling at 2 ms).
///
/// # Errors
/// The first error `check` returns.
pub async fn poll_until<T, E>(
    deadline: Instant,
    check: impl AsyncFnMut() -> Result<Option<T>, E>,
) -> Result<Polled<T>, E> {
    poll_from(deadline, Duration::from_millis(POLL_INTERVAL_MS), check).await
}

/// [`poll_until`] with `first` as the shortest pause: for a wait that
/// usually ends within a few ms and is on every cell's path (the leak
/// guard's wait for a closed pool's backends to exit).
///
/// # Errors
/// The first error `check` returns.
pub async fn poll_from<T, E>(
    deadline: Instant,
    first: Duration,
    mut check: impl AsyncFnMut() -> Result<Option<T>, E>,
) -> Result<Polled<T>, E> {
    let began = Instant::now();
    loop {
        if let Some(v) = check().await? {
            return Ok(Polled::Done(v));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(Polled::TimedOut);
        }
        let pause = ((now - began) / 10).clamp(first, Duration::from_millis(MAX_POLL_INTERVAL_MS));
        tokio::time::sleep(pause.min(deadline - now)).await;
    }
}

// ---------------------------------------------------------------------------
// The catalog SQL of the run's phases (every pg_locks / pg_stat_activity query
// the harness sends lives in this file).
// ---------------------------------------------------------------------------

/// Ends every other backend connected to the current database.
pub const TERMINATE_OTHERS_SQL: &str = "select pg_terminate_backend(pid) from pg_stat_activity \
     where datname = current_database() and pid <> pg_backend_pid()";

/// Backends of the current database still running a statement: pid, what it
/// waits for (`wait_event_type/wait_event`; else, for a backend with a lock
/// not granted in `pg_locks`, `Lock/LOCKTYPE`, as the wait event names it:
/// a backend in a lock's queue shows no wait event while it is woken, e.g.
/// by a catch-up interrupt, until it sleeps again; else `running`), the pids
/// blocking it (`pg_blocking_pids`, comma-separated) and the start of its
/// statement.
pub const STUCK_SQL: &str = "select pid, coalesce(wait_event_type || '/' || wait_event, \
     (select 'Lock/' || l.locktype from pg_locks l where l.pid = a.pid and not l.granted limit 1), 'running'), \
     array_to_string(pg_blocking_pids(pid), ','), left(regexp_replace(query, '\\s+', ' ', 'g'), 80) \
     from pg_stat_activity a where datname = current_database() and pid <> pg_backend_pid() \
     and backend_type = 'client backend' and state = 'active' order by pid";

/// Ends every other backend of the current database that holds or waits for
/// an advisory lock; returns their pids.
pub const CLEAN_ADVISORY_SQL: &str = "select pid from (select distinct pid from pg_locks \
     where locktype = 'advisory' and pid <> pg_backend_pid() \
     and database = (select oid from pg_database where datname = current_database())) x \
     where pg_terminate_backend(pid)";

/// How many other backends of the current database (not the monitor) run a
/// statement that is not a lock wait, or changed state in the last 100 ms
/// (`pg_stat_activity.state_change`). A lock wait is a backend with an
/// ungranted `pg_locks` row.
pub const UNSETTLED_SQL: &str = "select count(*) from pg_stat_activity a where datname = current_database() \
     and pid <> pg_backend_pid() and application_name <> 'locklab-monitor' \
     and ((state = 'active' and not exists \
            (select 1 from pg_locks l where l.pid = a.pid and not l.granted)) \
          or state_change > clock_timestamp() - interval '100 ms')";

/// For backend `pid`: (1 when it is idle after a pooler's reset, `DISCARD
/// ALL` or `reset` (the column's check-in, `locklab_drivers::CheckIn::reset_query`),
/// 0 otherwise; how many rows `pg_stat_activity` has for it, 0 once it is gone).
pub fn reset_or_gone_sql(pid: i32, reset: &str) -> String {
    let resets = reset_statements_sql(reset);
    format!(
        "select count(*) filter (where state = 'idle' and query in {resets}), count(*) \
         from pg_stat_activity where pid = {pid}"
    )
}

/// The statements a pooler's check-in may send, as an SQL list literal for
/// `query in …`: PgBouncer's default `DISCARD ALL` (with and without its
/// semicolon) and the column's own `reset` (`locklab_drivers::CheckIn::reset_query`).
fn reset_statements_sql(reset: &str) -> String {
    let reset = reset.replace('\'', "''");
    format!("('DISCARD ALL', 'DISCARD ALL;', '{reset}')")
}

/// How many client backends of database `db`, other than the asking one and
/// `except` (the direct actors'), a pooler that resets after every
/// transaction has released and not finished resetting: idle after a
/// statement that is not the pooler's reset `reset` (nor none at all), or
/// still running that reset (`active`). PgBouncer sends the reset after it
/// has passed ReadyForQuery to the client (`src/objects.c`, `release_server`
/// → `reset_on_release`), so either state can be seen right after a step.
pub fn unreset_backends_sql(db: &str, except: &[i32], reset: &str) -> String {
    let lit = db.replace('\'', "''");
    let except: String = except.iter().map(|p| format!(" and pid <> {p}")).collect();
    let resets = reset_statements_sql(reset);
    format!(
        "select count(*) from pg_stat_activity where datname = '{lit}' and backend_type = 'client backend' \
         and pid <> pg_backend_pid(){except} \
         and ((state = 'idle' and query <> '' and query not in {resets}) \
         or (state = 'active' and query in {resets}))"
    )
}

/// What is left in database `db` (asked from another database): one text per
/// backend, `pid N (application_name, state)`, and per advisory lock, `lock
/// KEY (pid N)` (KEY an i64, or (i32, i32) for two-key locks; a prepared
/// transaction's lock has no pid). Backend `except` (the harness's monitor
/// connection, kept for the next cell) is not a leftover.
pub fn leftovers_sql(db: &str, except: Option<i32>) -> String {
    let lit = db.replace('\'', "''");
    let except = except.map_or(String::new(), |pid| format!(" and pid <> {pid}"));
    format!(
        "select 'pid ' || pid || ' (' || coalesce(nullif(application_name, ''), backend_type) || ', ' \
         || coalesce(state, 'no state') || ')' from pg_stat_activity where datname = '{lit}'{except} \
         union all \
         select 'lock ' || case when objsubid = 1 then ((classid::bigint << 32) | objid::bigint)::text \
         else '(' || classid::int || ', ' || objid::int || ')' end \
         || coalesce(' (pid ' || pid || ')', ' (a prepared transaction)') \
         from pg_locks where locktype = 'advisory' \
         and database = (select oid from pg_database where datname = '{lit}')"
    )
}

/// Ends every backend connected to database `db` (asked from another database).
pub fn terminate_database_sql(db: &str) -> String {
    let lit = db.replace('\'', "''");
    format!("select pg_terminate_backend(pid) from pg_stat_activity where datname = '{lit}'")
}

/// How many `create database` statements whose name matches the LIKE
/// `pattern` are still running.
pub fn creating_databases_sql(pattern: &str) -> String {
    format!(
        "select count(*) from pg_stat_activity where state = 'active' \
         and pid <> pg_backend_pid() and query like 'create database \"{pattern}'"
    )
}

/// The backend pid of the connection it runs on.
pub const BACKEND_PID_SQL: &str = "select pg_backend_pid()";

/// Whether none of `pids` (backend pids) is running a statement (`active`
/// in `pg_stat_activity`): `t` or `f`.
pub fn none_active_sql(pids: &[i32]) -> String {
    let pids: Vec<String> = pids.iter().map(ToString::to_string).collect();
    format!(
        "select count(*) = 0 from pg_stat_activity where state = 'active' and pid in ({})",
        pids.join(", ")
    )
}

/// Ends backend `pid`, waiting up to `timeout_ms` (ms) until it has exited
/// (PostgreSQL 14+: with a timeout, `pg_terminate_backend` waits, docs
/// §9.28.2): `t` once it has, `f` (with a warning) if it had not.
pub fn terminate_backend_sql(pid: i32, timeout_ms: u64) -> String {
    format!("select pg_terminate_backend({pid}, {timeout_ms})")
}

/// Ends every backend connected to database `$1` but this one and backend
/// `$2` (0: none; the harness's monitor kept for the next cell), asked from
/// another database.
pub const TERMINATE_DATABASE_BACKENDS_SQL: &str = "select pg_terminate_backend(pid) from pg_stat_activity \
     where datname = $1 and pid <> pg_backend_pid() and pid <> $2";

/// The names of the databases whose name matches the LIKE `pattern`.
pub fn databases_like_sql(pattern: &str) -> String {
    format!("select datname from pg_database where datname like '{pattern}'")
}

/// Whether statement `sql` waits in pgagroal's queue, read from the server
/// (pgagroal 1.6 lists no clients: [`crate::server::poolers::queue`]): `t`
/// when no backend of the current database runs it (`active` with that
/// text in `pg_stat_activity.query`, compared on its first 1000
/// characters, below the default `track_activity_query_size` of 1024
/// bytes) and none of pgagroal's server connections to the database
/// (`application_name` `pgagroal`: it does not pass its clients' on) is
/// `idle`, so the pooler has none to give it: "in a statement, on no
/// backend".
pub fn queued_on_no_backend_sql(sql: &str) -> String {
    let lit = dollar_quoted(sql);
    format!(
        "select count(*) filter (where state = 'active' and left(query, 1000) = left({lit}, 1000)) = 0 \
         and count(*) filter (where application_name = 'pgagroal' and state = 'idle') = 0 \
         and count(*) filter (where application_name = 'pgagroal') > 0 \
         from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()"
    )
}

/// The backends of the current database that run statement `sql`
/// (`active`, the same text on its first 1000 characters) and wait for a
/// lock another backend holds (`pg_blocking_pids`): one pid a row. Behind a
/// transaction-mode pooler a client's statement runs on whichever server
/// connection the pooler gives it, not necessarily the backend its
/// checkout's `select pg_backend_pid()` met, so the statement is looked
/// for by its text (and the caller gives each client a backend of its own:
/// several may send the same text).
pub fn statement_blocked_sql(sql: &str) -> String {
    let lit = dollar_quoted(sql);
    format!(
        "select pid from pg_stat_activity where datname = current_database() \
         and pid <> pg_backend_pid() and state = 'active' and left(query, 1000) = left({lit}, 1000) \
         and cardinality(pg_blocking_pids(pid)) > 0 order by pid"
    )
}

/// `text` as a dollar-quoted string literal, its tag chosen so that the
/// text does not contain it (PostgreSQL docs §4.1.2.4): unlike `'…'` with
/// doubled quotes, its meaning does not depend on
/// `standard_conforming_strings`, which a scenario's `server_settings` may
/// turn off.
fn dollar_quoted(text: &str) -> String {
    let mut tag = "$ll$".to_owned();
    let mut n = 0;
    while text.contains(&tag) {
        n += 1;
        tag = format!("$ll{n}$");
    }
    format!("{tag}{text}{tag}")
}
