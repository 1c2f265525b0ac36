//! `locklab verdict`: the properties judged per column, for a run or a
//! matrix.json, and the CI gate (`--require`, `--require-severity`).

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, bail};
use locklab::properties::Scope;
use locklab::report::verdicts::VerdictView;

use crate::cli::VerdictArgs;
use crate::execute::execute;
use crate::gate::{check_required, gate};
use crate::output::emit;

/// Prints the verdicts of a run of the selection (or of `--from`'s report)
/// for the selected columns, and exits 1 when a selected column violates a
/// required property (or a cell deciding one failed: undecided), naming the
/// property and the deciding cell; 0 otherwise. Server findings never fail
/// a column.
///
/// # Errors
/// A `--require` id no property has; a `--from` file that is not a
/// matrix.json; a `-d` column the report lacks; no verdicts (the property
/// files do not load); as [`execute`].
pub fn verdict(dir: &Path, args: &VerdictArgs) -> Result<ExitCode> {
    check_required(&args.gate)?;
    let report = match &args.from {
        Some(file) => locklab::judge::load(file)?,
        None => execute(dir, &args.run)?,
    };
    let drivers = &args.run.driver;
    for d in drivers {
        if !report.drivers.iter().any(|c| &c.id == d) {
            bail!(
                "-d {d}: no such column in {} (have: {})",
                args.from
                    .as_ref()
                    .map_or("this run".to_owned(), |f| f.display().to_string()),
                report
                    .drivers
                    .iter()
                    .map(|c| c.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    if report.verdicts.is_empty() {
        bail!("no verdicts: the report has no runs of a server");
    }
    let selected = |driver: &str| drivers.is_empty() || drivers.iter().any(|d| d == driver);
    let gate = gate(&report, &args.gate, &selected);
    if args.coverage {
        emit(&coverage(&report, drivers))?;
    } else if args.json {
        emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&serde_json::json!({
                "properties": report.properties,
                "verdicts": report.verdicts,
            }))?
        ))?;
    } else {
        let view = VerdictView::of(&report).only(drivers);
        emit(&view.markdown("all", "matrix.md", "#")?)?;
    }
    Ok(gate.exit_code(&args.gate, "verdict"))
}

/// `verdict --coverage`: per property and selected column, the verdict,
/// what it was tried across, not tried, and not applicable to the column,
/// and each deciding cell with its reading and where it stands.
fn coverage(report: &locklab::report::Report, drivers: &[String]) -> String {
    let selected = |driver: &str| drivers.is_empty() || drivers.iter().any(|d| d == driver);
    let mut out = String::new();
    for server in &report.verdicts {
        let _ = writeln!(out, "# What each verdict was tried across ({})\n", server.server);
        for p in server.properties.iter() {
            let declared = report.properties.iter().find(|q| q.id == p.id);
            let _ = writeln!(
                out,
                "## {} ({}, {})\n",
                p.id,
                p.severity.as_str(),
                match p.scope {
                    Scope::Column => "a column property",
                    Scope::Server => "a server property",
                }
            );
            if let Some(d) = declared {
                for (dim, applies) in &d.dimensions {
                    if let locklab::properties::Applies::DoesNotApply(why) = applies {
                        let _ = writeln!(out, "- {}: does not apply: {why}", dim.as_str());
                    }
                }
                if !d.witnesses.is_empty() {
                    let kinds: Vec<&str> = d.witnesses.iter().map(|k| k.as_str()).collect();
                    let _ = writeln!(out, "- decided by every recorded witness of: {}", kinds.join(", "));
                }
            }
            let _ = writeln!(
                out,
                "\n| column | verdict | tried across | not tried | deciding cells |\n|---|---|---|---|---|"
            );
            for c in p.columns.iter().filter(|c| selected(&c.driver)) {
                let cov = c.coverage.as_ref();
                let cells: Vec<String> = c
                    .evidence
                    .iter()
                    .map(|e| {
                        let mut at = Vec::new();
                        if let Some(n) = e.at.pool_size {
                            at.push(format!("pool {n}"));
                        }
                        at.extend(e.at.hand_back.iter().cloned());
                        at.extend(e.at.give_up.iter().cloned());
                        format!(
                            "`{}` · `{}`: {} ({}{})",
                            e.scenario,
                            e.record.as_deref().unwrap_or("status"),
                            e.reading,
                            e.reads.as_str(),
                            if at.is_empty() {
                                String::new()
                            } else {
                                format!("; {}", at.join(", "))
                            }
                        )
                    })
                    .collect();
                let na: Vec<String> = cov
                    .iter()
                    .flat_map(|c| &c.dimensions)
                    .flat_map(|d| d.not_applicable.iter().cloned())
                    .collect();
                let _ = writeln!(
                    out,
                    "| `{}` | {} {} | {} | {} | {} | {} |",
                    c.driver,
                    c.verdict.symbol(),
                    c.verdict.as_str(),
                    cov.map(|c| c.tried_text()).unwrap_or_default(),
                    cov.map(|c| c.untried_text()).unwrap_or_default(),
                    na.join(", "),
                    cells.join("<br>").replace('|', "\\|")
                );
            }
            out.push('\n');
        }
    }
    out
}
