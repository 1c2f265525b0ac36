//! The lockfile readers: one file per ecosystem, each a [`Reader`] per
//! file name in [`READERS`].

mod cargo;
mod go;
mod jvm;
mod node;
mod python;
mod ruby;

use std::path::Path;

use super::{Ecosystem, LineError};

/// A package as a reader found it (the file is added by [`super::read`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Package {
    /// As the ecosystem spells it.
    pub name: String,
    /// The locked version.
    pub version: Option<String>,
    /// Why there is no version, when there is none.
    pub unresolved: Option<String>,
    /// Its line (1-based), where known.
    pub line: Option<usize>,
}

impl Package {
    /// A package at `version`, at `line`.
    pub fn locked(name: impl Into<String>, version: impl Into<String>, line: Option<usize>) -> Package {
        Package {
            name: name.into(),
            version: Some(version.into()),
            unresolved: None,
            line,
        }
    }
}

/// A reader of one kind of lockfile.
pub struct Reader {
    /// The ecosystem.
    pub ecosystem: Ecosystem,
    /// The file names it reads, for messages.
    pub names: &'static str,
    /// Whether a file of this name is one.
    pub matches: fn(&str) -> bool,
    /// Reads the file's text; the path is the file's, for a reader that
    /// also reads a file beside it (Cargo.lock's Cargo.toml).
    pub read: fn(&str, &Path) -> Result<Vec<Package>, LineError>,
}

/// Every lockfile `doctor` reads. Adding one: a reader in the ecosystem's
/// file and a line here.
pub const READERS: &[Reader] = &[
    Reader {
        ecosystem: Ecosystem::Cargo,
        names: "Cargo.lock",
        matches: |n| n == "Cargo.lock",
        read: cargo::cargo_lock,
    },
    Reader {
        ecosystem: Ecosystem::Python,
        names: "requirements*.txt",
        matches: |n| n.starts_with("requirements") && n.ends_with(".txt"),
        read: |text, _| python::requirements(text),
    },
    Reader {
        ecosystem: Ecosystem::Python,
        names: "poetry.lock",
        matches: |n| n == "poetry.lock",
        read: |text, _| python::toml_packages(text),
    },
    Reader {
        ecosystem: Ecosystem::Python,
        names: "uv.lock",
        matches: |n| n == "uv.lock",
        read: |text, _| python::toml_packages(text),
    },
    Reader {
        ecosystem: Ecosystem::Python,
        names: "Pipfile.lock",
        matches: |n| n == "Pipfile.lock",
        read: |text, _| python::pipfile_lock(text),
    },
    Reader {
        ecosystem: Ecosystem::Go,
        names: "go.mod",
        matches: |n| n == "go.mod",
        read: |text, _| go::go_mod(text),
    },
    Reader {
        ecosystem: Ecosystem::Npm,
        names: "package-lock.json",
        matches: |n| n == "package-lock.json",
        read: |text, _| node::package_lock(text),
    },
    Reader {
        ecosystem: Ecosystem::Npm,
        names: "yarn.lock",
        matches: |n| n == "yarn.lock",
        read: |text, _| node::yarn_lock(text),
    },
    Reader {
        ecosystem: Ecosystem::Npm,
        names: "pnpm-lock.yaml",
        matches: |n| n == "pnpm-lock.yaml",
        read: |text, _| node::pnpm_lock(text),
    },
    Reader {
        ecosystem: Ecosystem::Maven,
        names: "pom.xml",
        matches: |n| n == "pom.xml",
        read: |text, _| jvm::pom(text),
    },
    Reader {
        ecosystem: Ecosystem::Maven,
        names: "gradle.lockfile",
        matches: |n| n == "gradle.lockfile" || n.ends_with(".lockfile"),
        read: |text, _| jvm::gradle_lockfile(text),
    },
    Reader {
        ecosystem: Ecosystem::Ruby,
        names: "Gemfile.lock",
        matches: |n| n == "Gemfile.lock",
        read: |text, _| ruby::gemfile_lock(text),
    },
];

/// A TOML file's `[[package]]` tables with `name` and `version` (Cargo.lock,
/// poetry.lock, uv.lock), each at the line of its `name = "…"`.
///
/// # Errors
/// Malformed TOML (at its line), a package without a string `name` or `version`.
pub(super) fn toml_package_tables(text: &str) -> Result<Vec<Package>, LineError> {
    let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| LineError {
        line: e.span().map(|s| super::line_of(text, s.start)),
        message: format!("not TOML: {}", e.message()),
    })?;
    let Some(packages) = doc.get("package") else {
        return Ok(Vec::new());
    };
    let packages = packages.as_array().ok_or_else(|| LineError {
        line: super::line_containing(text, "package"),
        message: "`package` is not an array of tables ([[package]])".into(),
    })?;
    let mut out = Vec::new();
    let mut from = 0;
    for (i, p) in packages.iter().enumerate() {
        let field = |key: &str| p.get(key).and_then(|v| v.as_str());
        let (Some(name), Some(version)) = (field("name"), field("version")) else {
            return Err(LineError {
                line: nth_package_line(text, i),
                message: format!("[[package]] number {} has no string `name` and `version`", i + 1),
            });
        };
        // The line of this package's name, searched from the previous one.
        let needle = format!("name = \"{name}\"");
        let line = text[from..].find(&needle).map(|at| {
            from += at + needle.len();
            super::line_of(text, from)
        });
        out.push(Package::locked(name, version, line));
    }
    Ok(out)
}

/// The line of the `i`-th (0-based) `[[package]]` header.
fn nth_package_line(text: &str, i: usize) -> Option<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.trim() == "[[package]]")
        .nth(i)
        .map(|(n, _)| n + 1)
}
