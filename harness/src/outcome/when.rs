//! Which readings a reading rule matches ([`When`]): the typed value's kind,
//! variant, scalar, lock snapshot, SQLSTATE, cancel, invariant row, notice,
//! or (for a record-less rule) the cell's status.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Reading, Status, Value};

/// A scalar an `is:` compares with: `true`, `0`, `"4321ms"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Scalar {
    /// `t` / `f`.
    Bool(bool),
    /// A number.
    Int(i64),
    /// Text, compared with the value as the report shows it.
    Text(String),
}

/// Whether the actor held the key when it unlocked it, as its own steps
/// before the unlock say: a lock call counts as taken when it cannot have
/// failed (a plain `pg_advisory_lock` without a client-side bound, or a
/// try-lock that `expect`s `true`) or, when it is recorded, when its reading
/// says it returned ([`Meaning::taken_if`]); an unlock or
/// `pg_advisory_unlock_all()` gives it back, re-entrant counts kept; a
/// crash, terminate, disconnect or restart ends the session and its locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Taken {
    /// The actor took the key (at the level it unlocks: shared or not) and
    /// had not given it back.
    Taken,
    /// The actor never took the key, or had given back every time it took it.
    NotTaken,
}

/// Which readings a rule matches: every field given must match (at least one).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct When {
    /// The value's kind, as `matrix.json` names it (`error`, `locks`,
    /// `checkout`, `return`, `dropped`, `released`, `still_held`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// For a `checkout`, `return`, `guard` or `invariant` value: its variant
    /// (`ok`, `no_answer`, `dropped`, `failed`; `to_pool`, `closed`,
    /// `to_pooler`, `unfinished`; `release_now`, `dropped`, `leaked`, `not_acquired`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// A `bool`, `int`/`number` or `text` value equal to this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is: Option<Scalar>,
    /// A `text` value (a lock library's or the migrator's report, e.g.
    /// `the migration ran 1×`) containing this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    /// A lock snapshot (`observe`): whether a matching lock was granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<bool>,
    /// A lock snapshot with a holder of this actor name (`server connection`
    /// behind transaction pooling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// A lock snapshot with a holder in this `pg_stat_activity.state`
    /// (`idle`, `idle in transaction`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// A lock snapshot with (true) or without (false) a waiter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<bool>,
    /// An error with this SQLSTATE (`55P03`); `none` for an error without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqlstate: Option<String>,
    /// A dropped call whose cancel request went so: `none` (none asked
    /// for), `not_sent`, `no_effect`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<String>,
    /// The row of an invariant over a race cell's trials, as one trial came
    /// out: `holds` or `violated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<InvariantRow>")]
    pub invariant: Option<crate::outcome::Verdict>,
    /// The severity of the step's first server notice (`WARNING`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// Without `record`: the cell's status (`pass`, `deviates`, `n/a`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub status: Option<Status>,
    /// A witness (`witness: unlock`): whether the actor held the key it
    /// unlocked (`taken`) or not (`not_taken`: false by design).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<Taken>,
    /// A witness: whether the actor gave its connection back between taking
    /// the key and unlocking it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub across_return: Option<bool>,
    /// A witness: whether the key was still held at the next observation of
    /// it after the unlock (a witness without such an observation matches no
    /// rule that gives this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_after: Option<bool>,
}

/// How one trial came out for an invariant (the schema's view of
/// [`crate::outcome::Verdict`]).
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum InvariantRow {
    /// The trial kept the invariant.
    Holds,
    /// The trial broke it.
    Violated,
}

/// The value kinds `when: {kind: …}` may name: [`Value`]'s serialised tags.
pub const KINDS: &[&str] = &[
    "no_rows",
    "null",
    "not_applicable",
    "settings_cannot_pass",
    "bool",
    "int",
    "number",
    "text",
    "error",
    "locks",
    "held_count",
    "order",
    "checkout",
    "return",
    "dropped",
    "guard",
    "unsupported",
    "no_connection",
    "released",
    "still_held",
    "invariant",
    "wait",
];

