//! `locklab check`'s comparison of a fresh run with the baseline, cell by
//! cell ([`crate::compare::diff`] with the p50 times), and its readable diff.

use std::fmt::Write as _;
use std::path::Path;

use std::collections::BTreeMap;

use super::{Baseline, BaselineCell, BaselineObservation, TIMED_FROM_MS};
use crate::compare::{self, Timings, Tolerance};
use crate::outcome::Reading;
use crate::outcome::trials::{FULL_TRIALS, SEEN_SHARE, SHARE_TOLERANCE};

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
    let (b, mut a) = (before.outcome(), after.outcome());
    // Two runs of a race agree on an observation when every value one saw
    // in at least SEEN_SHARE of its trials the other saw at all (a short
    // run, under FULL_TRIALS trials as under cargo test: in that direction
    // only, since rarer values may simply not have come up in it).
    for recorded in &mut a.observations {
        let (Some(bo), Some(ao)) = (
            before.observations.get(recorded.name.as_str()),
            after.observations.get(recorded.name.as_str()),
        ) else {
            continue;
        };
        let (Some(bs), Some(a_s)) = (shares(bo), shares(ao)) else {
            continue;
        };
        let short = bo.trials.unwrap_or(0).min(ao.trials.unwrap_or(0)) < FULL_TRIALS;
        let (small, large, small_n) = if ao.trials <= bo.trials {
            (&a_s, &bs, ao.trials.unwrap_or(0))
        } else {
            (&bs, &a_s, bo.trials.unwrap_or(0))
        };
        // In a short run one trial is already over 5 %: a value seen once
        // there may be a rare one that the other run happened not to see.
        let least = if short { 2.0 } else { 0.0 };
        let known = |x: &Shares, y: &Shares, n: u64| {
            x.iter()
                .all(|(v, share)| *share < SEEN_SHARE || (share * n as f64).round() < least || y.contains_key(v))
        };
        if known(small, large, small_n) && (short || known(large, small, 0)) {
            recorded.seen.clone_from(&bo.seen);
            recorded.sqlstate.clone_from(&bo.sqlstate);
        }
    }
    let (tb, ta) = (before.p50s(), after.p50s());
    let timings = Timings {
        before: &tb,
        after: &ta,
        tolerance,
        untimed_ms: TIMED_FROM_MS,
    };
    let mut changes: Vec<String> = compare::diff(&b, &a, Some(timings))
        .iter()
        .map(ToString::to_string)
        .collect();
    changes.extend(share_changes(before, after));
    changes
}

/// Values of a trial cell's observation whose share of the trials moved by
/// more than [`SHARE_TOLERANCE`] (values under [`SEEN_SHARE`] in both are
/// not compared; nor are the shares of a run with fewer than
/// [`FULL_TRIALS`]): `` `name` share of `55P03`: 51% → 10% (outside ±25 points) ``.
fn share_changes(before: &BaselineCell, after: &BaselineCell) -> Vec<String> {
    let mut out = Vec::new();
    for (name, b) in &before.observations {
        let Some(a) = after.observations.get(name) else {
            continue;
        };
        let (Some(bs), Some(a_s)) = (shares(b), shares(a)) else {
            continue;
        };
        if b.trials.unwrap_or(0).min(a.trials.unwrap_or(0)) < FULL_TRIALS {
            continue;
        }
        // In the order of their text, as the cells show them.
        let values: std::collections::BTreeSet<&Reading> = bs.keys().chain(a_s.keys()).collect();
        let mut values: Vec<&Reading> = values.into_iter().collect();
        values.sort_by_cached_key(|r| r.to_string());
        for v in values {
            let (x, y) = (bs.get(v).copied().unwrap_or(0.0), a_s.get(v).copied().unwrap_or(0.0));
            if x.max(y) >= SEEN_SHARE && (x - y).abs() > SHARE_TOLERANCE {
                out.push(format!(
                    "`{name}` share of `{v}`: {:.0}% → {:.0}% (outside ±{:.0} points)",
                    100.0 * x,
                    100.0 * y,
                    100.0 * SHARE_TOLERANCE
                ));
            }
        }
    }
    out
}

