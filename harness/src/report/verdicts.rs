//! What the report shows of the verdicts ([`crate::properties`]), computed
//! once from a [`Report`]'s `properties` and `verdicts`: per server, the
//! server findings, the properties with their counts, the properties ×
//! columns grid and a card per column. `templates/verdicts.md.j2` words it
//! as Markdown (in `matrix.md`, for `locklab verdict`, and for the README's
//! and the book's generated regions); `templates/index.html.j2` as HTML.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use super::{DriverColumn, Report};
use crate::baseline::BaselineCell;
use crate::properties::remedies::{Context, first_proven};
use crate::properties::{ColumnVerdict, Evidence, Mark, Property, PropertyVerdicts, Proven, Scope, Severity};

/// The verdicts of a report, ready for a template.
#[derive(Serialize)]
pub struct VerdictView {
    /// One per server with verdicts.
    pub servers: Vec<ServerView>,
    /// Whether the report has several servers (headings then name them).
    pub several: bool,
}

/// The verdicts of one server.
#[derive(Serialize)]
pub struct ServerView {
    /// `pg17`.
    pub id: String,
    /// `PostgreSQL 17.11`.
    pub version: String,
    /// The server-scope properties.
    pub findings: Vec<Finding>,
    /// The column-scope properties, numbered from 1.
    pub properties: Vec<PropertyRow>,
    /// One row per column: its mark per property of `properties`.
    pub grid: Vec<GridRow>,
    /// One card per column.
    pub cards: Vec<Card>,
}

/// A server-scope property: how it fared through the columns.
#[derive(Serialize)]
pub struct Finding {
    /// The property.
    pub id: String,
    /// Its rule.
    pub rule: String,
    /// `unsafe`, …
    pub severity: &'static str,
    /// Where the rule comes from.
    pub source: String,
    /// What to do.
    pub advice: String,
    /// Its file.
    pub file: String,
    /// The overall mark: violated if any column violated it.
    pub symbol: &'static str,
    /// Columns that violated it / that decided it (holds or violated).
    pub violated: usize,
    /// Columns whose cells decided it.
    pub decided: usize,
    /// One line per deciding cell that violated it somewhere: the cell, how
    /// often, in how many columns.
    pub evidence: Vec<Fact>,
}

/// A column-scope property, with its counts over the columns.
#[derive(Serialize)]
pub struct PropertyRow {
    /// Its number in the grid (1-based).
    pub n: usize,
    /// The property.
    pub id: String,
    /// Its rule.
    pub rule: String,
    /// `unsafe`, …
    pub severity: &'static str,
    /// Where the rule comes from.
    pub source: String,
    /// Its file.
    pub file: String,
    /// Columns where it holds.
    pub holds: usize,
    /// Columns where it holds where tried (a dimension value left untried).
    pub partly: usize,
    /// Columns that violate it.
    pub violated: usize,
    /// Columns where it does not apply.
    pub na: usize,
    /// Columns where it is undecided.
    pub undecided: usize,
    /// For n/a and undecided: `reason (columns)`.
    pub reasons: Vec<String>,
    /// The columns that violate it, in column order.
    pub violated_by: Vec<String>,
}

/// One column's marks.
#[derive(Serialize)]
pub struct GridRow {
    /// The column.
    pub driver: String,
    /// One per property row: the mark and its CSS class and title.
    pub marks: Vec<GridMark>,
}

/// A mark of the grid.
#[derive(Serialize)]
pub struct GridMark {
    /// ✓ ✗ – ?
    pub symbol: &'static str,
    /// `holds`, `violated`, `na`, `undecided`.
    pub class: &'static str,
    /// The deciding cells in one line each (the HTML title).
    pub title: String,
    /// The family of the first deciding cell that decided the verdict (for the link).
    pub family: String,
}

/// A column's card: what is unsafe with it and what to do.
#[derive(Serialize)]
pub struct Card {
    /// The column.
    pub driver: String,
    /// `deadpool-postgres 0.14.2` (and the pooler's version).
    pub crate_line: String,
    /// Its configuration.
    pub configuration: String,
    /// For a pooler column that models other products' check-in
    /// (`locklab_drivers::models_of`): per product and mode, whether a
    /// session-level lock survives check-in there (this column's verdict of
    /// [`CHECK_IN_PROPERTY`]), what it sends and the source.
    pub models: Vec<ModelLine>,
    /// Violated properties per severity, then holds and n/a counts.
    pub unsafe_count: usize,
    /// Violated surprising properties.
    pub surprising_count: usize,
    /// Violated informational properties.
    pub informational_count: usize,
    /// Properties that hold.
    pub holds_count: usize,
    /// Properties that hold where tried.
    pub partly_count: usize,
    /// Properties that do not apply.
    pub na_count: usize,
    /// One line per violated (by severity) or undecided property.
    pub lines: Vec<CardLine>,
    /// The properties that hold: `id` and the first fact (`id: fact`), and
    /// what they were tried across.
    pub holds: Vec<String>,
    /// The properties that hold where tried: `id (not tried: …)`.
    pub partly: Vec<String>,
    /// The properties that do not apply: `id (why)`.
    pub not_applicable: Vec<String>,
}

