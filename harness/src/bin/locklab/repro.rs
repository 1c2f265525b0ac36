//! `locklab repro`: a cell of a report as a reproduction that runs without
//! locklab (`locklab::repro`): a bash script over `psql` for a direct or
//! pooler column, numbered steps in the pool's terms for a pool column.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use locklab::properties::Mark;
use locklab::repro::Header;
use locklab_drivers::DriverKind;

use crate::cli::ReproArgs;
use crate::selection::load;

/// Writes the reproduction of `-s SCENARIO × -d COLUMN` of the report
/// (default `reports/matrix.json`) to `--out` (made executable) or stdout.
///
/// # Errors
/// No such scenario (or a file of several parameter sets named without
/// one), no such column, no such cell in the report, a step without a
/// `psql` form, a file that cannot be written.
pub fn repro(dir: &Path, args: &ReproArgs) -> Result<ExitCode> {
    let scenarios = load(dir)?;
    let Some(scenario) = scenarios.iter().find(|s| s.name == args.scenario) else {
        let sets: Vec<&str> = scenarios
            .iter()
            .filter(|s| s.family == args.scenario)
            .map(|s| s.name.as_str())
            .collect();
        if !sets.is_empty() {
            bail!(
                "-s {}: name one of its parameter sets: {}",
                args.scenario,
                sets.join(", ")
            );
        }
        bail!("-s {}: no such scenario in {}", args.scenario, dir.display());
    };
    let registry = locklab_drivers::registry();
    let Some(driver) = registry.iter().find(|d| d.info().id == args.driver) else {
        bail!("-d {}: no such column (`locklab list` names them)", args.driver);
    };
    let info = driver.info();
    let from = args
        .from
        .clone()
        .unwrap_or_else(|| locklab::server::workspace_root().join("reports/matrix.json"));
    let report = locklab::judge::load(&from).with_context(|| format!("--from {}", from.display()))?;
    let Some(run) = report
        .runs
        .iter()
        .find(|r| r.scenario == scenario.name && r.driver == info.id)
    else {
        bail!(
            "no cell {} × {} in {} (run it there first, or give --from)",
            scenario.name,
            info.id,
            from.display()
        );
    };
    let readings: BTreeMap<String, String> = run
        .observations
        .iter()
        .map(|o| (o.name.clone(), o.value.to_string()))
        .collect();
    let column = report.drivers.iter().find(|d| d.id == info.id);
    let mut versions: Vec<String> = report
        .servers
        .iter()
        .filter(|s| s.id == run.server)
        .map(|s| s.version.clone())
        .collect();
    if let Some(v) = column.and_then(|c| c.pooler_version.clone()) {
        versions.push(v);
    }
    if let Some(c) = column {
        versions.push(format!("{} {}", c.crate_name, c.crate_version));
    }
    let mut properties = Vec::new();
    for server in report.verdicts.iter().filter(|s| s.server == run.server) {
        for p in &server.properties {
            let Some(v) = p.of(info.id) else { continue };
            let Some(e) = v.evidence.iter().find(|e| e.scenario == scenario.name) else {
                continue;
            };
            let verdict = match v.verdict {
                Mark::Violated => "violated on this column",
                Mark::Holds => "holds on this column",
                other => other.as_str(),
            };
            properties.push(format!(
                "{} ({}): {verdict}; this cell's {}: {}",
                p.id,
                p.severity.as_str(),
                e.record.as_deref().unwrap_or("status"),
                e.says.as_deref().unwrap_or(&e.reading)
            ));
        }
    }
    let header = Header {
        versions: versions.join("; "),
        configuration: column.map_or_else(|| info.configuration.to_owned(), |c| c.configuration.clone()),
        properties,
        from: format!(
            "{}, {}",
            from.strip_prefix(locklab::server::workspace_root())
                .unwrap_or(&from)
                .display(),
            report.generated_at
        ),
    };
    // A client without a pool (tokio-postgres, a connection per checkout),
    // directly or through a pooler: psql does the same.
    let (text, executable) = if info.kind == DriverKind::Direct || info.crate_name == "tokio-postgres" {
        (
            locklab::repro::script(scenario, &info, &readings, &header).map_err(|e| anyhow::anyhow!("{e}"))?,
            true,
        )
    } else {
        (locklab::repro::pool_steps(scenario, &info, &readings, &header), false)
    };
    match &args.out {
        Some(path) => {
            std::fs::write(path, &text).with_context(|| format!("cannot write {}", path.display()))?;
            if executable {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
            }
            eprintln!(
                "locklab: wrote {} ({})",
                path.display(),
                if executable {
                    "a bash script over psql: PGHOST… and, for a pooler column, POOLER_HOST…; see its header"
                } else {
                    "the steps in the pool's terms"
                }
            );
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}
