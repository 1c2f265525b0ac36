//! The baseline as a directory of files, one per scenario file
//! (`reports/baseline/NAME.json`, NAME the scenario file's name, holding the
//! cells of all its parameter sets), each self-contained: the run that wrote
//! it (locklab version, commit, repeats, server and backend, CPU pressure of
//! its race cells) and the columns its cells name. A file is what
//! [`Baseline`] is for the whole matrix, cut to one scenario
//! ([`ScenarioBaseline`]); a directory read whole is one [`Baseline`] again
//! ([`BaselineDir::whole`]) for the comparison of [`super::compare`].
//!
//! A change is never written over an accepted file by `locklab check`: it
//! writes `NAME.json.new` beside it ([`pending_path`]), which `locklab
//! review` accepts (renames over `NAME.json`) or rejects (removes), as
//! `cargo insta review` does with snapshots. Only `check --update` writes
//! accepted files, and only those whose cells differ by the comparison
//! rules ([`ScenarioBaseline::settle`]).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::{Baseline, BaselineCell, BaselineDriver, BaselineServer, WHOLE_FILE_VERSION};
use crate::outcome::shares::Pressure;

/// Version of a baseline directory's file layout ([`ScenarioBaseline`]).
/// Version 2 was the single `baseline.json` of the whole matrix:
/// `locklab migrate-baseline` splits one.
pub const BASELINE_VERSION: u32 = 3;

/// What a pending file's name adds to its accepted file's: `NAME.json.new`.
pub const PENDING_SUFFIX: &str = ".new";

/// The scenario file (`family`) an instance name belongs to: `NAME` of
/// `NAME[param=value,…]`.
pub fn family(instance: &str) -> &str {
    instance.split_once('[').map_or(instance, |(name, _)| name)
}

/// `DIR/NAME.json`: the accepted file of scenario file `name`.
pub fn accepted_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.json"))
}

/// `DIR/NAME.json.new`: the pending file of scenario file `name`.
pub fn pending_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.json{PENDING_SUFFIX}"))
}

/// The expected cells of one scenario file on one server: a file of a
/// baseline directory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioBaseline {
    /// [`BASELINE_VERSION`].
    pub baseline_version: u32,
    /// The scenario file's name (`name:` of `scenarios/NAME.yaml`), equal to
    /// this file's stem.
    pub scenario: String,
    /// When the run that last wrote it started (RFC 3339, UTC).
    pub generated_at: String,
    /// Harness version of that run.
    pub locklab_version: String,
    /// Runs per cell of that run (timings are their p50).
    pub repeat: usize,
    /// Commit of the checkout of that run, if known.
    pub git_commit: Option<String>,
    /// The server its cells were measured on.
    pub server: BaselineServer,
    /// The CPU pressure its race cells ran under, taken together
    /// ([`Pressure::merge`], trial-weighted); absent for a scenario without
    /// `trials`. Each race cell keeps its own ([`BaselineCell::pressure`]),
    /// which is what the race rule compares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure: Option<Pressure>,
    /// The columns its cells name: id → crate and configuration.
    pub drivers: IndexMap<String, BaselineDriver>,
    /// One per parameter set × column, parameter-set-major, columns in
    /// registry order.
    pub cells: Vec<BaselineCell>,
}

impl ScenarioBaseline {
    /// The files of `whole`, by scenario file name: its cells grouped by
    /// [`family`], each with the columns it names and `whole`'s header.
    pub fn split(whole: &Baseline) -> BTreeMap<String, ScenarioBaseline> {
        let mut out: BTreeMap<String, ScenarioBaseline> = BTreeMap::new();
        for cell in &whole.cells {
            let name = family(&cell.scenario);
            let file = out.entry(name.to_owned()).or_insert_with(|| ScenarioBaseline {
                baseline_version: BASELINE_VERSION,
                scenario: name.to_owned(),
                generated_at: whole.generated_at.clone(),
                locklab_version: whole.locklab_version.clone(),
                repeat: whole.repeat,
                git_commit: whole.git_commit.clone(),
                server: whole.server.clone(),
                pressure: None,
                drivers: IndexMap::new(),
                cells: Vec::new(),
            });
            file.cells.push(cell.clone());
        }
        for file in out.values_mut() {
            file.drivers = whole
                .drivers
                .iter()
                .filter(|(id, _)| file.cells.iter().any(|c| &c.driver == *id))
                .map(|(id, d)| (id.clone(), d.clone()))
                .collect();
            file.pressure = file.cells_pressure();
        }
        out
    }