/// A product whose check-in a pooler column models, on its card
/// ([`Card::models`]).
#[derive(Serialize)]
pub struct ModelLine {
    /// The product, e.g. `PgCat`.
    pub product: &'static str,
    /// Its mode, e.g. `session`.
    pub mode: &'static str,
    /// What it sends at check-in.
    pub sends: &'static str,
    /// Where that is stated.
    pub source: &'static str,
    /// `survives`, `released`, or `not decided`: what the column's verdict
    /// of [`CHECK_IN_PROPERTY`] says of a session-level lock left at
    /// check-in.
    pub lock: &'static str,
    /// That verdict's mark (✓ ✗ – ? ◐).
    pub symbol: &'static str,
}

/// One property on a card.
#[derive(Serialize)]
pub struct CardLine {
    /// ✓ ✗ – ?
    pub symbol: &'static str,
    /// `holds`, `violated`, `n/a`, `undecided`.
    pub verdict: &'static str,
    /// The property.
    pub id: String,
    /// `unsafe`, …
    pub severity: &'static str,
    /// The facts, from the deciding cells (violating ones first).
    pub facts: Vec<Fact>,
    /// For a violation: the property's advice when no remedy is proven for
    /// the column, then the readings' own; for another verdict, the
    /// readings' own (what holds can still need care).
    pub advice: Vec<String>,
    /// For a violation: the first remedy proven for this column, with what
    /// proves it.
    pub proven: Option<Proven>,
    /// What the verdict was tried across (its coverage), empty without one.
    pub across: String,
    /// For n/a and undecided: why.
    pub reasons: Vec<String>,
}

/// A fact from one deciding cell.
#[derive(Serialize)]
pub struct Fact {
    /// The fact in words.
    pub text: String,
    /// The scenario run (`NAME[params]`).
    pub scenario: String,
    /// Its file's name, the report's anchor.
    pub family: String,
    /// The record read (or `status`).
    pub record: String,
}

fn family(scenario: &str) -> String {
    scenario.split('[').next().unwrap_or(scenario).to_owned()
}

fn class(m: Mark) -> &'static str {
    match m {
        Mark::Holds => "holds",
        Mark::Violated => "violated",
        Mark::NotApplicable => "na",
        Mark::Undecided => "undecided",
        Mark::HoldsWhereTried => "partly",
    }
}

/// The cells of server `server` of `report`, as the verdicts read them.
fn cells_of(report: &Report, server: &str) -> Vec<BaselineCell> {
    report
        .runs
        .iter()
        .filter(|r| r.server == server)
        .map(BaselineCell::of)
        .collect()
}

/// The fact an evidence states: the rule's words (or the reading), and for
/// a race row the trials.
fn fact(e: &Evidence) -> Fact {
    let mut text = e.says.clone().unwrap_or_else(|| e.reading.clone());
    if let Some(t) = e.trials
        && t.violated > 0
    {
        text = format!("{text} (in {} of {} trials)", t.violated, t.of);
    }
    Fact {
        text,
        scenario: e.scenario.clone(),
        family: family(&e.scenario),
        record: e.record.clone().unwrap_or_else(|| "status".to_owned()),
    }
}

/// The facts of a column verdict: the evidence that decided it first, each
/// distinct text once (the first cell that states it named).
fn facts(v: &ColumnVerdict) -> Vec<Fact> {
    if v.verdict == Mark::NotApplicable {
        // The reasons say it.
        return Vec::new();
    }
    let mut ordered: Vec<&Evidence> = v.evidence.iter().filter(|e| e.reads == v.verdict).collect();
    if v.verdict == Mark::Violated {
        ordered.extend(v.evidence.iter().filter(|e| e.reads == Mark::Holds && e.says.is_some()));
    }
    let mut out: Vec<Fact> = Vec::new();
    for e in ordered {
        let f = fact(e);
        if !out.iter().any(|x| x.text == f.text) {
            out.push(f);
        }
    }
    out
}

