//! `locklab schema [scenario|protocol]`: the scenario format's or the
//! driver protocol's JSON Schema on stdout.

use std::process::ExitCode;

use anyhow::Result;
use locklab::scenario;

use crate::cli::SchemaOf;
use crate::output::emit;

/// Prints the JSON Schema of scenario files (as shipped in
/// `scenarios/scenario.schema.json`) or of the driver protocol (as shipped
/// in `drivers/adapters/protocol.schema.json`).
///
/// # Errors
/// Serialising the schema or writing to stdout failed.
pub fn schema(of: SchemaOf) -> Result<ExitCode> {
    let schema = match of {
        SchemaOf::Scenario => scenario::json_schema(),
        SchemaOf::Protocol => locklab_drivers::external::protocol::schema(),
    };
    emit(&format!("{}\n", serde_json::to_string_pretty(&schema)?))?;
    Ok(ExitCode::SUCCESS)
}
