//! Errors located in a file: [`Pos`], [`FileError`] (`FILE:LINE:COLUMN:
//! message`), [`yaml_error`], which words a YAML reader's error for the
//! file's author, and [`yaml_files`], the files a directory of them holds.

use std::path::{Path, PathBuf};

/// A position in a file: 1-based line and column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
}

impl Pos {
    /// The position of a serde-saphyr location.
    pub fn of(loc: &serde_saphyr::Location) -> Pos {
        Pos {
            line: loc.line(),
            column: loc.column(),
        }
    }
}

/// An error in a file (a scenario file, a keys file), with the place it was
/// found: shown `FILE:LINE:COLUMN: message`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}:{}:{}: {message}", file.display(), pos.line, pos.column)]
pub struct FileError {
    /// The file.
    pub file: PathBuf,
    /// Where in it.
    pub pos: Pos,
    /// What is wrong, in one sentence.
    pub message: String,
}

impl FileError {
    /// An error about the whole file (or directory) `file`, placed at 1:1.
    pub fn at_start(file: &Path, message: impl Into<String>) -> FileError {
        FileError {
            file: file.to_owned(),
            pos: Pos { line: 1, column: 1 },
            message: message.into(),
        }
    }
}

/// A serde-saphyr error as a located [`FileError`] in the file's terms: the
/// parser's budget, untagged enums and number types said in words. `what`
/// names the kind of file in messages (`scenario file`); `hints` maps an
/// untagged enum's type name to the sentence said instead of serde's
/// "did not match any variant of untagged enum T".
pub fn yaml_error(path: &Path, e: &serde_saphyr::Error, what: &str, hints: &[(&str, &str)]) -> FileError {
    let pos = e
        .location()
        .map(|l| Pos::of(&l))
        .filter(|p| p.line > 0)
        .unwrap_or(Pos { line: 1, column: 1 });
    let opts = serde_saphyr::render_options! { snippets: serde_saphyr::SnippetMode::Off };
    let mut message = e.render_with_options(opts);
    // The parser's resource budget (an alias bomb, absurd nesting): say what
    // was too much, once, without the parser's internals.
    if let Some(rest) = message.strip_prefix("budget breached: ") {
        // e.g. "Nodes { nodes: 250001 }", "Depth { depth: 2001 }".
        let kind = rest.split([' ', '{']).next().unwrap_or("size").to_lowercase();
        message = match kind.as_str() {
            "nodes" | "aliases" | "anchors" => format!(
                "the YAML is too large: more {kind} than a {what} may have (aliases count as what they expand to)"
            ),
            "depth" => format!("the YAML is nested too deeply for a {what}"),
            _ => format!("the YAML exceeds the parser's limit on {kind} for a {what}"),
        };
    }
    // The plain rendering ends with " at line L, column C"; we print that in front.
    if let Some(i) = message.rfind(" at line ") {
        message.truncate(i);
    }
    // Advice meant for programs embedding the parser, not for scenario authors.
    if let Some(i) = message.find(", set DuplicateKeyPolicy") {
        message.truncate(i);
    }
    // serde's wording for the either-or fields, in the file's terms.
    for (ty, says) in hints {
        if message.contains(&format!("untagged enum {ty}")) {
            message = (*says).to_owned();
        }
    }
    if message == "recursion limit exceeded" {
        message = format!("the YAML is nested too deeply for a {what}");
    }
    if message == "invalid floating point" {
        message = "expected a number".to_owned();
    }
    if message == "invalid boolean" {
        message = "expected true or false".to_owned();
    }
    // "invalid i64" and the like: say it in words.
    if let Some(ty) = message.strip_prefix("invalid ")
        && matches!(
            ty,
            "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "i128" | "u128"
        )
    {
        message = if ty == "i64" {
            // Also what a whole number beyond i64 gets.
            "expected a whole number (i64), from -9223372036854775808 to 9223372036854775807".to_owned()
        } else {
            format!("expected a whole number ({ty})")
        };
    }
    if message.starts_with("multiple YAML documents detected") {
        message = format!("the file holds several YAML documents (`---`); a {what} holds one");
    }
    FileError {
        file: path.to_owned(),
        pos,
        message: message.trim().to_owned(),
    }
}

/// The `*.yaml` files of `dir`, sorted by name (other files are left out);
/// `what` names them in errors (`scenario`, `property`).
///
/// # Errors
/// The directory cannot be read, or holds no `*.yaml` file (a wrong
/// directory, `.yml` files: nothing to load is a mistake, not a pass); the
/// error is placed at 1:1 of the directory.
pub fn yaml_files(dir: &Path, what: &str) -> Result<Vec<PathBuf>, FileError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| FileError::at_start(dir, format!("cannot read {what} directory: {e}")))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(FileError::at_start(
            dir,
            format!("no {what} files (*.yaml) in this directory"),
        ));
    }
    Ok(files)
}
