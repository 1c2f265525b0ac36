//! `locklab check`'s comparison of a fresh run with the baseline, cell by
//! cell ([`crate::compare::diff`] with the p50 times), and its readable diff.

use std::fmt::Write as _;
use std::path::Path;

use std::collections::BTreeMap;

use super::{Baseline, BaselineCell, BaselineObservation, TIMED_FROM_MS};
use crate::compare::{self, Timings, Tolerance};
use crate::outcome::Reading;
use crate::outcome::shares;

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
    /// Information, not differences: race cells whose shares the rule would
    /// call changed but whose runs do not compare: CPU pressure too far
    /// apart ([`shares::comparable`]), or [`Shares::Information`].
    pub notes: Vec<CellDiff>,
    /// Properties whose verdict changed, one line each
    /// ([`Comparison::judge`]): printed first, above the value changes.
    pub verdicts: Vec<String>,
    /// Verdict changes decided by race cells whose readings the race rule
    /// does not call changed: "not contradicted", information only.
    pub verdict_notes: Vec<String>,
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
        out.push_str(&self.render_verdicts());
        let notes = self.render_notes();
        if self.diffs.is_empty() {
            out.push_str(&notes);
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
        out.push_str(&notes);
        out
    }

    /// The information lines, one per cell: share changes under pressures
    /// too far apart to compare, and the changed readings of cells whose
    /// readings vary by nature (empty without any).
    fn render_notes(&self) -> String {
        let mut out = self.render_verdict_notes();
        if self.notes.is_empty() {
            return out;
        }
        // (Race cells whose shares moved in runs that do not compare, and
        // cells whose readings vary by nature: each line says which.)
        let _ = writeln!(
            out,
            "\ninformation, not differences: {} cell(s) that moved where they are not compared: race shares \
             in runs whose shares do not compare (docs: \"The race rule\"), readings that vary by nature \
             (\"Cells whose readings vary by nature\"); the reason ends each line",
            self.notes.len()
        );
        for n in &self.notes {
            let _ = writeln!(out, "  {} × {}: {}", n.scenario, n.driver, n.changes.join("; "));
        }
        out
    }
}

/// `PostgreSQL 17.11` from a `version()` string.
pub fn short_version(version: &str) -> String {
    version.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
}

/// How a comparison treats a race row's shares that moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shares {
    /// By the race rule ([`shares`]): a change counts when the two runs'
    /// CPU pressure is comparable ([`shares::comparable`]), and is
    /// information otherwise. `locklab check`, `soak`, `check --upgrade`,
    /// `try`.
    ByPressure,
    /// Always information, never a difference, for the reason given (a
    /// sentence ending the information line): runs made under conditions
    /// CPU pressure does not tell apart, such as `cargo test`'s.
    Information(&'static str),
}

impl Shares {
    /// `locklab check`'s default: race shares measured on another machine,
    /// or another day, are information (the race rule: shares move with
    /// load and latency); `check --compare-shares` compares them by the
    /// race rule ([`Shares::ByPressure`]).
    pub const ANOTHER_MACHINE: Shares = Shares::Information(
        "race shares move with the machine's load and latency: information unless `check --compare-shares` \
         (for runs on the same machine)",
    );
}

/// Compares a fresh run with `baseline`. Values must be equal; p50 times
/// must be within `tolerance`; race shares compare by the race rule
/// ([`Shares::ByPressure`]; [`compare_with`] for another treatment). A
/// fresh cell missing from the baseline is a difference, and so is a
/// baseline cell missing from the run for which `expected` is true (a run
/// of a selection expects only the cells of its scenarios and drivers; a
/// full run, every cell).
pub fn compare(
    baseline: &Baseline,
    fresh: &Baseline,
    tolerance: Tolerance,
    expected: &dyn Fn(&BaselineCell) -> bool,
) -> Comparison {
    compare_with(baseline, fresh, tolerance, Shares::ByPressure, expected)
}

