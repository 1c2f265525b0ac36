//! The validator's type: it checks one instance of a file and collects
//! every error with its position. Its rules are `impl` blocks in the files
//! beside this one; what one step kind alone checks is in that kind's file
//! (`scenario/steps/`), which records its errors here (and reads what the
//! validator knows of the steps so far, `walk.rs`).

use std::path::Path;

use crate::scenario::{Pos, ScenarioError};

/// Checks one instance of a file and builds its
/// [`crate::scenario::Scenario`], collecting every error with its position.
pub(crate) struct Validator<'a> {
    /// The file, for error positions.
    pub(crate) file: &'a Path,
    /// Errors found so far.
    pub(crate) errors: Vec<ScenarioError>,
    /// This instance's parameters.
    pub(crate) params: &'a [(String, String)],
}

impl Validator<'_> {
    /// Records an error at `pos`.
    pub(crate) fn err(&mut self, pos: Pos, message: impl Into<String>) {
        self.errors.push(ScenarioError {
            file: self.file.to_owned(),
            pos,
            message: message.into(),
        });
    }
}