fn crate_line(d: &DriverColumn) -> String {
    match &d.pooler_version {
        Some(p) => format!("{} {}; {p}", d.crate_name, d.crate_version),
        None => format!("{} {}", d.crate_name, d.crate_version),
    }
}

impl VerdictView {
    /// The view of `report`'s verdicts (empty without any).
    pub fn of(report: &Report) -> VerdictView {
        let info: BTreeMap<&str, &Property> = report.properties.iter().map(|p| (p.id.as_str(), p)).collect();
        let servers = report
            .verdicts
            .iter()
            .map(|sv| {
                let version = report
                    .servers
                    .iter()
                    .find(|s| s.id == sv.server)
                    .map(|s| crate::baseline::short_version(&s.version))
                    .unwrap_or_else(|| sv.server.clone());
                let column_props: Vec<&PropertyVerdicts> =
                    sv.properties.iter().filter(|p| p.scope == Scope::Column).collect();
                let cells = cells_of(report, &sv.server);
                let ctx = Context {
                    verdicts: &sv.properties,
                    columns: &report.drivers,
                    cells: &cells,
                };
                ServerView {
                    id: sv.server.clone(),
                    version,
                    findings: sv
                        .properties
                        .iter()
                        .filter(|p| p.scope == Scope::Server)
                        .filter_map(|p| finding(p, info.get(p.id.as_str())?))
                        .collect(),
                    properties: column_props
                        .iter()
                        .enumerate()
                        .map(|(n, p)| property_row(n + 1, p, info.get(p.id.as_str()).copied()))
                        .collect(),
                    grid: report.drivers.iter().map(|d| grid_row(d, &column_props)).collect(),
                    cards: report
                        .drivers
                        .iter()
                        .map(|d| card(d, &column_props, &info, &ctx))
                        .collect(),
                }
            })
            .collect();
        VerdictView {
            servers,
            several: report.verdicts.len() > 1,
        }
    }

    /// The view narrowed to the columns in `drivers` (all when empty).
    pub fn only(mut self, drivers: &[String]) -> VerdictView {
        if drivers.is_empty() {
            return self;
        }
        for s in &mut self.servers {
            s.grid.retain(|g| drivers.contains(&g.driver));
            s.cards.retain(|c| drivers.contains(&c.driver));
        }
        self
    }

    /// The view as Markdown: `section` picks the parts (`all`: findings,
    /// properties, grid and cards; `findings`: the findings and the
    /// properties with the columns that violate them, for the README);
    /// `link` is the path of `matrix.md` evidence links point into (empty:
    /// this document).
    ///
    /// # Errors
    /// A template error (a bug).
    pub fn markdown(&self, section: &str, link: &str, heading: &str) -> Result<String> {
        let mut env = super::markdown_environment()?;
        env.add_template("verdicts.md", include_str!("../../templates/verdicts.md.j2"))?;
        Ok(env.get_template("verdicts.md")?.render(minijinja::context! {
            v => minijinja::value::Serde(self),
            section => section,
            link => link,
            h => heading,
        })?)
    }
}

/// The deciding cells of a server property that read one way (violated or
/// holds) in some column: how many columns, and what each read.
struct Group {
    scenario: String,
    record: Option<String>,
    mark: Mark,
    details: Vec<String>,
}

/// A server property as a finding: per deciding cell and what it read
/// (violations first), in how many columns, which trials, how long.
fn finding(p: &PropertyVerdicts, info: &Property) -> Option<Finding> {
    let violated = p.count(Mark::Violated);
    let decided = violated + p.count(Mark::Holds) + p.count(Mark::HoldsWhereTried);
    let mut groups: Vec<Group> = Vec::new();
    for mark in [Mark::Violated, Mark::Holds] {
        for c in &p.columns {
            for e in c.evidence.iter().filter(|e| e.reads == mark) {
                let mut detail = e
                    .trials
                    .map(|t| format!("{} of {}", t.violated, t.of))
                    .unwrap_or_else(|| e.reading.clone());
                if let Some(ms) = e.ms.filter(|_| mark == Mark::Holds) {
                    detail = format!("{detail} after {ms} ms");
                }
                let detail = format!("{}: {detail}", c.driver);
                match groups
                    .iter_mut()
                    .find(|g| g.scenario == e.scenario && g.record == e.record && g.mark == mark)
                {
                    Some(g) => g.details.push(detail),
                    None => groups.push(Group {
                        scenario: e.scenario.clone(),
                        record: e.record.clone(),
                        mark,
                        details: vec![detail],
                    }),
                }
            }
        }
    }
    let evidence = groups
        .into_iter()
        .map(|g| {
            let mut cell = p
                .columns
                .iter()
                .flat_map(|c| &c.evidence)
                .filter(|e| e.scenario == g.scenario && e.record == g.record);
            let says = cell
                .clone()
                .find(|e| e.reads == g.mark)
                .map(|e| e.says.clone().unwrap_or_else(|| e.reading.clone()))
                .unwrap_or_default();
            let race = cell.any(|e| e.trials.is_some());
            let shown: Vec<&str> = g.details.iter().take(3).map(String::as_str).collect();
            Fact {
                text: format!(
                    "{} {says}: in {} column(s) ({}{}{})",
                    g.mark.symbol(),
                    g.details.len(),
                    if race { "violating trials, of all: " } else { "" },
                    shown.join("; "),
                    if g.details.len() > 3 { "; …" } else { "" }
                ),
                family: family(&g.scenario),
                scenario: g.scenario,
                record: g.record.unwrap_or_else(|| "status".to_owned()),
            }
        })
        .collect();
    Some(Finding {
        id: p.id.clone(),
        rule: info.rule.clone(),
        severity: p.severity.as_str(),
        source: info.source.clone(),
        advice: info.advice.clone(),
        file: info.file.display().to_string(),
        symbol: if violated > 0 {
            Mark::Violated.symbol()
        } else if decided == 0 {
            Mark::Undecided.symbol()
        } else {
            Mark::Holds.symbol()
        },
        violated,
        decided,
        evidence,
    })
}

