//! `matrix.json`: the [`Report`] itself, serialised (the schema is in the
//! module documentation of [`crate::report`]).

use anyhow::Result;

use super::Report;

impl Report {
    /// The report as pretty JSON.
    ///
    /// # Errors
    /// Serialisation failure (not expected).
    pub fn to_json(&self) -> Result<String> {
        let mut v = serde_json::to_value(self)?;
        // Step-by-step detail is for diagnosing a failure; a passed run's
        // observations already carry what it measured (and the file stays small).
        if let Some(runs) = v.get_mut("runs").and_then(|r| r.as_array_mut()) {
            for run in runs {
                if run.get("failure").is_some_and(|f| f.is_null())
                    && let Some(o) = run.as_object_mut()
                {
                    o.remove("steps");
                }
            }
        }
        Ok(serde_json::to_string_pretty(&v)? + "\n")
    }
}
