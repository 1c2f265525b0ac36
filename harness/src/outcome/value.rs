//! What one observation measured, typed ([`Value`]), with the two forms the
//! later stages read: the machine-readable JSON of `matrix.json` (serde,
//! without loss: what is written reads back as the same value) and the text
//! of a report cell (`Display`). The runner makes values; it never writes
//! cell text, and nothing reads cell text back into a value.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::keys::AdvisoryKey;

/// The value of an observation. In `matrix.json` (schema 7) a value is
/// `{"kind": KIND, "value": …}`, KIND the variant's snake-case name
/// (`no_rows`, `bool`, `error`, `locks`, …) and `value` its content (absent
/// for the kinds without one): e.g. `{"kind": "bool", "value": true}`,
/// `{"kind": "number", "value": [7, "007"]}`, `{"kind": "dropped", "value":
/// {"at_ms": 200, "cancel": {"not_sent": "…"}}}`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Value {
    /// The statement returned no row: shown `(no rows)`.
    NoRows,
    /// SQL NULL: shown `NULL`.
    Null,
    /// The step does not apply to this driver kind (`when:`): shown `n/a`.
    NotApplicable,
    /// The cell was not run: its pooler does not carry the scenario's
    /// connection settings (`locklab_drivers::PoolerFacts::settings_pass`).
    /// Shown `n/a (settings cannot pass the pooler)`; a report names the
    /// column's product ([`Value::shown_through`]: `n/a (settings cannot
    /// pass Pgpool-II)`). Its JSON names no product (`{"kind":
    /// "settings_cannot_pass"}`), so a baseline's cell is the same whichever
    /// pooler it is about.
    #[serde(rename = "settings_cannot_pass")]
    SettingsCannotPass,
    /// `t` / `f` from the server: shown `true` / `false`.
    Bool(bool),
    /// A value that parses as an i64 and is written as Rust writes it.
    Int(i64),
    /// A value that parses as an i64 but is written otherwise (`007`): the
    /// number and the text, shown as the server wrote it.
    Number(i64, String),
    /// Any other text (an empty one, e.g. the result of a function
    /// returning `void`, is shown `(empty)`).
    Text(String),
    /// A failed statement, shown as its SQLSTATE.
    Error(StatementError),
    /// An `observe` step: shown `held by a (idle); waiting: b`.
    Locks(LockSnapshot),
    /// A `held_count` step: how many times the actor's session held the
    /// session-level lock (how many unlocks it takes), of the exclusive or
    /// the shared mode: shown `held 3×`, `held 2× (shared)`, `held 0×`.
    HeldCount {
        /// The count.
        count: i64,
        /// Whether the shared holds were counted.
        shared: bool,
    },
    /// An `order` step: the step ids in completion order, shown `a → b`.
    Order(Vec<String>),
    /// A checkout bounded by `client_timeout_ms`.
    Checkout(Checkout),
    /// A return bounded by `client_timeout_ms`.
    Return(Return),
    /// A call dropped at its `client_timeout_ms` (ms).
    Dropped {
        /// The bound, in ms.
        at_ms: u64,
        /// Whether a cancel request was sent, and its effect.
        cancel: Cancel,
    },
    /// A `lock_guard` step whose guard was acquired and ended.
    Guard(GuardEnded),
    /// A capability the driver does not have (which): shown `n/a (no guard API)`.
    Unsupported(String),
    /// A step of an actor whose bounded checkout gave up (why).
    NoConnection(String),
    /// A `granted` step: the waiter stopped waiting (the lock was released to
    /// it, or its own bound ended the wait) within the bound; the time since
    /// the fault is the observation's `elapsed_ms`: shown `released`.
    Released,
    /// A `granted` step whose waiter still waited at the bound, ms after the
    /// fault: shown `still held at N s`.
    StillHeld(u64),
    /// The row of an invariant over a race cell's trials (or, in its
    /// distribution, how it came out on one trial).
    Invariant(Verdict),
    /// A recorded `blocked` step: what the actor's background call was
    /// doing when the step ended ([`Wait`]).
    Wait(Wait),
}

