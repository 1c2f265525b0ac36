//! `index.html`: one self-contained page (inline CSS and SVG, no scripts, no
//! external assets) with an overview matrix, one colour-coded table per
//! scenario with the evidence of each cell as hover text, timing charts and
//! the environment. Rendered from `templates/index.html.j2`.

use anyhow::Result;
use serde::Serialize;

use super::{Report, chart};
use crate::outcome::{Observation, RunResult, Stats, Status};

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

/// The CSS class of a cell from its run (and, for observation cells, whether
/// its value differs from the reference column of its server).
fn class_of(run: &RunResult, differs: bool) -> &'static str {
    match run.status() {
        Status::Pass if differs => "differs",
        Status::Pass => "same",
        Status::NotApplicable => "na",
        Status::Deviates => "dev",
        Status::Fail => "fail",
        Status::Unstable => "unstable",
    }
}

/// Orders the cell classes from harmless to alarming.
fn severity(class: &str) -> u8 {
    match class {
        "same" => 0,
        "differs" => 1,
        "na" => 2,
        "dev" => 3,
        "fail" => 4,
        _ => 5,
    }
}

fn stats_line(s: &Stats) -> String {
    if s.n > 1 {
        format!(
            "{:.1} ms p50; min {:.1}, p95 {:.1}, max {:.1} over {} repeats",
            s.p50, s.min, s.p95, s.max, s.n
        )
    } else {
        format!("{:.1} ms", s.p50)
    }
}

/// The notes every cell of a run carries in its hover text.
fn run_notes(run: &RunResult, lines: &mut Vec<String>) {
    if run.repeats > 1 {
        lines.push(format!("repeats: {}", run.repeats));
    }
    for u in &run.unstable {
        lines.push(format!("unstable: {u}"));
    }
    for note in [&run.failure, &run.deviation, &run.skipped].into_iter().flatten() {
        lines.push(note.clone());
    }
}

/// Hover text of an observation cell: the step and its SQL, value, SQLSTATE,
/// holders and waiters with backend pid and state, timings.
fn evidence(header: &str, step: &str, o: &Observation, run: &RunResult) -> String {
    let mut lines = vec![
        format!("{header} · {}", o.name),
        step.to_owned(),
        format!("value: {}", o.display),
    ];
    if let Some(state) = &o.sqlstate {
        lines.push(format!("SQLSTATE: {state}"));
    }
    if let Some(snapshot) = o.value.locks() {
        for (list, what) in [(&snapshot.holders, "holder"), (&snapshot.waiters, "waiter")] {
            for h in list {
                lines.push(format!(
                    "{what}: {} (backend pid {}, {})",
                    h.actor.as_deref().unwrap_or("?"),
                    h.pid,
                    h.state.as_deref().unwrap_or("?"),
                ));
            }
        }
    }
    if let Some(s) = &o.elapsed_stats {
        lines.push(format!("time: {}", stats_line(s)));
    }
    if let Some(w) = &o.waited_stats {
        lines.push(format!("at await: {}", stats_line(w)));
    }
    lines.extend(o.notices.iter().cloned());
    run_notes(run, &mut lines);
    lines.join("\n")
}

