//! `check`'s verdict changes: the properties judged on the baseline and on
//! the fresh run ([`crate::properties`]), and which changes count.

use std::fmt::Write as _;

use super::{Baseline, BaselineCell, Comparison};

impl Comparison {
    /// Adds the verdict changes between `baseline` and `fresh` under
    /// `properties` ([`crate::properties::changes`]): the baseline is judged
    /// on the cells the fresh run has, so that a selection changes no
    /// verdict by what it left out. A change decided by a race row counts
    /// only when the comparison found a difference in one of its deciding
    /// cells (the race rule: a run with fewer or luckier trials can only say
    /// "not contradicted"); else it is a note.
    pub fn judge(&mut self, properties: &[crate::properties::Property], baseline: &Baseline, fresh: &Baseline) {
        let drivers: Vec<String> = fresh.drivers.keys().cloned().collect();
        let ran: std::collections::HashSet<(&str, &str)> = fresh
            .cells
            .iter()
            .map(|c| (c.scenario.as_str(), c.driver.as_str()))
            .collect();
        let before_cells: Vec<BaselineCell> = baseline
            .cells
            .iter()
            .filter(|c| ran.contains(&(c.scenario.as_str(), c.driver.as_str())))
            .cloned()
            .collect();
        let before = crate::properties::evaluate(properties, &before_cells, &drivers);
        let after = crate::properties::evaluate(properties, &fresh.cells, &drivers);
        for c in crate::properties::changes(&before, &after) {
            let differs = self
                .diffs
                .iter()
                .any(|d| d.driver == c.driver && c.cells.contains(&d.scenario));
            let scope = match c.scope {
                crate::properties::Scope::Column => String::new(),
                crate::properties::Scope::Server => " (a server property)".to_owned(),
            };
            let line = format!(
                "{} × {}{scope}: {} → {} ({}; decided by {})",
                c.property,
                c.driver,
                c.before.as_str(),
                c.after.as_str(),
                c.severity.as_str(),
                if c.cells.is_empty() {
                    "its deciding cells".to_owned()
                } else {
                    c.cells.join(", ")
                }
            );
            if c.race && !differs {
                self.verdict_notes.push(line);
            } else {
                self.verdicts.push(line);
            }
        }
    }

    /// The verdict changes, first in the diff (empty without any).
    pub(super) fn render_verdicts(&self) -> String {
        let mut out = String::new();
        if !self.verdicts.is_empty() {
            let _ = writeln!(out, "\nverdicts changed: {}", self.verdicts.len());
            for v in &self.verdicts {
                let _ = writeln!(out, "  {v}");
            }
        }
        out
    }

    /// The verdict changes that do not count (empty without any).
    pub(super) fn render_verdict_notes(&self) -> String {
        let mut out = String::new();
        if !self.verdict_notes.is_empty() {
            let _ = writeln!(
                out,
                "\ninformation, not differences: {} verdict(s) decided by race cells differ, but the race rule \
                 finds no change in their cells: not contradicted",
                self.verdict_notes.len()
            );
            for v in &self.verdict_notes {
                let _ = writeln!(out, "  {v}");
            }
        }
        out
    }
}