/// What a `blocked` step read of a background call (`blocked on a lock`,
/// `queued in the pooler`, `finished first (value f)`); in `matrix.json`
/// `{"kind": "wait", "value": "blocked_on_lock"}`, `"queued_in_pooler"` or
/// `{"finished_first": VALUE}`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wait {
    /// Its backend waits for a lock another backend holds
    /// (`pg_blocking_pids` not empty; PostgreSQL docs §9.27, "System
    /// Information Functions").
    BlockedOnLock,
    /// Its client waits in the pooler for a server connection: listed as
    /// waiting by the pooler (PgBouncer's `SHOW CLIENTS` state `waiting`,
    /// Odyssey's `show clients` state `queue`), or, behind pgagroal, which
    /// lists no clients, its statement runs on no backend while none of
    /// the pooler's server connections to the database is idle.
    QueuedInPooler,
    /// The call finished before either was seen: its outcome (a value, or
    /// the statement's error).
    FinishedFirst(Box<Value>),
}

impl fmt::Display for Wait {
    /// `blocked on a lock`, `queued in the pooler`, `finished first (value
    /// false)`, `finished first (error 55P03)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::BlockedOnLock => f.write_str("blocked on a lock"),
            Wait::QueuedInPooler => f.write_str("queued in the pooler"),
            Wait::FinishedFirst(v) if matches!(**v, Value::Error(_)) => write!(f, "finished first (error {v})"),
            Wait::FinishedFirst(v) => write!(f, "finished first (value {v})"),
        }
    }
}

/// An invariant's row (`"holds"`, `"violated"`, `"finding"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No trial violated it: shown `holds`.
    Holds,
    /// A trial violated it: shown `violated`.
    Violated,
    /// An invariant declared the finding, however it came out (its row
    /// compares by its share of violating trials, which depends on how many
    /// ran): shown `measured (the finding)`.
    Finding,
}

/// A statement's error as the driver reported it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StatementError {
    /// The driver's message.
    pub message: String,
    /// The SQLSTATE, when the driver gives one.
    pub sqlstate: Option<String>,
    /// Whether the server sent it (`false`: a client-side error).
    pub from_server: bool,
}

/// How a bounded checkout went (`"ok"`, `{"no_answer": MS}`, …).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Checkout {
    /// A connection, and its first statement answered.
    Ok,
    /// A connection, but `select pg_backend_pid()` on it did not answer
    /// within the bound (ms): a statement still queued on it.
    NoAnswer(u64),
    /// The checkout was dropped at the bound (ms).
    Dropped(u64),
    /// The pool returned an error.
    Failed(String),
}

/// How a bounded return went (`"to_pool"`, `{"unfinished": MS}`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Return {
    /// Into the pool.
    ToPool,
    /// The connection was closed (the direct driver).
    Closed,
    /// The client connection to the pooler was closed; its server connection
    /// went back to the pooler.
    ToPooler,
    /// The give-back had not finished at the bound (ms).
    Unfinished(u64),
}

/// What happened to the cancel request of a dropped call (`"none"`,
/// `{"not_sent": WHY}`, `{"no_effect": MS}`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cancel {
    /// None was asked for (`on_timeout: drop`).
    None,
    /// None could be sent (why, e.g. the driver has no cancel API).
    NotSent(String),
    /// Sent, but the statement had not ended within this many ms.
    NoEffect(u64),
}

/// How a lock guard ended (`"release_now"`, `"dropped"`, `"leaked"`), or that a
/// `try_acquire` made none (`"not_acquired"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardEnded {
    /// `release_now()`.
    ReleaseNow,
    /// The guard was dropped.
    Dropped,
    /// `leak()`.
    Leaked,
    /// `try_acquire` found the lock taken: no guard was made.
    NotAcquired,
}

