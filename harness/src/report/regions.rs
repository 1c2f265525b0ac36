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
    /// Per product whose check-in a pooler column models, whether a
    /// session-level lock survives check-in ([`check_in_markdown`]).
    CheckIn,
    /// The pooler conformance kit's verdicts per pooler column
    /// ([`pooler_kit_markdown`]).
    PoolerKit,
    /// Per user's report re-enacted (a scenario with `report:`), the
    /// columns whose readings reproduce it ([`reproduced_markdown`]).
    Reproduced,
    /// The readings of every scenario with `report:`, one table each.
    UserReportReadings,
    /// Per unsafe column property the lock crate decides, each crate
    /// column's verdict next to its wrapped column's
    /// ([`lock_crate_markdown`]).
    LockCrate,
}

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
        content: Content::Readings(&[
            "lock-library-release",
            "migrator-concurrent",
            "rails-migrator-concurrent",
        ]),
        link: "../../reports/matrix.md",
        heading: "##",
    },
    Region {
        file: "docs/src/lock-libraries.md",
        name: "guard-readings",
        content: Content::Readings(&["lock-guard-api", "lock-guard-deferred-unlock"]),
        link: "../../reports/matrix.md",
        heading: "##",
    },
    Region {
        file: "docs/src/lock-libraries.md",
        name: "queue-readings",
        content: Content::Readings(&["job-queue-worker", "job-queue-scheduler", "job-queue-registration"]),
        link: "../../reports/matrix.md",
        heading: "##",
    },
    Region {
        file: "docs/src/poolers.md",
        name: "check-in",
        content: Content::CheckIn,
        link: "../../reports/matrix.md",
        heading: "##",
    },
    Region {
        file: "docs/src/poolers.md",
        name: "pooler-kit",
        content: Content::PoolerKit,
        link: "../../reports/matrix.md",
        heading: "##",
    },
    Region {
        file: "docs/src/lock-crate.md",
        name: "lock-crate-verdicts",
        content: Content::LockCrate,
        link: "../../reports/matrix.md",
        heading: "##",
    },
    Region {
        file: "docs/src/lock-crate.md",
        name: "lock-crate-readings",
        content: Content::Readings(&[
            "lock-crate-release",
            "lock-crate-bounded-wait",
            "lock-crate-acquire-dropped",
            "lock-crate-races",
            "lock-crate-statement-timeout-race",
            "lock-crate-refusal",
        ]),
        link: "../../reports/matrix.md",
        heading: "##",
    },
    Region {
        file: "docs/src/lock-libraries.md",
        name: "report-reproduced",
        content: Content::Reproduced,
        link: "../../reports/matrix.md",
        heading: "##",
    },
    Region {
        file: "docs/src/lock-libraries.md",
        name: "report-readings",
        content: Content::UserReportReadings,
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
            Content::CheckIn => Ok(check_in_markdown(report)),
            Content::PoolerKit => Ok(pooler_kit_markdown(report)),
            Content::Reproduced => Ok(reproduced_markdown(report)),
            Content::LockCrate => Ok(lock_crate_markdown(report)),
            Content::UserReportReadings => {
                let mut families: Vec<&str> = Vec::new();
                for s in report.scenarios.iter().filter(|s| s.report.is_some()) {
                    if !families.contains(&s.family.as_str()) {
                        families.push(&s.family);
                    }
                }
                Ok(readings_markdown(report, &families, self.heading))
            }
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

/// A table: per product and mode a pooler column models
/// (`locklab_drivers::models_of`), what it sends at check-in, the column,
/// and whether a session-level lock survives check-in there (the column's
/// verdict of `session-lock-released-on-return`, from its card in the
/// first server's verdicts), with the source and a link to the column's
/// card in the book's findings. Columns not in `report` are left out.
fn check_in_markdown(report: &Report) -> String {
    use std::fmt::Write as _;
    let view = VerdictView::of(report);
    let mut out = String::from(
        "| product, mode | at check-in it sends | modelled by | a session-level lock left at check-in | source |\n|---|---|---|---|---|\n",
    );
    let mut rows = 0;
    for card in view.servers.iter().take(1).flat_map(|s| &s.cards) {
        for m in &card.models {
            let lock = match m.lock {
                "survives" => "**survives** ✗",
                "released" => "released ✓",
                _ => "not decided ?",
            };
            let _ = writeln!(
                out,
                "| {}, {} | {} | [`{}`](findings.md#{}) (its card) | {lock} | {} |",
                m.product,
                m.mode,
                m.sends.replace('|', "\\|"),
                card.driver,
                card.driver,
                m.source.replace('|', "\\|"),
            );
            rows += 1;
        }
    }
    if rows == 0 {
        return "(no column of this report models another product's check-in)".into();
    }
    out
}

/// The pooler conformance kit (the scenarios tagged `pooler`) as
/// `pooler-check` judges it, for every pooler column of `report` without a
/// client-side pool: a row per column, a column per property its cells
/// decide (column-scope properties with a deciding cell of the kit), the
/// mark of the first server's verdict. What `locklab pooler-check
/// --column ID` prints, from the committed report.
fn pooler_kit_markdown(report: &Report) -> String {
    use std::fmt::Write as _;
    let kit: std::collections::BTreeSet<&str> = report
        .scenarios
        .iter()
        .filter(|s| s.tags.iter().any(|t| t == "pooler"))
        .map(|s| s.family.as_str())
        .collect();
    let Some(server) = report.verdicts.first() else {
        return "(no verdicts in this report)".into();
    };
    let family = |s: &str| s.split('[').next().unwrap_or(s).to_owned();
    let props: Vec<&crate::properties::PropertyVerdicts> = server
        .properties
        .iter()
        .filter(|p| p.scope == crate::properties::Scope::Column)
        .filter(|p| {
            p.columns
                .iter()
                .any(|c| c.evidence.iter().any(|e| kit.contains(family(&e.scenario).as_str())))
        })
        .collect();
    let columns: Vec<&crate::outcome::DriverColumn> = report
        .drivers
        .iter()
        .filter(|d| d.pooler.is_some() && !d.id.contains('+'))
        .collect();
    if props.is_empty() || columns.is_empty() {
        return "(no pooler column or no cell of the kit in this report)".into();
    }
    let mut out = String::from("| column | mode |");
    for p in &props {
        let _ = write!(out, " {} |", p.id);
    }
    out.push_str("\n|---|---|");
    out.push_str(&"---|".repeat(props.len()));
    out.push('\n');
    for d in columns {
        let _ = write!(out, "| `{}` | {} |", d.id, d.pooler.as_deref().unwrap_or(""));
        for p in &props {
            let mark = p.of(&d.id).map_or("", |v| v.verdict.symbol());
            let _ = write!(out, " {mark} |");
        }
        out.push('\n');
    }
    let _ = write!(
        out,
        "\nScenarios of the kit: {}.",
        kit.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
    );
    out
}

/// One row per scenario with `report:` (a user's report re-enacted): its
/// tracker, what the user saw, the readings that show it, and the columns
/// whose cell reads so ("reproduced through"), or that none does. A cell
/// whose repeats read differently is judged by its first run and marked
/// "(varies)"; `n/a` cells are left out.
fn reproduced_markdown(report: &Report) -> String {
    use std::fmt::Write as _;
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let mut out = String::from(
        "| scenario | the report | what the user saw | reproduced where | reproduced through | not reproduced through |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    for s in &report.scenarios {
        let Some(user) = &s.report else { continue };
        let (mut yes, mut no) = (Vec::new(), Vec::new());
        for d in &report.drivers {
            let Some(r) = report.runs.iter().find(|r| r.scenario == s.name && r.driver == d.id) else {
                continue;
            };
            let status = r.status();
            if status == crate::outcome::Status::NotApplicable {
                continue;
            }
            let readings: Vec<(String, crate::outcome::Reading)> =
                r.observations.iter().map(|o| (o.name.clone(), o.reading())).collect();
            let reproduced = user.reproduced_by(|name| readings.iter().find(|(n, _)| n == name).map(|(_, r)| r));
            let id = if status == crate::outcome::Status::Varies {
                format!("{} (varies)", d.id)
            } else {
                d.id.clone()
            };
            if reproduced { yes.push(id) } else { no.push(id) }
        }
        let through = |v: &[String]| if v.is_empty() { "none".to_owned() } else { v.join(", ") };
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} |",
            s.name,
            cell(&user.tracker),
            cell(&user.saw),
            cell(&user.condition()),
            through(&yes),
            through(&no)
        );
    }
    out
}

