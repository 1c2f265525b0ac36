//! `locklab schema`: the scenario format's JSON Schema on stdout.

use std::process::ExitCode;

use anyhow::Result;
use locklab::scenario;

use crate::output::emit;

/// Prints the JSON Schema of scenario files (as shipped in
/// `scenarios/scenario.schema.json`).
///
/// # Errors
/// Serialising the schema or writing to stdout failed.
pub fn schema() -> Result<ExitCode> {
    emit(&format!(
        "{}\n",
        serde_json::to_string_pretty(&scenario::json_schema())?
    ))?;
    Ok(ExitCode::SUCCESS)
}