impl GuardEnded {
    fn text(self) -> &'static str {
        match self {
            GuardEnded::ReleaseNow => "acquired, release_now()",
            GuardEnded::Dropped => "acquired, guard dropped",
            GuardEnded::Leaked => "acquired, leak()",
            GuardEnded::NotAcquired => "not acquired",
        }
    }
}

/// What an `observe` step saw: the granted and awaited advisory locks.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LockSnapshot {
    /// Whether any granted advisory lock matched.
    pub held: bool,
    /// Backends holding a matching lock (granted rows of `pg_locks`).
    pub holders: Vec<LockHolder>,
    /// Backends waiting for one (ungranted rows).
    pub waiters: Vec<LockHolder>,
}

/// One holder or waiter of an advisory lock.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LockHolder {
    /// The actor that last used the backend (`server connection` behind
    /// transaction pooling), `None` for a backend no actor used.
    pub actor: Option<String>,
    /// Backend pid.
    pub pid: i32,
    /// `pg_stat_activity.state` of the backend.
    pub state: Option<String>,
    /// The key: an i64, or (i32, i32) (serialised as text: `7`, `(1, 2)`).
    #[serde(
        serialize_with = "crate::observe::key_text",
        deserialize_with = "crate::observe::key_from_text"
    )]
    pub key: AdvisoryKey,
    /// `ExclusiveLock` or `ShareLock`.
    pub mode: String,
    /// What the backend waited for, when the `observe` step asked
    /// (`detail: [wait_event]`); not written otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitEvent>,
    /// Whether the backend held a snapshot (`backend_xmin` set), when the
    /// `observe` step asked (`detail: [xmin]`); not written otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xmin: Option<bool>,
}

/// What a backend waited for, from `pg_stat_activity` (`{"on":
/// "Lock:advisory"}`, `"nothing"`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitEvent {
    /// `wait_event_type:wait_event`, e.g. `Lock:advisory`, `Client:ClientRead`.
    On(String),
    /// No wait event: the backend was running (or not in `pg_stat_activity`).
    Nothing,
}

impl LockHolder {
    /// The detail the step asked for, as the cell shows it after the
    /// holder's state: `Lock:advisory`, `running`, `holds xmin`, `no xmin`.
    fn detail(&self) -> Vec<String> {
        let mut out = Vec::new();
        match &self.wait {
            Some(WaitEvent::On(w)) => out.push(w.clone()),
            Some(WaitEvent::Nothing) => out.push("running".to_owned()),
            None => {}
        }
        match self.xmin {
            Some(true) => out.push("holds xmin".to_owned()),
            Some(false) => out.push("no xmin".to_owned()),
            None => {}
        }
        out
    }
}

impl Value {
    /// The error a driver call ended with, as a step records it: its
    /// message, its SQLSTATE, and whether the server sent it.
    pub fn of_driver_error(e: &locklab_drivers::DriverError) -> Value {
        Value::Error(StatementError {
            message: e.to_string(),
            sqlstate: e.sqlstate().map(str::to_owned),
            from_server: matches!(e, locklab_drivers::DriverError::Db(_)),
        })
    }

    /// A value the server sent as text: `t`/`f` become booleans, integers
    /// numbers, anything else text.
    pub fn of_text(t: &str) -> Value {
        match t {
            "t" => Value::Bool(true),
            "f" => Value::Bool(false),
            _ => match t.parse::<i64>() {
                Ok(n) if n.to_string() == t => Value::Int(n),
                Ok(n) => Value::Number(n, t.to_owned()),
                Err(_) => Value::Text(t.to_owned()),
            },
        }
    }

