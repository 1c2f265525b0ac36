//! `locklab migrate-baseline OLD DIR`: a whole-matrix `baseline.json`
//! (`baseline_version` 2) split into a baseline directory, one file per
//! scenario ([`ScenarioBaseline::split`]), then checked value by value: every
//! cell of the old file, read as JSON apart from the typed model, must be in
//! the new files with every value equal, and each new file's header and
//! columns must be the old file's.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::{Baseline, BaselineDir, ScenarioBaseline, dir};

/// What a migration wrote and checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migrated {
    /// Files written (scenario files).
    pub files: usize,
    /// Cells of the old file, each found equal in a new file.
    pub cells: usize,
    /// Leaf values (strings, numbers, booleans, nulls) of those cells, each
    /// found equal.
    pub values: usize,
}

/// Splits the whole-matrix baseline `old` into the directory `into` and
/// checks that nothing was lost ([`check`]).
///
/// # Errors
/// `old` is not a version 2 baseline; `into` already holds baseline files;
/// I/O errors; a value of `old` not found equal in the new files (naming the
/// cell and the value's path).
pub fn migrate(old: &Path, into: &Path) -> Result<Migrated> {
    let whole = Baseline::load_whole(old)?;
    if !BaselineDir::pending(into)?.is_empty()
        || (into.is_dir()
            && std::fs::read_dir(into)?
                .flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "json")))
    {
        bail!(
            "{} already holds baseline files: give an empty or new directory",
            into.display()
        );
    }
    let files = ScenarioBaseline::split(&whole);
    for (name, file) in &files {
        file.save(&dir::accepted_path(into, name))?;
    }
    check(old, into)
}

/// Checks that every cell of the whole-matrix baseline `old` is in the
/// directory `into` with every value equal (as JSON values, read apart from
/// the typed model), and that each file's server, versions, repeats, commit
/// and columns are `old`'s.
///
/// # Errors
/// The first value not found equal, naming its cell and path; a header
/// value that differs; a new file with a cell `old` lacks.
pub fn check(old: &Path, into: &Path) -> Result<Migrated> {
    let read = |p: &Path| -> Result<Value> {
        serde_json::from_str(&std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?)
            .with_context(|| format!("{}: not valid JSON", p.display()))
    };
    let old_json = read(old)?;
    let loaded = BaselineDir::load(into)?;
    let mut new_cells: std::collections::HashMap<(String, String), (String, Value)> = Default::default();
    for name in loaded.files.keys() {
        let path = dir::accepted_path(into, name);
        let file = read(&path)?;
        for key in ["server", "locklab_version", "repeat", "git_commit", "generated_at"] {
            if file[key] != old_json[key] {
                bail!(
                    "{}: `{key}` is {} where {} has {}",
                    path.display(),
                    file[key],
                    old.display(),
                    old_json[key]
                );
            }
        }
        for (id, column) in file["drivers"].as_object().into_iter().flatten() {
            if old_json["drivers"][id] != *column {
                bail!("{}: column {id} is not as {} has it", path.display(), old.display());
            }
        }
        for cell in file["cells"].as_array().into_iter().flatten() {
            let k = (
                cell["scenario"].as_str().unwrap_or_default().to_owned(),
                cell["driver"].as_str().unwrap_or_default().to_owned(),
            );
            new_cells.insert(k, (name.clone(), cell.clone()));
        }
    }
    let old_cells = old_json["cells"].as_array().map(Vec::as_slice).unwrap_or_default();
    let mut values = 0;
    for cell in old_cells {
        let (scenario, driver) = (
            cell["scenario"].as_str().unwrap_or_default(),
            cell["driver"].as_str().unwrap_or_default(),
        );
        let Some((name, new)) = new_cells.get(&(scenario.to_owned(), driver.to_owned())) else {
            bail!(
                "{scenario} × {driver} of {} is in no file of {}",
                old.display(),
                into.display()
            );
        };
        values += equal_leaves(cell, new, &format!("{scenario} × {driver}"), name)?;
    }
    if new_cells.len() != old_cells.len() {
        bail!(
            "{} holds {} cells, {} holds {}",
            into.display(),
            new_cells.len(),
            old.display(),
            old_cells.len()
        );
    }
    Ok(Migrated {
        files: loaded.files.len(),
        cells: old_cells.len(),
        values,
    })
}

/// How many leaf values `old` has, each equal at the same path in `new`.
fn equal_leaves(old: &Value, new: &Value, at: &str, file: &str) -> Result<usize> {
    Ok(match old {
        Value::Object(map) => {
            let mut n = 0;
            for (k, v) in map {
                let Some(w) = new.get(k) else {
                    bail!("{at}: `{k}` is missing from {file}.json");
                };
                n += equal_leaves(v, w, &format!("{at}.{k}"), file)?;
            }
            n
        }
        Value::Array(items) => {
            let Some(others) = new.as_array().filter(|o| o.len() == items.len()) else {
                bail!("{at}: the list in {file}.json is not the old one's length");
            };
            let mut n = 0;
            for (i, (v, w)) in items.iter().zip(others).enumerate() {
                n += equal_leaves(v, w, &format!("{at}[{i}]"), file)?;
            }
            n
        }
        leaf => {
            if leaf != new {
                bail!("{at}: {leaf} in the old file, {new} in {file}.json");
            }
            1
        }
    })
}
