//! `matrix.md`: the [`View`] as GitHub-flavoured Markdown tables, rendered
//! from `templates/matrix.md.j2`.

use anyhow::Result;
use serde::Serialize;

use super::Report;
use super::view::{Family, Verdict, View};
use crate::outcome::Status;

/// One table of a scenario file: a parameter set's observations (or, for
/// the whole file, its locks left and expectations), one row per column.
#[derive(Serialize)]
struct Part {
    /// `[key=1]` for a parameter set, empty for the file's only set, `all
    /// parameter sets` for the file's last table.
    title: String,
    /// The observation names (the table's columns after `column`).
    headers: Vec<String>,
    /// One per column: its header and a cell per observation.
    rows: Vec<Row>,
}

#[derive(Serialize)]
struct Row {
    name: String,
    cells: Vec<String>,
}

#[derive(Serialize)]
struct Table<'a> {
    name: &'a str,
    description: &'a str,
    source: Option<&'a str>,
    parts: Vec<Part>,
}

/// A table cell's text: no `|`, no line breaks.
fn esc(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The mark of a row whose values (without timings) differ between servers.
fn mark(differs: bool) -> &'static str {
    if differs { " ⚠ differs between servers" } else { "" }
}

/// The expectations cell: `pass`, `n/a`, `deviates (1 of 2: …)`, `**FAIL**`,
/// `**FAIL** (1 of 2)`, `**VARIES** (1 of 2)`, or `—` without runs.
fn verdict(v: &Verdict) -> String {
    let (n, count) = (v.runs, v.count);
    match v.status {
        None => "—".to_owned(),
        Some(Status::Varies) => format!("**VARIES** ({count} of {n})"),
        Some(Status::Fail) if n == 1 => "**FAIL**".to_owned(),
        Some(Status::Fail) => format!("**FAIL** ({count} of {n})"),
        Some(Status::NotApplicable) => "n/a".to_owned(),
        Some(Status::Deviates) => format!("deviates ({count} of {n}: a session assumption fails)"),
        Some(Status::Pass) => "pass".to_owned(),
    }
}

/// One family's tables, transposed so that they read at 30+ columns: one
/// row per column and one column per observation; a table per parameter
/// set, then the locks left and the expectations (of every parameter set).
fn table<'a>(family: &Family<'a>, headers: &[String]) -> Table<'a> {
    let mut parts: Vec<Part> = Vec::new();
    for row in &family.rows {
        let title = if row.parameterised {
            row.suffix.to_owned()
        } else {
            String::new()
        };
        if parts.last().is_none_or(|p| p.title != title) {
            parts.push(Part {
                title,
                headers: Vec::new(),
                rows: headers
                    .iter()
                    .map(|h| Row {
                        name: format!("`{h}`"),
                        cells: Vec::new(),
                    })
                    .collect(),
            });
        }
        let part = parts.last_mut().expect("pushed above");
        part.headers
            .push(format!("`{}`{}", row.name, mark(row.differs_between_servers)));
        for (r, c) in part.rows.iter_mut().zip(&row.cells) {
            r.cells.push(match c.observation {
                Some(o) => match o.timing() {
                    Some(t) => format!("{} ({t})", esc(&c.shown)),
                    None => esc(&c.shown),
                },
                None => "—".to_owned(),
            });
        }
    }
    let several = parts.len() > 1;
    let last = Part {
        title: if several {
            "all parameter sets".to_owned()
        } else {
            String::new()
        },
        headers: vec![
            format!("locks left after run{}", mark(family.locks_left_differ_between_servers)),
            "expectations".to_owned(),
        ],
        rows: headers
            .iter()
            .zip(family.locks_left.iter().zip(&family.expectations))
            .map(|(h, (l, e))| Row {
                name: format!("`{h}`"),
                cells: vec![
                    l.summary().map(|x| esc(&x)).unwrap_or_else(|| "—".to_owned()),
                    verdict(e),
                ],
            })
            .collect(),
    };
    if several || parts.is_empty() {
        parts.push(last);
    } else if let Some(only) = parts.last_mut() {
        only.headers.extend(last.headers);
        for (r, l) in only.rows.iter_mut().zip(last.rows) {
            r.cells.extend(l.cells);
        }
    }
    Table {
        name: &family.first.family,
        description: &family.first.description,
        source: family.first.source.as_deref(),
        parts,
    }
}

impl Report {
    /// The report as GitHub-flavoured Markdown: the verdicts first
    /// ([`super::verdicts`]), then per scenario file a table per parameter
    /// set, one row per server × driver (server-major) and one column per
    /// recorded observation.
    /// With several servers, a row whose value differs between servers
    /// for the same driver is marked.
    ///
    /// # Errors
    /// A template error (a bug).
    pub fn to_markdown(&self) -> Result<String> {
        let view = View::of(self);
        let headers: Vec<String> = view.columns.iter().map(|c| c.header.clone()).collect();
        let tables: Vec<Table> = view.families.iter().map(|f| table(f, &headers)).collect();
        let verdicts = super::verdicts::VerdictView::of(self).markdown("all", "", "##")?;
        let mut env = super::markdown_environment()?;
        env.add_template("matrix.md", include_str!("../../templates/matrix.md.j2"))?;
        let out = env.get_template("matrix.md")?.render(minijinja::context! {
            headers => headers,
            tables => minijinja::value::Serde(&tables),
            verdicts => verdicts,
            ..self.template_context()
        })?;
        Ok(out)
    }
}
