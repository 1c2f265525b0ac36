//! Reading `matrix.json` back ([`read`]) and putting the shards of one
//! matrix together ([`merge_shards`]; the split is [`crate::shard`]'s).
//! Neither judges: `locklab::judge::{load, merge}` add the verdicts.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::{Context, Result, bail};

use super::{Report, SCHEMA_VERSION, Summary};
use crate::shard::Shard;

/// A `matrix.json` (a shard's, or a whole report's), read back, with its
/// totals counted anew from its cells, and without verdicts (they are
/// evaluated anew: `locklab::judge::load`).
///
/// # Errors
/// The file cannot be read, is not JSON, has another `schema_version` than
/// [`SCHEMA_VERSION`] (or 9, before the variation rule, or 8, before
/// verdicts), or does not have a report's fields (the message
/// names the path and, from serde, the line and column).
pub fn read(path: &Path) -> Result<Report> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    match json.get("schema_version").and_then(serde_json::Value::as_u64) {
        // Version 9 called a varying cell `unstable` (serde aliases read
        // it); version 8 lacks only the verdicts, evaluated below.
        Some(v) if v == u64::from(SCHEMA_VERSION) || v == 9 || v == 8 => {}
        Some(v) => bail!(
            "{}: schema_version {v}, but this locklab reads {SCHEMA_VERSION}: make every shard with this version",
            path.display()
        ),
        None => bail!("{}: no schema_version: not a locklab matrix.json", path.display()),
    }
    let mut report: Report =
        serde_json::from_str(&text).with_context(|| format!("{}: not a locklab matrix.json", path.display()))?;
    if report.schema_version < 10 {
        // Version 9 failed a cell whose repeats disagreed with a failure of
        // its own making; under the variation rule that cell varies.
        for r in &mut report.runs {
            let made_up = format!("{} × {}: unstable over ", r.scenario, r.driver);
            if !r.varied.is_empty() && r.failure.as_deref().is_some_and(|f| f.starts_with(&made_up)) {
                r.failure = None;
            }
        }
    }
    // The totals are the cells' (a file whose cells were put together by
    // hand keeps no stale count).
    let summary = Summary::of(&report.runs, &report.drivers, report.summary.elapsed_ms);
    Ok(Report {
        schema_version: SCHEMA_VERSION,
        summary,
        verdicts: Vec::new(),
        properties: Vec::new(),
        ..report
    })
}

/// Puts the shards of one matrix together: the report an unsharded run of
/// the same selection would have written, its cells in run order. Header
/// fields (environment, servers' start-up times) are the first shard's;
/// `summary` is counted anew from the cells, and its `elapsed_ms` is the
/// longest shard's (the shards ran side by side).
///
/// # Errors
/// No reports; shards that are not of one matrix (another selection of
/// servers, scenarios or drivers, another PostgreSQL version, another
/// locklab version, commit or `--repeat`); a file that is not a shard; a
/// shard missing or given twice; a cell missing or in two shards.
pub fn merge_shards(reports: Vec<(String, Report)>) -> Result<Report> {
    let Some((first_name, first)) = reports.first() else {
        bail!("merge: no shard files given");
    };
    let count = first.shard.map_or(1, |s| s.count);
    let mut seen: HashMap<usize, &str> = HashMap::new();
    for (name, r) in &reports {
        let Some(shard) = r.shard else {
            bail!("{name} is not a shard (it was not made with --shard I/N)");
        };
        if shard.count != count {
            bail!("{name} is shard {shard}, but {first_name} is one of {count}: give the shards of one split");
        }
        if let Some(other) = seen.insert(shard.index, name) {
            bail!("shard {shard} is given twice: {other} and {name}");
        }
        same_matrix(first_name, first, name, r)?;
    }
    let missing: Vec<String> = (1..=count)
        .filter(|i| !seen.contains_key(i))
        .map(|i| format!("{i}/{count}"))
        .collect();
    if !missing.is_empty() {
        bail!("shard(s) {} missing: give all {count}", missing.join(", "));
    }
    // Each cell's position in run order, from the header (which every shard shares).
    let mut positions: HashMap<(String, String, String), usize> = HashMap::new();
    for v in &first.servers {
        for s in &first.scenarios {
            for d in &first.drivers {
                let p = positions.len();
                positions.insert((v.id.clone(), s.name.clone(), d.id.clone()), p);
            }
        }
    }
    let total = positions.len();
    let position = |run: &crate::outcome::RunResult| {
        positions
            .get(&(run.server.clone(), run.scenario.clone(), run.driver.clone()))
            .copied()
    };
    let elapsed_ms = reports.iter().map(|(_, r)| r.summary.elapsed_ms).fold(0.0, f64::max);
    let git_dirty = reports.iter().any(|(_, r)| r.environment.git_dirty);
    let mut runs = Vec::new();
    let mut cells = HashSet::new();
    let mut base = None;
    for (name, mut r) in reports {
        let shard = r.shard.unwrap_or(Shard::ALL);
        for run in std::mem::take(&mut r.runs) {
            let id = format!("{} × {} × {}", run.server, run.scenario, run.driver);
            let Some(p) = position(&run) else {
                bail!("{name}: cell {id} is not in the matrix's header");
            };
            if !shard.contains(p) {
                bail!("{name}: cell {id} belongs to another shard than {shard}");
            }
            if !cells.insert(p) {
                bail!("{name}: cell {id} is there twice");
            }
            runs.push((p, run));
        }
        base.get_or_insert(r);
    }
    let mut merged = base.expect("at least one report");
    if cells.len() != total {
        bail!(
            "the shards hold {} of the matrix's {total} cells: a shard file was cut short or filtered",
            cells.len()
        );
    }
    runs.sort_by_key(|(p, _)| *p);
    merged.runs = runs.into_iter().map(|(_, run)| run).collect();
    merged.summary = Summary::of(&merged.runs, &merged.drivers, elapsed_ms);
    merged.environment.git_dirty = git_dirty;
    merged.generated_at = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    merged.shard = None;
    merged.verdicts.clear();
    merged.properties.clear();
    Ok(merged)
}

