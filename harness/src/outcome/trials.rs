//! Cells with `trials`: the distribution of outcomes over the trials, the
//! invariants checked on each, and the comparison rule for what varies by
//! nature (docs/src/faults-and-races.md, "Races").
//!
//! How two runs' trials compare is the race rule ([`super::shares`]): the
//! possible outcomes are the scenario's `outcomes:` (checked here on every
//! trial by [`Collector::outside`]); a must-hold invariant fails on one
//! violation; a finding's count and every reading's count compare by
//! [`super::shares::changes`] under comparable CPU pressure. An observation
//! still shows as the readings seen in at least [`SEEN_SHARE`] of its trials
//! ([`Observation::seen`], e.g. `55P03 | true`), for reading the report.
//! A race cell runs once however many repeats (`--repeat`, `soak`): its
//! trials are its repeats.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde::Serialize;

use super::{Counted, Observation, Reading, Stats, Value, Verdict};
use crate::scenario::trials::{Invariant, InvariantCheck, row_name};

/// The smallest share of the trials (5 %) in which a value must be seen to
/// be shown in the observation's cell (the report also shows every share).
pub const SEEN_SHARE: f64 = 0.05;

/// What the trials of one cell came to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct TrialsSummary {
    /// How many trials ran.
    pub n: u64,
    /// Each distinct trial outcome (its recorded readings) and in how many
    /// trials it occurred, in first-seen order.
    pub outcomes: Vec<TrialOutcome>,
    /// Each invariant's result, in file order.
    pub invariants: Vec<InvariantResult>,
    /// The CPU pressure the trials ran under (absent in reports written
    /// before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure: Option<super::shares::Pressure>,
}

/// One outcome of a trial: each recorded name's reading, in step order.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct TrialOutcome {
    /// `record:` name → reading.
    pub values: IndexMap<String, Reading>,
    /// In how many trials it occurred.
    pub trials: u64,
}

/// One invariant over the trials.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct InvariantResult {
    /// Its name.
    pub name: String,
    /// In how many trials it was checked (its `if_error` condition held and
    /// its snapshot was recorded).
    pub checked: u64,
    /// In how many of them it was violated.
    pub violated: u64,
    /// For `not_held_by`: in how many trials the actor's backend still held
    /// the lock for a moment while `active`: PostgreSQL sends a statement's
    /// error before it aborts the transaction and releases its locks
    /// (`PostgresMain`: `EmitErrorReport`, then `AbortCurrentTransaction`),
    /// so a snapshot taken at once may catch the lock on its way out. Not a
    /// violation (the lock does not outlive the call); counted apart.
    pub transient: u64,
    /// Whether a violation is the finding (the cell does not fail).
    pub finding: bool,
    /// The first violating trial: its number, its recorded values and the
    /// snapshot's `pg_locks` rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_violation: Option<String>,
}

impl InvariantResult {
    /// `violated in K of N trials`, or `holds in all N trials checked`
    /// (with the transient holds, if any).
    pub fn text(&self) -> String {
        let mut t = if self.violated == 0 {
            format!("holds in all {} trials checked", self.checked)
        } else {
            format!("violated in {} of {} trials", self.violated, self.checked)
        };
        if self.transient > 0 {
            t.push_str(&format!(
                " ({} with the lock still held for a moment by the caller's backend, active while it aborted)",
                self.transient
            ));
        }
        t
    }
}

/// How an invariant came out on one trial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checked {
    /// Its condition did not hold, or its snapshot was not recorded.
    NotApplicable,
    /// It holds.
    Holds,
    /// It holds, but the actor's backend, still `active`, held the lock for
    /// a moment ([`InvariantResult::transient`]).
    Transient,
}

