//! The generated regions of the README and the book: findings stated from
//! the report's verdicts, never by hand. A region sits between
//! `<!-- generated: NAME by locklab report; do not edit -->` and
//! `<!-- end of generated: NAME -->`; `locklab report` rewrites it when it
//! writes this repository's `reports/`, and a test fails when one is stale.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::Report;
use super::verdicts::VerdictView;

/// One generated region: where, and what goes in it.
pub struct Region {
    /// The file, relative to the workspace.
    pub file: &'static str,
    /// The region's name in its markers.
    pub name: &'static str,
    /// What goes in it.
    content: Content,
    /// The path of `reports/matrix.md` from the file, for evidence links.
    link: &'static str,
    /// The heading level the region's headings start below.
    heading: &'static str,
}

/// What a region holds.
enum Content {
    /// A part of the verdicts ([`VerdictView::markdown`]'s `section`).
    Verdicts(&'static str),
    /// The readings of these scenario files (by file name), one table each
    /// ([`readings_markdown`]).
    Readings(&'static [&'static str]),
}

/// The user reports re-enacted (`scenarios/report-*.yaml`), in the
/// chapter's order.
const USER_REPORTS: &[&str] = &[
    "report-rails-32622",
    "report-authentik-23876",
    "report-flyway-2895",
    "report-airflow-helm-529",
    "report-prisma-12999",
    "report-mockforge-968",
    "report-oban-52",
];

/// The regions this repository has.
pub const REGIONS: &[Region] = &[
    Region {
        file: "README.md",
        name: "findings",
        content: Content::Verdicts("findings"),
        link: "reports/matrix.md",
        heading: "##",
    },
    Region {
        file: "docs/src/findings.md",
        name: "cards",
        content: Content::Verdicts("cards"),
        link: "../../reports/matrix.md",
        heading: "#",
    },
    Region {
        file: "docs/src/lock-libraries.md",
        name: "library-readings",
        content: Content::Readings(&["lock-library-release", "migrator-concurrent"]),
        link: "../../reports/matrix.md",
        heading: "##",
    },
    Region {
        file: "docs/src/lock-libraries.md",
        name: "report-readings",
        content: Content::Readings(USER_REPORTS),
        link: "../../reports/matrix.md",
        heading: "##",
    },
];

fn begin(name: &str) -> String {
    format!("<!-- generated: {name} by locklab report; do not edit -->")
}

fn end(name: &str) -> String {
    format!("<!-- end of generated: {name} -->")
}

impl Region {
    /// The region's content for `report`.
    ///
    /// # Errors
    /// A template error (a bug).
    pub fn render(&self, report: &Report) -> Result<String> {
        match self.content {
            Content::Verdicts(section) => VerdictView::of(report).markdown(section, self.link, self.heading),
            Content::Readings(families) => Ok(readings_markdown(report, families, self.heading)),
        }
    }

    /// `text` with this region's content replaced by `content`.
    ///
    /// # Errors
    /// The markers are missing, or out of order.
    pub fn replace(&self, text: &str, content: &str) -> Result<String> {
        let (b, e) = (begin(self.name), end(self.name));
        let (Some(i), Some(j)) = (text.find(&b), text.find(&e)) else {
            bail!(
                "{}: no generated region '{}' (the lines `{b}` and `{e}`)",
                self.file,
                self.name
            );
        };
        if j < i {
            bail!(
                "{}: the end of the generated region '{}' comes before its start",
                self.file,
                self.name
            );
        }
        Ok(format!("{}{b}\n{}\n{}", &text[..i], content.trim(), &text[j..]))
    }

    /// The region's current content in `text`, if it has the markers.
    pub fn current<'t>(&self, text: &'t str) -> Option<&'t str> {
        let (b, e) = (begin(self.name), end(self.name));
        let i = text.find(&b)? + b.len();
        let j = text.find(&e)?;
        (i <= j).then(|| text[i..j].trim())
    }
}

