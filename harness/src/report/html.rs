//! `index.html`: one self-contained page (inline CSS and SVG, no scripts, no
//! external assets) with the verdicts first (properties × columns, server
//! findings, a card per column), an overview matrix, one colour-coded table per
//! scenario with the evidence of each cell as hover text, timing charts and
//! the environment: the view of `report/view.rs` rendered from
//! `templates/index.html.j2`.

use anyhow::Result;
use serde::Serialize;

use super::view::{Family, ObservationRow, Verdict, View};
use super::{Report, chart};
use crate::outcome::{Stats, Status};

/// A timing is charted when some column's p50 (or single value) reaches this, in ms;
/// faster steps are just round trips (an outlier alone does not make a chart).
const CHART_MIN_MS: f64 = 10.0;

/// One table cell: its text, CSS class (see the legend) and hover text.
#[derive(Serialize)]
struct Cell {
    text: String,
    sub: String,
    class: &'static str,
    title: String,
}

#[derive(Serialize)]
struct Row {
    name: String,
    /// The row's hover text: the step that records it, with its SQL (the
    /// same for every column, so said once here, not in each cell).
    title: String,
    cells: Vec<Cell>,
}

#[derive(Serialize)]
struct Chart {
    title: String,
    svg: String,
}

#[derive(Serialize)]
struct Section {
    anchor: String,
    name: String,
    description: String,
    source: Option<String>,
    file: String,
    rows: Vec<Row>,
    charts: Vec<Chart>,
}

/// The CSS class of an observation or locks-left cell: its run's status
/// (white for a pass, yellow for a pass whose value differs), `same` without a run.
fn class_of(status: Option<Status>, differs: bool) -> &'static str {
    match status {
        None | Some(Status::Pass) if !differs => "same",
        None | Some(Status::Pass) => "differs",
        Some(Status::NotApplicable) => "na",
        Some(Status::Deviates) => "dev",
        Some(Status::Fail) => "fail",
        Some(Status::Varies) => "varies",
    }
}

/// The text and CSS class of an expectations cell (a pass is green).
fn verdict(v: &Verdict) -> (String, &'static str) {
    let (n, count) = (v.runs, v.count);
    match v.status {
        None => ("—".to_owned(), "same"),
        Some(Status::Varies) => (format!("VARIES ({count} of {n})"), "varies"),
        Some(Status::Fail) => (format!("FAIL ({count} of {n})"), "fail"),
        Some(Status::NotApplicable) => ("n/a".to_owned(), "na"),
        Some(Status::Deviates) => (format!("deviates ({count} of {n})"), "dev"),
        Some(Status::Pass) => ("pass".to_owned(), "pass"),
    }
}

/// An observation row and, if some column's time reaches [`CHART_MIN_MS`], its chart.
fn observation_row(row: &ObservationRow<'_>, headers: &[String]) -> Result<(Row, Option<Chart>)> {
    let label = if row.parameterised {
        format!("{} {}", row.name, row.suffix)
    } else {
        row.name.to_owned()
    };
    let mut timed: Vec<(String, Stats)> = Vec::new();
    let mut distributions = Vec::new();
    let mut cells = Vec::new();
    for (c, cell) in row.cells.iter().enumerate() {
        let (text, sub) = match cell.observation {
            Some(o) => {
                if let Some(st) = o.elapsed_stats {
                    timed.push((headers[c].clone(), st));
                }
                if let Some(d) = &o.distribution {
                    let mut by_text = std::collections::BTreeMap::new();
                    for counted in d {
                        *by_text.entry(counted.reading.to_string()).or_default() += counted.trials;
                    }
                    distributions.push((headers[c].clone(), by_text));
                }
                (cell.shown.clone(), o.timing().unwrap_or_default())
            }
            None => ("—".into(), String::new()),
        };
        cells.push(Cell {
            text,
            sub,
            class: class_of(cell.status, cell.differs),
            title: cell.evidence.join("\n"),
        });
    }
    // A race's row: how its outcomes are distributed over the trials.
    let chart = if !distributions.is_empty() {
        Some(Chart {
            title: format!("{label}: share of the trials per outcome"),
            svg: chart::distribution_chart(&distributions).map_err(|e| anyhow::anyhow!("chart {label}: {e}"))?,
        })
    } else if timed.iter().any(|(_, s)| s.p50 >= CHART_MIN_MS) {
        Some(Chart {
            title: format!("{label}: {}", row.step),
            svg: chart::timing_chart(&timed).map_err(|e| anyhow::anyhow!("chart {label}: {e}"))?,
        })
    } else {
        None
    };
    Ok((
        Row {
            name: label,
            title: row.step.to_owned(),
            cells,
        },
        chart,
    ))
}

