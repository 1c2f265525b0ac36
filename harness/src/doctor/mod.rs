//! `locklab doctor`: a project's own stack, read from its lockfiles and
//! pooler configurations, mapped onto locklab's columns, so that its
//! verdicts and cards answer for that stack.
//!
//! Data flows one way: [`read`] finds the files of a directory and reads
//! each with the reader its name calls for ([`lockfiles::READERS`],
//! [`poolers::READERS`]) into [`Found`] packages and [`PoolerConfig`]s;
//! [`map::map`] puts them against a report's columns (exact, or the
//! nearest with the difference said) by the table of [`packages`]; the
//! binary's `doctor` command prints the mapping with the columns' verdicts
//! and cards.

pub mod lockfiles;
pub mod map;
pub mod packages;
pub mod poolers;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// A package ecosystem, by its lockfiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ecosystem {
    /// Rust: `Cargo.lock`.
    Cargo,
    /// Python: `requirements*.txt`, `poetry.lock`, `uv.lock`, `Pipfile.lock`.
    Python,
    /// Go: `go.mod`, `go.sum`.
    Go,
    /// JavaScript: `package-lock.json`, `yarn.lock`, `pnpm-lock.yaml`.
    Npm,
    /// Java: Maven's `pom.xml`, Gradle's `gradle.lockfile`.
    Maven,
    /// Ruby: `Gemfile.lock`.
    Ruby,
}

impl Ecosystem {
    /// Its name in output: `cargo`, `python`, ….
    pub fn as_str(self) -> &'static str {
        match self {
            Ecosystem::Cargo => "cargo",
            Ecosystem::Python => "python",
            Ecosystem::Go => "go",
            Ecosystem::Npm => "npm",
            Ecosystem::Maven => "maven",
            Ecosystem::Ruby => "ruby",
        }
    }
}

/// A package a lockfile names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Found {
    /// Its ecosystem.
    pub ecosystem: Ecosystem,
    /// Its name as the ecosystem spells it (`deadpool-postgres`,
    /// `github.com/jackc/pgx/v5`, `com.zaxxer:HikariCP`).
    pub name: String,
    /// The locked version, or `None` when the file does not pin one (a
    /// requirements line with a range, a Maven version from a parent or BOM).
    pub version: Option<String>,
    /// Why there is no version, when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unresolved: Option<String>,
    /// The file, relative to the project directory.
    pub file: String,
    /// Its line (1-based), where the reader knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
}

/// A pooler's configuration file, read for what decides its columns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PoolerConfig {
    /// The pooler: `pgbouncer`, `pgpool`, `pgagroal`, `odyssey`.
    pub pooler: &'static str,
    /// The file, relative to the project directory.
    pub file: String,
    /// The pool mode (`session`, `transaction`, `statement`, pgagroal's
    /// `performance`; Pgpool-II's `connection_cache` as `session` when on,
    /// `none` when off), with the line it was read from (`None`: the
    /// pooler's default).
    pub mode: String,
    /// The line the mode was read from; `None` for the pooler's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode_line: Option<usize>,
    /// What the pooler sends at check-in, as the file sets it (`None`: the
    /// pooler's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_query: Option<String>,
    /// PgBouncer's `server_reset_query_always` (also in transaction mode).
    pub reset_always: bool,
    /// For a setting per database or pool (PgBouncer's `[databases]`,
    /// Odyssey's `database` blocks): whose it is; `None` for the pooler's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The settings in the file that `doctor` does not read: `name (line N)`.
    pub not_read: Vec<String>,
}

/// A line of a file `doctor` read and cannot make sense of: a malformed
/// lockfile or an invalid value of a setting it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileError {
    /// The file.
    pub file: PathBuf,
    /// Its line (1-based), where known.
    pub line: Option<usize>,
    /// What is wrong, in one line.
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

impl std::error::Error for FileError {}

/// What a project directory holds, as `doctor` read it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Project {
    /// The files read, relative to the directory, in the order read.
    pub files: Vec<String>,
    /// The packages the lockfiles name (all of them, mapped or not).
    pub packages: Vec<Found>,
    /// The pooler configurations.
    pub poolers: Vec<PoolerConfig>,
}