/// Whether `b` is a shard of the same matrix as `a`: the same locklab,
/// commit, `--repeat`, servers (ids, backends and versions), scenarios and
/// drivers (ids and crate versions), in the same order.
fn same_matrix(a_name: &str, a: &Report, b_name: &str, b: &Report) -> Result<()> {
    let differ = |what: &str, x: String, y: String| -> Result<()> {
        if x == y {
            Ok(())
        } else {
            bail!("{a_name} and {b_name} are not shards of one matrix: {what} differ ({x} and {y})")
        }
    };
    differ("locklab versions", a.locklab_version.clone(), b.locklab_version.clone())?;
    differ(
        "commits",
        a.environment.git_commit.clone().unwrap_or_default(),
        b.environment.git_commit.clone().unwrap_or_default(),
    )?;
    differ("--repeat", a.repeat.to_string(), b.repeat.to_string())?;
    let servers = |r: &Report| {
        r.servers
            .iter()
            .map(|s| format!("{} ({}, {})", s.id, s.backend, s.version))
            .collect::<Vec<_>>()
            .join("; ")
    };
    differ("servers", servers(a), servers(b))?;
    let scenarios = |r: &Report| {
        r.scenarios
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    differ("scenarios", scenarios(a), scenarios(b))?;
    let drivers = |r: &Report| {
        r.drivers
            .iter()
            .map(|d| format!("{} {}", d.id, d.crate_version))
            .collect::<Vec<_>>()
            .join(", ")
    };
    differ("drivers", drivers(a), drivers(b))
}

#[cfg(test)]
mod tests {
    /// A version 9 file (before the variation rule) failed a cell whose
    /// repeats disagreed, with a failure of its own making and the list in
    /// `unstable`: read today, that cell varies and fails nothing.
    #[test]
    fn a_version_9_file_reads_its_unstable_cells_as_varied() {
        let path = crate::server::workspace_root().join("reports").join("matrix.json");
        let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        json["schema_version"] = 9.into();
        let run = json["runs"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|r| r["failure"].is_null() && r["skipped"].is_null())
            .unwrap();
        let name = format!(
            "{} × {}",
            run["scenario"].as_str().unwrap(),
            run["driver"].as_str().unwrap()
        );
        let run = run.as_object_mut().unwrap();
        run.remove("varied");
        run.remove("variants");
        run.insert("unstable".into(), serde_json::json!(["`x`: true ×2, false ×1"]));
        run.insert(
            "failure".into(),
            serde_json::json!(format!("{name}: unstable over 3 repeats: `x`: true ×2, false ×1")),
        );
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), serde_json::to_string(&json).unwrap()).unwrap();
        let report = crate::judge::load(file.path()).unwrap();
        let r = report
            .runs
            .iter()
            .find(|r| format!("{} × {}", r.scenario, r.driver) == name)
            .unwrap();
        assert_eq!(r.status(), crate::outcome::Status::Varies);
        assert!(r.passed());
        assert_eq!(r.varied, ["`x`: true ×2, false ×1"]);
    }

    /// Every value the committed report holds reads back into the same
    /// JSON, and (where the cell shows the value itself) the same cell text,
    /// and the whole re-renders to the committed Markdown: `merge` and
    /// `report --from` lose nothing of a file.
    #[test]
    fn the_committed_matrix_json_reads_back_unchanged() {
        let path = crate::server::workspace_root().join("reports").join("matrix.json");
        let report = crate::judge::load(&path).unwrap();
        assert!(report.runs.len() > 100, "{} runs", report.runs.len());
        let written: serde_json::Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
        let committed: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for (i, (w, c)) in written["runs"]
            .as_array()
            .unwrap()
            .iter()
            .zip(committed["runs"].as_array().unwrap())
            .enumerate()
        {
            assert_eq!(w, c, "run {i}");
        }
        assert_eq!(written, committed);
        let mut kinds = std::collections::HashSet::new();
        for o in report.runs.iter().flat_map(|r| &r.observations) {
            kinds.insert(std::mem::discriminant(&o.value));
        }
        assert!(kinds.len() >= 10, "only {} kinds of value in the report", kinds.len());
        // What was read back renders to the committed Markdown, with where
        // the cells' time went.
        let md = report.to_markdown().unwrap();
        let committed_md = std::fs::read_to_string(path.with_file_name("matrix.md")).unwrap();
        assert!(
            md == committed_md,
            "reports/matrix.md is not what reports/matrix.json renders to"
        );
        assert!(md.contains("## Where a cell's time goes"), "no phase table");
        let row = md
            .split("## Where a cell's time goes")
            .nth(1)
            .unwrap()
            .lines()
            .find(|l| l.starts_with("| `tokio-postgres` |"))
            .expect("a phase row for tokio-postgres");
        assert_eq!(
            row.matches(" | ").count(),
            crate::outcome::Phase::ALL.len() + 2,
            "{row}"
        );
        assert!(report.to_html().unwrap().contains("<h2 id=\"phases\">"));
    }
}