/// A family's section and its overview row.
fn section(family: &Family<'_>, headers: &[String]) -> Result<(Section, Row)> {
    let first = family.first;
    let mut rows = Vec::new();
    let mut charts = Vec::new();
    for row in &family.rows {
        let (row, chart) = observation_row(row, headers)?;
        rows.push(row);
        charts.extend(chart);
    }
    rows.push(Row {
        title: String::new(),
        name: "locks left after run".into(),
        cells: family
            .locks_left
            .iter()
            .map(|l| Cell {
                text: l.text(),
                sub: String::new(),
                class: class_of(l.status, l.differs),
                title: l.evidence.join("\n"),
            })
            .collect(),
    });
    let mut status_cells = Vec::new();
    let mut overview_cells = Vec::new();
    for v in &family.expectations {
        let (text, class) = verdict(v);
        let mut sub = Vec::new();
        if v.differing > 0 {
            sub.push(format!("≠{}", v.differing));
        }
        if v.locks_left {
            sub.push("locks left".to_owned());
        }
        overview_cells.push(Cell {
            text: text.clone(),
            sub: sub.join(" · "),
            class: if v.status == Some(Status::Pass) && v.differing > 0 {
                "differs"
            } else {
                class
            },
            title: v.evidence.join("\n"),
        });
        status_cells.push(Cell {
            text,
            sub: String::new(),
            class,
            title: v.evidence.join("\n"),
        });
    }
    rows.push(Row {
        title: String::new(),
        name: "expectations".into(),
        cells: status_cells,
    });
    let overview = Row {
        title: String::new(),
        name: first.family.clone(),
        cells: overview_cells,
    };
    let section = Section {
        anchor: format!("s-{}", first.family),
        name: first.family.clone(),
        description: first.description.clone(),
        source: first.source.clone(),
        file: first.file.display().to_string(),
        rows,
        charts,
    };
    Ok((section, overview))
}

impl Report {
    /// The report as one self-contained HTML page.
    ///
    /// # Errors
    /// A template or chart error (a bug).
    pub fn to_html(&self) -> Result<String> {
        let view = View::of(self);
        let headers: Vec<String> = view.columns.iter().map(|c| c.header.clone()).collect();
        let mut overview: Vec<Row> = Vec::new();
        let mut sections: Vec<Section> = Vec::new();
        for family in &view.families {
            let (section, row) = section(family, &headers)?;
            sections.push(section);
            overview.push(row);
        }
        let mut crates: Vec<String> = Vec::new();
        for d in &self.drivers {
            let c = format!("{} {}", d.crate_name, d.crate_version);
            if !crates.contains(&c) {
                crates.push(c);
            }
        }
        let mut env = minijinja::Environment::new();
        // Scenario text, SQL and server messages go into the page: escape all of it.
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
        env.add_template("index.html", include_str!("../../templates/index.html.j2"))?;
        let page = env.get_template("index.html")?.render(minijinja::context! {
            crates => crates,
            headers => headers,
            overview => minijinja::value::Serde(&overview),
            sections => minijinja::value::Serde(&sections),
            verdicts => minijinja::value::Serde(&super::verdicts::VerdictView::of(self)),
            ..self.template_context()
        })?;
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DriverColumn, Environment, ScenarioInfo, ServerInfo, Summary};
    use super::*;
    use crate::outcome::{Observation, RunResult};

