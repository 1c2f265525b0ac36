//! `locklab merge`: the shards' `matrix.json` files put together into one
//! report (see `locklab::shard`).

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Result;

use crate::cli::MergeArgs;
use crate::output::{emit, exit_for};
use crate::run::summary;

/// Reads every shard file, merges them and writes the report's files into
/// `--out`; prints what it wrote and the summary. Exit code 1 when a merged
/// cell failed, as for `report` (a cell that varied is no failure).
///
/// # Errors
/// A file that cannot be read or is not a shard's `matrix.json`; shards that
/// do not make one whole matrix (see `locklab::report::merge`); files that
/// cannot be written.
pub fn merge(args: &MergeArgs) -> Result<ExitCode> {
    let mut reports = Vec::new();
    for f in &args.files {
        reports.push((f.display().to_string(), locklab::judge::load(f)?));
    }
    let shards = reports.len();
    let report = locklab::judge::merge(reports)?;
    let mut text = String::new();
    let format: Vec<locklab::report::Format> = args.format.iter().map(|w| w.0).collect();
    for p in report.write(&args.out, &format)? {
        let _ = writeln!(text, "wrote {}", p.display());
    }
    let _ = writeln!(text, "merged {shards} shard(s): {} cell(s)", report.runs.len());
    text.push_str(&summary(&report));
    emit(&text)?;
    Ok(exit_for(&report))
}
