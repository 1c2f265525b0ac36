//! `locklab adapter check -- CMD ARGS…`: the protocol's conformance check
//! of an adapter ([`locklab::conformance`]), printed as it goes.

use std::process::ExitCode;

use anyhow::Result;
use locklab::server::{Server, ServerOptions};
use locklab_drivers::Driver as _;

use crate::cli::AdapterCheckArgs;
use crate::output::emit;

/// Starts the server the arguments ask for, runs every check against the
/// adapter, prints each as `✓ name` or `✗ name` and what is wrong, and a
/// count; exit 1 when a check failed.
///
/// # Errors
/// The server does not start; the adapter cannot be started; the check's
/// database cannot be made.
pub fn check(args: &AdapterCheckArgs) -> Result<ExitCode> {
    let (command, dir) = match &args.column {
        None => (args.command.clone(), std::env::current_dir()?),
        Some(id) => column_command(id)?,
    };
    let options = ServerOptions {
        dsn: args.dsn.clone(),
        ..ServerOptions::new(args.backend.0, args.pg)
    };
    let server = Server::start(&options)?;
    emit(&format!(
        "locklab adapter check: {} (on {})\n",
        command.join(" "),
        server.describe()
    ))?;
    let mut print = |f: &locklab::conformance::Finding| {
        let line = match &f.wrong {
            None => format!("  ✓ {}\n", f.check),
            Some(why) => format!("  ✗ {}\n      {why}\n", f.check),
        };
        let _ = emit(&line);
    };
    let findings = locklab::conformance::check(
        &server,
        &command,
        &dir,
        std::time::Duration::from_secs_f64(args.answer_timeout),
        &mut print,
    )?;
    let failed: Vec<&str> = findings
        .iter()
        .filter(|f| f.wrong.is_some())
        .map(|f| f.check.as_str())
        .collect();
    if failed.is_empty() {
        emit(&format!("{} of {} checks passed\n", findings.len(), findings.len()))?;
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "locklab adapter check: {} of {} checks failed: {}",
            failed.len(),
            findings.len(),
            failed.join(", ")
        );
        Ok(ExitCode::from(1))
    }
}

/// `--column ID`: the column's adapter command, installed, and its base
/// directory.
///
/// # Errors
/// An unknown id or a Rust column (the out-of-process ids are listed); a
/// column that cannot run here (its missing toolchain and the command that
/// installs it); a failed install.
fn column_command(id: &str) -> Result<(Vec<String>, std::path::PathBuf)> {
    use locklab_drivers::external::{declaration, declared};
    let Some(spec) = declaration(id) else {
        let ids: Vec<String> = declared().iter().map(|d| d.info().id.to_owned()).collect();
        anyhow::bail!(
            "no out-of-process column '{id}' (locklab's: {}; yours come from --columns FILE)",
            ids.join(", ")
        );
    };
    if let Some(why) = spec.unavailable() {
        anyhow::bail!("{why}");
    }
    let command = spec.installed_command().map_err(anyhow::Error::msg)?;
    Ok((command, spec.base_dir()))
}
