//! Validating `trials`, `random` and `invariants`.

use indexmap::IndexMap;
use serde_saphyr::Spanned;

use super::Validator;
use crate::scenario::params::is_identifier;
use crate::scenario::raw::RawInvariant;
use crate::scenario::{Actor, Invariant, InvariantCheck, Pos, RandomValue, Step, StepKind, Trials};

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
                check,
                finding: raw.finding,
            });
        }
        Some(Trials {
            count: u32::try_from(count.value.clamp(2, MAX_TRIALS)).unwrap_or(2),
            random,
            invariants: out,
        })
    }
}
