//! The regression baseline: `reports/baseline/`, the committed expected
//! matrix, one file per scenario file ([`dir`]: [`ScenarioBaseline`],
//! [`BaselineDir`]), and the comparison `locklab check` makes between it and
//! a fresh run ([`compare`], in `baseline/comparison.rs`, with the
//! cell-level comparison of [`crate::compare`]).
//!
//! A baseline cell ([`BaselineCell`]) is a lossy projection of the report's
//! cell, [`RunResult`], made by [`BaselineCell::of`] alone: what
//! [`RunResult::outcome`] keeps (status, each observation's reading and
//! SQLSTATE, the locks left, how many backends had to be ended) plus each
//! observation's p50 time in ms (no pids, no min/max). Values must be equal
//! (as typed values); times only within a [`Tolerance`].
//!
//! A file of the directory (`baseline_version` 3): `baseline_version`,
//! `scenario` (the scenario file's name), `generated_at`,
//! `locklab_version`, `repeat`, `git_commit`, `server` (`major`, `version`,
//! `backend`), `pressure` (its race cells', taken together), `drivers` (id
//! → `crate_name`, `crate_version`, `configuration`, …), `cells[]`
//! (`scenario`, `driver`, `status`, `observations` (name → `value` (a
//! [`crate::outcome::Reading`]: `{"kind", "value", "notice"}`) or, for a
//! race row, `seen` (the readings seen often), `sqlstate`, `p50_ms`, and for
//! a race row `shares` (readings with `share` and `count`) and `trials`),
//! `locks_left` (`[{"key", "state"}]`), `cleaned_backends`,
//! `backends_left`, and for a race cell `pressure`). Version 2 was one
//! `baseline.json` for the whole matrix ([`Baseline`], read by
//! [`Baseline::load_whole`]): `locklab migrate-baseline` splits it
//! ([`migrate`]).

mod comparison;
pub mod dir;
pub mod migrate;
mod verdicts;

use std::path::Path;

use anyhow::{Context, Result, bail};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

pub use self::comparison::{CellDiff, Comparison, Shares, compare, compare_with, short_version};
pub use self::dir::{BASELINE_VERSION, BaselineDir, ScenarioBaseline, family};
pub use crate::compare::Tolerance;
use crate::outcome::{LocksLeft, Outcome, Reading, Recorded, RunResult, Seen};
use crate::report::Report;

/// Version of the whole-matrix `baseline.json` layout that a directory of
/// [`ScenarioBaseline`] files replaced (read by [`Baseline::load_whole`],
/// for `locklab migrate-baseline`).
pub const WHOLE_FILE_VERSION: u32 = 2;

/// Steps faster than this (p50, in ms) keep no time in the baseline; `check`
/// compares them as if they took this long, so a round trip that now waits
/// for seconds is still caught.
pub const TIMED_FROM_MS: f64 = 50.0;

/// The expected matrix of one server, in memory: a baseline directory read
/// whole ([`BaselineDir::whole`]), one file of it
/// ([`ScenarioBaseline::as_baseline`]), or a run's cells
/// ([`Baseline::from_report`]); the comparison's two sides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// [`BASELINE_VERSION`] ([`WHOLE_FILE_VERSION`] in an old file).
    pub baseline_version: u32,
    /// When it was written (RFC 3339, UTC).
    pub generated_at: String,
    /// Harness version that wrote it.
    pub locklab_version: String,
    /// Runs per cell it was made from (timings are their p50).
    pub repeat: usize,
    /// Commit of the checkout that wrote it, if known.
    pub git_commit: Option<String>,
    /// The server it was measured on.
    pub server: BaselineServer,
    /// Driver columns: id → crate and configuration.
    pub drivers: IndexMap<String, BaselineDriver>,
    /// How many race rows (observations with shares, of cells with
    /// `trials`) the cells hold: the Bonferroni split of the race rule's
    /// false-alarm rate ([`crate::outcome::shares::threshold`]); kept in the
    /// header so that a process reading one cell knows it. 0 in baselines
    /// written before it existed (then each row gets the whole rate).
    #[serde(default)]
    pub race_rows: u64,
    /// One per scenario × driver, scenario-major.
    pub cells: Vec<BaselineCell>,
}

/// The server of a baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaselineServer {
    /// Major version, e.g. 17.
    pub major: u32,
    /// PostgreSQL `version()`.
    pub version: String,
    /// `container`, `local` or `external`.
    pub backend: String,
}