impl When {
    /// Whether the reading `r` matches every field given (`status` aside:
    /// see [`When::matches_status`]).
    pub fn matches(&self, r: &Reading) -> bool {
        let v = &r.value;
        let json = serde_json::to_value(v).unwrap_or_default();
        let kind_ok = self.kind.as_deref().is_none_or(|k| json["kind"] == k);
        let variant_ok = self.variant.as_deref().is_none_or(|want| match &json["value"] {
            serde_json::Value::String(s) => s == want,
            serde_json::Value::Object(o) if o.len() == 1 => o.contains_key(want),
            _ => false,
        });
        let is_ok = self.is.as_ref().is_none_or(|want| match (want, v) {
            (Scalar::Bool(b), Value::Bool(x)) => b == x,
            (Scalar::Int(i), Value::Int(x) | Value::Number(x, _)) => i == x,
            (Scalar::Text(t), Value::Text(x)) => t == x,
            (Scalar::Text(t), other) => *t == other.to_string(),
            _ => false,
        });
        let contains_ok = self
            .contains
            .as_deref()
            .is_none_or(|want| matches!(v, Value::Text(x) if x.contains(want)));
        let locks = v.locks();
        let held_ok = self.held.is_none_or(|h| locks.is_some_and(|l| l.held == h));
        let holder_ok = self
            .holder
            .as_deref()
            .is_none_or(|a| locks.is_some_and(|l| l.holders.iter().any(|h| h.actor.as_deref() == Some(a))));
        let state_ok = self
            .state
            .as_deref()
            .is_none_or(|s| locks.is_some_and(|l| l.holders.iter().any(|h| h.state.as_deref() == Some(s))));
        let waiting_ok = self
            .waiting
            .is_none_or(|w| locks.is_some_and(|l| l.waiters.is_empty() != w));
        let sqlstate_ok = self.sqlstate.as_deref().is_none_or(|want| match v {
            Value::Error(e) => match e.sqlstate.as_deref() {
                Some(s) => s == want,
                None => want == "none",
            },
            _ => false,
        });
        let cancel_ok = self.cancel.as_deref().is_none_or(|want| match v {
            Value::Dropped { cancel, .. } => {
                let name = match cancel {
                    crate::outcome::Cancel::None => "none",
                    crate::outcome::Cancel::NotSent(_) => "not_sent",
                    crate::outcome::Cancel::NoEffect(_) => "no_effect",
                };
                name == want
            }
            _ => false,
        });
        let invariant_ok = self
            .invariant
            .is_none_or(|want| matches!(v, Value::Invariant(x) if *x == want));
        let notice_ok = self.notice.as_deref().is_none_or(|n| r.notice.as_deref() == Some(n));
        self.status.is_none()
            && kind_ok
            && variant_ok
            && is_ok
            && contains_ok
            && held_ok
            && holder_ok
            && state_ok
            && waiting_ok
            && sqlstate_ok
            && cancel_ok
            && invariant_ok
            && notice_ok
    }

    /// Whether the fields that read a witness's meaning match `meaning`
    /// (whether the actor held the key, and whether it unlocked across a
    /// return: [`crate::properties::Meaning`]) and `held_after` (the paired observation's `held`, when there is one);
    /// true when the rule gives none of them.
    pub fn matches_witness(&self, meaning: Option<(Taken, bool)>, held_after: Option<bool>) -> bool {
        let lock_ok = self.lock.is_none_or(|l| meaning.is_some_and(|(taken, _)| taken == l));
        let across_ok = self
            .across_return
            .is_none_or(|a| meaning.is_some_and(|(_, across)| across == a));
        let held_ok = self.held_after.is_none_or(|h| held_after == Some(h));
        lock_ok && across_ok && held_ok
    }

    /// Whether it gives a field that reads a witness's meaning.
    pub fn reads_witness(&self) -> bool {
        self.lock.is_some() || self.across_return.is_some() || self.held_after.is_some()
    }

    /// Whether a record-less rule matches a cell of this status.
    pub fn matches_status(&self, status: Status) -> bool {
        self.status == Some(status)
    }

