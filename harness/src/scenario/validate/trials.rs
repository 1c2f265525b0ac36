//! Validating `trials`, `random` and `invariants`.

use indexmap::IndexMap;
use serde_saphyr::Spanned;

use super::Validator;
use crate::scenario::params::is_identifier;
use crate::scenario::raw::{RawInvariant, RawOutcome};
use crate::scenario::{Actor, Invariant, InvariantCheck, Pos, Possible, RandomValue, Step, StepKind, Trials};

/// Most trials a scenario may ask for.
const MAX_TRIALS: i64 = 10_000;

impl Validator<'_> {
    /// The `random:` values (each `[min, max]` in ms, 0 ≤ min ≤ max ≤ 600000).
    pub(super) fn random(
        &mut self,
        raw: Option<&Spanned<IndexMap<String, Vec<f64>>>>,
        trials: bool,
    ) -> Vec<RandomValue> {
        let Some(raw) = raw else { return Vec::new() };
        let pos = Pos::of(&raw.referenced);
        if !trials {
            self.err(pos, "'random' draws a value per trial; it needs 'trials'");
        }
        let mut out = Vec::new();
        for (name, range) in &raw.value {
            if !is_identifier(name) {
                self.err(
                    pos,
                    format!("random value '{name}' must be a letter or '_' followed by letters, digits or '_'"),
                );
            }
            if self.params.iter().any(|(p, _)| p == name) {
                self.err(pos, format!("random value '{name}' has the name of a parameter"));
            }
            match range.as_slice() {
                [min, max] if min.is_finite() && max.is_finite() && 0.0 <= *min && min <= max && *max <= 600_000.0 => {
                    out.push(RandomValue {
                        name: name.clone(),
                        min: *min,
                        max: *max,
                    });
                }
                _ => self.err(
                    pos,
                    format!(
                        "random value '{name}' must be [min, max] in ms with 0 <= min <= max <= 600000, got {range:?}"
                    ),
                ),
            }
        }
        out
    }

    /// `trials` with its invariants; `None` without `trials`.
    pub(super) fn trials(
        &mut self,
        count: Option<&Spanned<i64>>,
        random: Vec<RandomValue>,
        invariants: Option<Spanned<IndexMap<String, Spanned<RawInvariant>>>>,
        outcomes: Option<Spanned<IndexMap<String, Spanned<Vec<RawOutcome>>>>>,
        actors: &[Actor],
        steps: &[Step],
    ) -> Option<Trials> {
        let Some(count) = count else {
            if let Some(inv) = &invariants {
                self.err(
                    Pos::of(&inv.referenced),
                    "'invariants' are checked on every trial; they need 'trials'",
                );
            }
            if let Some(o) = &outcomes {
                self.err(
                    Pos::of(&o.referenced),
                    "'outcomes' lists what a trial may read; it needs 'trials'",
                );
            }
            return None;
        };
        let cpos = Pos::of(&count.referenced);
        if !(2..=MAX_TRIALS).contains(&count.value) {
            self.err(
                cpos,
                format!("'trials' must be between 2 and {MAX_TRIALS}, got {}", count.value),
            );
        }
        let record_of = |name: &str| steps.iter().find(|s| s.record.as_deref() == Some(name));
        let mut out = Vec::new();
        for (name, raw) in invariants.map(|i| i.value).unwrap_or_default() {
            let pos = Pos::of(&raw.referenced);
            let raw = raw.value;
            match record_of(&raw.observe) {
                Some(s) if matches!(s.kind, StepKind::Observe(_)) => {}
                Some(_) => self.err(
                    pos,
                    format!(
                        "invariant '{name}': '{}' is not recorded by an 'observe' step",
                        raw.observe
                    ),
                ),
                None => self.err(pos, format!("invariant '{name}': no step records '{}'", raw.observe)),
            }
            if let Some(e) = &raw.if_error
                && record_of(e).is_none()
            {
                self.err(pos, format!("invariant '{name}': no step records '{e}' (if_error)"));
            }
            if let Some(u) = &raw.unless_value
                && record_of(&u.record).is_none()
            {
                self.err(
                    pos,
                    format!("invariant '{name}': no step records '{}' (unless_value)", u.record),
                );
            }
            let check = match (raw.not_held_by, raw.max_holders) {
                (Some(a), None) => {
                    if !actors.iter().any(|x| x.name == a) {
                        self.err(pos, format!("invariant '{name}': unknown actor '{a}' in 'not_held_by'"));
                    }
                    InvariantCheck::NotHeldBy(a)
                }
                (None, Some(n)) => InvariantCheck::MaxHolders(n),
                _ => {
                    self.err(
                        pos,
                        format!("invariant '{name}' needs exactly one of 'not_held_by' and 'max_holders'"),
                    );
                    InvariantCheck::MaxHolders(u32::MAX)
                }
            };
            out.push(Invariant {
                name,
                pos,
                observe: raw.observe,
                if_error: raw.if_error,
                unless_value: raw.unless_value.map(|u| (u.record, u.value)),
                check,
                finding: raw.finding,
            });
        }
        let possible = self.outcomes(outcomes, cpos, actors, steps);
        Some(Trials {
            count: u32::try_from(count.value.clamp(2, MAX_TRIALS)).unwrap_or(2),
            random,
            invariants: out,
            outcomes: possible,
        })
    }

    /// `outcomes:`: one non-empty list per `record` name of the steps, each
    /// item exactly one kind of reading, of a kind the step can record.
    fn outcomes(
        &mut self,
        raw: Option<Spanned<IndexMap<String, Spanned<Vec<RawOutcome>>>>>,
        trials_pos: Pos,
        actors: &[Actor],
        steps: &[Step],
    ) -> Vec<(String, Vec<Possible>)> {
        let recorded: Vec<&Step> = steps.iter().filter(|s| s.record.is_some()).collect();
        let Some(raw) = raw else {
            if !recorded.is_empty() {
                self.err(
                    trials_pos,
                    format!(
                        "a scenario with 'trials' lists every reading a trial may record under 'outcomes' \
                         (one list per record name: {})",
                        recorded
                            .iter()
                            .filter_map(|s| s.record.as_deref())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
            return Vec::new();
        };
        let opos = Pos::of(&raw.referenced);
        let mut out = Vec::new();
        for (name, items) in raw.value {
            let pos = Pos::of(&items.referenced);
            let Some(step) = recorded.iter().find(|s| s.record.as_deref() == Some(name.as_str())) else {
                self.err(pos, format!("outcomes: no step records '{name}'"));
                continue;
            };
            let snapshot = matches!(step.kind, StepKind::Observe(_));
            if items.value.is_empty() {
                self.err(pos, format!("outcomes: '{name}' lists no reading"));
            }
            let mut list = Vec::new();
            for item in items.value {
                if let Some(p) = self.possible(&name, item, snapshot, actors, pos) {
                    list.push(p);
                }
            }
            out.push((name, list));
        }
        for s in &recorded {
            let name = s.record.as_deref().unwrap_or_default();
            if !out.iter().any(|(n, _)| n == name) {
                self.err(
                    opos,
                    format!("outcomes: no list for '{name}' (every recorded name needs one)"),
                );
            }
        }
        out
    }

    /// One item of an `outcomes:` list.
    fn possible(
        &mut self,
        name: &str,
        item: RawOutcome,
        snapshot: bool,
        actors: &[Actor],
        pos: Pos,
    ) -> Option<Possible> {
        let kinds = [
            item.value.is_some(),
            item.error.is_some(),
            item.dropped.is_some(),
            item.held.is_some(),
            item.held_by.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            self.err(
                pos,
                format!("outcomes: each item of '{name}' has exactly one of value, error, dropped, held, held_by"),
            );
            return None;
        }
        if item.state.is_some() && item.held_by.is_none() {
            self.err(pos, format!("outcomes: '{name}': 'state' goes with 'held_by'"));
        }
        let for_snapshot = item.held.is_some() || item.held_by.is_some();
        if for_snapshot != snapshot {
            self.err(
                pos,
                if snapshot {
                    format!("outcomes: '{name}' is a lock snapshot (an observe step): its readings are held or held_by")
                } else {
                    format!("outcomes: '{name}' is not a lock snapshot: held and held_by are for observe steps")
                },
            );
            return None;
        }
        Some(if let Some(v) = item.value {
            Possible::Value(v)
        } else if let Some(code) = item.error {
            if code == "none" {
                Possible::Error(None)
            } else {
                match super::expect::sqlstate_of(&code) {
                    Some(c) => Possible::Error(Some(c)),
                    None => {
                        self.err(
                            pos,
                            format!(
                                "outcomes: '{name}': '{code}' is neither a SQLSTATE (five characters such as 57014), \
                                 a known condition name, nor none"
                            ),
                        );
                        return None;
                    }
                }
            }
        } else if let Some(d) = item.dropped {
            if !d {
                self.err(pos, format!("outcomes: '{name}': dropped is only ever true"));
            }
            Possible::Dropped
        } else if let Some(h) = item.held {
            Possible::Held(h)
        } else {
            let actor = item.held_by.unwrap_or_default();
            if actor != "server connection" && !actors.iter().any(|a| a.name == actor) {
                self.err(
                    pos,
                    format!("outcomes: '{name}': unknown actor '{actor}' in held_by (or 'server connection')"),
                );
            }
            Possible::HeldBy {
                actor,
                state: item.state,
            }
        })
    }
}
