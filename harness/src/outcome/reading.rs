//! What comparisons look at in an observation: its [`Reading`] (the value as
//! its report cell shows it, typed), or for a race row the readings seen
//! often enough over the trials ([`Seen`]). Repeat folding, `soak`, `check`
//! and the report's "≠N" compare these, never cell text; their `Display`
//! is the one place the text is made.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::Value;
use crate::keys::AdvisoryKey;

/// One observation's value as comparisons see it: [`Value::as_read`] (no
/// backend pids of named actors, no driver messages) and the severity of
/// the step's first server notice (`WARNING`), shown `true + WARNING`, where
/// the notices are compared (a direct actor's step:
/// [`super::NoticesRead`]).
/// Serialised as the value's `{"kind", "value"}` plus `"notice"` when there
/// is one.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Reading {
    /// The value, as read ([`Value::as_read`]).
    #[serde(flatten)]
    pub value: Value,
    /// Severity of the first notice (`WARNING`, `NOTICE`), if the step had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
}

impl Reading {
    /// The reading of `value` with the step's `notices` (`SEVERITY: message`).
    pub fn of(value: &Value, notices: &[String]) -> Reading {
        Reading {
            value: value.as_read(),
            notice: notices
                .first()
                .map(|n| n.split(':').next().unwrap_or_default().to_owned()),
        }
    }

    /// A reading without a notice.
    pub fn plain(value: Value) -> Reading {
        Reading::of(&value, &[])
    }
}

impl fmt::Display for Reading {
    /// The report cell's text: `true`, `55P03`, `true + WARNING`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)?;
        match &self.notice {
            Some(severity) => write!(f, " + {severity}"),
            None => Ok(()),
        }
    }
}

/// A reading and in how many trials of a race cell it was seen: an entry of
/// [`super::Observation::distribution`], serialised as the reading plus
/// `"trials"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counted {
    /// What was read.
    #[serde(flatten)]
    pub reading: Reading,
    /// In how many trials.
    pub trials: u64,
}

/// What an observation compares as: one reading, or for a race row the
/// readings seen in at least [`super::trials::SEEN_SHARE`] of its trials
/// (sorted; shown alphabetically, ` | `-separated, `(none)` for none).
/// Serialised `{"value": READING}` or `{"seen": [READING, …]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Seen {
    /// A run's reading.
    Value(Reading),
    /// The readings a race cell saw often, in [`Reading`]'s order.
    Seen(Vec<Reading>),
}

impl Seen {
    /// Whether the report shows it as not applicable (`n/a…`).
    pub fn is_not_applicable(&self) -> bool {
        matches!(self, Seen::Value(r) if r.value.is_not_applicable())
    }
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seen::Value(r) => r.fmt(f),
            Seen::Seen(rs) if rs.is_empty() => f.write_str("(none)"),
            Seen::Seen(rs) => {
                let mut texts: Vec<String> = rs.iter().map(ToString::to_string).collect();
                texts.sort();
                f.write_str(&texts.join(" | "))
            }
        }
    }
}

/// One advisory lock left in the run's database after a run (the "locks left
/// after run" cell): its key and the holding backend's state.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LeftLock {
    /// The key: an i64, or (i32, i32) (serialised as text: `43`, `(1, 2)`).
    #[serde(
        serialize_with = "crate::observe::key_text",
        deserialize_with = "crate::observe::key_from_text"
    )]
    pub key: AdvisoryKey,
    /// `pg_stat_activity.state` of the holder (`idle`, …), if known.
    pub state: Option<String>,
}

/// The locks left after a run, sorted (so that they do not depend on which
/// backend came first): shown `none`, or `key 43 (idle), key (1, 2) (idle
/// in transaction)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LocksLeft(pub Vec<LeftLock>);

impl LocksLeft {
    /// The locks of these `pg_locks` rows.
    pub fn of(rows: &[crate::observe::LockRow]) -> LocksLeft {
        let mut locks: Vec<LeftLock> = rows
            .iter()
            .map(|l| LeftLock {
                key: l.key,
                state: l.state.clone(),
            })
            .collect();
        locks.sort();
        LocksLeft(locks)
    }
}

