//! What one observation measured, typed ([`Value`]), with the two forms the
//! later stages read: the machine-readable JSON of `matrix.json`
//! (`Serialize`) and the text of a report cell (`Display`). The runner makes
//! values; it never writes cell text.

use std::fmt;

use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use crate::keys::AdvisoryKey;

/// The value of an observation.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// The statement returned no row: `null`, shown `(no rows)`.
    NoRows,
    /// SQL NULL: `null`, shown `NULL`.
    Null,
    /// The step does not apply to this driver kind (`when:`): `null`, shown `n/a`.
    NotApplicable,
    /// The cell was not run (PgBouncer cannot carry the scenario's connection
    /// settings): `null`, shown `n/a (settings cannot pass PgBouncer)`.
    SettingsCannotPassPgBouncer,
    /// `t` / `f` from the server: a JSON boolean, shown `true` / `false`.
    Bool(bool),
    /// A value that parses as an i64 and is written as Rust writes it: a JSON number.
    Int(i64),
    /// A value that parses as an i64 but is written otherwise (`007`): a
    /// JSON number, shown as the server wrote it.
    Number(i64, String),
    /// Any other text: a JSON string (an empty one, e.g. the result of a
    /// function returning `void`, is shown `(empty)`).
    Text(String),
    /// A failed statement: `{error}`, shown as its SQLSTATE.
    Error(StatementError),
    /// An `observe` step: `{held, holders, waiters}`, shown `held by a (idle); waiting: b`.
    Locks(LockSnapshot),
    /// An `order` step: the step ids in completion order, shown `a → b`.
    Order(Vec<String>),
    /// A checkout bounded by `client_timeout_ms`: `{checkout, error?, first_statement?}`.
    Checkout(Checkout),
    /// A return bounded by `client_timeout_ms`: `{return}`.
    Return(Return),
    /// A call dropped at its `client_timeout_ms` (ms): `{dropped_at_ms, cancel}`.
    Dropped {
        /// The bound, in ms.
        at_ms: u64,
        /// Whether a cancel request was sent, and its effect.
        cancel: Cancel,
    },
    /// A `lock_guard` step whose guard was acquired and ended: `{guard}`.
    Guard(GuardEnded),
    /// A capability the driver does not have: `{unsupported}`, shown `n/a (no guard API)`.
    Unsupported(String),
    /// A step of an actor whose bounded checkout gave up (why): `{no_connection}`.
    NoConnection(String),
    /// A `granted` step: the waiter stopped waiting (the lock was released to
    /// it, or its own bound ended the wait) within the bound; the time since
    /// the fault is the observation's `elapsed_ms`: `{released: true}`,
    /// shown `released`.
    Released,
    /// A `granted` step whose waiter still waited at the bound, ms after the
    /// fault: `{still_held_at_ms}`, shown `still held at N s`.
    StillHeld(u64),
}

/// A statement's error as the driver reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatementError {
    /// The driver's message.
    pub message: String,
    /// The SQLSTATE, when the driver gives one.
    pub sqlstate: Option<String>,
    /// Whether the server sent it (`false`: a client-side error).
    pub from_server: bool,
}

/// How a bounded checkout went.
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// How a bounded return went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// What happened to the cancel request of a dropped call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// None was asked for (`on_timeout: drop`).
    None,
    /// None could be sent (why, e.g. the driver has no cancel API).
    NotSent(String),
    /// Sent, but the statement had not ended within this many ms.
    NoEffect(u128),
}

/// How a lock guard ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardEnded {
    /// `release_now()`.
    ReleaseNow,
    /// The guard was dropped.
    Dropped,
    /// `leak()`.
    Leaked,
}

impl GuardEnded {
    fn text(self) -> &'static str {
        match self {
            GuardEnded::ReleaseNow => "acquired, release_now()",
            GuardEnded::Dropped => "acquired, guard dropped",
            GuardEnded::Leaked => "acquired, leak()",
        }
    }
}