    /// The value as comparisons see it ([`super::Reading`]): what its report
    /// cell shows, with what varies from run to run and the cell does not show
    /// cleared. A holder or waiter an actor is named for keeps no backend pid
    /// (0), and a waiter no `state` (it waits); a statement's error keeps its
    /// SQLSTATE, not the driver's message (empty), and counts as the server's
    /// when it has a SQLSTATE; a missing capability keeps no reason (empty).
    /// The lock key and mode stay: the scenario's SQL fixes them.
    pub fn as_read(&self) -> Value {
        let holder = |h: &LockHolder, waits: bool| LockHolder {
            pid: if h.actor.is_some() { 0 } else { h.pid },
            state: if waits { None } else { h.state.clone() },
            ..h.clone()
        };
        match self {
            Value::Locks(l) => Value::Locks(LockSnapshot {
                held: l.held,
                holders: l.holders.iter().map(|h| holder(h, false)).collect(),
                waiters: l.waiters.iter().map(|h| holder(h, true)).collect(),
            }),
            Value::Error(e) => Value::Error(StatementError {
                message: String::new(),
                sqlstate: e.sqlstate.clone(),
                from_server: e.from_server || e.sqlstate.is_some(),
            }),
            Value::Unsupported(_) => Value::Unsupported(String::new()),
            Value::Wait(Wait::FinishedFirst(v)) => Value::Wait(Wait::FinishedFirst(Box::new(v.as_read()))),
            other => other.clone(),
        }
    }

    /// Whether the report shows it as not applicable (`n/a`, `n/a (…)`):
    /// the step or the cell was not run for this column.
    pub fn is_not_applicable(&self) -> bool {
        matches!(
            self,
            Value::NotApplicable | Value::SettingsCannotPass | Value::Unsupported(_)
        )
    }

    /// The text of its report cell in a column behind the pooler product
    /// `pooler` (`PgBouncer`, `Pgpool-II`; `None`: no pooler): as
    /// `Display`, except that [`Value::SettingsCannotPass`] names the
    /// product.
    pub fn shown_through(&self, pooler: Option<&str>) -> String {
        match (self, pooler) {
            (Value::SettingsCannotPass, Some(product)) => format!("n/a (settings cannot pass {product})"),
            _ => self.to_string(),
        }
    }

    /// The lock snapshot of an `observe` step, if this is one.
    pub fn locks(&self) -> Option<&LockSnapshot> {
        match self {
            Value::Locks(l) => Some(l),
            _ => None,
        }
    }

    /// The SQLSTATE of a failed statement.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Value::Error(e) => e.sqlstate.as_deref(),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    /// The text of the value's report cell (`true`, `55P03`, `held by worker (idle)`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::NoRows => f.write_str("(no rows)"),
            Value::Null => f.write_str("NULL"),
            Value::NotApplicable => f.write_str("n/a"),
            Value::SettingsCannotPass => f.write_str("n/a (settings cannot pass the pooler)"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(n) => write!(f, "{n}"),
            Value::Number(_, t) => f.write_str(t),
            Value::Text(t) if t.is_empty() => f.write_str("(empty)"),
            Value::Text(t) => f.write_str(t),
            Value::Error(e) => match (&e.sqlstate, e.from_server) {
                (Some(code), _) => f.write_str(code),
                (None, true) => f.write_str("error, no SQLSTATE from the driver"),
                (None, false) => f.write_str("client error"),
            },
            Value::Locks(l) => l.fmt(f),
            Value::HeldCount { count, shared } => {
                write!(f, "held {count}×{}", if *shared { " (shared)" } else { "" })
            }
            Value::Order(ids) => f.write_str(&ids.join(" → ")),
            Value::Checkout(c) => match c {
                Checkout::Ok => f.write_str("ok"),
                Checkout::NoAnswer(ms) => write!(f, "handed out, no answer within {ms} ms"),
                Checkout::Dropped(ms) => write!(f, "checkout dropped at {ms} ms"),
                Checkout::Failed(e) => write!(f, "checkout failed: {e}"),
            },
            Value::Return(Return::Unfinished(ms)) => write!(f, "unfinished at {ms} ms"),
            Value::Return(r) => f.write_str(r.text()),
            Value::Dropped { at_ms, cancel } => match cancel {
                Cancel::None => write!(f, "dropped at {at_ms} ms"),
                Cancel::NotSent(why) => write!(f, "no cancel request sent ({why}); dropped at {at_ms} ms"),
                Cancel::NoEffect(within) => {
                    write!(f, "cancel sent, no effect within {within} ms; dropped at {at_ms} ms")
                }
            },
            Value::Guard(g) => f.write_str(g.text()),
            Value::Unsupported(_) => f.write_str("n/a (no guard API)"),
            Value::NoConnection(why) => write!(f, "no connection ({why})"),
            Value::Released => f.write_str("released"),
            Value::StillHeld(ms) if ms % 1000 == 0 => write!(f, "still held at {} s", ms / 1000),
            Value::StillHeld(ms) => write!(f, "still held at {ms} ms"),
            Value::Invariant(Verdict::Holds) => f.write_str("holds"),
            Value::Invariant(Verdict::Violated) => f.write_str("violated"),
            Value::Invariant(Verdict::Finding) => f.write_str("measured (the finding)"),
            Value::Wait(w) => w.fmt(f),
        }
    }
}