/// A race row's shares by reading.
type Shares = BTreeMap<Reading, f64>;

/// The shares of a race row's readings, `None` for another observation.
fn shares(o: &BaselineObservation) -> Option<Shares> {
    Some(
        o.shares
            .as_ref()?
            .iter()
            .map(|s| (s.reading.clone(), s.share))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::super::{BASELINE_VERSION, BaselineDriver, BaselineServer, Share, two_digits};
    use super::*;
    use crate::outcome::{LocksLeft, Seen, Value};

    fn cell(scenario: &str, driver: &str, held: &str, ms: f64) -> BaselineCell {
        BaselineCell {
            scenario: scenario.into(),
            driver: driver.into(),
            status: crate::outcome::Status::Pass,
            observations: [(
                "held".to_owned(),
                BaselineObservation {
                    seen: Seen::Value(Reading::plain(Value::of_text(held))),
                    sqlstate: None,
                    p50_ms: Some(ms),
                    shares: None,
                    trials: None,
                },
            )]
            .into_iter()
            .collect(),
            locks_left: LocksLeft::default(),
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

    /// A race cell's observation: `shares` of `trials` trials, displayed as
    /// the values seen in at least 5 % of them.
    fn race(shares: &[(&str, f64)], trials: u64) -> BaselineCell {
        let mut c = cell("race", "a", "", 10.0);
        let o = c.observations.get_mut("held").unwrap();
        let reading = |k: &str| Reading::plain(Value::of_text(k));
        let mut seen: Vec<Reading> = shares
            .iter()
            .filter(|(_, s)| *s >= SEEN_SHARE)
            .map(|(k, _)| reading(k))
            .collect();
        seen.sort();
        o.seen = Seen::Seen(seen);
        o.shares = Some(
            shares
                .iter()
                .map(|(k, share)| Share {
                    reading: reading(k),
                    share: *share,
                })
                .collect(),
        );
        o.trials = Some(trials);
        c
    }

    #[test]
    fn races_compare_by_the_values_seen_and_their_shares() {
        let full = race(&[("55P03", 0.5), ("true", 0.47), ("timeout-then-grant", 0.03)], 1000);
        // A short run that saw only one of the common values agrees, whatever
        // its first trial's SQLSTATE.
        let mut first_failed = race(&[("true", 1.0)], 12);
        first_failed.observations.get_mut("held").unwrap().sqlstate = Some("55P03".into());
        assert!(cell_changes(&full, &first_failed, Tolerance::default()).is_empty());
        // A value seen once in a short run may be a rare one: not held against it.
        assert!(
            cell_changes(
                &full,
                &race(&[("true", 11.0 / 12.0), ("57014", 1.0 / 12.0)], 12),
                Tolerance::default()
            )
            .is_empty()
        );
        // One that saw a value the full run never saw (twice or more) does not.
        let new_value = cell_changes(&full, &race(&[("true", 0.5), ("57014", 0.5)], 12), Tolerance::default());
        assert_eq!(new_value.len(), 1, "{new_value:?}");
        assert!(
            new_value[0].starts_with("`held`: 55P03 | true → 57014 | true"),
            "{new_value:?}"
        );
        // A rare value may be missing from another full run, and 5 points of drift are noise.
        let again = race(&[("55P03", 0.45), ("true", 0.55)], 1000);
        assert!(cell_changes(&full, &again, Tolerance::default()).is_empty());
        // A share that moved by more than 25 points is a change.
        let shifted = race(&[("55P03", 0.1), ("true", 0.9)], 1000);
        assert_eq!(
            cell_changes(&full, &shifted, Tolerance::default()),
            vec![
                "`held` share of `55P03`: 50% → 10% (outside ±25 points)".to_owned(),
                "`held` share of `true`: 47% → 90% (outside ±25 points)".to_owned()
            ]
        );
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
