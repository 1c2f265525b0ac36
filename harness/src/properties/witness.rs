//! Witnesses: what a recorded reading witnesses, read from the scenario
//! itself, so that a property selects the readings it is about
//! (`decided_by: - witness: unlock`) and every scenario that records such a
//! reading decides it without being named, the user's own included.
//!
//! A witness carries what its step meant, so that a property can tell cases
//! apart that read the same: an unlock of a lock the actor took from one of
//! a key it never held (`false` by design, PostgreSQL docs §9.28.10: "If the
//! lock was not held, false is returned"), and an unlock that ran after the
//! actor gave its connection back (the return may have ended the session
//! that held the lock: a direct column closes it, a pool or pooler may reset
//! it) from one on the connection that took the lock.

use std::collections::HashMap;
use std::sync::OnceLock;

use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::keys::AdvisoryKey;
use crate::scenario::{
    AbandonStep, BackgroundStep, DisconnectStep, FaultStep, RestartStep, ReturnStep, Scenario, SqlStep, StepKind,
};

/// The kinds of reading a property can select by what it witnesses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WitnessKind {
    /// A recorded `select pg_advisory_unlock(KEY)` or
    /// `select pg_advisory_unlock_shared(KEY)` (one call, nothing else in
    /// the statement): its boolean, with what the actor had done with KEY
    /// before, and the next observation of KEY after it.
    Unlock,
}

impl WitnessKind {
    /// Every kind (the match in [`WitnessKind::as_str`] is exhaustive: a
    /// new kind fails to compile until it is named there).
    pub const ALL: &'static [WitnessKind] = &[WitnessKind::Unlock];

    /// `unlock`.
    pub fn as_str(self) -> &'static str {
        match self {
            WitnessKind::Unlock => "unlock",
        }
    }
}

pub use crate::outcome::when::Taken;

/// What a witness step meant, as the property's `when:` reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meaning {
    /// The kind.
    pub kind: WitnessKind,
    /// Whether the actor held the key.
    pub lock: Taken,
    /// Whether the actor returned its connection between taking the key and
    /// the unlock (the unlock ran on a later checkout).
    pub across_return: bool,
    /// The `record:` of the next `observe: advisory_locks` of the same key
    /// after the unlock, when no lock call on the key comes between them:
    /// whether the lock was still held after the unlock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_after: Option<String>,
    /// For `lock: taken` resting on a recorded lock call that may have
    /// failed (a try-lock, a bounded or erroring call): its `record:`. The
    /// lock was taken only where that reading is `true` or a plain return
    /// (no error, not given up); otherwise the witness reads as `not_taken`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_if: Option<String>,
}

/// One witness of a scenario instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Witness {
    /// The scenario instance (`NAME[params]`).
    pub scenario: String,
    /// The witness step's `record:`.
    pub record: String,
    /// The witness step's index in the file's `steps`.
    pub step: usize,
    /// The key.
    pub key: AdvisoryKey,
    /// What the step meant.
    pub meaning: Meaning,
}

fn lock_call() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| Regex::new(r"(?i)\bpg_(try_)?advisory_lock(_shared)?\s*\(([^()]*)\)").expect("a valid regex"))
}

fn unlock_call() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| Regex::new(r"(?i)\bpg_advisory_unlock(_shared)?\s*\(([^()]*)\)").expect("a valid regex"))
}

/// Any call of pg_advisory_unlock or pg_advisory_unlock_shared, whatever its arguments.
fn any_unlock() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| Regex::new(r"(?i)\bpg_advisory_unlock(_shared)?\s*\(").expect("a valid regex"))
}

fn sole_unlock() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        Regex::new(r"(?is)^\s*select\s+pg_advisory_unlock(_shared)?\s*\(([^()]*)\)\s*;?\s*$").expect("a valid regex")
    })
}

fn unlock_all() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| Regex::new(r"(?i)\bpg_advisory_unlock_all\s*\(\s*\)").expect("a valid regex"))
}

/// The key of a call's argument text (`81`, `1, 52`), `None` for anything
/// but literal integers (a `${saved}` value, an expression).
fn key_of(args: &str) -> Option<AdvisoryKey> {
    let args = args.trim();
    if args.contains(',') {
        AdvisoryKey::from_text(&format!("({args})"))
    } else {
        AdvisoryKey::from_text(args)
    }
}

/// (actor, shared, key) → how often taken, whether a return came since, and
/// the recorded lock call it rests on, if it may have failed.
#[derive(Default)]
struct Held {
    count: u32,
    returned: bool,
    taken_if: Option<String>,
}