/// Directories `doctor` does not descend into: dependencies, build
/// outputs, version control.
const SKIPPED_DIRS: &[&str] = &[
    ".git",
    "target",
    "node_modules",
    ".venv",
    "venv",
    "vendor",
    "build",
    "dist",
    ".cache",
    ".gradle",
];

/// How deep below the project directory `doctor` looks for files (a
/// monorepo's `services/api/Cargo.lock`, a `deploy/pgbouncer.ini`).
const MAX_DEPTH: usize = 4;

/// Reads the project in `dir`: every lockfile and pooler configuration in
/// it or up to [`MAX_DEPTH`] directories below (not in [`SKIPPED_DIRS`]),
/// in path order.
///
/// # Errors
/// A [`FileError`] for `dir` itself not readable, a file that cannot
/// be read or is malformed (naming its line), a pooler setting with an
/// invalid value, or a directory with none of the files `doctor` reads.
pub fn read(dir: &Path) -> Result<Project, FileError> {
    let mut files = Vec::new();
    walk(dir, 0, &mut files)?;
    files.sort();
    let mut project = Project::default();
    for path in files {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let lockfile = lockfiles::READERS.iter().find(|r| (r.matches)(name));
        let pooler = poolers::READERS.iter().find(|r| (r.matches)(name));
        if lockfile.is_none() && pooler.is_none() {
            continue;
        }
        let rel = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).map_err(|e| FileError {
            file: path.clone(),
            line: None,
            message: format!("cannot read it: {e}"),
        })?;
        let at = |line: Option<usize>, message: String| FileError {
            file: path.clone(),
            line,
            message,
        };
        if let Some(r) = lockfile {
            let found = (r.read)(&text, &path).map_err(|e| at(e.line, e.message))?;
            project.packages.extend(found.into_iter().map(|p| Found {
                ecosystem: r.ecosystem,
                name: p.name,
                version: p.version,
                unresolved: p.unresolved,
                file: rel.clone(),
                line: p.line,
            }));
        } else if let Some(r) = pooler {
            let configs = (r.read)(&text).map_err(|e| at(e.line, e.message))?;
            project
                .poolers
                .extend(configs.into_iter().map(|c| PoolerConfig { file: rel.clone(), ..c }));
        }
        project.files.push(rel);
    }
    if project.files.is_empty() {
        return Err(FileError {
            file: dir.to_path_buf(),
            line: None,
            message: format!(
                "no lockfile or pooler configuration here or up to {MAX_DEPTH} directories below (doctor reads {})",
                lockfiles::READERS
                    .iter()
                    .map(|r| r.names)
                    .chain(poolers::READERS.iter().map(|r| r.names))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    Ok(project)
}

/// Collects the files of `dir` and of its subdirectories down to
/// [`MAX_DEPTH`]. Only the project directory itself must be readable: a
/// subdirectory that is not (a database volume another user owns, say) is
/// passed over, as dependencies and build outputs are.
fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<(), FileError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(_) if depth > 0 => return Ok(()),
        Err(e) => {
            return Err(FileError {
                file: dir.to_path_buf(),
                line: None,
                message: format!("cannot read the directory: {e}"),
            });
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if depth < MAX_DEPTH && !SKIPPED_DIRS.contains(&name.as_ref()) && !name.starts_with('.') {
                walk(&path, depth + 1, out)?;
            }
        } else if kind.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

/// A reader's error: the line (1-based) where known, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    /// The line.
    pub line: Option<usize>,
    /// What is wrong, in one line.
    pub message: String,
}

impl LineError {
    /// An error at `line`.
    pub fn at(line: usize, message: impl Into<String>) -> LineError {
        LineError {
            line: Some(line),
            message: message.into(),
        }
    }
}

/// The 1-based line of byte offset `offset` in `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The first line (1-based) of `text` that contains `needle`.
pub fn line_containing(text: &str, needle: &str) -> Option<usize> {
    text.lines().position(|l| l.contains(needle)).map(|i| i + 1)
}
