//! `locklab schema [scenario|protocol|property]`: the scenario format's,
//! the driver protocol's or the property files' JSON Schema on stdout.

use std::process::ExitCode;

use anyhow::Result;
use locklab::scenario;

use crate::cli::SchemaOf;
use crate::output::emit;

/// Prints the JSON Schema of scenario files (as shipped in
/// `scenarios/scenario.schema.json`), of the driver protocol (as shipped
/// in `drivers/adapters/protocol.schema.json`) or of property files (as
/// shipped in `properties/property.schema.json`).
///
/// # Errors
/// Serialising the schema or writing to stdout failed.
pub fn schema(of: SchemaOf) -> Result<ExitCode> {
    let schema = match of {
        SchemaOf::Scenario => scenario::json_schema(),
        SchemaOf::Protocol => locklab_drivers::external::protocol::schema(),
        SchemaOf::Property => locklab::properties::json_schema(),
    };
    emit(&format!("{}\n", serde_json::to_string_pretty(&schema)?))?;
    Ok(ExitCode::SUCCESS)
}
