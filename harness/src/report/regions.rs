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
    /// Which part of the verdicts ([`VerdictView::markdown`]'s `section`).
    section: &'static str,
    /// The path of `reports/matrix.md` from the file, for evidence links.
    link: &'static str,
    /// The heading level the region's headings start below.
    heading: &'static str,
}

/// The regions this repository has.
pub const REGIONS: &[Region] = &[
    Region {
        file: "README.md",
        name: "findings",
        section: "findings",
        link: "reports/matrix.md",
        heading: "##",
    },
    Region {
        file: "docs/src/findings.md",
        name: "cards",
        section: "cards",
        link: "../../reports/matrix.md",
        heading: "#",
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
        VerdictView::of(report).markdown(self.section, self.link, self.heading)
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

/// Rewrites every region under `root` whose content differs from what
/// `report` says; returns the files it changed.
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
        changed.push(path);
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
