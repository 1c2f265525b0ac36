//! The CI gate `verdict` and `doctor` share: which required properties a
//! selection of columns violates (or cannot be judged on), and which hold
//! only where tried.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::{Result, bail};
use locklab::properties::{Mark, Scope, Severity};
use locklab::report::Report;

use crate::cli::GateArgs;

/// Checks that every `--require` id is a property's; a server property's
/// id is taken with a note (it fails no column).
///
/// # Errors
/// An id no property has, or property files that do not load.
pub fn check_required(args: &GateArgs) -> Result<()> {
    let properties =
        locklab::properties::shipped_cached().map_err(|e| anyhow::anyhow!("the property files do not load:\n{e}"))?;
    for id in &args.require {
        match properties.iter().find(|p| &p.id == id) {
            None => bail!(
                "--require: no property '{id}' (have: {})",
                properties.iter().map(|p| p.id.as_str()).collect::<Vec<_>>().join(", ")
            ),
            Some(p) if p.scope == Scope::Server => eprintln!(
                "locklab: note: --require {id}: a server property, shown as a server finding; it fails no column"
            ),
            Some(_) => {}
        }
    }
    Ok(())
}

/// What the gate found.
pub struct Gate {
    /// Violated or undecided (property, column) pairs.
    pub failures: usize,
    /// One line per failure: the column, the property and the deciding cell.
    pub failing: String,
    /// The required pairs that hold only where tried (◐), with why.
    pub partly: Vec<String>,
}

/// Judges `report`'s column verdicts of the properties `args` requires (by
/// id, or by severity and graver), for the columns `selected` accepts.
pub fn gate(report: &Report, args: &GateArgs, selected: &dyn Fn(&str) -> bool) -> Gate {
    let severity = args.require_severity.map(|s| s.0);
    let required = |id: &str, s: Severity| args.require.iter().any(|r| r == id) || severity.is_some_and(|g| s <= g);
    let mut failing = String::new();
    let mut failures = 0;
    let mut partly = Vec::new();
    for server in &report.verdicts {
        for p in server.properties.iter().filter(|p| p.scope == Scope::Column) {
            if !required(&p.id, p.severity) {
                continue;
            }
            for c in p.columns.iter().filter(|c| selected(&c.driver)) {
                if c.verdict == Mark::HoldsWhereTried {
                    partly.push(format!("{} × {} ({})", p.id, c.driver, c.reasons.join("; ")));
                }
                if !matches!(c.verdict, Mark::Violated | Mark::Undecided) {
                    continue;
                }
                failures += 1;
                let cell = c
                    .evidence
                    .iter()
                    .find(|e| e.reads == c.verdict)
                    .map(|e| {
                        format!(
                            "{} · {}: {}",
                            e.scenario,
                            e.record.as_deref().unwrap_or("status"),
                            e.says.as_deref().unwrap_or(&e.reading)
                        )
                    })
                    .unwrap_or_else(|| c.reasons.join("; "));
                let _ = writeln!(
                    failing,
                    "{} {} {} ({}, required) on {}: {cell}",
                    c.driver,
                    if c.verdict == Mark::Violated {
                        "violates"
                    } else {
                        "cannot be judged on"
                    },
                    p.id,
                    p.severity.as_str(),
                    server.server
                );
            }
        }
    }
    Gate {
        failures,
        failing,
        partly,
    }
}

impl Gate {
    /// Prints what the gate found to stderr (`command` names the command)
    /// and returns the exit code: 1 with a failure, else 0. With nothing
    /// required (`args`) nothing is printed.
    pub fn exit_code(&self, args: &GateArgs, command: &str) -> ExitCode {
        let required = args.any();
        if self.failures > 0 {
            eprint!(
                "locklab {command}: {} required propert(y/ies) not met:\n{}",
                self.failures, self.failing
            );
            return ExitCode::from(1);
        }
        if required {
            eprintln!("locklab {command}: every required property holds (or does not apply) in the selected column(s)");
            if !self.partly.is_empty() {
                eprintln!(
                    "locklab {command}: note: {} of them hold only where tried (◐; `verdict --coverage` says what decided them):\n  {}",
                    self.partly.len(),
                    self.partly.join("\n  ")
                );
            }
        }
        ExitCode::SUCCESS
    }
}
