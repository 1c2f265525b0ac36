//! A cell as the baseline keeps it and the properties judge it
//! ([`BaselineCell`]): a lossy projection of a run ([`RunResult`]), with
//! p50 times and no pids, whose fields are the outcome's types. Built only
//! by [`BaselineCell::of`].

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::{LocksLeft, Outcome, Reading, Recorded, RunResult, Seen};

/// Steps faster than this (p50, in ms) keep no time in the baseline; `check`
/// compares them as if they took this long, so a round trip that now waits
/// for seconds is still caught.
pub const TIMED_FROM_MS: f64 = 50.0;

/// What one scenario × driver cell measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaselineCell {
    /// Scenario name (with its parameter set).
    pub scenario: String,
    /// Driver id.
    pub driver: String,
    /// `pass`, `deviates`, `n/a`, `varies` or `fail`.
    pub status: crate::outcome::Status,
    /// Observations in step order: name → value.
    pub observations: IndexMap<String, BaselineObservation>,
    /// The "locks left after run" cell: keys with backend states.
    pub locks_left: LocksLeft,
    /// Backends the harness had to end after the run.
    pub cleaned_backends: usize,
    /// Backends or advisory locks the leak guard found in the run's database
    /// once the run was over (0 in baselines written before it existed).
    #[serde(default)]
    pub backends_left: usize,
    /// For a cell with `trials`: the CPU pressure its trials ran under,
    /// which decides whether its shares compare
    /// ([`crate::outcome::shares::comparable`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure: Option<crate::outcome::shares::Pressure>,
    /// Its scenario's readings vary by nature (`readings_vary:` in the
    /// scenario file): it compares by status alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub readings_vary: bool,
    /// When its repeats read differently: each way they read, with how many
    /// repeats read so ([`crate::outcome::RunResult::variants`]): the set of
    /// readings `check` compares a varying cell by, and what the properties
    /// judge it over. Empty when every repeat agreed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<crate::outcome::Variant>,
}

/// One observation of a cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaselineObservation {
    /// What it compares as: its reading (`"value"`), or a race row's
    /// often-seen readings (`"seen"`).
    #[serde(flatten)]
    pub seen: Seen,
    /// SQLSTATE, if the step failed on the server.
    pub sqlstate: Option<String>,
    /// p50 wall time of the step over the repeats, in ms, to two significant
    /// digits (`200.6` → `200`, `1001.6` → `1000`), so that regenerating the
    /// baseline does not rewrite every line; `None` without a timing or when
    /// under [`TIMED_FROM_MS`] (a round trip, whose time is noise) or when the
    /// step said `time_varies: true`.
    pub p50_ms: Option<f64>,
    /// For a cell with `trials`: each reading's share of the trials (0–1,
    /// two decimals), compared within
    /// the race rule ([`crate::outcome::shares`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares: Option<Vec<Share>>,
    /// For a cell with `trials`: how many trials the shares are of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trials: Option<u64>,
}

/// A reading's share of a race cell's trials.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Share {
    /// What was read.
    #[serde(flatten)]
    pub reading: Reading,
    /// Its share of the trials, 0–1 with two decimals (for reading).
    pub share: f64,
    /// In how many trials it was read (what the race rule compares;
    /// baselines written before it existed have the share alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}

impl Share {
    /// Its count of `n` trials: [`Share::count`], or the share's.
    pub fn count(&self, n: u64) -> u64 {
        self.count.unwrap_or_else(|| (self.share * n as f64).round() as u64)
    }
}

impl BaselineCell {
    /// What the baseline keeps of the run `r`.
    pub fn of(r: &RunResult) -> BaselineCell {
        let o = r.outcome();
        BaselineCell {
            scenario: r.scenario.clone(),
            driver: r.driver.clone(),
            status: o.status,
            observations: r
                .observations
                .iter()
                .map(|ob| {
                    (
                        ob.name.clone(),
                        BaselineObservation {
                            seen: ob.seen(),
                            sqlstate: ob.sqlstate.clone(),
                            p50_ms: ob
                                .elapsed_stats
                                .map(|s| s.p50)
                                .or(ob.elapsed_ms)
                                .filter(|ms| *ms >= TIMED_FROM_MS && !ob.time_varies)
                                .map(two_digits),
                            trials: ob.distribution.as_ref().map(|d| d.iter().map(|c| c.trials).sum()),
                            shares: ob.distribution.as_ref().map(|d| {
                                let n: u64 = d.iter().map(|c| c.trials).sum();
                                d.iter()
                                    .map(|c| Share {
                                        reading: c.reading.clone(),
                                        share: (100.0 * c.trials as f64 / n.max(1) as f64).round() / 100.0,
                                        count: Some(c.trials),
                                    })
                                    .collect()
                            }),
                        },
                    )
                })
                .collect(),
            locks_left: o.locks_left,
            cleaned_backends: o.cleaned_backends,
            backends_left: o.backends_left,
            pressure: r.trials.as_ref().and_then(|t| t.pressure),
            readings_vary: r.readings_vary,
            variants: r.variants.clone(),
        }
    }