/// Whether a lock call step cannot have failed to take the lock: a plain
/// blocking call without a client-side bound, or a try-lock that expects
/// `true` (the cell fails or deviates otherwise).
fn surely_taken(step: &crate::scenario::Step, try_lock: bool) -> bool {
    match &step.kind {
        StepKind::Sql(SqlStep { expect, bound, .. }) => {
            let expects_true = expect
                .as_ref()
                .is_some_and(|e| e.value == Some(crate::scenario::Scalar::Bool(true)));
            let expects_error = expect.as_ref().is_some_and(|e| e.error.is_some());
            if try_lock {
                expects_true
            } else {
                bound.is_none() && !expects_error
            }
        }
        _ => false,
    }
}

fn sql_of(kind: &StepKind) -> Option<(usize, &str)> {
    match kind {
        StepKind::Sql(SqlStep { actor, sql, .. }) => Some((*actor, sql.as_str())),
        StepKind::Background(BackgroundStep { actor, sql }) => Some((*actor, sql.as_str())),
        _ => None,
    }
}

/// The witnesses a scenario instance records, in step order.
pub fn of_scenario(s: &Scenario) -> Vec<Witness> {
    let mut held: HashMap<(usize, bool, AdvisoryKey), Held> = HashMap::new();
    let mut out = Vec::new();
    for (i, step) in s.steps.iter().enumerate() {
        match &step.kind {
            // The connection goes back: a later unlock runs on a later checkout.
            StepKind::Return(ReturnStep { actor, .. }) | StepKind::Abandon(AbandonStep { actor }) => {
                for ((a, _, _), h) in &mut held {
                    if a == actor {
                        h.returned = true;
                    }
                }
            }
            // The session ends, and its locks with it.
            StepKind::Disconnect(DisconnectStep { actor }) | StepKind::Fault(FaultStep { actor, .. }) => {
                held.retain(|(a, _, _), _| a != actor)
            }
            StepKind::Restart(RestartStep { .. }) => held.clear(),
            kind => {
                let Some((actor, sql)) = sql_of(kind) else {
                    continue;
                };
                if let (Some(record), Some(c)) = (&step.record, sole_unlock().captures(sql))
                    && let Some(key) = key_of(&c[2])
                {
                    let shared = c.get(1).is_some();
                    let h = held.get(&(actor, shared, key)).filter(|h| h.count > 0);
                    out.push(Witness {
                        scenario: s.name.clone(),
                        record: record.clone(),
                        step: i,
                        key,
                        meaning: Meaning {
                            kind: WitnessKind::Unlock,
                            lock: if h.is_some() { Taken::Taken } else { Taken::NotTaken },
                            across_return: h.is_some_and(|h| h.returned),
                            held_after: observation_after(s, i, key),
                            taken_if: h.and_then(|h| h.taken_if.clone()),
                        },
                    });
                }
                if unlock_all().is_match(sql) {
                    held.retain(|(a, _, _), _| *a != actor);
                }
                for c in unlock_call().captures_iter(sql) {
                    if let Some(key) = key_of(&c[2])
                        && let Some(h) = held.get_mut(&(actor, c.get(1).is_some(), key))
                    {
                        h.count = h.count.saturating_sub(1);
                    }
                }
                for c in lock_call().captures_iter(sql) {
                    let Some(key) = key_of(&c[3]) else {
                        continue;
                    };
                    let try_lock = c.get(1).is_some();
                    let taken_if = if surely_taken(step, try_lock) {
                        None
                    } else if let Some(record) = &step.record {
                        Some(record.clone())
                    } else {
                        // An unrecorded call that may have failed: not known to hold.
                        continue;
                    };
                    let h = held.entry((actor, c.get(2).is_some(), key)).or_default();
                    if h.count == 0 {
                        h.returned = false;
                        h.taken_if = taken_if;
                    }
                    h.count += 1;
                }
            }
        }
    }
    out
}

/// The `record:` of the first recorded `observe: advisory_locks` of `key`
/// after step `after`, unless a lock call on `key` comes first.
fn observation_after(s: &Scenario, after: usize, key: AdvisoryKey) -> Option<String> {
    for step in &s.steps[after + 1..] {
        if let Some((_, sql)) = sql_of(&step.kind)
            && lock_call().captures_iter(sql).any(|c| key_of(&c[3]) == Some(key))
        {
            return None;
        }
        if let StepKind::Observe(o) = &step.kind
            && o.key == Some(key)
            && let Some(record) = &step.record
        {
            return Some(record.clone());
        }
    }
    None
}

