//! Errors of the YAML reader, reworded for scenario authors
//! ([`locklab_core::located::yaml_error`] with the scenario format's hints).

use std::path::Path;

use super::ScenarioError;

/// A serde-saphyr error as a located [`ScenarioError`] in the file's terms:
/// the parser's budget, untagged enums and number types said in words.
pub(crate) fn yaml_error(path: &Path, e: &serde_saphyr::Error) -> ScenarioError {
    locklab_core::located::yaml_error(path, e, "scenario file", HINTS)
}

/// What an untagged enum of the format expects, in words.
const HINTS: &[(&str, &str)] = &[
    (
        "RawParams",
        "'params' must be a map of lists ({key: [1, 2]}) or a list of maps ([{key: 1}, {key: 2}])",
    ),
    ("OneOrMany", "'blocked' must be an actor name or a list of actor names"),
    (
        "RowsExpect",
        "'rows' must be a row count or a list of rows (lists of values)",
    ),
];
