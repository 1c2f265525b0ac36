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
    /// "not contradicted"); else it is a note. So is a violated verdict that
    /// a run missed by chance by the variation rule
    /// ([`crate::properties::variation::missed_by_chance`]), and a change
    /// between `holds` and `holds where tried` that no differing cell
    /// explains: no violation on either side, only what was tried moved
    /// (a coordinate such as the hand-back read off a reading that varies
    /// by nature, behind a pooler that hands out any server connection);
    /// where a deciding cell differs, the change counts with it.
    pub fn judge(&mut self, properties: &[crate::properties::Property], baseline: &Baseline, fresh: &Baseline) {
        // The fresh run's column facts judge both sides, so no change comes
        // from them (a baseline written before they were kept has none).
        let drivers: Vec<crate::properties::Column> = fresh
            .drivers
            .iter()
            .map(|(id, d)| crate::properties::Column {
                id: id.clone(),
                pooled: d.kind.as_deref() != Some("direct"),
                pooler: d.pooler.clone(),
                lock_crate: d.crate_name == locklab_drivers::libraries::LOCK_CRATE,
            })
            .collect();
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
            let column = |v: &[crate::properties::PropertyVerdicts]| {
                v.iter()
                    .find(|p| p.id == c.property)
                    .and_then(|p| p.of(&c.driver))
                    .cloned()
            };
            let (b, a) = (column(&before), column(&after));
            let chance = match (&b, &a) {
                (Some(b), Some(a)) => crate::properties::variation::missed_by_chance(b, a, fresh.repeat),
                _ => None,
            };
            use crate::properties::Mark::{Holds, HoldsWhereTried};
            let coverage_only = matches!((c.before, c.after), (Holds, HoldsWhereTried) | (HoldsWhereTried, Holds));
            // Every deciding cell, not only those whose reading changed
            // (`c.cells`, which `differs` reads): what was tried moves with
            // a coordinate's reading too.
            let deciding_cell_differs = [&b, &a].into_iter().flatten().flat_map(|v| &v.evidence).any(|e| {
                self.diffs
                    .iter()
                    .any(|d| d.driver == c.driver && d.scenario == e.scenario)
            });
            if let Some(why) = chance {
                self.verdict_notes
                    .push(format!("{line}: by the variation rule not contradicted: {why}"));
            } else if coverage_only && !deciding_cell_differs {
                self.verdict_notes.push(format!(
                    "{line}: no violation on either side and no deciding cell differs, only what was tried: not \
                     contradicted"
                ));
            } else if c.race && !differs {
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
                "\ninformation, not differences: {} verdict(s) differ, but the race rule finds no change in their \
                 race cells, or the variation rule says the run may have missed its varying cells' violations by \
                 chance, or only what was tried moved: not contradicted",
                self.verdict_notes.len()
            );
            for v in &self.verdict_notes {
                let _ = writeln!(out, "  {v}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use indexmap::IndexMap;

    use super::*;
    use crate::baseline::{BaselineDriver, BaselineObservation, BaselineServer, Share, Tolerance, compare};
    use crate::outcome::{LocksLeft, Reading, Seen, Status, Value, Verdict};
    use crate::properties::{Decider, Property, ReadingRule, Reads, Scope, Severity, When};

    /// A property read off `invariant i` of scenario `s`.
    fn property() -> Property {
        let rule = |v: Verdict, reads: Reads| ReadingRule {
            when: When {
                invariant: Some(v),
                ..When::default()
            },
            reads,
            says: None,
            advice: None,
        };
        Property {
            id: "p".into(),
            rule: "r".into(),
            source: "s".into(),
            severity: Severity::Unsafe,
            scope: Scope::Column,
            advice: "a".into(),
            for_poolers: None,
            remedies: Vec::new(),
            dimensions: Vec::new(),
            witnesses: Vec::new(),
            decided_by: vec![Decider {
                scenario: "s".into(),
                record: Some("invariant i".into()),
                readings: vec![
                    rule(Verdict::Holds, Reads::Holds),
                    rule(Verdict::Violated, Reads::Violated),
                ],
                witness: None,
                coordinates: Default::default(),
            }],
            file: "p.yaml".into(),
        }
    }

    /// A baseline of one race cell whose invariant held in `holds` trials
    /// and was violated in `violated`.
    fn baseline(holds: u64, violated: u64) -> Baseline {
        let n = holds + violated;
        let share = |v: Verdict, c: u64| Share {
            reading: Reading::plain(Value::Invariant(v)),
            share: c as f64 / n as f64,
            count: Some(c),
        };
        let mut observations = IndexMap::new();
        observations.insert(
            "invariant i".to_owned(),
            BaselineObservation {
                seen: Seen::Value(Reading::plain(Value::Invariant(Verdict::Finding))),
                sqlstate: None,
                p50_ms: None,
                shares: Some(vec![share(Verdict::Holds, holds), share(Verdict::Violated, violated)]),
                trials: Some(n),
            },
        );
        let mut drivers = IndexMap::new();
        drivers.insert(
            "d".to_owned(),
            BaselineDriver {
                crate_name: "c".into(),
                crate_version: "1".into(),
                configuration: "x".into(),
                readings_vary: false,
                kind: None,
                pooler: None,
            },
        );
        Baseline {
            baseline_version: crate::baseline::BASELINE_VERSION,
            generated_at: String::new(),
            locklab_version: String::new(),
            repeat: 1,
            git_commit: None,
            server: BaselineServer {
                major: 17,
                version: "PostgreSQL 17.11".into(),
                backend: "local".into(),
            },
            drivers,
            race_rows: 1,
            cells: vec![crate::baseline::BaselineCell {
                scenario: "s".into(),
                driver: "d".into(),
                status: Status::Pass,
                observations,
                locks_left: LocksLeft::default(),
                cleaned_backends: 0,
                backends_left: 0,
                // The same pressure on both sides: the shares compare.
                pressure: Some(crate::outcome::shares::Pressure {
                    cpu_some: Some(0.1),
                    load1: 1.0,
                    cpus: 2,
                }),
                readings_vary: false,
                variants: Vec::new(),
            }],
        }
    }

    fn judged(before: &Baseline, after: &Baseline) -> Comparison {
        let mut c = compare(before, after, Tolerance::default(), &|_| true);
        c.judge(&[property()], before, after);
        c
    }

    /// A race-decided verdict: a short run that did not see a rare
    /// violation is "not contradicted" (a note); a run that differs by the
    /// race rule changes the verdict (a line of the diff).
    #[test]
    fn a_race_verdict_changes_only_when_the_race_rule_says_its_cell_did() {
        let rare = baseline(990, 10);
        let short = baseline(12, 0);
        let c = judged(&rare, &short);
        assert!(c.verdicts.is_empty(), "{:?}", c.verdicts);
        assert_eq!(c.verdict_notes.len(), 1, "{:?}", c.verdict_notes);
        assert!(c.render_verdict_notes().contains("not contradicted"));

        let often = baseline(500, 500);
        let never = baseline(1000, 0);
        let c = judged(&often, &never);
        assert_eq!(c.verdicts, ["p × d: violated → holds (unsafe; decided by s)"], "{c:?}");
        assert!(c.render_verdicts().starts_with("\nverdicts changed: 1\n"));
    }

    /// On the committed baseline: the next checkout behind Odyssey in
    /// transaction mode getting another server connection (seen on a fresh
    /// machine: `same_backend_on_next_checkout` true → false) widens what
    /// `session-lock-released-on-return` was tried across, `holds where
    /// tried` → `holds`: a note, as that cell's readings vary by nature. The
    /// same change on a column whose readings are compared (psycopg-pool
    /// with its unlock-all reset) is a differing cell, and the verdict
    /// change counts with it.
    #[test]
    fn a_verdict_that_only_moves_what_was_tried_counts_only_with_a_differing_cell() {
        let root = crate::server::workspace_root();
        let scenarios = crate::scenario::load_dir(&root.join("scenarios")).unwrap();
        let properties = crate::properties::load_dir(&root.join("properties"), &scenarios).unwrap();
        let before = crate::baseline::BaselineDir::load(&root.join("reports/baseline"))
            .unwrap()
            .whole();
        let other_connection = |driver: &str| {
            let mut after = before.clone();
            let cell = after
                .cells
                .iter_mut()
                .find(|c| c.scenario == "session-lock-pool-return-other" && c.driver == driver)
                .unwrap();
            let o = cell.observations.get_mut("same_backend_on_next_checkout").unwrap();
            assert_eq!(o.seen, Seen::Value(Reading::plain(Value::Bool(true))), "{driver}");
            o.seen = Seen::Value(Reading::plain(Value::Bool(false)));
            let mut c = compare(&before, &after, Tolerance::default(), &|_| true);
            c.judge(&properties, &before, &after);
            c
        };
        let line = |v: &[String], driver: &str| {
            v.iter()
                .find(|l| {
                    l.starts_with(&format!(
                        "session-lock-released-on-return × {driver}: holds where tried → holds"
                    ))
                })
                .cloned()
        };
        let varies = other_connection("odyssey-transaction");
        assert!(
            line(&varies.verdicts, "odyssey-transaction").is_none(),
            "{:?}",
            varies.verdicts
        );
        assert!(
            line(&varies.verdict_notes, "odyssey-transaction").is_some_and(|l| l.contains("only what was tried")),
            "{:?}",
            varies.verdict_notes
        );
        let compared = other_connection("psycopg-pool-unlock-all");
        assert!(!compared.diffs.is_empty());
        assert!(
            line(&compared.verdicts, "psycopg-pool-unlock-all").is_some(),
            "{:?} / {:?}",
            compared.verdicts,
            compared.verdict_notes
        );
    }
}