    /// Adds to each race row (an observation with shares) the readings the
    /// same row of `before` (this cell as accepted) had and this run did not
    /// read, at count 0 and share 0, so that rewriting the baseline never
    /// forgets an outcome because one run of 1,000 trials missed a rare one
    /// (issue 32: a rewrite once lost 38). The race rule compares counts, so
    /// a reading kept at 0 costs nothing unless a run reads it often. Rows
    /// `before` lacks are left alone. Returns how many readings were kept.
    pub fn keep_readings_of(&mut self, before: &BaselineCell) -> usize {
        let mut kept = 0;
        for (name, o) in &mut self.observations {
            let (Some(shares), Some(old)) = (
                o.shares.as_mut(),
                before.observations.get(name).and_then(|b| b.shares.as_ref()),
            ) else {
                continue;
            };
            for s in old {
                if !shares.iter().any(|n| n.reading == s.reading) {
                    shares.push(Share {
                        reading: s.reading.clone(),
                        share: 0.0,
                        count: Some(0),
                    });
                    kept += 1;
                }
            }
        }
        kept
    }

    /// How many repeats its variants are of (0 for a cell whose repeats
    /// agreed).
    pub fn varied_repeats(&self) -> usize {
        self.variants.iter().map(|v| v.repeats).sum()
    }

    /// Each variant of a varying cell as a cell of its own (its status,
    /// readings, locks left; the p50 times of the cell's observations of
    /// the same name), with how many repeats read so. Empty for a cell whose
    /// repeats agreed.
    pub fn variant_cells(&self) -> Vec<(usize, BaselineCell)> {
        self.variants
            .iter()
            .map(|v| {
                let o = &v.outcome;
                let cell = BaselineCell {
                    status: o.status,
                    observations: o
                        .observations
                        .iter()
                        .map(|r| {
                            let p50_ms = self.observations.get(&r.name).and_then(|b| b.p50_ms);
                            (
                                r.name.clone(),
                                BaselineObservation {
                                    seen: r.seen.clone(),
                                    sqlstate: r.sqlstate.clone(),
                                    p50_ms,
                                    shares: None,
                                    trials: None,
                                },
                            )
                        })
                        .collect(),
                    locks_left: o.locks_left.clone(),
                    cleaned_backends: o.cleaned_backends,
                    backends_left: o.backends_left,
                    variants: Vec::new(),
                    ..self.clone()
                };
                (v.repeats, cell)
            })
            .collect()
    }

    /// What the cell keeps of [`RunResult::outcome`], for [`crate::compare`].
    pub(crate) fn outcome(&self) -> Outcome {
        Outcome {
            status: self.status,
            observations: self
                .observations
                .iter()
                .map(|(name, o)| Recorded {
                    name: name.clone(),
                    seen: o.seen.clone(),
                    sqlstate: o.sqlstate.clone(),
                })
                .collect(),
            locks_left: self.locks_left.clone(),
            cleaned_backends: self.cleaned_backends,
            backends_left: self.backends_left,
        }
    }

    /// The p50 times, aligned with [`BaselineCell::outcome`]'s observations.
    pub(crate) fn p50s(&self) -> Vec<Option<f64>> {
        self.observations.values().map(|o| o.p50_ms).collect()
    }
}

/// `ms` rounded to two significant digits.
pub(crate) fn two_digits(ms: f64) -> f64 {
    if ms <= 0.0 || !ms.is_finite() {
        return ms;
    }
    let unit = 10f64.powi(ms.log10().floor() as i32 - 1);
    (ms / unit).round() * unit
}
