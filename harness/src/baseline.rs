//! The regression baseline: `reports/baseline.json`, the committed expected
//! matrix, and the comparison `locklab check` makes between it and a fresh run.
//!
//! A baseline keeps, per scenario × driver cell, what [`RunResult::outcome`]
//! keeps (status, each observation's displayed value and SQLSTATE, the locks
//! left, how many backends had to be ended) plus each observation's p50 time
//! in ms. Values must be equal; times only within a [`Tolerance`].
//!
//! `baseline.json` layout (`baseline_version` 1): `baseline_version`,
//! `generated_at`, `locklab_version`, `repeat`, `git_commit`, `server`
//! (`major`, `version`, `backend`), `drivers` (id → `crate_name`,
//! `crate_version`, `configuration`), `cells[]` (`scenario`, `driver`,
//! `status`, `observations` (name → `value`, `sqlstate`, `p50_ms`),
//! `locks_left`, `cleaned_backends`).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::outcome::RunResult;
use crate::report::Report;

/// Version of the `baseline.json` layout.
pub const BASELINE_VERSION: u32 = 1;

/// Steps faster than this (p50, in ms) keep no time in the baseline; `check`
/// compares them as if they took this long, so a round trip that now waits
/// for seconds is still caught.
pub const TIMED_FROM_MS: f64 = 50.0;

/// The expected matrix of one server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// [`BASELINE_VERSION`].
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
}

/// What one scenario × driver cell measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaselineCell {
    /// Scenario name (with its parameter set).
    pub scenario: String,
    /// Driver id.
    pub driver: String,
    /// `pass`, `deviates`, `n/a`, `fail` or `unstable`.
    pub status: crate::outcome::Status,
    /// Observations in step order: name → value.
    pub observations: IndexMap<String, BaselineObservation>,
    /// The "locks left after run" cell (`none`, or keys with backend states).
    pub locks_left: String,
    /// Backends the harness had to end after the run.
    pub cleaned_backends: usize,
    /// Backends or advisory locks the leak guard found in the run's database
    /// once the run was over (0 in baselines written before it existed).
    #[serde(default)]
    pub backends_left: usize,
}

/// One observation of a cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaselineObservation {
    /// The displayed value (as in the report cell, without the timing).
    pub value: String,
    /// SQLSTATE, if the step failed on the server.
    pub sqlstate: Option<String>,
    /// p50 wall time of the step over the repeats, in ms, to two significant
    /// digits (`200.6` → `200`, `1001.6` → `1000`), so that regenerating the
    /// baseline does not rewrite every line; `None` without a timing or when
    /// under [`TIMED_FROM_MS`] (a round trip, whose time is noise).
    pub p50_ms: Option<f64>,
}

/// How far a time may move before `check` calls it changed: a new p50 `t`
/// against a baseline p50 `b` is accepted when
/// `b / factor - slack_ms <= t <= b * factor + slack_ms`.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    /// Multiplicative factor (≥ 1).
    pub factor: f64,
    /// Additive slack, in ms.
    pub slack_ms: f64,
}

impl Default for Tolerance {
    /// 3× and 1000 ms: machines are shared and noisy, and a debug build under
    /// `cargo test` is slower than the release build that wrote the baseline
    /// (on a loaded two-core machine single round trips of a few ms took up to
    /// 0.7 s in both of two repeats); a lock wait that went from a 200 ms
    /// `lock_timeout` to a 10 s deadline is still caught.
    fn default() -> Tolerance {
        Tolerance {
            factor: 3.0,
            slack_ms: 1000.0,
        }
    }
}

impl Tolerance {
    fn accepts(&self, before: f64, after: f64) -> bool {
        after >= before / self.factor - self.slack_ms && after <= before * self.factor + self.slack_ms
    }
}

impl BaselineCell {
    fn of(r: &RunResult) -> BaselineCell {
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
                            value: ob.display.clone(),
                            sqlstate: ob.sqlstate.clone(),
                            p50_ms: ob
                                .elapsed_stats
                                .map(|s| s.p50)
                                .or(ob.elapsed_ms)
                                .filter(|ms| *ms >= TIMED_FROM_MS)
                                .map(two_digits),
                        },
                    )
                })
                .collect(),
            locks_left: o.locks_left,
            cleaned_backends: o.cleaned_backends,
            backends_left: o.backends_left,
        }
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
                        },
                    )
                })
                .collect(),
            cells: report.runs.iter().map(BaselineCell::of).collect(),
        })
    }

    /// Reads a baseline file.
    ///
    /// # Errors
    /// A missing or unreadable file, invalid JSON (with line and column), or
    /// another `baseline_version`; each names the file.
    pub fn load(path: &Path) -> Result<Baseline> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "cannot read the baseline {} (write one with `locklab check --update` or `just baseline`)",
                path.display()
            )
        })?;
        let version: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
        let found = version.get("baseline_version").and_then(serde_json::Value::as_u64);
        if found != Some(u64::from(BASELINE_VERSION)) {
            bail!(
                "{}: baseline_version {} is not {BASELINE_VERSION}; rewrite it with `locklab check --update`",
                path.display(),
                found.map_or("(missing)".to_owned(), |v| v.to_string())
            );
        }
        serde_json::from_str(&text).with_context(|| format!("{}: not a locklab baseline", path.display()))
    }

    /// Writes the baseline as pretty JSON.
    ///
    /// # Errors
    /// I/O errors, with the path.
    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(self)? + "\n";
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
    }
}