/// [`compare`], with race shares treated as `rule` says.
pub fn compare_with(
    baseline: &Baseline,
    fresh: &Baseline,
    tolerance: Tolerance,
    rule: Shares,
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
    let mut notes = Vec::new();
    let mut compared = 0;
    for after in &fresh.cells {
        let before = baseline
            .cells
            .iter()
            .find(|c| c.scenario == after.scenario && c.driver == after.driver);
        let changes = match before {
            Some(before) => {
                compared += 1;
                let varies = [baseline.drivers.get(&after.driver), fresh.drivers.get(&after.driver)]
                    .iter()
                    .all(|d| d.is_some_and(|d| d.readings_vary))
                    || (before.readings_vary && after.readings_vary);
                let (changes, info) = cell_changes(before, after, tolerance, baseline.race_rows, varies, rule);
                if !info.is_empty() {
                    notes.push(CellDiff {
                        scenario: after.scenario.clone(),
                        driver: after.driver.clone(),
                        driver_note: driver_note(&after.driver),
                        changes: info,
                    });
                }
                changes
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
    Comparison {
        compared,
        diffs,
        notes,
        verdicts: Vec::new(),
        verdict_notes: Vec::new(),
    }
}

/// The changed values of one cell, one line each, and the information lines
/// (share changes that do not count: see [`shares`]). A race row (one with
/// shares) does not compare by the readings it saw: which are possible is
/// the scenario's `outcomes:`, checked by the runner on every trial; its
/// counts compare by [`share_changes`]. A cell whose readings vary by
/// nature (`varies`: its column's [`BaselineDriver::readings_vary`], behind
/// pgagroal or Odyssey, where which server connection a client gets varies;
/// or its scenario's, [`BaselineCell::readings_vary`], on both sides; or a
/// cell an old baseline called unstable, which kept no variants)
/// compares by its status alone: a run that fails, or is `n/a` where the
/// baseline's was not (or the other way round), is a change; its readings'
/// differences are information lines. (`varies` needs both columns to vary:
/// `check --upgrade` from PgBouncer to pgagroal compares every reading.)
/// A cell whose repeats read differently on either side compares by its
/// set of readings ([`set_changes`]). Moved shares count as `rule` says.
fn cell_changes(
    before: &BaselineCell,
    after: &BaselineCell,
    tolerance: Tolerance,
    race_rows: u64,
    varies: bool,
    rule: Shares,
) -> (Vec<String>, Vec<String>) {
    use crate::outcome::Status::Varies;
    // A baseline written before the variation rule keeps no variants of a
    // cell it called unstable: that compares by status alone, as then.
    let unkept = before.status == Varies && before.variants.is_empty();
    if !varies && !unkept && (before.status == Varies || after.status == Varies) {
        return set_changes(before, after);
    }
    if varies || unkept {
        let (b, a) = (before.outcome(), after.outcome());
        let info: Vec<String> = compare::diff(&b, &a, None)
            .iter()
            .map(|c| format!("{c} (its readings vary by nature: not compared)"))
            .collect();
        use crate::outcome::Status::{Fail, NotApplicable};
        let changed = after.status == Fail || (after.status == NotApplicable) != (before.status == NotApplicable);
        return match after.status {
            _ if !changed => (Vec::new(), info),
            other => (
                vec![format!(
                    "outcome: {} in the baseline (its readings vary by nature) → {other}",
                    before.status
                )],
                info,
            ),
        };
    }
    let (b, mut a) = (before.outcome(), after.outcome());
    for recorded in &mut a.observations {
        let (Some(bo), Some(ao)) = (
            before.observations.get(recorded.name.as_str()),
            after.observations.get(recorded.name.as_str()),
        ) else {
            continue;
        };
        if bo.shares.is_some() && ao.shares.is_some() {
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
    let moved = share_changes(before, after, race_rows);
    if moved.is_empty() {
        return (changes, Vec::new());
    }
    if let Shares::Information(why) = rule {
        let mut info = moved;
        info.push(why.to_owned());
        (changes, info)
    } else if shares::comparable(before.pressure.as_ref(), after.pressure.as_ref()) {
        changes.extend(moved);
        (changes, Vec::new())
    } else {
        let text = |p: Option<&shares::Pressure>| p.map_or("CPU pressure not recorded".to_owned(), |p| p.text());
        let mut info = moved;
        info.push(format!(
            "{} in the baseline, {} now (within ±{:.0} points they would count)",
            text(before.pressure.as_ref()),
            text(after.pressure.as_ref()),
            100.0 * shares::PRESSURE_BAND
        ));
        (changes, info)
    }
}

/// What changed in a cell whose repeats read differently on either side
/// (the variation rule, docs/src/faults-and-races.md): its sets of readings
/// compare, not its repeats' shares. A value the fresh run read that none of
/// the baseline's repeats read is a change, and so is a run that fails or is
/// `n/a` where the baseline's was not (or the other way round); a value the
/// baseline read and the run did not is information (a run of a few repeats
/// misses a rare one), as are the times.
fn set_changes(before: &BaselineCell, after: &BaselineCell) -> (Vec<String>, Vec<String>) {
    use crate::outcome::Status::{Fail, NotApplicable};
    let outcomes = |c: &BaselineCell| -> Vec<(usize, crate::outcome::Outcome)> {
        if c.variants.is_empty() {
            vec![(1, c.outcome())]
        } else {
            c.variants.iter().map(|v| (v.repeats, v.outcome.clone())).collect()
        }
    };
    let (b, a) = (outcomes(before), outcomes(after));
    let all: Vec<&crate::outcome::Outcome> = b.iter().chain(&a).map(|(_, o)| o).collect();
    let mut changes = Vec::new();
    let mut info = Vec::new();
    if after.status == Fail || (after.status == NotApplicable) != (before.status == NotApplicable) {
        changes.push(format!("outcome: {} → {}", before.status, after.status));
    }
    let tally = |fields: &[compare::Field<'_>], counts: &[(usize, crate::outcome::Outcome)]| {
        let mut seen: Vec<(String, usize)> = Vec::new();
        for (f, (n, _)) in fields.iter().zip(counts) {
            let t = f.to_string();
            match seen.iter_mut().find(|(x, _)| *x == t) {
                Some((_, k)) => *k += n,
                None => seen.push((t, *n)),
            }
        }
        seen.iter()
            .map(|(t, n)| format!("{t} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (item, fields) in compare::align(&all) {
        if item == compare::Item::Status && !changes.is_empty() {
            continue;
        }
        let (fb, fa) = fields.split_at(b.len());
        let mut new: Vec<String> = Vec::new();
        for f in fa.iter().filter(|f| !fb.contains(f)) {
            let t = f.to_string();
            if !new.contains(&t) {
                new.push(t);
            }
        }
        if !new.is_empty() {
            changes.push(format!(
                "{item}: {} read, never in the baseline's repeats ({})",
                new.join(", "),
                tally(fb, &b)
            ));
        } else if fb.iter().any(|f| !fa.contains(f)) {
            info.push(format!(
                "{item}: {} in the baseline → {} (its repeats read differently: the baseline's other readings \
                 not read this time)",
                tally(fb, &b),
                tally(fa, &a)
            ));
        }
    }
    (changes, info)
}

/// The readings of a race row whose counts changed by the rule of
/// [`shares::changes`]: `` `name` share of `55P03`: 51 % of 1000 → 10 % of
/// 1000 (Fisher p = …) ``. Whether they count is the caller's
/// ([`shares::comparable`]).
fn share_changes(before: &BaselineCell, after: &BaselineCell, race_rows: u64) -> Vec<String> {
    let mut out = Vec::new();
    for (name, b) in &before.observations {
        let Some(a) = after.observations.get(name) else {
            continue;
        };
        let (Some(bs), Some(a_s)) = (counts(b), counts(a)) else {
            continue;
        };
        // In the order of their text, as the cells show them.
        let values: std::collections::BTreeSet<&Reading> = bs.keys().chain(a_s.keys()).collect();
        let mut values: Vec<&Reading> = values.into_iter().collect();
        values.sort_by_cached_key(|r| r.to_string());
        let rows: Vec<(&Reading, u64, u64)> = values
            .into_iter()
            .map(|v| (v, bs.get(v).copied().unwrap_or(0), a_s.get(v).copied().unwrap_or(0)))
            .collect();
        let (n, m) = (b.trials.unwrap_or(0), a.trials.unwrap_or(0));
        for (v, change) in shares::changes(&rows, n, m, race_rows) {
            out.push(format!("`{name}` share of `{v}`: {}", change.text()));
        }
    }
    out
}

/// A race row's counts by reading, `None` for another observation.
fn counts(o: &BaselineObservation) -> Option<BTreeMap<Reading, u64>> {
    let n = o.trials.unwrap_or(0);
    Some(
        o.shares
            .as_ref()?
            .iter()
            .map(|s| (s.reading.clone(), s.count(n)))
            .collect(),
    )
}

#[cfg(test)]
#[path = "comparison_tests.rs"]
mod tests;
