//! The variation rule (docs/src/faults-and-races.md, "The variation rule"):
//! a cell whose repeats read differently (a pooler's hand-out order, a race
//! between processes) is a reading, never a failure. Its properties are
//! judged over every repeat ([`read_variants`]): violated when any repeat
//! violated them, with the count; holds only when every repeat that decides
//! held; undecided only when a repeat could not be read. And `check` calls a
//! verdict decided by such cells changed only where the fresh run
//! contradicts the baseline ([`missed_by_chance`]): a violation the baseline
//! never read, or a holds where the baseline's violations were frequent
//! enough that missing them all is less likely than the race rule's
//! false-alarm rate ([`crate::outcome::shares::FALSE_ALARM_RATE`]).

use serde::{Deserialize, Serialize};

use super::{ColumnVerdict, Evidence, Mark};
use crate::outcome::cell::BaselineCell;
use crate::properties::Decider;

/// How many of a varying cell's repeats read as violating, of how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepeatCount {
    /// Repeats whose readings violated the property.
    pub violated: u64,
    /// Repeats of the cell.
    pub of: u64,
}

/// What a cell whose repeats read differently says through `d`, judged per
/// repeat (the variation rule, docs/src/faults-and-races.md): violated when
/// any repeat violated it (with the count), undecided when one could not be
/// read, holds when every repeat that decides held, n/a when none decides;
/// `None` when no repeat reached the record.
pub(super) fn read_variants(
    d: &Decider,
    cell: &BaselineCell,
    mut e: Evidence,
    read_cell: fn(&Decider, &BaselineCell) -> Option<Evidence>,
) -> Option<Evidence> {
    let read: Vec<(usize, Evidence)> = cell
        .variant_cells()
        .into_iter()
        .filter_map(|(n, c)| read_cell(d, &c).map(|e| (n, e)))
        .collect();
    if read.is_empty() {
        return None;
    }
    let of = cell.varied_repeats() as u64;
    let violated: u64 = read
        .iter()
        .filter(|(_, e)| e.reads == Mark::Violated)
        .map(|(n, _)| *n as u64)
        .sum();
    e.reads = Mark::combined(read.iter().map(|(_, e)| e.reads));
    let mut shown: Vec<(String, usize)> = Vec::new();
    for (n, r) in &read {
        match shown.iter_mut().find(|(t, _)| *t == r.reading) {
            Some((_, k)) => *k += n,
            None => shown.push((r.reading.clone(), *n)),
        }
    }
    // A record that read the same in every repeat (the cell varied
    // elsewhere) shows as that reading.
    e.reading = if let [(only, _)] = shown.as_slice() {
        only.clone()
    } else {
        format!(
            "varied over {of} repeats: {}",
            shown
                .iter()
                .map(|(t, n)| format!("{t} ×{n}"))
                .collect::<Vec<_>>()
                .join("; ")
        )
    };
    if let Some((_, first)) = read.iter().find(|(_, r)| r.reads == e.reads) {
        e.says.clone_from(&first.says);
        e.advice.clone_from(&first.advice);
        e.ms = first.ms;
    }
    e.repeats = Some(RepeatCount { violated, of });
    Some(e)
}

/// For a verdict that went from violated to anything else between
/// `before` (the baseline's) and `after` (a fresh run's, of `repeat`
/// repeats per cell): why that is not a contradiction by the variation rule,
/// or `None` when it is one. Each cell that violated in the baseline, `k`
/// of its `n` repeats (every repeat, for a cell whose repeats agreed), is
/// read again in `m` repeats (its own count, for a fresh cell that varied);
/// all of them missing the violation by chance has probability
/// `(1 − k/n)^m` (the baseline's share taken as the rate). Only when that is
/// at least the false-alarm rate for every such cell is the change
/// information rather than a difference.
pub fn missed_by_chance(before: &ColumnVerdict, after: &ColumnVerdict, repeat: usize) -> Option<String> {
    if before.verdict != Mark::Violated || after.verdict == Mark::Violated {
        return None;
    }
    let mut why = Vec::new();
    for e in before.evidence.iter().filter(|e| e.reads == Mark::Violated) {
        let x = after
            .evidence
            .iter()
            .find(|x| x.scenario == e.scenario && x.record == e.record)?;
        if e.trials.is_some() || x.trials.is_some() {
            return None;
        }
        let (k, n) = e.repeats.map_or((1, 1), |r| (r.violated, r.of.max(1)));
        let m = x.repeats.map_or(repeat as u64, |r| r.of).max(1);
        let p = (1.0 - k as f64 / n as f64).powi(m as i32);
        if p < crate::outcome::shares::FALSE_ALARM_RATE {
            return None;
        }
        why.push(format!(
            "{} violated in {k} of {n} repeats in the baseline; {m} repeat(s) all miss that with p = {p:.2}",
            e.scenario
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::properties::Coordinates;

    fn evidence(reads: Mark, repeats: Option<(u64, u64)>) -> Evidence {
        Evidence {
            scenario: "s".into(),
            record: Some("r".into()),
            reading: String::new(),
            reads,
            says: None,
            advice: None,
            trials: None,
            repeats: repeats.map(|(violated, of)| RepeatCount { violated, of }),
            ms: None,
            at: Coordinates::default(),
        }
    }

    fn verdict(e: Evidence) -> ColumnVerdict {
        ColumnVerdict {
            driver: "d".into(),
            verdict: e.reads,
            reasons: Vec::new(),
            evidence: vec![e],
            coverage: None,
        }
    }

    #[test]
    fn a_rare_violation_missed_by_a_short_run_is_not_a_change() {
        // 1 of 3 in the baseline: 3 repeats all miss it with p = (2/3)^3 ≈ 0.30.
        let before = verdict(evidence(Mark::Violated, Some((1, 3))));
        let after = verdict(evidence(Mark::Holds, None));
        assert!(missed_by_chance(&before, &after, 3).is_some());
    }

    #[test]
    fn a_violation_in_every_repeat_that_goes_away_is_a_change() {
        let before = verdict(evidence(Mark::Violated, None));
        let after = verdict(evidence(Mark::Holds, None));
        assert_eq!(missed_by_chance(&before, &after, 3), None);
        // 5 of 6 in the baseline: 3 repeats miss it with p = (1/6)^3 < 1 %.
        let before = verdict(evidence(Mark::Violated, Some((5, 6))));
        assert_eq!(missed_by_chance(&before, &after, 3), None);
    }

    #[test]
    fn a_new_violation_is_always_a_change() {
        let before = verdict(evidence(Mark::Holds, None));
        let after = verdict(evidence(Mark::Violated, Some((1, 3))));
        assert_eq!(missed_by_chance(&before, &after, 3), None);
    }
}
