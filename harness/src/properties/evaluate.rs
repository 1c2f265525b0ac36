//! Verdicts: each property judged per column from the cells of one server
//! ([`BaselineCell`]s: a baseline's, or a run's as [`BaselineCell::of`]
//! keeps it), and how two sets of verdicts differ.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

pub mod variation;

use super::dimensions::{Column, Coordinates, Coverage};
use super::{Decider, Property, Reads, Scope, Severity};
use crate::outcome::cell::{BaselineCell, BaselineObservation};
use crate::outcome::{Reading, Seen, Status};

/// A verdict: how a column (or, for a server property, the server through a
/// column) fares against a property. Serialised `holds`, `violated`, `n/a`,
/// `undecided`, `holds where tried`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mark {
    /// Every deciding reading says it holds.
    #[serde(rename = "holds")]
    Holds,
    /// A deciding reading violates it.
    #[serde(rename = "violated")]
    Violated,
    /// No deciding cell applies to the column (the reasons say why).
    #[serde(rename = "n/a")]
    NotApplicable,
    /// A deciding cell failed, or a reading no rule of the property reads.
    #[serde(rename = "undecided")]
    Undecided,
    /// Every deciding reading holds, but a value of a dimension the property
    /// declares and the column has was not tried ([`ColumnVerdict::coverage`]
    /// says which): never shown as ✓.
    #[serde(rename = "holds where tried")]
    HoldsWhereTried,
}

impl Mark {
    /// `holds`, `violated`, `n/a`, `undecided`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mark::Holds => "holds",
            Mark::Violated => "violated",
            Mark::NotApplicable => "n/a",
            Mark::Undecided => "undecided",
            Mark::HoldsWhereTried => "holds where tried",
        }
    }

    /// The mark the report shows: ✓, ✗, –, ?, ◐.
    pub fn symbol(self) -> &'static str {
        match self {
            Mark::Holds => "✓",
            Mark::Violated => "✗",
            Mark::NotApplicable => "–",
            Mark::Undecided => "?",
            Mark::HoldsWhereTried => "◐",
        }
    }

    /// What several readings together say, in precedence order: violated
    /// if any is, else undecided if any is, else holds if any does, else
    /// n/a (also for none).
    pub fn combined(marks: impl IntoIterator<Item = Mark> + Clone) -> Mark {
        let any = |m: Mark| marks.clone().into_iter().any(|x| x == m);
        if any(Mark::Violated) {
            Mark::Violated
        } else if any(Mark::Undecided) {
            Mark::Undecided
        } else if any(Mark::Holds) {
            Mark::Holds
        } else {
            Mark::NotApplicable
        }
    }

    fn of(reads: Reads) -> Mark {
        match reads {
            Reads::Holds => Mark::Holds,
            Reads::Violated => Mark::Violated,
            Reads::NotApplicable => Mark::NotApplicable,
        }
    }
}

/// How many of a race cell's trials read as violating, of how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialCount {
    /// Trials whose reading violated the property.
    pub violated: u64,
    /// Trials of the cell.
    pub of: u64,
}

/// The reading of a cell whose repeats read differently in a file written
/// before the variation rule, which kept no variants to judge.
pub const VARIES_UNKEPT: &str =
    "the cell's repeats read differently, and the file keeps no variants to judge (written before the variation rule)";

/// One deciding cell's part in a verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The scenario run (`NAME[params]`).
    pub scenario: String,
    /// The record read, `None` for the cell's status.
    pub record: Option<String>,
    /// The reading as the report shows it (for a race row: the readings
    /// that decided, with their trials).
    pub reading: String,
    /// What it says about the property.
    pub reads: Mark,
    /// The fact in words, from the property's reading rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub says: Option<String>,
    /// The reading rule's own advice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advice: Option<String>,
    /// For a race row: the trials that violated, of all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trials: Option<TrialCount>,
    /// For a cell whose repeats read differently: the repeats that
    /// violated, of all (judged per repeat: [`RepeatCount`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats: Option<variation::RepeatCount>,
    /// The step's p50 time in ms, as the baseline keeps it (from 50 ms, two
    /// significant digits): e.g. how long after a crash the lock was released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<f64>,
    /// Where the cell stands in the dimensions (pool size, hand-back, give-up).
    #[serde(default, skip_serializing_if = "Coordinates::is_empty")]
    pub at: Coordinates,
}

