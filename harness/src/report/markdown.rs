//! `matrix.md`: the [`View`] as GitHub-flavoured Markdown tables, rendered
//! from `templates/matrix.md.j2`.

use anyhow::Result;
use serde::Serialize;

use super::Report;
use super::view::{Family, Verdict, View};
use crate::outcome::Status;

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
    rows: Vec<Row>,
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
/// `**FAIL** (1 of 2)`, `**UNSTABLE** (1 of 2)`, or `—` without runs.
fn verdict(v: &Verdict) -> String {
    let (n, count) = (v.runs, v.count);
    match v.status {
        None => "—".to_owned(),
        Some(Status::Unstable) => format!("**UNSTABLE** ({count} of {n})"),
        Some(Status::Fail) if n == 1 => "**FAIL**".to_owned(),
        Some(Status::Fail) => format!("**FAIL** ({count} of {n})"),
        Some(Status::NotApplicable) => "n/a".to_owned(),
        Some(Status::Deviates) => format!("deviates ({count} of {n}: a session assumption fails)"),
        Some(Status::Pass) => "pass".to_owned(),
    }
}

/// One family's table: its observation rows, locks left and expectations.
fn table<'a>(family: &Family<'a>) -> Table<'a> {
    let mut rows: Vec<Row> = family
        .rows
        .iter()
        .map(|row| {
            let label = if row.parameterised {
                format!("`{}` {}", row.name, esc(row.suffix))
            } else {
                format!("`{}`", row.name)
            };
            Row {
                name: format!("{label}{}", mark(row.differs_between_servers)),
                cells: row
                    .cells
                    .iter()
                    .map(|c| match c.observation {
                        Some(o) => match o.timing() {
                            Some(t) => format!("{} ({t})", esc(&o.shown())),
                            None => esc(&o.shown()),
                        },
                        None => "—".to_owned(),
                    })
                    .collect(),
            }
        })
        .collect();
    rows.push(Row {
        name: format!("locks left after run{}", mark(family.locks_left_differ_between_servers)),
        cells: family
            .locks_left
            .iter()
            .map(|l| l.summary().map(|x| esc(&x)).unwrap_or_else(|| "—".to_owned()))
            .collect(),
    });
    rows.push(Row {
        name: "expectations".into(),
        cells: family.expectations.iter().map(verdict).collect(),
    });
    Table {
        name: &family.first.family,
        description: &family.first.description,
        source: family.first.source.as_deref(),
        rows,
    }
}

impl Report {
    /// The report as GitHub-flavoured Markdown: per scenario, one row per
    /// recorded observation and one column per server × driver (server-major).
    /// With several servers, a row whose value differs between servers
    /// for the same driver is marked.
    ///
    /// # Errors
    /// A template error (a bug).
    pub fn to_markdown(&self) -> Result<String> {
        let view = View::of(self);
        let headers: Vec<String> = view.columns.iter().map(|c| c.header.clone()).collect();
        let tables: Vec<Table> = view.families.iter().map(table).collect();
        let mut env = minijinja::Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .keep_trailing_newline(true)
                .build()?,
        );
        env.add_template("matrix.md", include_str!("../../templates/matrix.md.j2"))?;
        let out = env.get_template("matrix.md")?.render(minijinja::context! {
            headers => headers,
            tables => minijinja::value::Serde(&tables),
            ..self.template_context()
        })?;
        Ok(out)
    }
}
