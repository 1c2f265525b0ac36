//! Taking a [`Snapshot`]: one query, inside a read-only transaction with a
//! short `statement_timeout`, over `pg_locks`, `pg_stat_activity`,
//! `pg_database` and, for waiters only, `pg_blocking_pids`.
//!
//! `pg_blocking_pids` takes every lock-manager partition lock for a moment
//! (PostgreSQL docs, "System Information Functions": "frequent calls to this
//! function could have some impact on database performance"), so it is called
//! once per waiting backend, never per held lock; who a holder blocks is
//! derived from the waiters' lists.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use locklab_core::ConnectSpec;
use tokio_postgres::Client;

use crate::tls::Connector;

use super::{Lock, Mode, Snapshot};
use locklab_core::keys::AdvisoryKey;

/// At most this many characters of a session's last query are kept.
pub const QUERY_CHARS: i32 = 120;

/// `application_name` of the snapshot's own session.
pub const APPLICATION_NAME: &str = "locklab holders";

/// The snapshot query: one row per session (backend pid and database) that
/// holds or awaits advisory locks, its locks as arrays (a session's details
/// are read, joined and sent once, not once per lock: at 10,000 locks on 200
/// sessions, 200 rows), or a single row with those columns NULL when there is
/// none (the first four columns are always there). The five `array_agg`s of
/// a group are advanced together, row by row (none has an `order by` of its
/// own), so their elements line up. A backend awaits at most one lock at a
/// time, so `waitstart` is that lock's. `$1`: the database names
/// to keep (NULL: all; the last column names those that do not exist); `$2`: [`QUERY_CHARS`]. `pg_locks.waitstart` exists
/// since PostgreSQL 14.
const SQL: &str = "\
with now as materialized (select clock_timestamp() as t),
stats_role as materialized (
  -- PostgreSQL 14 shows other sessions to members of pg_read_all_stats,
  -- 15+ to roles with its privileges (pgstatfuncs.c, HAS_PGSTAT_PERMISSIONS).
  select pg_catalog.pg_has_role('pg_read_all_stats',
    case when current_setting('server_version_num')::int < 150000 then 'MEMBER' else 'USAGE' end) as sees_all),
l as (
  select pid, database, case when pid is null then virtualtransaction end as vxid,
    array_agg(classid order by classid, objid, objsubid, mode) as classids,
    array_agg(objid order by classid, objid, objsubid, mode) as objids,
    array_agg(objsubid order by classid, objid, objsubid, mode) as objsubids,
    array_agg(mode = 'ShareLock' order by classid, objid, objsubid, mode) as shared,
    array_agg(granted order by classid, objid, objsubid, mode) as granted,
    min(waitstart) as waitstart, bool_and(granted) as all_granted
  from pg_catalog.pg_locks where locktype = 'advisory'
  group by pid, database, case when pid is null then virtualtransaction end),
lp as (
  -- A prepared transaction's locks have no pid; its virtualtransaction also
  -- holds its own transactionid, which names it in pg_prepared_xacts. Looked
  -- up only for such groups (usually none).
  select l.*, case when l.pid is null then (
    select x.transactionid from pg_catalog.pg_locks x
    where x.locktype = 'transactionid' and x.pid is null and x.virtualtransaction = l.vxid limit 1) end as xid
  from l),
sel as (
  select l.*, d.datname::text as datname, a.application_name,
    coalesce(a.usename::text, px.owner::text) as usename,
    host(a.client_addr) as client, a.state, coalesce(a.state_change, px.prepared) as state_change,
    coalesce(a.xact_start, px.prepared) as xact_start, a.query, a.usesysid, px.gid,
    case when not l.all_granted and l.pid is not null then pg_catalog.pg_blocking_pids(l.pid) end as blockers
  from lp l
  left join pg_catalog.pg_database d on d.oid = l.database
  left join pg_catalog.pg_stat_activity a on a.pid = l.pid
  left join pg_catalog.pg_prepared_xacts px on px.transaction = l.xid
  where $1::text[] is null or d.datname = any($1::text[]))