/// A property's verdict for one column.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ColumnVerdict {
    /// The driver column.
    pub driver: String,
    /// The verdict: violated if any deciding cell violates it, else
    /// undecided if any cannot be read, else holds if any holds, else n/a.
    pub verdict: Mark,
    /// Why n/a or undecided (deduplicated).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// Each deciding cell, in the property's order.
    pub evidence: Vec<Evidence>,
    /// What the verdict was tried across, for a property that declares its
    /// dimensions (`None` for one that does not, and for n/a).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<Coverage>,
}

/// A property's verdicts over the columns of one server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PropertyVerdicts {
    /// The property's id.
    pub id: String,
    /// Its severity.
    pub severity: Severity,
    /// Its scope.
    pub scope: Scope,
    /// One per column, in column order.
    pub columns: Vec<ColumnVerdict>,
}

impl PropertyVerdicts {
    /// How many columns have `mark`.
    pub fn count(&self, mark: Mark) -> usize {
        self.columns.iter().filter(|c| c.verdict == mark).count()
    }

    /// The verdict of column `driver`.
    pub fn of(&self, driver: &str) -> Option<&ColumnVerdict> {
        self.columns.iter().find(|c| c.driver == driver)
    }
}

/// The verdicts of one server (`matrix.json` `verdicts[]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerVerdicts {
    /// The server's id (`pg17`).
    pub server: String,
    /// One per property, in the properties' order.
    pub properties: Vec<PropertyVerdicts>,
}

/// Each property's verdict per column of `drivers`, from the cells of one
/// server.
pub fn evaluate(properties: &[Property], cells: &[BaselineCell], drivers: &[Column]) -> Vec<PropertyVerdicts> {
    let mut by_driver: HashMap<&str, Vec<&BaselineCell>> = HashMap::new();
    for c in cells {
        by_driver.entry(c.driver.as_str()).or_default().push(c);
    }
    properties
        .iter()
        .map(|p| PropertyVerdicts {
            id: p.id.clone(),
            severity: p.severity,
            scope: p.scope,
            columns: drivers
                .iter()
                .map(|d| column(p, by_driver.get(d.id.as_str()).map_or(&[][..], Vec::as_slice), d))
                .collect(),
        })
        .collect()
}