/// Checks `inv` on one trial's recorded observations.
///
/// # Errors
/// The violation: which holder broke it.
pub fn check(inv: &Invariant, observations: &[Observation]) -> Result<Checked, String> {
    let find = |name: &str| observations.iter().find(|o| o.name == name);
    if let Some(cond) = &inv.if_error
        && !matches!(find(cond).map(|o| &o.value), Some(Value::Error(_)))
    {
        return Ok(Checked::NotApplicable);
    }
    if let Some((record, text)) = &inv.unless_value
        && matches!(find(record).map(|o| &o.value), Some(Value::Text(t)) if t == text)
    {
        return Ok(Checked::NotApplicable);
    }
    let Some(Value::Locks(snapshot)) = find(&inv.observe).map(|o| &o.value) else {
        return Ok(Checked::NotApplicable);
    };
    match &inv.check {
        InvariantCheck::NotHeldBy(actor) => {
            let mine: Vec<_> = snapshot
                .holders
                .iter()
                .filter(|h| h.actor.as_deref() == Some(actor))
                .collect();
            match mine.iter().find(|h| h.state.as_deref() != Some("active")) {
                Some(h) => Err(format!(
                    "'{actor}' holds {} ({}, backend {}, {})",
                    h.key,
                    h.mode,
                    h.pid,
                    h.state.as_deref().unwrap_or("?")
                )),
                None if mine.is_empty() => Ok(Checked::Holds),
                None => Ok(Checked::Transient),
            }
        }
        InvariantCheck::MaxHolders(max) => {
            let mut pids: Vec<i32> = snapshot.holders.iter().map(|h| h.pid).collect();
            pids.sort_unstable();
            pids.dedup();
            if pids.len() as u64 > u64::from(*max) {
                Err(format!("{} holders (at most {max}): {snapshot}", pids.len()))
            } else {
                Ok(Checked::Holds)
            }
        }
    }
}

/// What a distribution compares as: the readings seen in at least
/// [`SEEN_SHARE`] of the trials, in [`Reading`]'s order.
pub fn seen(distribution: &[Counted]) -> Vec<Reading> {
    let n: u64 = distribution.iter().map(|c| c.trials).sum();
    let mut seen: Vec<Reading> = distribution
        .iter()
        .filter(|c| n > 0 && (c.trials as f64) >= SEEN_SHARE * n as f64)
        .map(|c| c.reading.clone())
        .collect();
    seen.sort();
    seen
}