    /// Its race cells' pressure taken together (trial-weighted).
    fn cells_pressure(&self) -> Option<Pressure> {
        let mut total: Option<(Pressure, u64)> = None;
        for c in &self.cells {
            let Some(p) = c.pressure else { continue };
            let n = c.observations.values().find_map(|o| o.trials).unwrap_or(1);
            total = Some(match total {
                None => (p, n),
                Some((t, m)) => (t.merge(m, p, n), m + n),
            });
        }
        total.map(|(p, _)| p)
    }

    /// How many race rows (observations with shares) its cells hold.
    pub fn race_rows(&self) -> u64 {
        self.cells
            .iter()
            .flat_map(|c| c.observations.values())
            .filter(|o| o.shares.is_some())
            .count() as u64
    }

    /// As a [`Baseline`] of its cells alone, counting `race_rows` race rows
    /// (those of the whole directory: the race rule's false-alarm split).
    pub fn as_baseline(&self, race_rows: u64) -> Baseline {
        Baseline {
            baseline_version: BASELINE_VERSION,
            generated_at: self.generated_at.clone(),
            locklab_version: self.locklab_version.clone(),
            repeat: self.repeat,
            git_commit: self.git_commit.clone(),
            server: self.server.clone(),
            drivers: self.drivers.clone(),
            race_rows,
            cells: self.cells.clone(),
        }
    }

    /// The file to accept after a run: `accepted` (`None` for a scenario
    /// without one) with the cells of `fresh` (this run's file of the same
    /// scenario) that `differ` names put in, and the cells it names that
    /// this run lacks taken out; every other cell of `accepted` as it was,
    /// to the byte. A race row put in keeps, at count 0, the readings its
    /// accepted row knew and this run did not read
    /// ([`BaselineCell::keep_readings_of`]), so that rewriting never forgets
    /// a rare outcome. The header is this run's (the run that wrote it);
    /// each column's entry is this run's when a cell of it was put in.
    /// Returns the file and how many readings were kept at 0.
    pub fn settle(
        accepted: Option<&ScenarioBaseline>,
        fresh: &ScenarioBaseline,
        differ: &HashSet<(String, String)>,
    ) -> (ScenarioBaseline, usize) {
        let Some(accepted) = accepted else {
            return (fresh.clone(), 0);
        };
        let key = |c: &BaselineCell| (c.scenario.clone(), c.driver.clone());
        let mut kept = 0;
        let mut put_in: HashSet<String> = HashSet::new();
        let mut cells: Vec<BaselineCell> = Vec::new();
        for old in &accepted.cells {
            if !differ.contains(&key(old)) {
                cells.push(old.clone());
                continue;
            }
            if let Some(new) = fresh.cells.iter().find(|c| key(c) == key(old)) {
                let mut new = new.clone();
                kept += new.keep_readings_of(old);
                put_in.insert(new.driver.clone());
                cells.push(new);
            }
        }
        for new in &fresh.cells {
            if !accepted.cells.iter().any(|c| key(c) == key(new)) {
                put_in.insert(new.driver.clone());
                cells.push(new.clone());
            }
        }
        // Parameter sets in the run's order (then any the run did not
        // have), columns in the registry's order (then the rest by id).
        let mut instances: Vec<&str> = fresh.cells.iter().map(|c| c.scenario.as_str()).collect();
        instances.extend(accepted.cells.iter().map(|c| c.scenario.as_str()));
        let mut seen = HashSet::new();
        instances.retain(|s| seen.insert(*s));
        let ids = locklab_drivers::ids();
        let rank = |c: &BaselineCell| {
            (
                instances.iter().position(|s| *s == c.scenario).unwrap_or(usize::MAX),
                ids.iter().position(|d| *d == c.driver).unwrap_or(usize::MAX),
                c.driver.clone(),
            )
        };
        let mut ranked: Vec<_> = cells.into_iter().map(|c| (rank(&c), c)).collect();
        ranked.sort_by(|a, b| a.0.cmp(&b.0));
        let cells: Vec<BaselineCell> = ranked.into_iter().map(|(_, c)| c).collect();
        let mut columns: Vec<&str> = Vec::new();
        for c in &cells {
            if !columns.contains(&c.driver.as_str()) {
                columns.push(&c.driver);
            }
        }
        let drivers = columns
            .iter()
            .filter_map(|id| {
                let entry = if put_in.contains(*id) {
                    fresh.drivers.get(*id).or_else(|| accepted.drivers.get(*id))
                } else {
                    accepted.drivers.get(*id).or_else(|| fresh.drivers.get(*id))
                };
                entry.map(|d| ((*id).to_owned(), d.clone()))
            })
            .collect();
        let mut out = ScenarioBaseline {
            drivers,
            cells,
            pressure: None,
            ..fresh.clone()
        };
        out.pressure = out.cells_pressure();
        (out, kept)
    }