fn column(p: &Property, cells: &[&BaselineCell], driver: &Column) -> ColumnVerdict {
    let mut evidence = Vec::new();
    let mut witnessed = Vec::new();
    let mut reasons: Vec<String> = Vec::new();
    for d in &p.decided_by {
        for cell in cells.iter().filter(|c| d.covers(&c.scenario)) {
            let Some(mut e) = read_cell(d, cell) else {
                continue;
            };
            e.at = d
                .coordinates
                .get(&cell.scenario)
                .cloned()
                .unwrap_or_default()
                .measured(cell);
            if let Some(h) = unlock_hand_back(d, cell) {
                e.at.hand_back = vec![h.to_owned()];
            }
            witnessed.push(d.witness.is_some());
            if matches!(e.reads, Mark::NotApplicable | Mark::Undecided) {
                let why = e.says.clone().unwrap_or_else(|| e.reading.clone());
                if !reasons.contains(&why) {
                    reasons.push(why);
                }
            }
            evidence.push(e);
        }
    }
    // A cell that says n/a through one of its records (no guard API, no
    // cancel request sent) does not decide the property through the others.
    // A witness's n/a is about its own step (an unlock of a key never
    // taken): the cell's other witnesses still decide.
    let not_applicable: Vec<String> = evidence
        .iter()
        .zip(&witnessed)
        .filter(|(e, w)| e.reads == Mark::NotApplicable && !**w)
        .map(|(e, _)| e.scenario.clone())
        .collect();
    for e in &mut evidence {
        if not_applicable.contains(&e.scenario) {
            e.reads = Mark::NotApplicable;
        }
    }
    let verdict = Mark::combined(evidence.iter().map(|e| e.reads));
    if evidence.is_empty() {
        reasons.push("no deciding cell in this run".to_owned());
    }
    if matches!(verdict, Mark::Violated | Mark::Holds) {
        reasons.clear();
    }
    let coverage = (!p.dimensions.is_empty() && verdict != Mark::NotApplicable).then(|| {
        let decided: Vec<&Coordinates> = evidence
            .iter()
            .filter(|e| matches!(e.reads, Mark::Holds | Mark::Violated))
            .map(|e| &e.at)
            .collect();
        // A value is not applicable to the column only where the column
        // cannot do it (no cancel API): a witness's n/a is about its own
        // step (an unlock of a key never taken), not about the column; nor
        // is a cell of the other family (the lock crate's scenarios on
        // other columns, theirs on the crate's), which never runs there.
        let not_decided: Vec<&Coordinates> = evidence
            .iter()
            .zip(&witnessed)
            .filter(|(e, w)| e.reads == Mark::NotApplicable && !**w && e.at.lock_crate == driver.lock_crate)
            .map(|(e, _)| &e.at)
            .collect();
        Coverage::of(&p.dimensions, driver, &decided, &not_decided)
    });
    let verdict = match &coverage {
        Some(c) if verdict == Mark::Holds && c.has_untried() => {
            reasons.push(format!("not tried: {}", c.untried_text()));
            Mark::HoldsWhereTried
        }
        _ => verdict,
    };
    ColumnVerdict {
        driver: driver.id.clone(),
        verdict,
        reasons,
        evidence,
        coverage,
    }
}

/// The first rule of `d` that matches `reading` (and, for a witness, its
/// meaning as `cell` bears it out and `held_after`: the paired
/// observation's `held`).
fn rule_for<'a>(
    d: &'a Decider,
    reading: &Reading,
    cell: Option<&BaselineCell>,
    held_after: Option<bool>,
) -> Option<&'a super::ReadingRule> {
    let meaning = d.witness.as_ref().map(|m| match (&m.taken_if, cell) {
        (Some(record), Some(cell)) if !lock_returned(cell, record) => super::Meaning {
            lock: super::Taken::NotTaken,
            across_return: false,
            ..m.clone()
        },
        _ => m.clone(),
    });
    d.readings.iter().find(|r| {
        r.when.matches(reading)
            && r.when
                .matches_witness(meaning.as_ref().map(|m| (m.lock, m.across_return)), held_after)
    })
}

/// Whether the lock call recorded as `record` in `cell` took the lock: a
/// try-lock's `true`, or a plain return (`void`: no rows' value, empty text).
fn lock_returned(cell: &BaselineCell, record: &str) -> bool {
    use crate::outcome::Value;
    match cell.observations.get(record).map(|o| &o.seen) {
        Some(Seen::Value(r)) => match &r.value {
            Value::Bool(b) => *b,
            Value::Null | Value::NoRows => true,
            Value::Text(t) => t.is_empty(),
            _ => false,
        },
        _ => false,
    }
}