/// Property `n` (1-based) of the table, with its counts and the reasons of
/// its n/a and undecided columns (one per reason, naming the columns).
fn property_row(n: usize, p: &PropertyVerdicts, info: Option<&Property>) -> PropertyRow {
    let mut reasons: Vec<(String, Vec<&str>)> = Vec::new();
    for c in p
        .columns
        .iter()
        .filter(|c| matches!(c.verdict, Mark::NotApplicable | Mark::Undecided | Mark::HoldsWhereTried))
    {
        let why = format!("{}: {}", c.verdict.as_str(), c.reasons.join("; "));
        match reasons.iter_mut().find(|(w, _)| *w == why) {
            Some((_, cs)) => cs.push(&c.driver),
            None => reasons.push((why, vec![&c.driver])),
        }
    }
    PropertyRow {
        n,
        id: p.id.clone(),
        rule: info.map(|i| i.rule.clone()).unwrap_or_default(),
        severity: p.severity.as_str(),
        source: info.map(|i| i.source.clone()).unwrap_or_default(),
        file: info.map(|i| i.file.display().to_string()).unwrap_or_default(),
        holds: p.count(Mark::Holds),
        partly: p.count(Mark::HoldsWhereTried),
        violated: p.count(Mark::Violated),
        na: p.count(Mark::NotApplicable),
        undecided: p.count(Mark::Undecided),
        reasons: reasons
            .into_iter()
            .map(|(why, cs)| format!("{why} ({})", cs.join(", ")))
            .collect(),
        violated_by: p
            .columns
            .iter()
            .filter(|c| c.verdict == Mark::Violated)
            .map(|c| c.driver.clone())
            .collect(),
    }
}

/// Column `d`'s marks, one per property, each with its deciding cells.
fn grid_row(d: &DriverColumn, props: &[&PropertyVerdicts]) -> GridRow {
    GridRow {
        driver: d.id.clone(),
        marks: props
            .iter()
            .map(|p| match p.of(&d.id) {
                Some(v) => GridMark {
                    symbol: v.verdict.symbol(),
                    class: class(v.verdict),
                    title: v
                        .evidence
                        .iter()
                        .map(|e| {
                            format!(
                                "{} · {}: {} ({})",
                                e.scenario,
                                e.record.as_deref().unwrap_or("status"),
                                e.reading,
                                e.reads.as_str()
                            )
                        })
                        .chain(v.coverage.iter().map(|c| format!("tried across: {}", c.tried_text())))
                        .chain(
                            v.coverage
                                .iter()
                                .filter(|c| c.has_untried())
                                .map(|c| format!("not tried: {}", c.untried_text())),
                        )
                        .collect::<Vec<_>>()
                        .join("\n"),
                    family: v
                        .evidence
                        .iter()
                        .find(|e| e.reads == v.verdict)
                        .or(v.evidence.first())
                        .map(|e| family(&e.scenario))
                        .unwrap_or_default(),
                },
                None => GridMark {
                    symbol: " ",
                    class: "na",
                    title: String::new(),
                    family: String::new(),
                },
            })
            .collect(),
    }
}

/// The property whose verdict says whether a session-level lock survives a
/// pooler's check-in: a `pooler_mode` dimension, decided by a lock left on a
/// connection that goes back.
pub const CHECK_IN_PROPERTY: &str = "session-lock-released-on-return";

