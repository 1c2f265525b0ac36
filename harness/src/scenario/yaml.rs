//! Errors of the YAML reader, reworded for scenario authors.

use std::path::Path;

use super::{Pos, ScenarioError};

/// A serde-saphyr error as a located [`ScenarioError`] in the file's terms:
/// the parser's budget, untagged enums and number types said in words.
pub(crate) fn yaml_error(path: &Path, e: &serde_saphyr::Error) -> ScenarioError {
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
                "the YAML is too large: more {kind} than a scenario file may have (aliases count as what they expand to)"
            ),
            "depth" => "the YAML is nested too deeply for a scenario file".to_owned(),
            _ => format!("the YAML exceeds the parser's limit on {kind} for a scenario file"),
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
    for (ty, says) in [
        (
            "RawParams",
            "'params' must be a map of lists ({key: [1, 2]}) or a list of maps ([{key: 1}, {key: 2}])",
        ),
        ("OneOrMany", "'blocked' must be an actor name or a list of actor names"),
        (
            "RowsExpect",
            "'rows' must be a row count or a list of rows (lists of values)",
        ),
    ] {
        if message.contains(&format!("untagged enum {ty}")) {
            message = says.to_owned();
        }
    }
    if message == "recursion limit exceeded" {
        message = "the YAML is nested too deeply for a scenario file".to_owned();
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
        message = "the file holds several YAML documents (`---`); a scenario file holds one".to_owned();
    }
    ScenarioError {
        file: path.to_owned(),
        pos,
        message: message.trim().to_owned(),
    }
}