    /// Each column whose every cell in this file is `n/a` takes the entry
    /// `known` has for it (the accepted directory's, [`BaselineDir::whole`]),
    /// when it has one: such a column did not run here, so the run's entry
    /// is what the column declares, not what it reported when it ran (an
    /// adapter's version from its `hello`, with its details, is known only
    /// once it has started). Without this, a scenario written alone where
    /// every adapter's cell is `n/a` carries their declared short versions,
    /// and the directory's files disagree on those columns.
    pub fn keep_entries_of_columns_not_run(&mut self, known: &IndexMap<String, BaselineDriver>) {
        for (id, entry) in self.drivers.iter_mut() {
            let not_run = self
                .cells
                .iter()
                .filter(|c| &c.driver == id)
                .all(|c| c.status == crate::outcome::Status::NotApplicable);
            if not_run && let Some(k) = known.get(id) {
                *entry = k.clone();
            }
        }
    }

    /// Reads one file of a baseline directory.
    ///
    /// # Errors
    /// An unreadable file, invalid JSON (with line and column), another
    /// `baseline_version` (a version 2 file is a whole-matrix baseline:
    /// the message names `locklab migrate-baseline`), or a `scenario` that
    /// is not the file's name; each names the file.
    pub fn load(path: &Path) -> Result<ScenarioBaseline> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
        let found = value.get("baseline_version").and_then(serde_json::Value::as_u64);
        if found == Some(u64::from(WHOLE_FILE_VERSION)) {
            bail!(
                "{}: a whole-matrix baseline (baseline_version {WHOLE_FILE_VERSION}); a baseline is now a directory \
                 of one file per scenario: split it with `locklab migrate-baseline {} DIR`",
                path.display(),
                path.display()
            );
        }
        if found != Some(u64::from(BASELINE_VERSION)) {
            bail!(
                "{}: baseline_version {} is not {BASELINE_VERSION}",
                path.display(),
                found.map_or("(missing)".to_owned(), |v| v.to_string())
            );
        }
        let file: ScenarioBaseline =
            serde_json::from_str(&text).with_context(|| format!("{}: not a locklab baseline file", path.display()))?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(|n| n.trim_end_matches(PENDING_SUFFIX).trim_end_matches(".json"))
            .unwrap_or_default();
        if file.scenario != name {
            bail!(
                "{}: holds the cells of scenario '{}', not '{name}' (a file is named after its scenario)",
                path.display(),
                file.scenario
            );
        }
        if let Some(c) = file.cells.iter().find(|c| family(&c.scenario) != file.scenario) {
            bail!(
                "{}: cell {} × {} is not of scenario '{}'",
                path.display(),
                c.scenario,
                c.driver,
                file.scenario
            );
        }
        Ok(file)
    }

    /// Writes it as pretty JSON (keys in their declared order, one value a
    /// line), creating the directory.
    ///
    /// # Errors
    /// I/O errors, with the path.
    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(self)? + "\n";
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
    }
}

impl Baseline {
    /// Writes it as the accepted files of the baseline directory `dir`, one
    /// per scenario file ([`ScenarioBaseline::split`]).
    ///
    /// # Errors
    /// I/O errors, with the path.
    pub fn save_as_dir(&self, dir: &Path) -> Result<()> {
        for (name, file) in ScenarioBaseline::split(self) {
            file.save(&accepted_path(dir, &name))?;
        }
        Ok(())
    }
}

/// A baseline directory's accepted files.
#[derive(Clone, Debug)]
pub struct BaselineDir {
    /// The directory.
    pub path: PathBuf,
    /// Its accepted files (`NAME.json`), by scenario file name.
    pub files: BTreeMap<String, ScenarioBaseline>,
}

impl BaselineDir {
    /// A directory with no accepted file yet (it need not exist).
    pub fn empty(path: &Path) -> BaselineDir {
        BaselineDir {
            path: path.to_owned(),
            files: BTreeMap::new(),
        }
    }