impl Return {
    /// The cell text of a return that finished.
    fn text(self) -> &'static str {
        match self {
            Return::ToPool => "to pool",
            Return::Closed => "closed",
            Return::ToPooler => "closed, server connection to the pooler",
            Return::Unfinished(_) => "unfinished",
        }
    }
}

impl fmt::Display for LockSnapshot {
    /// `held by worker (idle)`, `not held`, `held by a (idle in transaction); waiting: b`
    /// (a backend no actor used is `backend PID`); with the step's
    /// `detail`, each backend's after its state: `held by a (idle,
    /// Client:ClientRead, no xmin); waiting: b (Lock:advisory, holds xmin)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |h: &LockHolder| h.actor.clone().unwrap_or_else(|| format!("backend {}", h.pid));
        if self.holders.is_empty() {
            f.write_str("not held")?;
        } else {
            let hs: Vec<String> = self
                .holders
                .iter()
                .map(|h| {
                    let mut inside = vec![h.state.clone().unwrap_or_else(|| "?".to_owned())];
                    inside.extend(h.detail());
                    format!("{} ({})", name(h), inside.join(", "))
                })
                .collect();
            write!(f, "held by {}", hs.join(", "))?;
        }
        if !self.waiters.is_empty() {
            let ws: Vec<String> = self
                .waiters
                .iter()
                .map(|h| match h.detail() {
                    d if d.is_empty() => name(h),
                    d => format!("{} ({})", name(h), d.join(", ")),
                })
                .collect();
            write!(f, "; waiting: {}", ws.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of value reads back from its JSON as itself (nothing is
    /// lost, so nothing needs the cell text to rebuild it), in the shape
    /// the schema documents.
    #[test]
    fn values_read_back_from_their_json_without_loss() {
        let json = |v: &Value| serde_json::to_string(v).unwrap();
        let snapshot = LockSnapshot {
            held: true,
            holders: vec![LockHolder {
                actor: None,
                pid: 9,
                state: Some("idle".into()),
                key: AdvisoryKey::Pair(1, 2),
                mode: "ShareLock".into(),
                wait: None,
                xmin: None,
            }],
            waiters: Vec::new(),
        };
        let every = [
            Value::NoRows,
            Value::Null,
            Value::NotApplicable,
            Value::SettingsCannotPass,
            Value::of_text("t"),
            Value::of_text("-7"),
            Value::of_text("007"),
            Value::of_text(""),
            Value::Error(StatementError {
                message: "m".into(),
                sqlstate: Some("55P03".into()),
                from_server: true,
            }),
            Value::Error(StatementError {
                message: "closed".into(),
                sqlstate: None,
                from_server: false,
            }),
            Value::Locks(snapshot),
            Value::Order(vec!["a".into(), "b".into()]),
            Value::Checkout(Checkout::Ok),
            Value::Checkout(Checkout::NoAnswer(200)),
            Value::Checkout(Checkout::Dropped(300)),
            Value::Checkout(Checkout::Failed("x".into())),
            Value::Return(Return::ToPool),
            Value::Return(Return::Closed),
            Value::Return(Return::ToPooler),
            Value::Return(Return::Unfinished(500)),
            Value::Dropped {
                at_ms: 200,
                cancel: Cancel::None,
            },
            Value::Dropped {
                at_ms: 200,
                cancel: Cancel::NotSent("no cancel API".into()),
            },
            Value::Dropped {
                at_ms: 200,
                cancel: Cancel::NoEffect(1000),
            },
            Value::Guard(GuardEnded::ReleaseNow),
            Value::Guard(GuardEnded::Dropped),
            Value::Guard(GuardEnded::Leaked),
            Value::Guard(GuardEnded::NotAcquired),
            Value::Unsupported("guard".into()),
            Value::NoConnection("checkout dropped at 300 ms".into()),
            Value::Released,
            Value::StillHeld(3000),
            Value::Invariant(Verdict::Finding),
            Value::HeldCount {
                count: 3,
                shared: false,
            },
        ];
        for v in &every {
            let back: Value = serde_json::from_str(&json(v)).unwrap();
            assert_eq!(&back, v, "{}", json(v));
        }
        assert_eq!(json(&Value::NoRows), r#"{"kind":"no_rows"}"#);
        assert_eq!(json(&Value::of_text("t")), r#"{"kind":"bool","value":true}"#);
        assert_eq!(json(&Value::of_text("007")), r#"{"kind":"number","value":[7,"007"]}"#);
        assert_eq!(
            json(&every[21]),
            r#"{"kind":"dropped","value":{"at_ms":200,"cancel":{"not_sent":"no cancel API"}}}"#
        );
        assert_eq!(
            json(&every[10]),
            r#"{"kind":"locks","value":{"held":true,"holders":[{"actor":null,"pid":9,"state":"idle","key":"(1, 2)","mode":"ShareLock"}],"waiters":[]}}"#
        );
    }

    /// The cell texts the report has always shown.
    #[test]
    fn values_display_as_report_cells() {
        let text = |v: Value| v.to_string();
        assert_eq!(text(Value::of_text("f")), "false");
        assert_eq!(text(Value::of_text("")), "(empty)");
        assert_eq!(
            text(Value::Error(StatementError {
                message: "m".into(),
                sqlstate: None,
                from_server: true
            })),
            "error, no SQLSTATE from the driver"
        );
        assert_eq!(
            text(Value::Dropped {
                at_ms: 200,
                cancel: Cancel::NoEffect(1000)
            }),
            "cancel sent, no effect within 1000 ms; dropped at 200 ms"
        );
        assert_eq!(text(Value::Return(Return::Unfinished(300))), "unfinished at 300 ms");
        assert_eq!(
            text(Value::HeldCount {
                count: 3,
                shared: false
            }),
            "held 3×"
        );
        assert_eq!(text(Value::HeldCount { count: 2, shared: true }), "held 2× (shared)");
        let h = |actor: Option<&str>, pid| LockHolder {
            actor: actor.map(str::to_owned),
            pid,
            state: Some("idle".into()),
            key: AdvisoryKey::Big(7),
            mode: "ExclusiveLock".into(),
            wait: None,
            xmin: None,
        };
        let snapshot = LockSnapshot {
            held: true,
            holders: vec![h(Some("a"), 1)],
            waiters: vec![h(None, 2)],
        };
        assert_eq!(
            text(Value::Locks(snapshot.clone())),
            "held by a (idle); waiting: backend 2"
        );
        let mut detailed = snapshot;
        detailed.holders[0].wait = Some(WaitEvent::On("Client:ClientRead".into()));
        detailed.holders[0].xmin = Some(false);
        detailed.waiters[0].wait = Some(WaitEvent::On("Lock:advisory".into()));
        detailed.waiters[0].xmin = Some(true);
        assert_eq!(
            text(Value::Locks(detailed)),
            "held by a (idle, Client:ClientRead, no xmin); waiting: backend 2 (Lock:advisory, holds xmin)"
        );
    }
}
