//! Tests of [`super`] on the committed baseline directory: a directory read
//! whole and split again is itself, and a run's differing cells go into a
//! file without touching the others.

use std::collections::HashSet;

use super::*;
use crate::outcome::{Reading, Seen, Value};

fn committed() -> BaselineDir {
    BaselineDir::load(&crate::server::workspace_root().join("reports/baseline")).unwrap()
}

#[test]
fn the_directory_read_whole_and_split_again_is_itself() {
    let dir = committed();
    let whole = dir.whole();
    assert_eq!(whole.race_rows, dir.race_rows());
    assert_eq!(whole.race_rows, whole.clone().with_race_rows().race_rows);
    let split = ScenarioBaseline::split(&whole);
    assert_eq!(split.keys().collect::<Vec<_>>(), dir.files.keys().collect::<Vec<_>>());
    for (name, file) in &dir.files {
        assert_eq!(split[name].cells, file.cells, "{name}");
        assert_eq!(split[name].drivers, file.drivers, "{name}");
    }
}

#[test]
fn settle_puts_in_only_the_differing_cells_and_keeps_rare_race_readings() {
    let dir = committed();
    let accepted = dir
        .files
        .values()
        .find(|f| f.race_rows() > 0)
        .expect("a scenario with race cells")
        .clone();
    let (race_index, race) = accepted
        .cells
        .iter()
        .enumerate()
        .find(|(_, c)| {
            c.observations
                .values()
                .any(|o| o.shares.as_ref().is_some_and(|s| s.len() > 1))
        })
        .expect("a race row with two readings");
    // This run: one reading of the race row missed, and another cell's
    // first value changed; every cell of the run otherwise as accepted, but
    // with a new commit in the header.
    let mut fresh = accepted.clone();
    fresh.git_commit = Some("0123456789ab".into());
    let (name, o) = fresh.cells[race_index]
        .observations
        .iter_mut()
        .find(|(_, o)| o.shares.as_ref().is_some_and(|s| s.len() > 1))
        .unwrap();
    let name = name.clone();
    let missed = o.shares.as_mut().unwrap().pop().unwrap().reading;
    let other = (race_index + 1) % fresh.cells.len();
    let first = fresh.cells[other].observations.values_mut().next().unwrap();
    first.seen = Seen::Value(Reading::plain(Value::of_text("something else")));
    let differ: HashSet<(String, String)> = [race_index, other]
        .iter()
        .map(|&i| (fresh.cells[i].scenario.clone(), fresh.cells[i].driver.clone()))
        .collect();
    let (settled, kept) = ScenarioBaseline::settle(Some(&accepted), &fresh, &differ);
    assert_eq!(kept, 1);
    assert_eq!(
        settled.git_commit.as_deref(),
        Some("0123456789ab"),
        "the header is the run's"
    );
    assert_eq!(settled.cells.len(), accepted.cells.len());
    for (i, (s, a)) in settled.cells.iter().zip(&accepted.cells).enumerate() {
        if i == other {
            assert_eq!(s, &fresh.cells[other]);
        } else if i == race_index {
            let shares = s.observations[&name].shares.as_ref().unwrap();
            assert!(
                shares.iter().any(|sh| sh.reading == missed && sh.count == Some(0)),
                "{}: the missed reading is kept at 0",
                race.driver
            );
        } else {
            assert_eq!(s, a, "{} × {}: not differing, kept", a.scenario, a.driver);
        }
    }
    // Nothing differs: the accepted file, cell for cell.
    let (same, _) = ScenarioBaseline::settle(Some(&accepted), &fresh, &HashSet::new());
    assert_eq!(same.cells, accepted.cells);
    assert_eq!(same.drivers, accepted.drivers);
    // No accepted file: the run's.
    assert_eq!(ScenarioBaseline::settle(None, &fresh, &differ).0, fresh);
}

#[test]
fn a_column_not_run_in_a_file_keeps_the_entry_the_directory_knows() {
    let dir = committed();
    let known = dir.whole().drivers;
    // A file with a column that ran and one whose every cell is n/a, both
    // with the entries a run gives when their adapters never started.
    let mut file = dir
        .files
        .values()
        .find(|f| {
            let ids: HashSet<&str> = f.cells.iter().map(|c| c.driver.as_str()).collect();
            ids.len() >= 2
        })
        .expect("a file of two columns")
        .clone();
    let ran = file.cells[0].driver.clone();
    let not_run = file.cells.iter().find(|c| c.driver != ran).unwrap().driver.clone();
    for c in file.cells.iter_mut() {
        c.status = if c.driver == not_run {
            crate::outcome::Status::NotApplicable
        } else {
            crate::outcome::Status::Pass
        };
    }
    for id in [&ran, &not_run] {
        file.drivers.get_mut(id).unwrap().crate_version = "0.0.0-declared".into();
    }
    file.keep_entries_of_columns_not_run(&known);
    assert_eq!(
        file.drivers[&not_run], known[&not_run],
        "{not_run}: not run, the directory's entry"
    );
    assert_eq!(
        file.drivers[&ran].crate_version, "0.0.0-declared",
        "{ran}: it ran, the run's entry"
    );
}

#[test]
fn a_file_not_named_after_its_scenario_or_of_the_old_layout_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let file = committed().files.into_values().next().unwrap();
    let wrong = work.path().join("another-name.json");
    file.save(&wrong).unwrap();
    let e = ScenarioBaseline::load(&wrong).unwrap_err().to_string();
    assert!(e.contains("not 'another-name'"), "{e}");
    let mut old = serde_json::to_value(&file).unwrap();
    old["baseline_version"] = 2.into();
    let old_path = work.path().join("baseline.json");
    std::fs::write(&old_path, old.to_string()).unwrap();
    let e = BaselineDir::load(&old_path).unwrap_err().to_string();
    assert!(e.contains("locklab migrate-baseline"), "{e}");
    assert_eq!(family("extreme-keys[key=-1,fn=pg_try_advisory_lock]"), "extreme-keys");
}