/// One cell that differs between a baseline and a fresh run.
#[derive(Debug, Clone)]
pub struct CellDiff {
    /// Scenario name.
    pub scenario: String,
    /// Driver id.
    pub driver: String,
    /// `crate version before → after` (or just the version when unchanged),
    /// and the configuration when it changed.
    pub driver_note: String,
    /// What changed, one line each: `` `name`: before → after ``.
    pub changes: Vec<String>,
}

/// The result of comparing a fresh run with a baseline.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// Cells compared.
    pub compared: usize,
    /// Cells that differ, in the fresh run's order (new and missing cells included).
    pub diffs: Vec<CellDiff>,
}

impl Comparison {
    /// Whether nothing changed.
    pub fn is_clean(&self) -> bool {
        self.diffs.is_empty()
    }

    /// The readable diff: a header with the number of changed cells per
    /// driver column, then the changed cells, scenario by scenario; cells of
    /// one scenario whose changes are identical are one block naming all their
    /// drivers. Each block names scenario, drivers with crate version before →
    /// after, and has one line per changed value (before → after). With
    /// `max_lines`, blocks stop once that many lines are printed and a last
    /// line counts the cells left out. The caller adds how to accept the change.
    pub fn render(&self, baseline: &Baseline, path: &Path, now: &str, max_lines: Option<usize>) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "locklab check: {} of {} cell(s) differ from {}",
            self.diffs.len(),
            self.compared,
            path.display()
        );
        let _ = writeln!(
            out,
            "  baseline: {} ({}), written {}{}; now: {now}",
            short_version(&baseline.server.version),
            baseline.server.backend,
            baseline.generated_at,
            baseline
                .git_commit
                .as_deref()
                .map(|c| format!(" at {}", &c[..c.len().min(12)]))
                .unwrap_or_default()
        );
        if self.diffs.is_empty() {
            return out;
        }
        let mut per_driver: Vec<(&str, &str, usize)> = Vec::new();
        for d in &self.diffs {
            match per_driver.iter_mut().find(|(id, _, _)| *id == d.driver) {
                Some((_, _, n)) => *n += 1,
                None => per_driver.push((&d.driver, &d.driver_note, 1)),
            }
        }
        let counts: Vec<String> = per_driver
            .iter()
            .map(|(id, note, n)| format!("{id} {n} ({note})"))
            .collect();
        let _ = writeln!(out, "  changed cells per driver: {}", counts.join(", "));
        // Blocks: (scenario, changes) → drivers, in first-seen order.
        let mut blocks: Vec<(&str, &[String], Vec<&CellDiff>)> = Vec::new();
        for d in &self.diffs {
            match blocks
                .iter_mut()
                .find(|(s, c, _)| *s == d.scenario && *c == d.changes.as_slice())
            {
                Some((_, _, ds)) => ds.push(d),
                None => blocks.push((&d.scenario, &d.changes, vec![d])),
            }
        }
        let mut lines = 0;
        let mut shown = 0;
        for (scenario, changes, drivers) in &blocks {
            if max_lines.is_some_and(|m| lines + changes.len() + 2 > m) && shown > 0 {
                break;
            }
            let names: Vec<String> = drivers
                .iter()
                .map(|d| format!("{} ({})", d.driver, d.driver_note))
                .collect();
            let _ = writeln!(out, "\n{scenario} × {}", names.join(", "));
            for c in *changes {
                let _ = writeln!(out, "  {c}");
            }
            lines += changes.len() + 2;
            shown += drivers.len();
        }
        if shown < self.diffs.len() {
            let _ = writeln!(
                out,
                "\n… and {} more changed cell(s) not shown; `locklab check --full` prints every one.",
                self.diffs.len() - shown
            );
        }
        out
    }
}

/// `PostgreSQL 17.11` from a `version()` string.
pub fn short_version(version: &str) -> String {
    version.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
}