/// For each scenario file of `families` (by name), a heading, its source,
/// and a table of its readings: one row per distinct set of readings (and
/// status), with the columns that read it; `n/a` columns are listed under
/// the table. Read from `report`'s cells, never by hand.
fn readings_markdown(report: &Report, families: &[&str], heading: &str) -> String {
    use std::fmt::Write as _;
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let mut out = String::new();
    for family in families {
        let instances: Vec<&super::ScenarioInfo> = report.scenarios.iter().filter(|s| s.family == *family).collect();
        let Some(first) = instances.first() else {
            let _ = writeln!(out, "{heading}# {family}\n\n(not in this report)\n");
            continue;
        };
        let _ = writeln!(out, "{heading}# {family}\n");
        if let Some(src) = &first.source {
            let _ = writeln!(out, "Source: {}\n", cell(src));
        }
        for s in &instances {
            if instances.len() > 1 {
                let params: Vec<String> = s.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let _ = writeln!(out, "{heading}## {}\n", params.join(", "));
            }
            let mut rows: Vec<(Vec<String>, Vec<&str>)> = Vec::new();
            let mut not_applicable = Vec::new();
            for d in &report.drivers {
                let Some(r) = report.runs.iter().find(|r| r.scenario == s.name && r.driver == d.id) else {
                    continue;
                };
                let status = r.status();
                if status == crate::outcome::Status::NotApplicable {
                    not_applicable.push(d.id.as_str());
                    continue;
                }
                let mut key = vec![status.to_string()];
                for name in &s.observations {
                    key.push(
                        r.observations
                            .iter()
                            .find(|o| &o.name == name)
                            .map_or_else(|| "—".to_owned(), |o| o.reading().to_string()),
                    );
                }
                match rows.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, cols)) => cols.push(d.id.as_str()),
                    None => rows.push((key, vec![d.id.as_str()])),
                }
            }
            let _ = writeln!(
                out,
                "| columns | outcome | {} |",
                s.observations
                    .iter()
                    .map(|o| format!("`{o}`"))
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
            let _ = writeln!(out, "| --- | --- |{}", " --- |".repeat(s.observations.len()));
            for (key, cols) in &rows {
                let _ = writeln!(
                    out,
                    "| {} | {} |",
                    cols.join(", "),
                    key.iter().map(|v| cell(v)).collect::<Vec<_>>().join(" | ")
                );
            }
            if !not_applicable.is_empty() {
                let _ = writeln!(out, "\nn/a: {}.", not_applicable.join(", "));
            }
            let _ = writeln!(out);
        }
    }
    out
}

/// Rewrites every region under `root` whose content differs from what
/// `report` says; returns the files it changed, each once.
///
/// # Errors
/// A file that cannot be read or written, or lacks its markers.
pub fn sync(report: &Report, root: &Path) -> Result<Vec<PathBuf>> {
    let mut changed = Vec::new();
    for r in REGIONS {
        let path = root.join(r.file);
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let content = r.render(report)?;
        if r.current(&text) == Some(content.trim()) {
            continue;
        }
        std::fs::write(&path, r.replace(&text, &content)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        // (A file with two regions that changed is named once.)
        if !changed.contains(&path) {
            changed.push(path);
        }
    }
    Ok(changed)
}

/// The regions under `root` that differ from what `report` says, as
/// `FILE: region NAME`.
///
/// # Errors
/// A file that cannot be read, or a template error.
pub fn stale(report: &Report, root: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for r in REGIONS {
        let text = std::fs::read_to_string(root.join(r.file))?;
        if r.current(&text) != Some(r.render(report)?.trim()) {
            out.push(format!("{}: region {}", r.file, r.name));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_is_replaced_between_its_markers_only() {
        let r = &REGIONS[0];
        let text = format!("before\n{}\nold\n{}\nafter\n", begin(r.name), end(r.name));
        let new = r.replace(&text, "new\n").unwrap();
        assert_eq!(new, format!("before\n{}\nnew\n{}\nafter\n", begin(r.name), end(r.name)));
        assert_eq!(r.current(&new), Some("new"));
        assert!(r.replace("no markers", "x").is_err());
        assert!(r.current("no markers").is_none());
    }
}