    pub(crate) fn is_empty(&self) -> bool {
        *self == When::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Checkout, LockSnapshot, StatementError};

    /// Every value kind is one `when: {kind}` may name (the match is
    /// exhaustive: a new kind fails to compile here until it is listed).
    #[test]
    fn every_value_kind_is_listed() {
        let sample = |v: &Value| -> Value {
            match v {
                Value::NoRows
                | Value::Null
                | Value::NotApplicable
                | Value::SettingsCannotPass
                | Value::Bool(_)
                | Value::Int(_)
                | Value::Number(..)
                | Value::Text(_)
                | Value::Error(_)
                | Value::Locks(_)
                | Value::HeldCount { .. }
                | Value::Order(_)
                | Value::Checkout(_)
                | Value::Return(_)
                | Value::Dropped { .. }
                | Value::Guard(_)
                | Value::Unsupported(_)
                | Value::NoConnection(_)
                | Value::Released
                | Value::StillHeld(_)
                | Value::Invariant(_)
                | Value::Wait(_) => v.clone(),
            }
        };
        let values = [
            Value::NoRows,
            Value::Null,
            Value::NotApplicable,
            Value::SettingsCannotPass,
            Value::Bool(true),
            Value::Int(1),
            Value::Number(7, "007".into()),
            Value::Text("x".into()),
            Value::Error(StatementError {
                message: String::new(),
                sqlstate: None,
                from_server: true,
            }),
            Value::Locks(LockSnapshot {
                held: false,
                holders: vec![],
                waiters: vec![],
            }),
            Value::HeldCount {
                count: 1,
                shared: false,
            },
            Value::Order(vec![]),
            Value::Checkout(Checkout::Ok),
            Value::Return(crate::outcome::Return::ToPool),
            Value::Dropped {
                at_ms: 1,
                cancel: crate::outcome::Cancel::None,
            },
            Value::Guard(crate::outcome::GuardEnded::Dropped),
            Value::Unsupported(String::new()),
            Value::NoConnection(String::new()),
            Value::Released,
            Value::StillHeld(1),
            Value::Invariant(crate::outcome::Verdict::Holds),
            Value::Wait(crate::outcome::Wait::QueuedInPooler),
        ];
        assert_eq!(values.len(), KINDS.len());
        for v in &values {
            let kind = serde_json::to_value(sample(v)).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned();
            assert!(KINDS.contains(&kind.as_str()), "{kind} is not in KINDS");
        }
    }

    fn when(yaml: &str) -> When {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn when_matches_each_field() {
        let error = |s: Option<&str>| {
            Reading::plain(Value::Error(StatementError {
                message: String::new(),
                sqlstate: s.map(str::to_owned),
                from_server: true,
            }))
        };
        assert!(when("{sqlstate: 55P03}").matches(&error(Some("55P03"))));
        assert!(!when("{sqlstate: 55P03}").matches(&error(None)));
        assert!(when("{sqlstate: none}").matches(&error(None)));
        assert!(when("{kind: error}").matches(&error(None)));
        assert!(!when("{kind: locks}").matches(&error(None)));
        let no_answer = Reading::plain(Value::Checkout(Checkout::NoAnswer(1000)));
        assert!(when("{kind: checkout, variant: no_answer}").matches(&no_answer));
        assert!(!when("{kind: checkout, variant: ok}").matches(&no_answer));
        assert!(when("{is: true}").matches(&Reading::plain(Value::Bool(true))));
        assert!(!when("{is: true}").matches(&Reading::plain(Value::Bool(false))));
        assert!(when("{is: 0}").matches(&Reading::plain(Value::Int(0))));
        assert!(when("{is: '4321ms'}").matches(&Reading::plain(Value::Text("4321ms".into()))));
        // A status rule never matches a reading.
        assert!(!when("{status: deviates}").matches(&Reading::plain(Value::Bool(true))));
        assert!(when("{status: deviates}").matches_status(Status::Deviates));
    }
}