    /// A one-cell report whose scenario text, SQL and value are hostile HTML.
    fn hostile() -> Report {
        let evil = "<script>alert(1)</script> & \"q\" 'a'";
        Report {
            schema_version: super::super::SCHEMA_VERSION,
            generated_at: "2026-11-30T00:00:00Z".into(),
            locklab_version: "0.1.0".into(),
            repeat: 2,
            shard: None,
            environment: Environment {
                os: evil.into(),
                kernel: None,
                arch: "x86_64".into(),
                cpus: 2,
                git_commit: None,
                git_dirty: false,
            },
            servers: vec![ServerInfo {
                id: "pg17".into(),
                major: 17,
                version: "PostgreSQL 17.11".into(),
                backend: "local".into(),
                image: None,
                startup_ms: 1.0,
                image_ms: 0.0,
            }],
            drivers: vec![DriverColumn {
                id: "d".into(),
                crate_name: "c".into(),
                crate_version: "1.0.0".into(),
                configuration: evil.into(),
                kind: "pooled".into(),
                pooler: None,
                pooler_kind: None,
                pooler_version: None,
            }],
            scenarios: vec![ScenarioInfo {
                name: "s".into(),
                family: "s".into(),
                params: Vec::new(),
                description: evil.into(),
                source: Some(evil.into()),
                tags: Vec::new(),
                report: None,
                file: "scenarios/s.yaml".into(),
                observations: vec!["o".into()],
                observation_steps: vec![format!("step 1 (a: select '{evil}')")],
            }],
            runs: vec![RunResult {
                failure: Some(evil.into()),
                observations: vec![Observation {
                    name: "o".into(),
                    step: 1,
                    value: crate::outcome::Value::Locks(crate::outcome::LockSnapshot {
                        held: true,
                        holders: vec![crate::outcome::LockHolder {
                            actor: Some(evil.into()),
                            pid: 42,
                            state: Some("idle".into()),
                            key: crate::keys::AdvisoryKey::Big(1),
                            mode: "ExclusiveLock".into(),
                            wait: None,
                            xmin: None,
                        }],
                        waiters: Vec::new(),
                    }),
                    sqlstate: Some("55P03".into()),
                    elapsed_ms: Some(200.0),
                    waited_ms: None,
                    notices: Vec::new(),
                    notices_read: Default::default(),
                    elapsed_stats: Stats::of(&[200.0, 210.0]),
                    waited_stats: None,
                    distribution: None,
                    time_varies: false,
                }],
                elapsed_ms: 300.0,
                repeats: 2,
                elapsed_stats: Stats::of(&[300.0, 310.0]),
                ..RunResult::new("pg17", "s", "d")
            }],
            summary: Summary {
                runs: 1,
                passed: 0,
                deviated: 0,
                not_applicable: 0,
                failed: 1,
                varied: 0,
                varied_why: Vec::new(),
                elapsed_ms: 1.0,
            },
            properties: Vec::new(),
            verdicts: Vec::new(),
        }
    }

    #[test]
    fn scenario_text_sql_and_values_are_escaped() {
        let page = hostile().to_html().unwrap();
        assert!(!page.contains("<script"), "unescaped script tag");
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
            "no escaped description"
        );
        // the hover text keeps its evidence, escaped inside the attribute
        assert!(page.contains("backend pid 42, idle"), "no holder evidence");
        assert!(page.contains("SQLSTATE: 55P03"), "no SQLSTATE evidence");
        assert!(page.contains("<svg"), "no chart for a 200 ms step");
    }
}