/// For each scenario file of `families` (by name), a heading, its source,
/// and a table of its readings: one row per distinct set of readings (and
/// status), with the columns that read it; `n/a` columns are listed under
/// the table. Read from `report`'s cells, never by hand.
/// Per unsafe column property that a cell of the lock crate decides (a
/// crate column's verdict is not n/a), a row: for each crate column
/// (`locklab_drivers::lock_crate::COLUMNS`) in the report, the wrapped
/// column's verdict (the same pool with the application's own raw SQL) and
/// the crate column's, as `✗ → ✓`. Then the properties every crate column
/// has as n/a, named.
fn lock_crate_markdown(report: &Report) -> String {
    use crate::properties::{Mark, Scope, Severity};
    use std::fmt::Write as _;
    let pairs: Vec<(&str, &str)> = locklab_drivers::lock_crate::COLUMNS
        .iter()
        .copied()
        .filter(|(c, _)| report.drivers.iter().any(|d| d.id == *c))
        .collect();
    let mut out = String::new();
    let Some(server) = report.verdicts.first() else {
        return "(this report has no verdicts)\n".to_owned();
    };
    if pairs.is_empty() {
        return "(this report has no column of the lock crate)\n".to_owned();
    }
    let mark = |p: &crate::properties::PropertyVerdicts, driver: &str| {
        p.columns.iter().find(|c| c.driver == driver).map(|c| c.verdict)
    };
    let _ = writeln!(
        out,
        "Each cell: the wrapped column's verdict (its pool or pooler, the application's own SQL) → the crate \
         column's (the same pool through pg-advisory-lock). ✓ holds · ◐ holds where tried · ✗ violated · – n/a · \
         ? undecided.\n"
    );
    let _ = writeln!(
        out,
        "| property | {} |",
        pairs
            .iter()
            .map(|(c, w)| format!("`{w}` → `{}`", c.trim_start_matches("pg-advisory-lock")))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(out, "|---|{}", "---|".repeat(pairs.len()));
    let mut not_decided = Vec::new();
    for p in server
        .properties
        .iter()
        .filter(|p| p.scope == Scope::Column && p.severity == Severity::Unsafe)
    {
        let decided = pairs
            .iter()
            .any(|(c, _)| mark(p, c).is_some_and(|m| m != Mark::NotApplicable));
        if !decided {
            not_decided.push(format!("`{}`", p.id));
            continue;
        }
        let cells: Vec<String> = pairs
            .iter()
            .map(|(c, w)| {
                let sym = |m: Option<Mark>| m.map_or("·", Mark::symbol);
                format!("{} → {}", sym(mark(p, w)), sym(mark(p, c)))
            })
            .collect();
        let _ = writeln!(out, "| `{}` | {} |", p.id, cells.join(" | "));
    }
    if !not_decided.is_empty() {
        let _ = writeln!(
            out,
            "\nNo cell of the crate decides (n/a on every crate column): {}. These are about a pool's own \
             behaviour under raw SQL, a pooler's pinning, a crash, or another library.",
            not_decided.join(", ")
        );
    }
    out
}

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