impl fmt::Display for LocksLeft {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let mut each: Vec<String> = self
            .0
            .iter()
            .map(|l| format!("key {} ({})", l.key, l.state.as_deref().unwrap_or("?")))
            .collect();
        each.sort();
        f.write_str(&each.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Cancel, LockHolder, LockSnapshot, StatementError};

    fn holder(actor: Option<&str>, pid: i32, state: &str) -> LockHolder {
        LockHolder {
            actor: actor.map(str::to_owned),
            pid,
            state: Some(state.to_owned()),
            key: AdvisoryKey::Big(43),
            mode: "ExclusiveLock".into(),
            wait: None,
            xmin: None,
        }
    }

    /// Two readings are equal exactly when their cells read the same: pids
    /// of named actors and drivers' messages do not count; what the cell
    /// shows does.
    #[test]
    fn readings_differ_where_the_cell_does() {
        let locks = |pid, state: &str, waiter_pid| {
            Value::Locks(LockSnapshot {
                held: true,
                holders: vec![holder(Some("holder"), pid, state)],
                waiters: vec![holder(Some("waiter"), waiter_pid, "active")],
            })
        };
        assert_eq!(Reading::plain(locks(1, "idle", 2)), Reading::plain(locks(7, "idle", 9)));
        assert_ne!(
            Reading::plain(locks(1, "idle", 2)),
            Reading::plain(locks(1, "active", 2))
        );
        let unnamed = |pid| {
            Value::Locks(LockSnapshot {
                held: true,
                holders: vec![holder(None, pid, "idle")],
                waiters: Vec::new(),
            })
        };
        assert_ne!(Reading::plain(unnamed(1)), Reading::plain(unnamed(2)));
        let error = |message: &str, sqlstate: Option<&str>| {
            Value::Error(StatementError {
                message: message.into(),
                sqlstate: sqlstate.map(str::to_owned),
                from_server: sqlstate.is_some(),
            })
        };
        assert_eq!(
            Reading::plain(error("lock timeout", Some("55P03"))),
            Reading::plain(error("canceling statement", Some("55P03")))
        );
        assert_ne!(
            Reading::plain(error("x", Some("55P03"))),
            Reading::plain(error("x", None))
        );
        // A typed value is not its text: the SQLSTATE 55P03 is not the string "55P03".
        assert_ne!(
            Reading::plain(error("x", Some("55P03"))),
            Reading::plain(Value::of_text("55P03"))
        );
        let warned = Reading::of(&Value::Bool(true), &["WARNING: you don't own a lock".into()]);
        assert_ne!(warned, Reading::plain(Value::Bool(true)));
        assert_eq!(warned.to_string(), "true + WARNING");
    }

    #[test]
    fn readings_read_back_from_their_json() {
        let every = [
            Reading::plain(Value::Dropped {
                at_ms: 10,
                cancel: Cancel::NoEffect(1000),
            }),
            Reading::of(&Value::Null, &["NOTICE: n".into()]),
            Reading::plain(Value::NoRows),
            Reading::plain(Value::Locks(LockSnapshot {
                held: true,
                holders: vec![holder(None, 5, "idle")],
                waiters: Vec::new(),
            })),
        ];
        for r in &every {
            let json = serde_json::to_string(r).unwrap();
            assert_eq!(&serde_json::from_str::<Reading>(&json).unwrap(), r, "{json}");
        }
        assert_eq!(
            serde_json::to_string(&every[1]).unwrap(),
            r#"{"kind":"null","notice":"NOTICE"}"#
        );
        let counted = Counted {
            reading: Reading::plain(Value::Bool(true)),
            trials: 19,
        };
        let json = serde_json::to_string(&counted).unwrap();
        assert_eq!(json, r#"{"kind":"bool","value":true,"trials":19}"#);
        assert_eq!(serde_json::from_str::<Counted>(&json).unwrap(), counted);
    }

    #[test]
    fn a_race_row_shows_its_often_seen_readings_alphabetically() {
        let seen = Seen::Seen(vec![
            Reading::plain(Value::Bool(true)),
            Reading::plain(Value::Error(StatementError {
                message: String::new(),
                sqlstate: Some("55P03".into()),
                from_server: true,
            })),
        ]);
        assert_eq!(seen.to_string(), "55P03 | true");
        assert_eq!(Seen::Seen(Vec::new()).to_string(), "(none)");
    }
}