/// What an `observe` step saw: the granted and awaited advisory locks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LockSnapshot {
    /// Whether any granted advisory lock matched.
    pub held: bool,
    /// Backends holding a matching lock (granted rows of `pg_locks`).
    pub holders: Vec<LockHolder>,
    /// Backends waiting for one (ungranted rows).
    pub waiters: Vec<LockHolder>,
}

/// One holder or waiter of an advisory lock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
}

impl Value {
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
            Value::SettingsCannotPassPgBouncer => f.write_str("n/a (settings cannot pass PgBouncer)"),
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
            Value::Order(ids) => f.write_str(&ids.join(" → ")),
            Value::Checkout(c) => match c {
                Checkout::Ok => f.write_str("ok"),
                Checkout::NoAnswer(ms) => write!(f, "handed out, no answer within {ms} ms"),
                Checkout::Dropped(ms) => write!(f, "checkout dropped at {ms} ms"),
                Checkout::Failed(e) => write!(f, "checkout failed: {e}"),
            },
            Value::Return(Return::Unfinished(ms)) => write!(f, "unfinished at {ms} ms"),
            Value::Return(r) => f.write_str(r.json()),
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
        }
    }
}

impl Value {
    /// Reads a value back from `matrix.json` (`locklab merge`): `json` as
    /// [`Serialize`] wrote it, and `display`, the cell text the report
    /// recorded with it (without a notice's ` + SEVERITY`), for what the
    /// JSON leaves out: which kind of `null`, a number's written form, the
    /// ms of a bound, why no cancel request was sent. Serialising the result
    /// gives `json` again, and for a value whose cell shows the value itself
    /// (not a race's distribution), displaying it gives `display`.
    ///
    /// # Errors
    /// A JSON shape no [`Value`] serialises to, named.
    pub fn from_report(json: &serde_json::Value, display: &str, sqlstate: Option<&str>) -> Result<Value, String> {
        use serde_json::Value as J;
        // The first number in a text such as "dropped at 200 ms", else 0.
        let ms_in = |t: &str| -> u64 {
            t.split(|c: char| !c.is_ascii_digit())
                .find(|w| !w.is_empty())
                .and_then(|w| w.parse().ok())
                .unwrap_or(0)
        };
        let text = |key: &str| json.get(key).and_then(J::as_str).map(str::to_owned);
        Ok(match json {
            J::Null => match display {
                "(no rows)" => Value::NoRows,
                "n/a" => Value::NotApplicable,
                "n/a (settings cannot pass PgBouncer)" => Value::SettingsCannotPassPgBouncer,
                _ => Value::Null,
            },
            J::Bool(b) => Value::Bool(*b),
            J::Number(n) => {
                let n = n.as_i64().ok_or_else(|| format!("not a bigint: {n}"))?;
                if display == n.to_string() || display.parse::<i64>().ok() != Some(n) {
                    Value::Int(n)
                } else {
                    Value::Number(n, display.to_owned())
                }
            }
            J::String(t) => Value::Text(t.clone()),
            J::Array(ids) => Value::Order(
                ids.iter()
                    .map(|i| {
                        i.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| format!("not a step id: {i}"))
                    })
                    .collect::<Result<_, _>>()?,
            ),
            J::Object(m) if m.contains_key("held") => {
                Value::Locks(LockSnapshot::deserialize(json).map_err(|e| format!("a lock snapshot: {e}"))?)
            }
            J::Object(m) if m.contains_key("checkout") => {
                Value::Checkout(match (text("checkout").as_deref(), m.len()) {
                    (Some("ok"), 1) => Checkout::Ok,
                    (Some("ok"), _) => Checkout::NoAnswer(ms_in(display)),
                    (Some("dropped"), _) => Checkout::Dropped(ms_in(display)),
                    (Some("failed"), _) => Checkout::Failed(text("error").unwrap_or_default()),
                    (other, _) => return Err(format!("an unknown checkout: {other:?}")),
                })
            }
            J::Object(m) if m.contains_key("error") => Value::Error(StatementError {
                message: text("error").unwrap_or_default(),
                sqlstate: sqlstate.map(str::to_owned),
                from_server: display != "client error",
            }),
            J::Object(m) if m.contains_key("return") => Value::Return(match text("return").as_deref() {
                Some("to pool") => Return::ToPool,
                Some("closed") => Return::Closed,
                Some("closed, server connection to the pooler") => Return::ToPooler,
                Some("unfinished") => Return::Unfinished(ms_in(display)),
                other => return Err(format!("an unknown return: {other:?}")),
            }),
            J::Object(m) if m.contains_key("dropped_at_ms") => Value::Dropped {
                at_ms: m["dropped_at_ms"].as_u64().ok_or("dropped_at_ms is not a number")?,
                cancel: match text("cancel").as_deref() {
                    Some("none") => Cancel::None,
                    Some("not sent") => Cancel::NotSent(
                        display
                            .strip_prefix("no cancel request sent (")
                            .and_then(|t| t.rsplit_once("); dropped at "))
                            .map_or_else(String::new, |(why, _)| why.to_owned()),
                    ),
                    Some("sent, no effect") => Cancel::NoEffect(u128::from(ms_in(display))),
                    other => return Err(format!("an unknown cancel: {other:?}")),
                },
            },
            J::Object(m) if m.contains_key("guard") => Value::Guard(
                [GuardEnded::ReleaseNow, GuardEnded::Dropped, GuardEnded::Leaked]
                    .into_iter()
                    .find(|g| text("guard").as_deref() == Some(g.text()))
                    .ok_or_else(|| format!("an unknown guard end: {:?}", text("guard")))?,
            ),
            J::Object(m) if m.contains_key("unsupported") => {
                Value::Unsupported(text("unsupported").unwrap_or_default())
            }
            J::Object(m) if m.contains_key("no_connection") => {
                Value::NoConnection(text("no_connection").unwrap_or_default())
            }
            J::Object(m) if m.contains_key("released") => Value::Released,
            J::Object(m) if m.contains_key("still_held_at_ms") => Value::StillHeld(
                m["still_held_at_ms"]
                    .as_u64()
                    .ok_or("still_held_at_ms is not a number")?,
            ),
            J::Object(m) => {
                return Err(format!(
                    "an object with keys {:?}, which no value has",
                    m.keys().collect::<Vec<_>>()
                ));
            }
        })
    }
}