/// [`Card::models`] for column `d`.
fn models(d: &DriverColumn, props: &[&PropertyVerdicts]) -> Vec<ModelLine> {
    let verdict = props
        .iter()
        .find(|p| p.id == CHECK_IN_PROPERTY)
        .and_then(|p| p.of(&d.id))
        .map(|v| v.verdict);
    let lock = match verdict {
        Some(Mark::Violated) => "survives",
        Some(Mark::Holds | Mark::HoldsWhereTried) => "released",
        _ => "not decided",
    };
    locklab_drivers::models_of(&d.id)
        .iter()
        .map(|m| ModelLine {
            product: m.product,
            mode: m.mode,
            sends: m.sends,
            source: m.source,
            lock,
            symbol: verdict.map_or("?", Mark::symbol),
        })
        .collect()
}

/// Column `d`'s card.
fn card(d: &DriverColumn, props: &[&PropertyVerdicts], info: &BTreeMap<&str, &Property>, ctx: &Context<'_>) -> Card {
    let mut lines: Vec<(u8, Severity, CardLine)> = Vec::new();
    for p in props {
        let Some(v) = p.of(&d.id) else {
            continue;
        };
        let mut advice = Vec::new();
        let mut proven = None;
        if v.verdict == Mark::Violated
            && let Some(i) = info.get(p.id.as_str())
        {
            proven = first_proven(&i.remedies, &p.id, d, ctx);
            if proven.is_none() {
                advice.push(i.advice.clone());
            }
        }
        // The readings' own advice: for a violation, or for what holds
        // (asyncpg's reset ends a lock one meant to keep).
        for e in v.evidence.iter().filter(|e| e.reads == v.verdict) {
            if let Some(a) = &e.advice
                && !advice.contains(a)
            {
                advice.push(a.clone());
            }
        }
        let order = match v.verdict {
            Mark::Violated => 0,
            Mark::Undecided => 1,
            Mark::HoldsWhereTried => 2,
            Mark::Holds => 3,
            Mark::NotApplicable => 4,
        };
        lines.push((
            order,
            p.severity,
            CardLine {
                symbol: v.verdict.symbol(),
                verdict: v.verdict.as_str(),
                id: p.id.clone(),
                severity: p.severity.as_str(),
                facts: facts(v),
                advice,
                proven,
                across: v.coverage.as_ref().map(|c| c.tried_text()).unwrap_or_default(),
                reasons: v.reasons.clone(),
            },
        ));
    }
    lines.sort_by_key(|(order, severity, _)| (*order, *severity));
    let holds = lines
        .iter()
        .filter(|(_, _, l)| l.verdict == "holds")
        .map(|(_, _, l)| {
            let fact = l.facts.first().map(|f| f.text.as_str()).into_iter();
            let advice = l.advice.iter().map(|a| format!("do: {a}"));
            let across = (!l.across.is_empty()).then(|| format!("tried across: {}", l.across));
            let said: Vec<String> = fact.map(str::to_owned).chain(across).chain(advice).collect();
            if said.is_empty() {
                l.id.clone()
            } else {
                format!("{} ({})", l.id, said.join("; "))
            }
        })
        .collect();
    let partly = lines
        .iter()
        .filter(|(_, _, l)| l.verdict == Mark::HoldsWhereTried.as_str())
        .map(|(_, _, l)| format!("{} (holds across {}; {})", l.id, l.across, l.reasons.join("; ")))
        .collect();
    let not_applicable = lines
        .iter()
        .filter(|(_, _, l)| l.verdict == "n/a")
        .map(|(_, _, l)| format!("{} ({})", l.id, l.reasons.join("; ")))
        .collect();
    let count = |m: &str, s: Option<&str>| {
        lines
            .iter()
            .filter(|(_, _, l)| l.verdict == m && s.is_none_or(|s| l.severity == s))
            .count()
    };
    Card {
        driver: d.id.clone(),
        crate_line: crate_line(d),
        configuration: d.configuration.clone(),
        models: models(d, props),
        unsafe_count: count("violated", Some("unsafe")),
        surprising_count: count("violated", Some("surprising")),
        informational_count: count("violated", Some("informational")),
        holds_count: count("holds", None),
        partly_count: count(Mark::HoldsWhereTried.as_str(), None),
        na_count: count("n/a", None),
        lines: lines
            .into_iter()
            .map(|(_, _, l)| l)
            .filter(|l| matches!(l.verdict, "violated" | "undecided"))
            .collect(),
        holds,
        partly,
        not_applicable,
    }
}