select to_char((select t from now) at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
  current_setting('server_version'), current_user::text, r.sees_all,
  s.classids, s.objids, s.objsubids, s.shared, s.granted, s.datname, s.pid,
  s.application_name, s.usename, s.client, s.state,
  extract(epoch from (n.t - s.state_change))::float8,
  extract(epoch from (n.t - s.xact_start))::float8,
  extract(epoch from (n.t - s.waitstart))::float8,
  left(s.query, $2::int4),
  coalesce(r.sees_all or s.pid is null or pg_catalog.pg_has_role(s.usesysid, 'USAGE'), false),
  s.blockers, s.gid,
  (select array_agg(n) from unnest($1::text[]) n
   where not exists (select from pg_catalog.pg_database where datname = n))
from now n cross join stats_role r left join sel s on true";

/// Where and how to take snapshots.
#[derive(Clone, Debug)]
pub struct Target {
    /// The server (from a DSN: [`crate::conninfo::parse`]).
    pub spec: ConnectSpec,
    /// With how much TLS ([`Connector::plain`]: none).
    pub connector: Connector,
    /// Only locks in these databases (empty: every database).
    pub databases: Vec<String>,
    /// Bound on the whole snapshot: connecting and the query together; the
    /// query's `statement_timeout` too.
    pub timeout: Duration,
}

/// A session with the server of `target`, as `application_name`
/// [`APPLICATION_NAME`], and the task that drives it (it ends when the client is dropped).
///
/// # Errors
/// One line without the password ([`ConnectSpec::redacted`]): the server
/// cannot be reached, refuses the role or its password, the port does not
/// speak PostgreSQL, TLS fails ([`crate::tls::explain`]), or no answer
/// within [`Target::timeout`].
pub async fn connect(target: &Target) -> Result<(Client, tokio::task::JoinHandle<()>)> {
    let at = target.spec.redacted();
    let mut config = target.spec.tokio_postgres_config();
    config
        .application_name(APPLICATION_NAME)
        .connect_timeout(target.timeout);
    let connect = tokio::time::timeout(target.timeout, target.connector.connect(&mut config));
    let (client, task) = connect
        .await
        .map_err(|_| anyhow!("no answer from {at} within {} s", target.timeout.as_secs_f64()))?
        .map_err(|e| {
            if let Some(why) = crate::tls::explain(&e, &target.connector.tls, &target.spec.host) {
                return anyhow!("cannot connect to PostgreSQL at {at}: {why}");
            }
            // Not the server's words and not a refused connection: something
            // answered that does not speak PostgreSQL's protocol.
            let refused = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
            let hint = if e.as_db_error().is_none() && !refused && !e.to_string().starts_with("error connecting") {
                " (does a PostgreSQL server listen there?)"
            } else {
                ""
            };
            anyhow!("cannot connect to PostgreSQL at {at}: {}{hint}", one_line(&e))
        })?;
    Ok((client, task))
}

/// Connects, runs `f` on the session and disconnects, all within
/// [`Target::timeout`]: however the server behaves (a server that stops
/// answering mid-query included), this returns by then. `what` names the
/// work in the timeout's message.
///
/// # Errors
/// As [`connect`]; `f`'s error; or "`what` on `user@host:port/db` took longer than N s".
pub async fn within<T>(target: &Target, what: &str, f: impl AsyncFnOnce(&Client) -> Result<T>) -> Result<T> {
    let at = target.spec.redacted();
    let started = Instant::now();
    let (client, task) = connect(target).await?;
    let left = target.timeout.saturating_sub(started.elapsed());
    let result = tokio::time::timeout(left, f(&client)).await;
    drop(client);
    // The connection task waits for a reply that may never come: end it.
    task.abort();
    let _ = task.await;
    result.map_err(|_| anyhow!("{what} on {at} took longer than {} s", target.timeout.as_secs_f64()))?
}

/// Connects, takes one snapshot and disconnects, within [`Target::timeout`].
///
/// # Errors
/// As [`within`]; or the query failed (its SQLSTATE in the message, e.g.
/// `57014` for the `statement_timeout`); or `--database` names no database.
pub async fn take(target: &Target) -> Result<Snapshot> {
    let at = target.spec.redacted();
    // Connecting errors name the server already; the query's get its name.
    within(target, "the snapshot", async |client| {
        query(client, target).await.with_context(|| format!("snapshot on {at}"))
    })
    .await
}

/// A driver error in one line: the server's message with its SQLSTATE, or the client's.
fn one_line(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => locklab_core::with_sources(e).replace('\n', " "),
    }
}