/// Recorded steps that call an unlock function in a form [`of_scenario`]
/// cannot read (several calls, an expression around it, a key that is not a
/// literal): `(record, why)`. Such a reading decides no property; the
/// shipped scenarios have none (a test keeps it so).
pub fn unread(s: &Scenario) -> Vec<(String, &'static str)> {
    let witnessed: Vec<String> = of_scenario(s).into_iter().map(|w| w.record).collect();
    s.steps
        .iter()
        .filter_map(|step| {
            let record = step.record.as_ref()?;
            let (_, sql) = sql_of(&step.kind)?;
            (any_unlock().is_match(sql) && !witnessed.contains(record)).then(|| {
                (
                    record.clone(),
                    "calls pg_advisory_unlock in a form other than `select pg_advisory_unlock[_shared](KEY)` with a literal key",
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> Vec<Scenario> {
        crate::scenario::load_dir(&crate::server::workspace_root().join("scenarios")).unwrap()
    }

    fn of(name: &str) -> Vec<Witness> {
        of_scenario(shipped().iter().find(|s| s.name == name).unwrap())
    }

    #[test]
    fn an_unlock_on_the_checkout_that_took_the_lock_is_taken_and_paired() {
        let w = of("session-unlock-interleaved");
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].record, "unlock_returns");
        assert_eq!(w[0].key, AdvisoryKey::Big(81));
        assert_eq!(w[0].meaning.lock, Taken::Taken);
        assert!(!w[0].meaning.across_return);
        assert_eq!(w[0].meaning.held_after.as_deref(), Some("held_after_unlock"));
    }

    #[test]
    fn an_unlock_on_a_later_checkout_is_across_a_return() {
        let w = of("report-mockforge-968");
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].meaning.lock, Taken::Taken);
        assert!(w[0].meaning.across_return);
        assert_eq!(w[0].meaning.held_after.as_deref(), Some("held_after_migrate"));
        // A shared lock and its shared unlock, with a two-int key.
        let w = of("report-oban-52");
        let ack = w.iter().find(|w| w.record == "ack_unlock").unwrap();
        assert_eq!(ack.key, AdvisoryKey::Pair(1, 52));
        assert_eq!((ack.meaning.lock, ack.meaning.across_return), (Taken::Taken, true));
    }

    #[test]
    fn an_unlock_of_a_key_never_taken_or_given_back_is_not_taken() {
        let w = of("unlock-not-held-warning");
        let lock: Vec<(&str, Taken)> = w.iter().map(|w| (w.record.as_str(), w.meaning.lock)).collect();
        assert_eq!(
            lock,
            [
                ("unlock_not_held", Taken::NotTaken),
                ("unlock_shared_not_held", Taken::NotTaken),
                ("unlock_held", Taken::Taken)
            ]
        );
        // Re-entrant: taken twice, given back twice, the third unlock finds nothing.
        let w = of("reentrant-session-lock");
        let third = w.iter().find(|w| w.record == "third_unlock_returns").unwrap();
        assert_eq!(third.meaning.lock, Taken::NotTaken);
        // Another actor's lock call on the key before the next observation:
        // that observation reads the other actor's lock, not the unlock's.
        let w = of("report-flyway-2895");
        let a = w.iter().find(|w| w.record == "a_unlock").unwrap();
        assert_eq!(a.meaning.held_after, None);
    }

    /// Every recorded unlock of the shipped scenarios is read as a witness.
    #[test]
    fn the_shipped_scenarios_have_no_unlock_the_witness_cannot_read() {
        for s in shipped() {
            assert!(unread(&s).is_empty(), "{}: {:?}", s.name, unread(&s));
        }
    }

    /// A user's scenario: a nested key is not read (and says so); a recorded
    /// try-lock's result decides whether the key was taken.
    #[test]
    fn a_nested_key_is_unread_and_a_recorded_try_lock_is_taken_if_true() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("own.yaml");
        std::fs::write(
            &path,
            "name: own\ndescription: d\nactors:\n  a: { via: direct }\nsteps:\n  \
             - { actor: a, sql: select pg_try_advisory_lock(5), record: try_lock }\n  \
             - { actor: a, sql: select pg_advisory_unlock(5), record: unlock }\n  \
             - { actor: a, sql: \"select pg_advisory_unlock(hashtext('k'))\", record: nested }\n",
        )
        .unwrap();
        let s = crate::scenario::load_file(&path).unwrap().remove(0);
        let w = of_scenario(&s);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].meaning.lock, Taken::Taken);
        assert_eq!(w[0].meaning.taken_if.as_deref(), Some("try_lock"));
        assert_eq!(unread(&s).into_iter().map(|(r, _)| r).collect::<Vec<_>>(), ["nested"]);
    }
}