/// Compares a fresh run with `baseline`. Values must be equal; p50 times
/// must be within `tolerance`. A fresh cell missing from the baseline is a
/// difference, and so is a baseline cell missing from the run for which
/// `expected` is true (a run of a selection expects only the cells of its
/// scenarios and drivers; a full run, every cell).
pub fn compare(
    baseline: &Baseline,
    fresh: &Baseline,
    tolerance: Tolerance,
    expected: &dyn Fn(&BaselineCell) -> bool,
) -> Comparison {
    let driver_note = |id: &str| {
        let before = baseline.drivers.get(id);
        let after = fresh.drivers.get(id);
        match (before, after) {
            (Some(b), Some(a)) => {
                let mut note = if b.crate_version == a.crate_version {
                    format!("{} {}", a.crate_name, a.crate_version)
                } else {
                    format!("{} {} → {}", a.crate_name, b.crate_version, a.crate_version)
                };
                if b.configuration != a.configuration {
                    let _ = write!(note, "; configuration {} → {}", b.configuration, a.configuration);
                }
                note
            }
            (None, Some(a)) => format!("{} {}, a column not in the baseline", a.crate_name, a.crate_version),
            (Some(b), None) => format!("{} {}, a column not in this run", b.crate_name, b.crate_version),
            (None, None) => "unknown column".to_owned(),
        }
    };
    let mut diffs = Vec::new();
    let mut compared = 0;
    for after in &fresh.cells {
        let before = baseline
            .cells
            .iter()
            .find(|c| c.scenario == after.scenario && c.driver == after.driver);
        let changes = match before {
            Some(before) => {
                compared += 1;
                cell_changes(before, after, tolerance)
            }
            None => vec![format!("new cell, not in the baseline: {}", after.status)],
        };
        if !changes.is_empty() {
            diffs.push(CellDiff {
                scenario: after.scenario.clone(),
                driver: after.driver.clone(),
                driver_note: driver_note(&after.driver),
                changes,
            });
        }
    }
    for before in baseline.cells.iter().filter(|c| expected(c)) {
        if !fresh
            .cells
            .iter()
            .any(|c| c.scenario == before.scenario && c.driver == before.driver)
        {
            diffs.push(CellDiff {
                scenario: before.scenario.clone(),
                driver: before.driver.clone(),
                driver_note: driver_note(&before.driver),
                changes: vec![format!("in the baseline ({}), not in this run", before.status)],
            });
        }
    }
    Comparison { compared, diffs }
}

