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
#[cfg(test)]
use crate::outcome::cell::two_digits;
pub use crate::outcome::cell::{BaselineCell, BaselineObservation, Share, TIMED_FROM_MS};
use crate::report::Report;

/// Version of the whole-matrix `baseline.json` layout that a directory of
/// [`ScenarioBaseline`] files replaced (read by [`Baseline::load_whole`],
/// for `locklab migrate-baseline`).
pub const WHOLE_FILE_VERSION: u32 = 2;

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