/// A driver column of a baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaselineDriver {
    /// Crate under test.
    pub crate_name: String,
    /// Its version from Cargo.lock.
    pub crate_version: String,
    /// Configuration in the crate's terms.
    pub configuration: String,
    /// Whether its cells' readings vary by nature (behind a pooler that
    /// hands out any of its server connections:
    /// `locklab_drivers::PoolerKind::readings_vary`): its cells compare by
    /// status alone ([`comparison::compare`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub readings_vary: bool,
    /// `direct` or `pooled` (absent in baselines written before it): which
    /// dimensions of a property apply to the column
    /// ([`crate::properties::Column`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The pooler's mode (`session`, `transaction`), for a column behind one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooler: Option<String>,
}

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
    fn outcome(&self) -> Outcome {
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
    fn p50s(&self) -> Vec<Option<f64>> {
        self.observations.values().map(|o| o.p50_ms).collect()
    }
}

/// `ms` rounded to two significant digits.
fn two_digits(ms: f64) -> f64 {
    if ms <= 0.0 || !ms.is_finite() {
        return ms;
    }
    let unit = 10f64.powi(ms.log10().floor() as i32 - 1);
    (ms / unit).round() * unit
}

impl Baseline {
    /// With [`Baseline::race_rows`] counted from its cells.
    pub fn with_race_rows(mut self) -> Baseline {
        self.race_rows = self
            .cells
            .iter()
            .flat_map(|c| c.observations.values())
            .filter(|o| o.shares.is_some())
            .count() as u64;
        self
    }

    /// Column `id` alone, its cells and driver entry renamed `as_id`: one
    /// side of a comparison of two columns of one run (`locklab check
    /// --upgrade FROM TO`, where both sides take one name so that
    /// [`compare`] pairs their cells by scenario). `None` when the baseline
    /// has no such column.
    pub fn column(&self, id: &str, as_id: &str) -> Option<Baseline> {
        let driver = self.drivers.get(id)?.clone();
        let mut out = self.clone();
        out.drivers = IndexMap::from([(as_id.to_owned(), driver)]);
        out.cells = self
            .cells
            .iter()
            .filter(|c| c.driver == id)
            .map(|c| BaselineCell {
                driver: as_id.to_owned(),
                ..c.clone()
            })
            .collect();
        Some(out)
    }

    /// The baseline of a report made on exactly one server.
    ///
    /// # Errors
    /// When the report has no server or several (a baseline is one server's).
    pub fn from_report(report: &Report) -> Result<Baseline> {
        let [server] = report.servers.as_slice() else {
            bail!(
                "a baseline is the matrix of one server, this run had {} (give a single --pg and --backend)",
                report.servers.len()
            );
        };
        Ok(Baseline {
            baseline_version: BASELINE_VERSION,
            generated_at: report.generated_at.clone(),
            locklab_version: report.locklab_version.clone(),
            repeat: report.repeat,
            git_commit: report.environment.git_commit.clone(),
            server: BaselineServer {
                major: server.major,
                version: server.version.clone(),
                backend: server.backend.clone(),
            },
            drivers: report
                .drivers
                .iter()
                .map(|d| {
                    (
                        d.id.clone(),
                        BaselineDriver {
                            crate_name: d.crate_name.clone(),
                            crate_version: d.crate_version.clone(),
                            configuration: d.configuration.clone(),
                            readings_vary: d.readings_vary(),
                            kind: Some(d.kind.clone()),
                            pooler: d.pooler.clone(),
                        },
                    )
                })
                .collect(),
            race_rows: 0,
            cells: report.runs.iter().map(BaselineCell::of).collect(),
        }
        .with_race_rows())
    }

    /// Reads a whole-matrix `baseline.json` (`baseline_version` 2, what a
    /// baseline was before it was a directory), for `locklab
    /// migrate-baseline`.
    ///
    /// # Errors
    /// A missing or unreadable file, invalid JSON (with line and column), or
    /// another `baseline_version`; each names the file.
    pub fn load_whole(path: &Path) -> Result<Baseline> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let version: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
        let found = version.get("baseline_version").and_then(serde_json::Value::as_u64);
        if found != Some(u64::from(WHOLE_FILE_VERSION)) {
            bail!(
                "{}: baseline_version {} is not {WHOLE_FILE_VERSION} (a whole-matrix baseline.json)",
                path.display(),
                found.map_or("(missing)".to_owned(), |v| v.to_string())
            );
        }
        serde_json::from_str(&text).with_context(|| format!("{}: not a locklab baseline", path.display()))
    }
}