/// The changed values of one cell, one line each.
fn cell_changes(before: &BaselineCell, after: &BaselineCell, tolerance: Tolerance) -> Vec<String> {
    let mut changes = Vec::new();
    if before.status != after.status {
        changes.push(format!("outcome: {} → {}", before.status, after.status));
    }
    let show = |o: &BaselineObservation| match &o.sqlstate {
        Some(state) if !o.value.contains(state.as_str()) => format!("{} [{state}]", o.value),
        _ => o.value.clone(),
    };
    for (name, b) in &before.observations {
        match after.observations.get(name) {
            None => changes.push(format!("`{name}`: {} → (not recorded)", show(b))),
            Some(a) => {
                if a.value != b.value || a.sqlstate != b.sqlstate {
                    changes.push(format!("`{name}`: {} → {}", show(b), show(a)));
                } else if b.p50_ms.is_some() || a.p50_ms.is_some() {
                    let (tb, ta) = (b.p50_ms.unwrap_or(TIMED_FROM_MS), a.p50_ms.unwrap_or(TIMED_FROM_MS));
                    if !tolerance.accepts(tb, ta) {
                        let show =
                            |t: Option<f64>| t.map_or(format!("under {TIMED_FROM_MS} ms"), |t| format!("{t} ms"));
                        changes.push(format!(
                            "`{name}` time: p50 {} → {} (outside {}× ± {} ms)",
                            show(b.p50_ms),
                            show(a.p50_ms),
                            tolerance.factor,
                            tolerance.slack_ms
                        ));
                    }
                }
            }
        }
    }
    for (name, a) in &after.observations {
        if !before.observations.contains_key(name) {
            changes.push(format!("`{name}`: (not recorded) → {}", show(a)));
        }
    }
    if before.locks_left != after.locks_left {
        changes.push(format!(
            "locks left after run: {} → {}",
            before.locks_left, after.locks_left
        ));
    }
    if before.cleaned_backends != after.cleaned_backends {
        changes.push(format!(
            "backends ended after run: {} → {}",
            before.cleaned_backends, after.cleaned_backends
        ));
    }
    if before.backends_left != after.backends_left {
        changes.push(format!(
            "left in the run's database once it was over (leak guard): {} → {}",
            before.backends_left, after.backends_left
        ));
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(scenario: &str, driver: &str, held: &str, ms: f64) -> BaselineCell {
        BaselineCell {
            scenario: scenario.into(),
            driver: driver.into(),
            status: crate::outcome::Status::Pass,
            observations: [(
                "held".to_owned(),
                BaselineObservation {
                    value: held.into(),
                    sqlstate: None,
                    p50_ms: Some(ms),
                },
            )]
            .into_iter()
            .collect(),
            locks_left: "none".into(),
            cleaned_backends: 0,
            backends_left: 0,
        }
    }

    fn baseline(cells: Vec<BaselineCell>, version: &str, configuration: &str) -> Baseline {
        Baseline {
            baseline_version: BASELINE_VERSION,
            generated_at: "2026-11-30T00:00:00Z".into(),
            locklab_version: "0.1.0".into(),
            repeat: 1,
            git_commit: None,
            server: BaselineServer {
                major: 17,
                version: "PostgreSQL 17.11 on x86_64".into(),
                backend: "local".into(),
            },
            drivers: ["a", "b"]
                .into_iter()
                .map(|d| {
                    (
                        d.to_owned(),
                        BaselineDriver {
                            crate_name: "deadpool-postgres".into(),
                            crate_version: version.into(),
                            configuration: configuration.into(),
                        },
                    )
                })
                .collect(),
            cells,
        }
    }

    #[test]
    fn a_changed_value_names_scenario_observation_driver_and_versions() {
        let before = baseline(
            vec![cell("s", "a", "true", 5.0), cell("s", "b", "true", 5.0)],
            "0.14.1",
            "Fast",
        );
        let after = baseline(
            vec![cell("s", "a", "true", 5.0), cell("s", "b", "false", 5.0)],
            "0.14.2",
            "Clean",
        );
        let c = compare(&before, &after, Tolerance::default(), &|_| true);
        assert_eq!(c.compared, 2);
        assert_eq!(c.diffs.len(), 1);
        let text = c.render(
            &before,
            Path::new("reports/baseline.json"),
            "PostgreSQL 17.11 (local)",
            None,
        );
        assert!(
            text.contains("s × b (deadpool-postgres 0.14.1 → 0.14.2; configuration Fast → Clean)"),
            "{text}"
        );
        assert!(text.contains("`held`: true → false"), "{text}");
        assert!(!text.contains("s × a"), "{text}");
    }

    #[test]
    fn times_are_compared_within_the_tolerance() {
        let before = baseline(vec![cell("s", "a", "true", 200.0)], "1", "x");
        let near = baseline(vec![cell("s", "a", "true", 390.0)], "1", "x");
        let far = baseline(vec![cell("s", "a", "true", 10_000.0)], "1", "x");
        assert!(compare(&before, &near, Tolerance::default(), &|_| true).is_clean());
        let c = compare(&before, &far, Tolerance::default(), &|_| true);
        assert_eq!(c.diffs.len(), 1);
        assert!(
            c.diffs[0].changes[0].contains("time: p50 200 ms → 10000 ms"),
            "{:?}",
            c.diffs
        );
    }

    #[test]
    fn times_keep_two_digits_and_fast_steps_none() {
        assert_eq!(two_digits(200.6), 200.0);
        assert_eq!(two_digits(1001.6), 1000.0);
        assert_eq!(two_digits(276.3), 280.0);
        assert_eq!(two_digits(52.4), 52.0);
        let mut fast = cell("s", "a", "true", 1.0);
        fast.observations[0].p50_ms = None;
        let mut hung = cell("s", "a", "true", 10_000.0);
        hung.observations[0].p50_ms = Some(10_000.0);
        let c = compare(
            &baseline(vec![fast], "1", "x"),
            &baseline(vec![hung], "1", "x"),
            Tolerance::default(),
            &|_| true,
        );
        assert!(
            c.diffs[0].changes[0].contains("p50 under 50 ms → 10000 ms"),
            "{:?}",
            c.diffs
        );
    }

    #[test]
    fn new_and_missing_cells_are_differences() {
        let before = baseline(
            vec![cell("s", "a", "true", 1.0), cell("gone", "a", "true", 1.0)],
            "1",
            "x",
        );
        let after = baseline(
            vec![cell("s", "a", "true", 1.0), cell("new", "a", "true", 1.0)],
            "1",
            "x",
        );
        let c = compare(&before, &after, Tolerance::default(), &|_| true);
        // a selection that left out scenario `gone` does not expect it
        let only_s = compare(&before, &after, Tolerance::default(), &|c| c.scenario == "s");
        assert_eq!(only_s.diffs.len(), 1, "{:?}", only_s.diffs);
        let text: Vec<String> = c
            .diffs
            .iter()
            .map(|d| format!("{} {:?}", d.scenario, d.changes))
            .collect();
        assert_eq!(c.diffs.len(), 2, "{text:?}");
        assert!(
            text[0].starts_with("new") && text[0].contains("not in the baseline"),
            "{text:?}"
        );
        assert!(
            text[1].starts_with("gone") && text[1].contains("not in this run"),
            "{text:?}"
        );
    }
}