/// For an unlock witness across a return: which connection the later
/// checkout got, as the unlock itself says: `true` reached the session that
/// took the lock (the same connection), `false` with the lock still held
/// after it ran on another; `None` when the reading cannot tell (the model's
/// guess stays).
fn unlock_hand_back(d: &Decider, cell: &BaselineCell) -> Option<&'static str> {
    let m = d.witness.as_ref().filter(|m| m.across_return)?;
    let Seen::Value(r) = &cell.observations.get(d.record.as_deref()?)?.seen else {
        return None;
    };
    match (&r.value, held_after(d, cell)) {
        (crate::outcome::Value::Bool(true), _) if m.lock == super::Taken::Taken => Some(super::dimensions::SAME),
        (crate::outcome::Value::Bool(false), Some(true)) => Some(super::dimensions::OTHER),
        _ => None,
    }
}

/// For a witness decider: whether the key was held at the paired
/// observation of `cell`.
fn held_after(d: &Decider, cell: &BaselineCell) -> Option<bool> {
    let record = d.witness.as_ref()?.held_after.as_ref()?;
    match &cell.observations.get(record)?.seen {
        Seen::Value(r) => r.value.locks().map(|l| l.held),
        _ => None,
    }
}

/// What `cell` says through `d`; `None` for a record a deviating cell did
/// not reach (it deviated before the step that records it).
fn read_cell(d: &Decider, cell: &BaselineCell) -> Option<Evidence> {
    let mut e = Evidence {
        scenario: cell.scenario.clone(),
        record: d.record.clone(),
        reading: String::new(),
        reads: Mark::Undecided,
        says: None,
        advice: None,
        trials: None,
        repeats: None,
        ms: None,
        at: Coordinates::default(),
    };
    if cell.status == Status::Varies && !cell.variants.is_empty() {
        return variation::read_variants(d, cell, e, read_cell);
    }
    match cell.status {
        Status::Fail => {
            e.reading = format!("the cell is {}", cell.status);
            return Some(e);
        }
        Status::Varies => {
            e.reading = VARIES_UNKEPT.to_owned();
            return Some(e);
        }
        Status::NotApplicable => {
            // The cell's own reason, where an observation carries one.
            e.reading = cell
                .observations
                .values()
                .map(|o| o.seen.to_string())
                .find(|t| t.starts_with("n/a ("))
                .unwrap_or_else(|| "the cell is n/a".to_owned());
            e.reads = Mark::NotApplicable;
            return Some(e);
        }
        Status::Pass | Status::Deviates => {}
    }
    let Some(record) = &d.record else {
        e.reading = cell.status.to_string();
        if let Some(rule) = d.readings.iter().find(|r| r.when.matches_status(cell.status)) {
            e.reads = Mark::of(rule.reads);
            e.says.clone_from(&rule.says);
            e.advice.clone_from(&rule.advice);
        } else {
            e.says = Some(format!("status {} is not read by the property", cell.status));
        }
        return Some(e);
    };
    let Some(o) = cell.observations.get(record) else {
        if cell.status == Status::Deviates {
            return None;
        }
        e.reading = "not recorded".to_owned();
        return Some(e);
    };
    e.ms = o.p50_ms;
    match race_counts(o) {
        Some((counts, n)) => read_race(d, &mut e, &counts, n),
        None => {
            let Seen::Value(r) = &o.seen else {
                e.reading = o.seen.to_string();
                return Some(e);
            };
            let held = held_after(d, cell);
            e.reading = match (&d.witness, held) {
                (Some(_), Some(h)) => format!("{r}, then {}", if h { "still held" } else { "not held" }),
                _ => r.to_string(),
            };
            match rule_for(d, r, Some(cell), held) {
                Some(rule) => {
                    e.reads = Mark::of(rule.reads);
                    e.says.clone_from(&rule.says);
                    e.advice.clone_from(&rule.advice);
                }
                None if r.value.is_not_applicable() => e.reads = Mark::NotApplicable,
                None => e.says = Some(format!("the reading `{r}` is not read by the property")),
            }
        }
    }
    Some(e)
}

