//! [`Report`]: the matrix report of a [`crate::lab::Lab`]'s cells, judged by
//! the properties, as `locklab report` writes it.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::report::Format;

/// The matrix report of a run: its cells, the properties' verdicts per
/// column and the environment it ran in (docs/src/reports.md).
#[derive(Debug)]
pub struct Report(pub(crate) crate::report::Report);

impl Report {
    /// Writes the chosen formats into `dir` (created if missing):
    /// `matrix.json`, `matrix.md`, `index.html`; returns their paths.
    ///
    /// # Errors
    /// I/O errors, with the path.
    pub fn write(&self, dir: &Path, formats: &[Format]) -> Result<Vec<PathBuf>> {
        self.0.write(dir, formats)
    }
}
