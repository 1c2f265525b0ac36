//! `locklab-holders`: who holds and who awaits advisory locks on a running
//! server, with a verdict per lock — the guide's diagnostic hook ("export the
//! count of advisory locks held by connections in the idle state for longer
//! than a minute", section 4), made correct (bigint keys decoded from both
//! halves, waiters and `pg_blocking_pids`) and read-only.
//!
//! Data flow: a DSN and libpq's variables → [`conninfo`] (where, and how
//! much TLS) → [`tls::Connector`] → [`snapshot::take`] (one query in a
//! read-only transaction) → [`Snapshot`] → [`verdict::judge`] with
//! [`Thresholds`] and the operator's [`names::KeyNames`] →
//! [`verdict::Judged`] → [`render`] (table, JSON) or [`metrics`] (Prometheus
//! text format), served by [`serve`] for one server or for the named targets
//! of a [`config`] file; [`cli`] is the command line, shared by the
//! `locklab-holders` binary and `locklab holders`.
//!
//! For operators: this crate runs against production servers, so it depends
//! on tokio-postgres, rustls and the exporter's libraries (axum, prometheus), never on
//! the lab's pools, containers or report writers (`cargo tree -p
//! locklab-holders -e normal,build`). `cargo install --locked --path holders`
//! installs just the `locklab-holders` binary.

#![deny(missing_docs)]

pub mod cli;
pub mod config;
pub mod conninfo;
pub mod metrics;
pub mod names;
pub mod render;
pub mod serve;
mod setup;
pub mod snapshot;
pub mod tls;
pub mod verdict;

use std::time::Duration;

use serde::Serialize;

use locklab_core::keys::AdvisoryKey;

pub use snapshot::take;
pub use verdict::{Judged, Thresholds, Verdict, judge};

/// What the server showed at one moment: every advisory lock, held or awaited.
#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    /// The server's clock when the query ran (`clock_timestamp()`), ISO 8601 in
    /// UTC, e.g. `2026-12-01T12:54:54.421151Z`.
    pub taken_at: String,
    /// `server_version` (e.g. `17.11`).
    pub server_version: String,
    /// The role the snapshot was taken as (`current_user`).
    pub role: String,
    /// Whether that role sees every session's state and query text: a
    /// superuser, or a member of `pg_read_all_stats` (which `pg_monitor`
    /// includes). PostgreSQL docs, "The Cumulative Statistics System",
    /// pg_stat_activity: other sessions' details are visible only then.
    pub sees_all_sessions: bool,
    /// How long the snapshot took, connecting excluded (ms).
    pub query_ms: f64,
    /// The locks, in no particular order ([`judge`] sorts them).
    /// (Not serialised: [`Judged`] writes them with their verdicts.)
    #[serde(skip)]
    pub locks: Vec<Lock>,
}

/// `pg_locks` mode of an advisory lock: `pg_advisory_lock_shared` takes
/// `ShareLock`, `pg_advisory_lock` takes `ExclusiveLock` (PostgreSQL docs,
/// "Advisory Lock Functions").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `ShareLock`.
    Shared,
    /// `ExclusiveLock`.
    Exclusive,
}

impl Mode {
    /// `shared` or `exclusive`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Shared => "shared",
            Mode::Exclusive => "exclusive",
        }
    }
}

/// One `pg_locks` row with `locktype = 'advisory'`, joined with the session
/// (`pg_stat_activity`) that holds or awaits it.
#[derive(Clone, Debug, Serialize)]
pub struct Lock {
    /// The key, decoded from `classid`, `objid` and `objsubid` (see
    /// [`AdvisoryKey::decode`]). In JSON: a number (bigint) or `[a, b]` (two
    /// integers), and `key_text` as text (`"5000000001"`, `"(7, -3)"`), exact
    /// for readers whose numbers are doubles.
    #[serde(flatten, serialize_with = "key_json")]
    pub key: AdvisoryKey,
    /// Shared or exclusive.
    pub mode: Mode,
    /// Held (true) or awaited (false).
    pub granted: bool,
    /// The database the key belongs to (advisory keys are per database).
    pub database: Option<String>,
    /// Backend pid; `None` for a lock held by a prepared transaction.
    pub pid: Option<i32>,
    /// `application_name` of the session.
    pub application_name: Option<String>,
    /// The session's role.
    pub user: Option<String>,
    /// `client_addr` (text; `None` for a Unix-socket client or when not visible).
    pub client_addr: Option<String>,
    /// `state`: `active`, `idle`, `idle in transaction`, … (`None` when not visible).
    pub state: Option<String>,
    /// Seconds since the session entered that state (`state_change`).
    pub state_s: Option<f64>,
    /// Seconds since the session's transaction began (`xact_start`); `None` outside a transaction.
    pub xact_s: Option<f64>,
    /// For a waiter: seconds since it began to wait (`pg_locks.waitstart`, PostgreSQL 14+).
    pub wait_s: Option<f64>,
    /// The session's last query, at most [`snapshot::QUERY_CHARS`] characters.
    pub query: Option<String>,
    /// Whether this role may see the session's state and query (see [`Snapshot::sees_all_sessions`]).
    pub visible: bool,
    /// For a waiter: the pids that block it (`pg_blocking_pids`; 0 stands for
    /// a prepared transaction).
    pub blocked_by: Vec<i32>,
    /// The waiters on this key that this lock's session blocks.
    pub blocks: Vec<i32>,
    /// For a lock held by a prepared transaction: its `gid` (`pg_prepared_xacts`);
    /// its owner is [`Lock::user`], its age [`Lock::state_s`].
    pub prepared: Option<String>,
}

fn key_json<S: serde::Serializer>(key: &AdvisoryKey, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    // Flattened into the lock's object: `key` and `key_text`.
    let mut m = s.serialize_map(Some(2))?;
    match key {
        AdvisoryKey::Big(k) => m.serialize_entry("key", k)?,
        AdvisoryKey::Pair(a, b) => m.serialize_entry("key", &(a, b))?,
    }
    m.serialize_entry("key_text", &key.to_string())?;
    m.end()
}

/// Seconds as `73 s`, `4 min 2 s`, `3 h 05 min`, for tables and messages.
pub fn age_text(s: f64) -> String {
    let d = Duration::from_secs_f64(s.max(0.0));
    let secs = d.as_secs();
    if secs < 10 {
        format!("{:.1} s", d.as_secs_f64())
    } else if secs < 120 {
        format!("{secs} s")
    } else if secs < 7200 {
        format!("{} min {} s", secs / 60, secs % 60)
    } else {
        format!("{} h {:02} min", secs / 3600, (secs % 3600) / 60)
    }
}
