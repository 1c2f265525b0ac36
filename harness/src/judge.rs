//! A report with its verdicts: the properties that ship with locklab
//! (`properties/`, validated against the shipped scenarios and a run's own)
//! loaded, and the report judged by them ([`Report::judged_by`]). The
//! report's own code reads no file and no global; this module is where the
//! loading happens, after the report is assembled or read back.

use std::path::{Path, PathBuf};

use anyhow::Result;
use locklab_drivers::Driver;

use crate::outcome::RunResult;
use crate::report::{Environment, Report};
use crate::scenario::Scenario;
use crate::server::Server;

/// A report assembled from a run ([`Report::new`], on this process's
/// [`Environment::current`]) and judged with the shipped properties and the
/// run's `scenarios` ([`judged_with`]).
pub fn report(
    servers: &[Server],
    scenarios: &[Scenario],
    drivers: &[Box<dyn Driver>],
    runs: Vec<RunResult>,
    elapsed_ms: f64,
) -> Report {
    let assembled = Report::new(servers, scenarios, drivers, runs, elapsed_ms, Environment::current());
    judged_with(assembled, scenarios)
}

/// `report` judged anew by the shipped properties, loaded with the run's
/// own scenario files where they still are (not under the shipped
/// `scenarios/`; their witnesses decide, as in [`judged_with`]). When the
/// properties cannot be read (an invalid property file: `locklab validate`
/// names it), a note on stderr, and no verdicts.
pub fn judged(report: Report) -> Report {
    let root = crate::server::workspace_root();
    let shipped = root.join("scenarios");
    let mut files: Vec<PathBuf> = report
        .scenarios
        .iter()
        .map(|s| {
            if s.file.is_absolute() {
                s.file.clone()
            } else {
                root.join(&s.file)
            }
        })
        .filter(|f| !f.starts_with(&shipped) && f.is_file())
        .collect();
    files.sort();
    files.dedup();
    let own: Vec<Scenario> = files
        .iter()
        .filter_map(|f| crate::scenario::load_file(f).ok())
        .flatten()
        .collect();
    judged_with(report, &own)
}

/// `report` judged by the shipped properties loaded against the shipped
/// scenarios and `scenarios` (the run's own, e.g. `--scenarios DIR`): a
/// run's own scenario that records a witness a property selects (`witness:
/// unlock`) decides it, without a property file naming it. When the
/// properties cannot be read, a note on stderr (once per process), and no
/// verdicts.
pub fn judged_with(report: Report, scenarios: &[Scenario]) -> Report {
    match crate::properties::for_scenarios(scenarios) {
        Ok(properties) => report.judged_by(&properties),
        Err(e) => {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| eprintln!("locklab: note: no verdicts: the property files do not load:\n{e}"));
            let mut unjudged = report.judged_by(&[]);
            unjudged.verdicts.clear();
            unjudged
        }
    }
}

/// A `matrix.json` read back ([`crate::report::read`]) and judged anew
/// ([`judged`]).
///
/// # Errors
/// As [`crate::report::read`].
pub fn load(path: &Path) -> Result<Report> {
    Ok(judged(crate::report::read(path)?))
}

/// The shards of one matrix put together ([`crate::report::merge_shards`])
/// and judged anew ([`judged`]).
///
/// # Errors
/// As [`crate::report::merge_shards`].
pub fn merge(reports: Vec<(String, Report)>) -> Result<Report> {
    Ok(judged(crate::report::merge_shards(reports)?))
}
