//! `locklab doctor [DIR]`: the project's stack, read from its lockfiles
//! and pooler configurations ([`locklab::doctor`]), mapped onto the
//! report's columns, with their verdicts and cards, what could not be
//! mapped, and `locklab try` for the exact versions of its Rust pool crates.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use locklab::doctor::map::{Closeness, Mapping};
use locklab::properties::Scope;
use locklab::report::verdicts::{Card, VerdictView};

use crate::cli::{DoctorArgs, TryArgs};
use crate::execute::execute;
use crate::gate::{check_required, gate};
use crate::output::emit;

/// Where the verdicts come from with `--run`: not a file.
const THIS_RUN: &str = "this run";

/// Reads the project, maps it, prints the mapping and the verdicts (text
/// or `--json`), runs `try` for the offers with `--try`, and exits 1 when
/// a mapped column violates a required property (as `verdict` does).
///
/// # Errors
/// A project that cannot be read (no lockfile, a malformed one, an invalid
/// pooler setting: one line naming the file and line); a `--require` id no
/// property has; a report that does not load; as [`execute`] with `--run`.
pub fn doctor(dir: &Path, args: &DoctorArgs) -> Result<ExitCode> {
    check_required(&args.gate)?;
    let project = locklab::doctor::read(&args.project)?;
    let from = args
        .from
        .clone()
        .unwrap_or_else(|| locklab::server::workspace_root().join("reports/matrix.json"));
    let committed = locklab::judge::load(&from)?;
    let mapping = locklab::doctor::map::map(&project, &committed.drivers);
    if args.run_now && mapping.columns.is_empty() {
        eprintln!("locklab doctor: --run: no column tests your stack, so nothing runs; the mapping follows");
    }
    let (report, source) = if args.run_now && !mapping.columns.is_empty() {
        let mut run = args.run.clone();
        run.driver = mapping.columns.clone();
        eprintln!("locklab doctor: running {} column(s) of your stack", run.driver.len());
        (execute(dir, &run)?, THIS_RUN.to_owned())
    } else {
        (committed, from.display().to_string())
    };
    let selected = |d: &str| mapping.columns.iter().any(|c| c == d);
    let gate = gate(&report, &args.gate, &selected);
    let view = VerdictView::of(&report).only(&mapping.columns);
    if args.json {
        let cards: Vec<&Card> = view.servers.iter().flat_map(|s| &s.cards).collect();
        let verdicts: Vec<serde_json::Value> = report
            .verdicts
            .iter()
            .map(|server| {
                serde_json::json!({
                    "server": server.server,
                    "properties": server.properties.iter().filter(|p| p.scope == Scope::Column).map(|p| {
                        serde_json::json!({
                            "id": p.id,
                            "severity": p.severity.as_str(),
                            "columns": p.columns.iter().filter(|c| selected(&c.driver)).map(|c| {
                                serde_json::json!({"column": c.driver, "verdict": c.verdict.as_str()})
                            }).collect::<Vec<_>>(),
                        })
                    }).collect::<Vec<_>>(),
                })
            })
            .collect();
        emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&serde_json::json!({
                "project": args.project.display().to_string(),
                "report": source,
                "files": project.files,
                "stack": mapping.stack,
                "columns": mapping.columns,
                "not_mapped": mapping.not_mapped,
                "try": mapping.tries,
                "verdicts": verdicts,
                "cards": cards,
                "required_not_met": gate.failures,
            }))?
        ))?;
    } else {
        emit(&text(args, &project.files, &mapping, &view, &source))?;
    }
    if args.try_versions {
        for offer in &mapping.tries {
            eprintln!("locklab doctor: {}", offer.command);
            let try_args = TryArgs {
                crates: vec![format!("{}@{}", offer.krate, offer.version)],
                run: args.run.clone(),
                dir: None,
                build_only: false,
                offline: false,
                full: false,
            };
            let code = crate::try_cmd::try_crates(dir, &try_args)?;
            eprintln!("locklab doctor: `{}` ended with {code:?}", offer.command);
        }
    }
    Ok(gate.exit_code(&args.gate, "doctor"))
}

/// The text `doctor` prints.
fn text(args: &DoctorArgs, files: &[String], mapping: &Mapping, view: &VerdictView, source: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Your stack: {}\n", args.project.display());
    let _ = writeln!(out, "Read: {}. Verdicts from {source}.\n", files.join(", "));
    let _ = writeln!(out, "## What locklab runs for it\n");
    if mapping.stack.is_empty() {
        let _ = writeln!(
            out,
            "Nothing: no package or pooler here has a column in locklab (see below for what was found).\n"
        );
    }
    for s in &mapping.stack {
        let columns = if s.columns.is_empty() {
            String::new()
        } else {
            format!(
                " → {}",
                s.columns
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let closeness = match s.closeness {
            Closeness::Exact => "exact",
            Closeness::Nearest => "nearest",
            Closeness::Library => "a library locklab runs",
        };
        let _ = writeln!(out, "- {} ({}){columns} [{closeness}]", s.found, s.source);
        if let Some(d) = &s.difference {
            let _ = writeln!(out, "  - {d}");
        }
    }
    if !mapping.tries.is_empty() {
        let _ = writeln!(out, "\n## Your exact versions\n");
        for t in &mapping.tries {
            let _ = writeln!(
                out,
                "- `{}`: builds locklab's columns on {} {} and shows what changes (or `locklab doctor --try`)",
                t.command, t.krate, t.version
            );
        }
    }
    if !mapping.not_mapped.is_empty() {
        let _ = writeln!(out, "\n## Not mapped\n");
        for n in &mapping.not_mapped {
            let _ = writeln!(out, "- {} ({}): {}", n.what, n.source, n.why);
        }
    }
    for server in &view.servers {
        if server.cards.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n## Verdicts ({})\n", server.version);
        for card in &server.cards {
            let _ = writeln!(
                out,
                "### `{}`: {} — {}\n",
                card.driver, card.crate_line, card.configuration
            );
            let _ = writeln!(
                out,
                "{} unsafe, {} surprising, {} informational violated; {} hold, {} hold where tried, {} n/a.\n",
                card.unsafe_count,
                card.surprising_count,
                card.informational_count,
                card.holds_count,
                card.partly_count,
                card.na_count
            );
            for line in &card.lines {
                let _ = writeln!(
                    out,
                    "- {} **{}** ({}, {}){}",
                    line.symbol,
                    line.id,
                    line.severity,
                    line.verdict,
                    line.facts
                        .first()
                        .map(|f| format!(": {} (`{}`)", f.text, f.scenario))
                        .unwrap_or_default()
                );
                if let Some(p) = &line.proven {
                    let _ = writeln!(out, "  - **Do:** {} ({})", p.action, p.proof);
                } else if let Some(a) = line.advice.first() {
                    let _ = writeln!(out, "  - **Do:** {a}");
                }
            }
            if !card.partly.is_empty() {
                let _ = writeln!(out, "- ◐ hold where tried: {}", card.partly.join("; "));
            }
            out.push('\n');
        }
    }
    // With `--run` the verdicts are this run's, with no file for `verdict
    // --from` to read: `verdict` without it runs the column too.
    let from = if source == THIS_RUN {
        String::new()
    } else {
        format!(" --from {source}")
    };
    let _ = writeln!(
        out,
        "`locklab verdict{from} -d COLUMN` shows every property of a column; `--coverage` what decided each."
    );
    out
}