/// `55P03 51% · true 49%` (by count, then text), for the report.
pub fn shares(distribution: &[Counted]) -> String {
    let n: u64 = distribution.iter().map(|c| c.trials).sum();
    let mut v: Vec<(String, u64)> = distribution.iter().map(|c| (c.reading.to_string(), c.trials)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.iter()
        .map(|(value, c)| {
            let pct = 100.0 * *c as f64 / n.max(1) as f64;
            if pct > 0.0 && pct < 1.0 {
                format!("{value} <1%")
            } else {
                format!("{value} {pct:.0}%")
            }
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

/// Collects the trials of one cell as they run.
#[derive(Default)]
pub struct Collector {
    summary: TrialsSummary,
    /// Per recorded name, in first-seen order: the first trial's observation,
    /// the counts of its readings, its timings (ms).
    rows: Vec<(Observation, BTreeMap<Reading, u64>, Vec<f64>)>,
}

impl Collector {
    /// A collector for these invariants.
    pub fn new(invariants: &[Invariant]) -> Collector {
        Collector {
            summary: TrialsSummary {
                invariants: invariants
                    .iter()
                    .map(|i| InvariantResult {
                        name: i.name.clone(),
                        checked: 0,
                        violated: 0,
                        transient: 0,
                        finding: i.finding,
                        first_violation: None,
                    })
                    .collect(),
                ..TrialsSummary::default()
            },
            rows: Vec::new(),
        }
    }

    /// Adds trial number `trial` (1-based) with its recorded observations.
    pub fn add(&mut self, trial: u64, observations: &[Observation], invariants: &[Invariant]) {
        self.summary.n += 1;
        let values: IndexMap<String, Reading> = observations.iter().map(|o| (o.name.clone(), o.reading())).collect();
        count_outcome(&mut self.summary.outcomes, values, 1);
        for o in observations {
            match self.rows.iter_mut().find(|(first, _, _)| first.name == o.name) {
                Some((_, counts, times)) => {
                    *counts.entry(o.reading()).or_default() += 1;
                    times.extend(o.elapsed_ms);
                }
                None => self.rows.push((
                    o.clone(),
                    BTreeMap::from([(o.reading(), 1)]),
                    o.elapsed_ms.into_iter().collect(),
                )),
            }
        }
        for (inv, result) in invariants.iter().zip(self.summary.invariants.iter_mut()) {
            match check(inv, observations) {
                Ok(Checked::NotApplicable) => {}
                Ok(Checked::Holds) => result.checked += 1,
                Ok(Checked::Transient) => {
                    result.checked += 1;
                    result.transient += 1;
                }
                Err(why) => {
                    result.checked += 1;
                    result.violated += 1;
                    if result.first_violation.is_none() {
                        let values: Vec<String> = observations
                            .iter()
                            .map(|o| format!("{} = {}", o.name, o.reading()))
                            .collect();
                        result.first_violation = Some(format!("trial {trial}: {why}; {}", values.join("; ")));
                    }
                }
            }
        }
    }

    /// The cell's observations (one per recorded name, then one per
    /// invariant) and the summary.
    pub fn finish(self) -> (Vec<Observation>, TrialsSummary) {
        let mut out = Vec::new();
        let last_step = self.rows.iter().map(|(o, _, _)| o.step).max().unwrap_or(0);
        for (mut o, counts, times) in self.rows {
            // Each trial had its own; the distribution says which.
            o.sqlstate = None;
            o.elapsed_stats = Stats::of(&times);
            o.elapsed_ms = o.elapsed_stats.map(|s| s.p50);
            o.distribution = Some(
                counts
                    .into_iter()
                    .map(|(reading, trials)| Counted { reading, trials })
                    .collect(),
            );
            out.push(o);
        }
        for r in &self.summary.invariants {
            // A finding's verdict depends on how many trials ran (a violation
            // in 5% of them may not show in 20): it compares by its share.
            let verdict = match (r.finding, r.violated) {
                (true, _) => Verdict::Finding,
                (false, 0) => Verdict::Holds,
                (false, _) => Verdict::Violated,
            };
            let mut o = Observation::new(
                &row_name(&r.name),
                last_step,
                Value::Invariant(verdict),
                Vec::new(),
                None,
                None,
            );
            let holds = r.checked - r.violated;
            // (A non-finding invariant compares by its verdict alone.)
            o.distribution = r.finding.then(|| {
                [(Verdict::Holds, holds), (Verdict::Violated, r.violated)]
                    .into_iter()
                    .filter(|(_, c)| *c > 0)
                    .map(|(v, trials)| Counted {
                        reading: Reading::plain(Value::Invariant(v)),
                        trials,
                    })
                    .collect()
            });
            out.push(o);
        }
        (out, self.summary)
    }
}

impl TrialsSummary {
    /// Adds another run's trials of the same cell (a repeat, a shard).
    pub fn merge(&mut self, other: &TrialsSummary) {
        self.pressure = match (self.pressure, other.pressure) {
            (Some(a), Some(b)) => Some(a.merge(self.n, b, other.n)),
            _ => None,
        };
        self.n += other.n;
        for o in &other.outcomes {
            count_outcome(&mut self.outcomes, o.values.clone(), o.trials);
        }
        for (mine, theirs) in self.invariants.iter_mut().zip(&other.invariants) {
            mine.checked += theirs.checked;
            mine.violated += theirs.violated;
            mine.transient += theirs.transient;
            if mine.first_violation.is_none() {
                mine.first_violation.clone_from(&theirs.first_violation);
            }
        }
    }
}

/// Adds `trials` occurrences of the outcome `values` to `outcomes`.
fn count_outcome(outcomes: &mut Vec<TrialOutcome>, values: IndexMap<String, Reading>, trials: u64) {
    match outcomes.iter_mut().find(|o| o.values == values) {
        Some(o) => o.trials += trials,
        None => outcomes.push(TrialOutcome { values, trials }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::AdvisoryKey;
    use crate::outcome::{LockHolder, LockSnapshot, Seen, StatementError};
    use crate::scenario::Pos;

    fn holder(actor: &str, pid: i32, state: &str) -> LockHolder {
        LockHolder {
            actor: Some(actor.to_owned()),
            pid,
            state: Some(state.to_owned()),
            key: AdvisoryKey::Big(41),
            mode: "ExclusiveLock".into(),
            wait: None,
            xmin: None,
        }
    }

    fn trial(call: Value, holders: Vec<LockHolder>) -> Vec<Observation> {
        let snapshot = LockSnapshot {
            held: !holders.is_empty(),
            holders,
            waiters: Vec::new(),
        };
        vec![
            Observation::new("lock_call", 4, call, Vec::new(), Some(10.0), None),
            Observation::new("after", 5, Value::Locks(snapshot), Vec::new(), None, None),
        ]
    }

    fn error() -> Value {
        Value::Error(StatementError {
            message: "canceling statement due to lock timeout".into(),
            sqlstate: Some("55P03".into()),
            from_server: true,
        })
    }

    fn not_held_by_waiter() -> Invariant {
        Invariant {
            name: "error-leaves-no-lock".into(),
            pos: Pos::default(),
            observe: "after".into(),
            if_error: Some("lock_call".into()),
            unless_value: None,
            check: InvariantCheck::NotHeldBy("waiter".into()),
            finding: false,
        }
    }

    #[test]
    fn an_error_with_no_lock_left_holds_and_one_with_the_lock_kept_is_violated() {
        let inv = not_held_by_waiter();
        assert_eq!(
            check(&inv, &trial(error(), vec![holder("holder", 1, "active")])),
            Ok(Checked::Holds)
        );
        let broken = check(&inv, &trial(error(), vec![holder("waiter", 2, "idle")]));
        assert_eq!(broken, Err("'waiter' holds 41 (ExclusiveLock, backend 2, idle)".into()));
        // Still aborting: the lock is on its way out, counted apart.
        assert_eq!(
            check(&inv, &trial(error(), vec![holder("waiter", 2, "active")])),
            Ok(Checked::Transient)
        );
        // The call succeeded: the condition does not hold, nothing checked.
        assert_eq!(
            check(&inv, &trial(Value::Bool(true), vec![holder("waiter", 2, "idle")])),
            Ok(Checked::NotApplicable)
        );
    }

    #[test]
    fn two_holders_break_max_holders_one() {
        let inv = Invariant {
            check: InvariantCheck::MaxHolders(1),
            if_error: None,
            unless_value: None,
            ..not_held_by_waiter()
        };
        assert_eq!(
            check(&inv, &trial(Value::Bool(true), vec![holder("waiter", 2, "idle")])),
            Ok(Checked::Holds)
        );
        let two = trial(
            Value::Bool(true),
            vec![holder("waiter", 2, "idle"), holder("holder", 1, "idle")],
        );
        assert!(check(&inv, &two).unwrap_err().starts_with("2 holders (at most 1)"));
    }

    #[test]
    fn the_collector_counts_values_and_names_the_first_violation() {
        let inv = vec![not_held_by_waiter()];
        let mut c = Collector::new(&inv);
        for t in 1..=19 {
            c.add(t, &trial(Value::Bool(true), vec![holder("waiter", 2, "idle")]), &inv);
        }
        c.add(20, &trial(error(), vec![holder("waiter", 2, "idle")]), &inv);
        let (rows, summary) = c.finish();
        assert_eq!(summary.n, 20);
        let d = rows[0].distribution.as_ref().unwrap();
        let count = |v: Value| {
            let want = Reading::plain(v);
            d.iter().find(|c| c.reading == want).map(|c| c.trials)
        };
        assert_eq!(count(Value::Bool(true)), Some(19));
        assert_eq!(count(error()), Some(1));
        // 55P03 is 5% of the trials: seen.
        assert_eq!(
            rows[0].seen(),
            Seen::Seen(vec![Reading::plain(Value::Bool(true)), Reading::plain(error())])
        );
        assert_eq!(rows[0].seen().to_string(), "55P03 | true");
        assert_eq!(rows[2].name, "invariant error-leaves-no-lock");
        assert_eq!(rows[2].seen().to_string(), "violated");
        assert_eq!(summary.outcomes.len(), 2);
        assert_eq!(summary.outcomes.iter().map(|o| o.trials).sum::<u64>(), 20);
        let r = &summary.invariants[0];
        assert_eq!((r.checked, r.violated), (1, 1));
        assert!(
            r.first_violation
                .as_deref()
                .unwrap()
                .starts_with("trial 20: 'waiter' holds 41")
        );
        assert_eq!(shares(rows[0].distribution.as_ref().unwrap()), "true 95% · 55P03 5%");
    }

    #[test]
    fn rare_values_are_shown_but_not_part_of_what_compares() {
        let d = [
            Counted {
                reading: Reading::plain(Value::Bool(true)),
                trials: 999,
            },
            Counted {
                reading: Reading::plain(error()),
                trials: 1,
            },
        ];
        assert_eq!(seen(&d), [Reading::plain(Value::Bool(true))]);
        assert_eq!(shares(&d), "true 100% · 55P03 <1%");
    }
}