impl Return {
    /// The `return` text of `matrix.json`.
    fn json(self) -> &'static str {
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
    /// (a backend no actor used is `backend PID`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |h: &LockHolder| h.actor.clone().unwrap_or_else(|| format!("backend {}", h.pid));
        if self.holders.is_empty() {
            f.write_str("not held")?;
        } else {
            let hs: Vec<String> = self
                .holders
                .iter()
                .map(|h| format!("{} ({})", name(h), h.state.as_deref().unwrap_or("?")))
                .collect();
            write!(f, "held by {}", hs.join(", "))?;
        }
        if !self.waiters.is_empty() {
            let ws: Vec<String> = self.waiters.iter().map(name).collect();
            write!(f, "; waiting: {}", ws.join(", "))?;
        }
        Ok(())
    }
}

impl Serialize for Value {
    /// The shapes `matrix.json` has had since values were built with `json!`.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let one = |s: S, key: &str, value: &str| {
            let mut m = s.serialize_map(Some(1))?;
            m.serialize_entry(key, value)?;
            m.end()
        };
        match self {
            Value::NoRows | Value::Null | Value::NotApplicable | Value::SettingsCannotPassPgBouncer => {
                s.serialize_unit()
            }
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Int(n) | Value::Number(n, _) => s.serialize_i64(*n),
            Value::Text(t) => s.serialize_str(t),
            Value::Error(e) => one(s, "error", &e.message),
            Value::Locks(l) => l.serialize(s),
            Value::Order(ids) => ids.serialize(s),
            Value::Checkout(c) => {
                let mut m = s.serialize_map(None)?;
                match c {
                    Checkout::Ok => m.serialize_entry("checkout", "ok")?,
                    Checkout::NoAnswer(_) => {
                        m.serialize_entry("checkout", "ok")?;
                        m.serialize_entry("first_statement", "no answer")?;
                    }
                    Checkout::Dropped(_) => m.serialize_entry("checkout", "dropped")?,
                    Checkout::Failed(e) => {
                        m.serialize_entry("checkout", "failed")?;
                        m.serialize_entry("error", e)?;
                    }
                }
                m.end()
            }
            Value::Return(r) => one(s, "return", r.json()),
            Value::Dropped { at_ms, cancel } => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("dropped_at_ms", at_ms)?;
                let cancel = match cancel {
                    Cancel::None => "none",
                    Cancel::NotSent(_) => "not sent",
                    Cancel::NoEffect(_) => "sent, no effect",
                };
                m.serialize_entry("cancel", cancel)?;
                m.end()
            }
            Value::Guard(g) => one(s, "guard", g.text()),
            Value::Unsupported(why) => one(s, "unsupported", why),
            Value::NoConnection(why) => one(s, "no_connection", why),
            Value::Released => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("released", &true)?;
                m.end()
            }
            Value::StillHeld(ms) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("still_held_at_ms", ms)?;
                m.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `matrix.json` keeps the shapes it had when values were built with `json!`.
    #[test]
    fn values_serialise_as_matrix_json_has_them() {
        let json = |v: Value| serde_json::to_string(&v).unwrap();
        assert_eq!(json(Value::NoRows), "null");
        assert_eq!(json(Value::of_text("t")), "true");
        assert_eq!(json(Value::of_text("-7")), "-7");
        assert_eq!(json(Value::of_text("007")), "7");
        assert_eq!(Value::of_text("007").to_string(), "007");
        assert_eq!(json(Value::of_text("")), "\"\"");
        assert_eq!(json(Value::of_text("1.5")), "\"1.5\"");
        assert_eq!(json(Value::Order(vec!["a".into(), "b".into()])), r#"["a","b"]"#);
        assert_eq!(
            json(Value::Checkout(Checkout::NoAnswer(200))),
            r#"{"checkout":"ok","first_statement":"no answer"}"#
        );
        assert_eq!(
            json(Value::Checkout(Checkout::Failed("x".into()))),
            r#"{"checkout":"failed","error":"x"}"#
        );
        assert_eq!(json(Value::Return(Return::ToPool)), r#"{"return":"to pool"}"#);
        assert_eq!(
            json(Value::Dropped {
                at_ms: 200,
                cancel: Cancel::None
            }),
            r#"{"dropped_at_ms":200,"cancel":"none"}"#
        );
        let snapshot = LockSnapshot {
            held: true,
            holders: vec![LockHolder {
                actor: None,
                pid: 9,
                state: Some("idle".into()),
                key: AdvisoryKey::Pair(1, 2),
                mode: "ShareLock".into(),
            }],
            waiters: Vec::new(),
        };
        assert_eq!(
            json(Value::Locks(snapshot)),
            r#"{"held":true,"holders":[{"actor":null,"pid":9,"state":"idle","key":"(1, 2)","mode":"ShareLock"}],"waiters":[]}"#
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
        let h = |actor: Option<&str>, pid| LockHolder {
            actor: actor.map(str::to_owned),
            pid,
            state: Some("idle".into()),
            key: AdvisoryKey::Big(7),
            mode: "ExclusiveLock".into(),
        };
        let snapshot = LockSnapshot {
            held: true,
            holders: vec![h(Some("a"), 1)],
            waiters: vec![h(None, 2)],
        };
        assert_eq!(text(Value::Locks(snapshot)), "held by a (idle); waiting: backend 2");
    }
}