async fn query(client: &Client, target: &Target) -> Result<Snapshot> {
    let ms = target.timeout.as_millis().max(1);
    client
        .batch_execute(&format!(
            "begin transaction read only; set local statement_timeout = {ms}"
        ))
        .await
        .map_err(|e| anyhow!("{}", one_line(&e)))?;
    let started = Instant::now();
    let rows = client
        .query(
            SQL,
            &[
                &(!target.databases.is_empty()).then_some(&target.databases),
                &QUERY_CHARS,
            ],
        )
        .await
        .map_err(|e| anyhow!("{}", one_line(&e)))?;
    // To the µs: a figure for people, not float noise.
    let query_ms = (started.elapsed().as_secs_f64() * 1e6).round() / 1000.0;
    client
        .batch_execute("commit")
        .await
        .map_err(|e| anyhow!("{}", one_line(&e)))?;
    let first = rows
        .first()
        .ok_or_else(|| anyhow!("the snapshot query returned no row"))?;
    if let Some(missing) = first.try_get::<_, Option<Vec<String>>>(22)? {
        bail!(
            "there is no database named '{}' on this server (--database)",
            missing.join("', '")
        );
    }
    let mut snapshot = Snapshot {
        taken_at: first.try_get(0)?,
        server_version: first.try_get(1)?,
        role: first.try_get(2)?,
        sees_all_sessions: first.try_get(3)?,
        query_ms,
        locks: Vec::with_capacity(rows.len()),
    };
    for row in &rows {
        let (Some(classids), Some(objids), Some(objsubids), Some(shared), Some(granted)) = (
            row.try_get::<_, Option<Vec<u32>>>(4)?,
            row.try_get::<_, Option<Vec<u32>>>(5)?,
            row.try_get::<_, Option<Vec<i16>>>(6)?,
            row.try_get::<_, Option<Vec<bool>>>(7)?,
            row.try_get::<_, Option<Vec<bool>>>(8)?,
        ) else {
            continue; // the row that says there is no lock
        };
        let visible: bool = row.try_get(19)?;
        let hidden = |v: Option<String>| v.filter(|_| visible);
        let session = Lock {
            key: AdvisoryKey::Big(0),
            mode: Mode::Exclusive,
            granted: true,
            database: row.try_get(9)?,
            pid: row.try_get(10)?,
            application_name: row.try_get(11)?,
            user: row.try_get(12)?,
            client_addr: row.try_get(13)?,
            state: hidden(row.try_get(14)?),
            state_s: row.try_get::<_, Option<f64>>(15)?.map(|s| s.max(0.0)),
            xact_s: row.try_get::<_, Option<f64>>(16)?.map(|s| s.max(0.0)),
            wait_s: None,
            query: hidden(row.try_get(18)?),
            visible,
            blocked_by: Vec::new(),
            blocks: Vec::new(),
            prepared: row.try_get(21)?,
        };
        let wait_s = row.try_get::<_, Option<f64>>(17)?.map(|s| s.max(0.0));
        let blockers = row.try_get::<_, Option<Vec<i32>>>(20)?.unwrap_or_default();
        let locks = classids.iter().zip(&objids).zip(&objsubids).zip(&shared).zip(&granted);
        for ((((classid, objid), objsubid), shared), granted) in locks {
            let Some(key) = AdvisoryKey::decode(*classid, *objid, *objsubid) else {
                continue;
            };
            let mut lock = session.clone();
            lock.key = key;
            lock.mode = if *shared { Mode::Shared } else { Mode::Exclusive };
            lock.granted = *granted;
            if !granted {
                lock.wait_s = wait_s;
                lock.blocked_by.clone_from(&blockers);
            }
            snapshot.locks.push(lock);
        }
    }
    link_blockers(&mut snapshot.locks);
    Ok(snapshot)
}

/// Fills [`Lock::blocks`]: a lock's session blocks each waiter on the same
/// database and key whose `pg_blocking_pids` names it (a prepared
/// transaction, which has no pid, is named 0 there).
pub fn link_blockers(locks: &mut [Lock]) {
    let mut waiters: HashMap<(Option<String>, AdvisoryKey), Vec<(i32, Vec<i32>)>> = HashMap::new();
    for l in locks.iter().filter(|l| !l.granted) {
        if let Some(pid) = l.pid {
            waiters
                .entry((l.database.clone(), l.key))
                .or_default()
                .push((pid, l.blocked_by.clone()));
        }
    }
    for l in locks.iter_mut() {
        let pid = l.pid.unwrap_or(0);
        let Some(ws) = waiters.get(&(l.database.clone(), l.key)) else {
            continue;
        };
        l.blocks = ws
            .iter()
            .filter(|(w, by)| *w != pid && by.contains(&pid))
            .map(|(w, _)| *w)
            .collect();
    }
}