impl Report {
    /// The report as one self-contained HTML page.
    ///
    /// # Errors
    /// A template or chart error (a bug).
    pub fn to_html(&self) -> Result<String> {
        let columns = self.columns();
        let header = |v: &str, d: &str| self.header(v, d);
        let headers: Vec<String> = columns.iter().map(|(v, d)| header(v, d)).collect();
        let run_of = |v: &str, s: &str, d: &str| self.run_of(v, s, d);
        // The reference column of each server: its first driver (tokio-postgres, no pool).
        let reference = |v: &str| self.drivers.first().map(|d| d.id.clone()).map(|d| (v.to_owned(), d));
        let families = self.families();
        let mut overview: Vec<Row> = Vec::new();
        let mut sections: Vec<Section> = Vec::new();
        for family in &families {
            let first = family[0];
            let anchor = format!("s-{}", first.family);
            let parameterised = family.len() > 1 || !first.params.is_empty();
            let mut rows = Vec::new();
            let mut charts = Vec::new();
            // Per column: the observations whose value differs from the reference column.
            let mut differing: Vec<Vec<String>> = vec![Vec::new(); columns.len()];
            for s in family {
                let suffix = s.name.strip_prefix(&s.family).unwrap_or_default();
                for (k, name) in s.observations.iter().enumerate() {
                    let step = s.observation_steps.get(k).map(String::as_str).unwrap_or_default();
                    let mut cells = Vec::new();
                    let mut timed: Vec<(String, Stats)> = Vec::new();
                    for (c, (v, d)) in columns.iter().enumerate() {
                        let run = run_of(v, &s.name, d);
                        let Some((run, o)) = run.and_then(|r| r.observation(name).map(|o| (r, o))) else {
                            let mut title = vec![format!("{} · {name}: not recorded", header(v, d))];
                            if let Some(r) = run {
                                run_notes(r, &mut title);
                            }
                            cells.push(Cell {
                                text: "—".into(),
                                sub: String::new(),
                                class: run.map_or("same", |r| class_of(r, false)),
                                title: title.join("\n"),
                            });
                            continue;
                        };
                        let reference_value = reference(v)
                            .and_then(|(rv, rd)| run_of(&rv, &s.name, &rd))
                            .and_then(|r| r.observation(name))
                            .map(|r| r.display.as_str());
                        // A step that does not apply to one of the two is not a difference.
                        let differs = reference_value
                            .is_some_and(|r| r != o.display && !r.starts_with("n/a") && !o.display.starts_with("n/a"));
                        if differs {
                            differing[c].push(format!("{name}{suffix}: {}", o.display));
                        }
                        if let Some(st) = o.elapsed_stats {
                            timed.push((header(v, d), st));
                        }
                        cells.push(Cell {
                            text: o.display.clone(),
                            sub: o.timing().unwrap_or_default(),
                            class: class_of(run, differs),
                            title: evidence(&header(v, d), step, o, run),
                        });
                    }
                    let label = if parameterised {
                        format!("{name} {suffix}")
                    } else {
                        name.clone()
                    };
                    if timed.iter().any(|(_, s)| s.p50 >= CHART_MIN_MS) {
                        charts.push(Chart {
                            title: format!("{label}: {step}"),
                            svg: chart::timing_chart(&timed).map_err(|e| anyhow::anyhow!("chart {label}: {e}"))?,
                        });
                    }
                    rows.push(Row { name: label, cells });
                }
            }
            let locks_cells = columns
                .iter()
                .map(|(v, d)| {
                    let mut parts = Vec::new();
                    let mut title = vec![format!("{} · locks left after run", header(v, d))];
                    let mut class = "same";
                    for s in family {
                        let Some(r) = run_of(v, &s.name, d) else { continue };
                        let suffix = s.name.strip_prefix(&s.family).unwrap_or_default();
                        if !r.locks_left.is_empty() {
                            parts.push(format!("{}{suffix}", super::describe_locks_left(&r.locks_left)));
                        }
                        for l in &r.locks_left {
                            title.push(format!(
                                "{suffix} key {} {} {} by backend pid {} ({}, application_name {})",
                                l.key,
                                l.mode,
                                if l.granted { "held" } else { "waited for" },
                                l.pid,
                                l.state.as_deref().unwrap_or("?"),
                                l.application_name.as_deref().unwrap_or("?")
                            ));
                        }
                        if !r.cleaned_backends.is_empty() {
                            title.push(format!(
                                "{suffix} backends ended after the run: {:?}",
                                r.cleaned_backends
                            ));
                        }
                        if !r.backends_left.is_empty() {
                            parts.push(format!("LEAK once over: {}{suffix}", r.backends_left.join(", ")));
                            title.push(format!(
                                "{suffix} leak guard: still in the run's database once it was over: {}",
                                r.backends_left.join(", ")
                            ));
                        }
                        // The most severe class of the file's runs.
                        let c = class_of(r, !r.locks_left.is_empty());
                        if severity(c) > severity(class) {
                            class = c;
                        }
                    }
                    Cell {
                        text: if parts.is_empty() {
                            "none".into()
                        } else {
                            parts.join("; ")
                        },
                        sub: String::new(),
                        class,
                        title: title.join("\n"),
                    }
                })
                .collect();
            rows.push(Row {
                name: "locks left after run".into(),
                cells: locks_cells,
            });
            let mut status_cells = Vec::new();
            let mut overview_cells = Vec::new();
            for (c, (v, d)) in columns.iter().enumerate() {
                let runs: Vec<&RunResult> = family.iter().filter_map(|s| run_of(v, &s.name, d)).collect();
                let n = runs.len();
                let count = |f: &dyn Fn(&RunResult) -> bool| runs.iter().filter(|r| f(r)).count();
                let unstable = count(&|r| !r.unstable.is_empty());
                let failed = count(&|r| !r.passed());
                let deviated = count(&|r| r.deviation.is_some());
                let skipped = count(&|r| r.skipped.is_some());
                let (text, class) = if n == 0 {
                    ("—".to_owned(), "same")
                } else if unstable > 0 {
                    (format!("UNSTABLE ({unstable} of {n})"), "unstable")
                } else if failed > 0 {
                    (format!("FAIL ({failed} of {n})"), "fail")
                } else if skipped == n {
                    ("n/a".to_owned(), "na")
                } else if deviated > 0 {
                    (format!("deviates ({deviated} of {n})"), "dev")
                } else {
                    ("pass".to_owned(), "pass")
                };
                let mut title = vec![format!("{} · {}", header(v, d), first.family)];
                for line in &differing[c] {
                    title.push(format!("differs from the first column: {line}"));
                }
                for r in &runs {
                    let suffix = r.scenario.strip_prefix(&first.family).unwrap_or_default();
                    title.push(format!("{suffix} {}", r.outcome().status).trim().to_owned());
                    run_notes(r, &mut title);
                }
                let left = runs.iter().any(|r| !r.locks_left.is_empty());
                let mut sub = Vec::new();
                if !differing[c].is_empty() {
                    sub.push(format!("≠{}", differing[c].len()));
                }
                if left {
                    sub.push("locks left".to_owned());
                }
                overview_cells.push(Cell {
                    text: text.clone(),
                    sub: sub.join(" · "),
                    class: if class == "pass" && !differing[c].is_empty() {
                        "differs"
                    } else {
                        class
                    },
                    title: title.join("\n"),
                });
                status_cells.push(Cell {
                    text,
                    sub: String::new(),
                    class,
                    title: title.join("\n"),
                });
            }
            rows.push(Row {
                name: "expectations".into(),
                cells: status_cells,
            });
            overview.push(Row {
                name: first.family.clone(),
                cells: overview_cells,
            });
            sections.push(Section {
                anchor,
                name: first.family.clone(),
                description: first.description.clone(),
                source: first.source.clone(),
                file: first.file.display().to_string(),
                rows,
                charts,
            });
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
            ..self.template_context()
        })?;
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DriverColumn, Environment, ScenarioInfo, ServerInfo, Summary};
    use super::*;
    use crate::outcome::Observation;

    /// A one-cell report whose scenario text, SQL and value are hostile HTML.
    fn hostile() -> Report {
        let evil = "<script>alert(1)</script> & \"q\" 'a'";
        Report {
            schema_version: super::super::SCHEMA_VERSION,
            generated_at: "2026-11-30T00:00:00Z".into(),
            locklab_version: "0.1.0".into(),
            repeat: 2,
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
            }],
            scenarios: vec![ScenarioInfo {
                name: "s".into(),
                family: "s".into(),
                params: Vec::new(),
                description: evil.into(),
                source: Some(evil.into()),
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
                        }],
                        waiters: Vec::new(),
                    }),
                    display: evil.into(),
                    sqlstate: Some("55P03".into()),
                    elapsed_ms: Some(200.0),
                    waited_ms: None,
                    notices: Vec::new(),
                    elapsed_stats: Stats::of(&[200.0, 210.0]),
                    waited_stats: None,
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
                unstable: 0,
                elapsed_ms: 1.0,
            },
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