    /// Reads every accepted file of the directory (pending ones are
    /// [`BaselineDir::pending`]'s).
    ///
    /// # Errors
    /// A missing directory, a path that is a file (a whole-matrix
    /// `baseline.json`: the message names `locklab migrate-baseline`), or a
    /// file [`ScenarioBaseline::load`] refuses.
    pub fn load(path: &Path) -> Result<BaselineDir> {
        Self::load_some(path, None)
    }

    /// [`BaselineDir::load`], reading only the files of the scenario files
    /// `names` (those of them that exist) when given: a process that runs one
    /// cell reads one file.
    ///
    /// # Errors
    /// As [`BaselineDir::load`].
    pub fn load_some(path: &Path, names: Option<&[&str]>) -> Result<BaselineDir> {
        if path.is_file() {
            ScenarioBaseline::load(path)?;
            bail!(
                "{} is a file: a baseline is a directory of one file per scenario",
                path.display()
            );
        }
        if !path.is_dir() {
            bail!(
                "no baseline directory {} (write one with `locklab check --update --baseline {}`)",
                path.display(),
                path.display()
            );
        }
        let mut files = BTreeMap::new();
        match names {
            Some(names) => {
                for name in names {
                    let file = accepted_path(path, name);
                    if file.is_file() {
                        files.insert((*name).to_owned(), ScenarioBaseline::load(&file)?);
                    }
                }
            }
            None => {
                for name in list(path, ".json")? {
                    files.insert(name.clone(), ScenarioBaseline::load(&accepted_path(path, &name))?);
                }
            }
        }
        Ok(BaselineDir {
            path: path.to_owned(),
            files,
        })
    }

    /// The names of the scenario files with a pending file (`NAME.json.new`)
    /// in `path`, sorted; none when the directory does not exist.
    ///
    /// # Errors
    /// An unreadable directory.
    pub fn pending(path: &Path) -> Result<Vec<String>> {
        if !path.is_dir() {
            return Ok(Vec::new());
        }
        list(path, &format!(".json{PENDING_SUFFIX}"))
    }

    /// How many race rows its files hold together: the Bonferroni split of
    /// the race rule's false-alarm rate ([`crate::outcome::shares::threshold`]).
    pub fn race_rows(&self) -> u64 {
        self.files.values().map(ScenarioBaseline::race_rows).sum()
    }

    /// Its files as one baseline: their cells (files in name order), the
    /// columns they name, [`BaselineDir::race_rows`], and the header of the
    /// file written last.
    pub fn whole(&self) -> Baseline {
        let latest = self.files.values().max_by(|a, b| a.generated_at.cmp(&b.generated_at));
        let mut drivers: IndexMap<String, BaselineDriver> = IndexMap::new();
        let mut cells = Vec::new();
        for file in self.files.values() {
            for (id, d) in &file.drivers {
                drivers.entry(id.clone()).or_insert_with(|| d.clone());
            }
            cells.extend(file.cells.iter().cloned());
        }
        let ids = locklab_drivers::ids();
        drivers.sort_by(|a, _, b, _| {
            let rank = |id: &str| ids.iter().position(|d| *d == id).unwrap_or(usize::MAX);
            rank(a).cmp(&rank(b)).then_with(|| a.cmp(b))
        });
        Baseline {
            baseline_version: BASELINE_VERSION,
            generated_at: latest.map(|f| f.generated_at.clone()).unwrap_or_default(),
            locklab_version: latest.map(|f| f.locklab_version.clone()).unwrap_or_default(),
            repeat: latest.map_or(1, |f| f.repeat),
            git_commit: latest.and_then(|f| f.git_commit.clone()),
            server: latest.map_or_else(
                || BaselineServer {
                    major: 0,
                    version: "(no baseline yet)".to_owned(),
                    backend: String::new(),
                },
                |f| f.server.clone(),
            ),
            drivers,
            race_rows: self.race_rows(),
            cells,
        }
    }
}

/// The stems of the files in `dir` whose names end with `suffix`
/// (`.json`: `NAME.json` gives `NAME`), sorted.
fn list(dir: &Path, suffix: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let entry = entry.with_context(|| format!("cannot read {}", dir.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(stem) = name.strip_suffix(suffix)
            && !stem.is_empty()
            && entry.path().is_file()
        {
            out.push(stem.to_owned());
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
#[path = "dir_tests.rs"]
mod tests;