/// A race row's readings seen in at least one trial, with their counts, and
/// the trials; `None` for another observation.
fn race_counts(o: &BaselineObservation) -> Option<(Vec<(Reading, u64)>, u64)> {
    let n = o.trials?;
    let shares = o.shares.as_ref()?;
    Some((
        shares
            .iter()
            .map(|s| (s.reading.clone(), s.count(n)))
            .filter(|(_, c)| *c > 0)
            .collect(),
        n,
    ))
}

fn read_race(d: &Decider, e: &mut Evidence, counts: &[(Reading, u64)], n: u64) {
    if counts.is_empty() {
        e.reading = format!("no trial of {n} decided it");
        e.reads = Mark::NotApplicable;
        return;
    }
    let mut violated = 0;
    let mut holds = false;
    let mut unread = Vec::new();
    let mut says = Vec::new();
    let mut advice = None;
    for (r, c) in counts {
        match rule_for(d, r, None, None) {
            Some(rule) => match rule.reads {
                Reads::Violated => {
                    violated += c;
                    if let Some(s) = &rule.says
                        && !says.contains(s)
                    {
                        says.push(s.clone());
                    }
                    if advice.is_none() {
                        advice.clone_from(&rule.advice);
                    }
                }
                Reads::Holds => holds = true,
                Reads::NotApplicable => {}
            },
            None => unread.push(r.to_string()),
        }
    }
    e.trials = Some(TrialCount { violated, of: n });
    if violated > 0 {
        e.reads = Mark::Violated;
        e.reading = format!("violated in {violated} of {n} trials");
        e.says = (!says.is_empty()).then(|| says.join("; "));
        e.advice = advice;
    } else if !unread.is_empty() {
        e.reading = format!("{} in {n} trials", unread.join(" | "));
        e.says = Some(format!(
            "the readings {} are not read by the property",
            unread.join(", ")
        ));
    } else if holds {
        e.reads = Mark::Holds;
        e.reading = format!("holds in all {n} trials");
    } else {
        e.reads = Mark::NotApplicable;
        e.reading = format!("no trial of {n} decided it");
    }
}

/// A verdict that differs between two evaluations (`locklab check`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerdictChange {
    /// The property's id.
    pub property: String,
    /// Its severity.
    pub severity: Severity,
    /// Its scope.
    pub scope: Scope,
    /// The column.
    pub driver: String,
    /// The verdict before (the baseline's).
    pub before: Mark,
    /// The verdict now.
    pub after: Mark,
    /// The deciding cells whose reading changed (`scenario` names).
    pub cells: Vec<String>,
    /// Whether a race row decides it (its readings vary by nature).
    pub race: bool,
}

/// The verdicts of `after` that differ from `before`'s, property by
/// property, column by column (a column or property in only one is left out).
pub fn changes(before: &[PropertyVerdicts], after: &[PropertyVerdicts]) -> Vec<VerdictChange> {
    let mut out = Vec::new();
    for a in after {
        let Some(b) = before.iter().find(|b| b.id == a.id) else {
            continue;
        };
        for ac in &a.columns {
            let Some(bc) = b.of(&ac.driver) else {
                continue;
            };
            if ac.verdict == bc.verdict {
                continue;
            }
            let mut cells: Vec<String> = ac
                .evidence
                .iter()
                .filter(|e| {
                    !bc.evidence
                        .iter()
                        .any(|x| x.scenario == e.scenario && x.record == e.record && x.reads == e.reads)
                })
                .map(|e| e.scenario.clone())
                .collect();
            let mut seen = std::collections::HashSet::new();
            cells.retain(|c| seen.insert(c.clone()));
            let race = ac.evidence.iter().chain(&bc.evidence).any(|e| e.trials.is_some());
            out.push(VerdictChange {
                property: a.id.clone(),
                severity: a.severity,
                scope: a.scope,
                driver: ac.driver.clone(),
                before: bc.verdict,
                after: ac.verdict,
                cells,
                race,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests;
