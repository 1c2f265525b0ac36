//! A scenario with `trials`: its steps run many times within the cell,
//! collected into distributions and checked against its invariants
//! ([`crate::outcome::trials`]).

use std::sync::atomic::{AtomicU32, Ordering};

use locklab_drivers::DirectConn;

use super::state::Run;
use super::{StepError, StepResult};
use crate::outcome::shares::PressureMeter;
use crate::outcome::trials::Collector;
use crate::outcome::{Observation, Value};
use crate::scenario::row_name;
use crate::scenario::{Possible, Trials};

/// At most this many trials per cell (0: as the scenario says).
static MAX_TRIALS: AtomicU32 = AtomicU32::new(0);

/// Caps the trials of every cell that has `trials` at `max` (`None`: as
/// each scenario says): `cargo test` runs a short version of the races that
/// still exercises the machinery and the verdicts (`--trials` on the command
/// line).
pub fn set_max_trials(max: Option<u32>) {
    MAX_TRIALS.store(max.unwrap_or(0), Ordering::Relaxed);
}

/// How many trials a scenario asking for `count` runs.
pub fn effective_trials(count: u32) -> u32 {
    match MAX_TRIALS.load(Ordering::Relaxed) {
        0 => count,
        max => count.min(max.max(1)),
    }
}

impl Run<'_> {
    /// The steps, once per trial; then the distributions and the invariants.
    /// The first trial's step reports are kept (and a failing trial's).
    pub(super) async fn run_trials(
        &mut self,
        trials: &Trials,
        pool: &dyn locklab_drivers::Pool,
        monitor: &mut DirectConn,
    ) -> StepResult {
        let n = effective_trials(trials.count);
        let mut collector = Collector::new(&trials.invariants);
        let meter = PressureMeter::start();
        for t in 1..=n {
            for r in &trials.random {
                let v = if r.max > r.min {
                    rand::random_range(r.min..=r.max)
                } else {
                    r.min
                };
                self.vars.insert(r.name.clone(), Some(format!("{v:.3}")));
            }
            self.faults.forget_the_last();
            let kept = self.result.steps.len();
            let outcome = self.run_steps(pool, monitor).await;
            let observations = std::mem::take(&mut self.result.observations);
            if let Err(e) = outcome {
                self.result.observations = observations;
                return Err(e.map(|m| format!("trial {t} of {n}: {m}")));
            }
            if t > 1 {
                self.result.steps.truncate(kept);
            }
            collector.add(u64::from(t), &observations, &trials.invariants);
        }
        let (observations, mut summary) = collector.finish();
        summary.pressure = Some(meter.finish());
        let mut broken = outside(&trials.outcomes, &observations);
        self.result.observations = observations;
        broken.extend(
            summary
                .invariants
                .iter()
                .filter(|r| r.violated > 0 && !r.finding)
                .map(|r| {
                    format!(
                        "{} {}; first: {}",
                        row_name(&r.name),
                        r.text(),
                        r.first_violation.as_deref().unwrap_or("?")
                    )
                }),
        );
        self.result.trials = Some(summary);
        if broken.is_empty() {
            Ok(())
        } else {
            Err(StepError::Mismatch(broken.join("; ")))
        }
    }
}

/// The readings outside the scenario's `outcomes:`, one line per recorded
/// name: `` `lock_call` read 08P01 in 3 of 12 trials, not among its possible
/// outcomes (value: true | error: 57014) ``. A step that did not apply
/// (`n/a`) reads nothing.
fn outside(outcomes: &[(String, Vec<Possible>)], observations: &[Observation]) -> Vec<String> {
    let mut out = Vec::new();
    for (name, list) in outcomes {
        let Some(d) = observations
            .iter()
            .find(|o| &o.name == name)
            .and_then(|o| o.distribution.as_ref())
        else {
            continue;
        };
        let n: u64 = d.iter().map(|c| c.trials).sum();
        for c in d {
            let v = &c.reading.value;
            if matches!(v, Value::NotApplicable | Value::SettingsCannotPass) || list.iter().any(|p| possible(p, v)) {
                continue;
            }
            out.push(format!(
                "`{name}` read {} in {} of {n} trials, not among its possible outcomes ({})",
                c.reading,
                c.trials,
                list.iter().map(ToString::to_string).collect::<Vec<_>>().join(" | ")
            ));
        }
    }
    out
}

/// Whether a trial's reading `v` is the possible reading `p` (an item of a
/// scenario's `outcomes:`).
pub fn possible(p: &Possible, v: &Value) -> bool {
    match (p, v) {
        (Possible::Value(s), Value::Null) => s.matches(None),
        (Possible::Value(s), Value::Bool(b)) => s.matches(Some(if *b { "t" } else { "f" })),
        (Possible::Value(s), Value::Int(i)) => s.matches(Some(&i.to_string())),
        (Possible::Value(s), Value::Number(_, t) | Value::Text(t)) => s.matches(Some(t)),
        (Possible::Error(code), Value::Error(e)) => e.sqlstate == *code,
        (Possible::Dropped, Value::Dropped { .. }) => true,
        (Possible::Held(h), Value::Locks(s)) => s.held == *h,
        (Possible::HeldBy { actor, state }, Value::Locks(s)) => {
            s.held
                && !s.holders.is_empty()
                && s.holders.iter().all(|h| {
                    h.actor.as_deref() == Some(actor.as_str())
                        && state.as_ref().is_none_or(|want| h.state.as_ref() == Some(want))
                })
        }
        _ => false,
    }
}
