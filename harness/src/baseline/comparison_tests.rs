//! Tests of [`super`]: the comparison of a run with the baseline.

use super::super::{BASELINE_VERSION, BaselineDriver, BaselineServer, Share, two_digits};
use super::*;
use crate::outcome::{LocksLeft, Seen, Value};

fn cell(scenario: &str, driver: &str, held: &str, ms: f64) -> BaselineCell {
    BaselineCell {
        scenario: scenario.into(),
        driver: driver.into(),
        status: crate::outcome::Status::Pass,
        observations: [(
            "held".to_owned(),
            BaselineObservation {
                seen: Seen::Value(Reading::plain(Value::of_text(held))),
                sqlstate: None,
                p50_ms: Some(ms),
                shares: None,
                trials: None,
            },
        )]
        .into_iter()
        .collect(),
        locks_left: LocksLeft::default(),
        cleaned_backends: 0,
        backends_left: 0,
        pressure: None,
        readings_vary: false,
        variants: Vec::new(),
    }
}

fn baseline(cells: Vec<BaselineCell>, version: &str, configuration: &str) -> Baseline {
    Baseline {
        baseline_version: BASELINE_VERSION,
        generated_at: "2026-11-30T00:00:00Z".into(),
        locklab_version: "0.1.0".into(),
        repeat: 1,
        git_commit: None,
        server: BaselineServer {
            major: 17,
            version: "PostgreSQL 17.11 on x86_64".into(),
            backend: "local".into(),
        },
        drivers: ["a", "b"]
            .into_iter()
            .map(|d| {
                (
                    d.to_owned(),
                    BaselineDriver {
                        crate_name: "deadpool-postgres".into(),
                        crate_version: version.into(),
                        configuration: configuration.into(),
                        readings_vary: false,
                        kind: None,
                        pooler: None,
                    },
                )
            })
            .collect(),
        race_rows: 0,
        cells,
    }
}

/// A race cell's observation: `counts` of `trials` trials under CPU
/// pressure `psi`, displayed as the values seen in at least 5 % of them.
fn race(counts: &[(&str, u64)], trials: u64, psi: f64) -> BaselineCell {
    let mut c = cell("race", "a", "", 10.0);
    let o = c.observations.get_mut("held").unwrap();
    let reading = |k: &str| Reading::plain(Value::of_text(k));
    let mut seen: Vec<Reading> = counts
        .iter()
        .filter(|(_, k)| *k as f64 >= 0.05 * trials as f64)
        .map(|(k, _)| reading(k))
        .collect();
    seen.sort();
    o.seen = Seen::Seen(seen);
    o.shares = Some(
        counts
            .iter()
            .map(|(k, count)| Share {
                reading: reading(k),
                share: *count as f64 / trials as f64,
                count: Some(*count),
            })
            .collect(),
    );
    o.trials = Some(trials);
    c.pressure = Some(shares::Pressure {
        cpu_some: Some(psi),
        load1: 1.0,
        cpus: 2,
    });
    c
}

#[test]
fn races_compare_by_their_counts_under_comparable_pressure() {
    let t = Tolerance::default();
    let full = race(&[("55P03", 500), ("true", 470), ("timeout-then-grant", 30)], 1000, 0.3);
    // A short run that saw only one of the values agrees, whatever its
    // first trial's SQLSTATE; which values are possible is not decided here.
    let mut first_failed = race(&[("true", 12)], 12, 0.3);
    first_failed.observations.get_mut("held").unwrap().sqlstate = Some("55P03".into());
    assert_eq!(
        cell_changes(&full, &first_failed, t, 900, false, Shares::ByPressure),
        (vec![], vec![])
    );
    // A reading the baseline never saw, in half of 12 trials, is a
    // change of share (whether it is possible at all is the runner's).
    let (new_value, _) = cell_changes(
        &full,
        &race(&[("true", 6), ("57014", 6)], 12, 0.3),
        t,
        900,
        false,
        Shares::ByPressure,
    );
    assert_eq!(new_value.len(), 1, "{new_value:?}");
    assert!(new_value[0].starts_with("`held` share of `57014`: 0 % of 1000 → 50 % of 12 (Fisher p = "));
    // Drift of 2.5 points in 1,000 trials is noise.
    let again = race(&[("55P03", 475), ("true", 500), ("timeout-then-grant", 25)], 1000, 0.3);
    assert_eq!(
        cell_changes(&full, &again, t, 900, false, Shares::ByPressure),
        (vec![], vec![])
    );
    // 50 % → 10 % is a change at equal pressure…
    let shifted = race(&[("55P03", 100), ("true", 900)], 1000, 0.35);
    let (changes, info) = cell_changes(&full, &shifted, t, 900, false, Shares::ByPressure);
    assert!(info.is_empty());
    assert_eq!(changes.len(), 3, "{changes:?}");
    assert!(
        changes[0].starts_with("`held` share of `55P03`: 50 % of 1000 → 10 % of 1000 (Fisher p = "),
        "{changes:?}"
    );
    // … and information only when the pressures are apart.
    let loaded = race(&[("55P03", 100), ("true", 900)], 1000, 0.6);
    let (changes, info) = cell_changes(&full, &loaded, t, 900, false, Shares::ByPressure);
    assert!(changes.is_empty(), "{changes:?}");
    assert_eq!(info.len(), 4, "{info:?}");
    assert!(info[3].starts_with("CPU pressure 30 % (load 1.0 on 2 CPUs) in the baseline, CPU pressure 60 %"));
    // Shares a caller says do not compare are information at any pressure,
    // with its reason; a change that is not a share still counts.
    let why = "the reason";
    let (changes, info) = cell_changes(&full, &shifted, t, 900, false, Shares::Information(why));
    assert!(changes.is_empty(), "{changes:?}");
    assert_eq!(info.len(), 4, "{info:?}");
    assert!(info[0].starts_with("`held` share of `55P03`: 50 % of 1000 → 10 % of 1000 (Fisher p = "));
    assert_eq!(info[3], why);
    let mut failed = shifted.clone();
    failed.status = crate::outcome::Status::Fail;
    let (changes, _) = cell_changes(&full, &failed, t, 900, false, Shares::Information(why));
    assert_eq!(changes.len(), 1, "{changes:?}");
}

#[test]
fn a_rewrite_keeps_the_readings_the_previous_baseline_knew() {
    let previous = baseline(
        vec![race(&[("true", 990), ("57014", 9), ("55P03", 1)], 1000, 0.3)],
        "0.14",
        "",
    );
    // The new run missed the two rare readings and read one never seen.
    let mut fresh = baseline(vec![race(&[("true", 998), ("42P01", 2)], 1000, 0.3)], "0.14", "");
    assert_eq!(fresh.cells[0].keep_readings_of(&previous.cells[0]), 2);
    let shares = fresh.cells[0].observations["held"].shares.clone().unwrap();
    let got: Vec<(String, u64)> = shares.iter().map(|s| (s.reading.to_string(), s.count(1000))).collect();
    assert_eq!(
        got,
        [("true", 998), ("42P01", 2), ("57014", 0), ("55P03", 0)]
            .map(|(v, n)| (v.to_owned(), n))
            .to_vec()
    );
    // Kept at 0, they are no change against the run that missed them.
    let run = race(&[("true", 998), ("42P01", 2)], 1000, 0.3);
    assert_eq!(
        cell_changes(
            &fresh.cells[0],
            &run,
            Tolerance::default(),
            1,
            false,
            Shares::ByPressure
        ),
        (vec![], vec![])
    );
    // Once kept, a second rewrite adds nothing.
    let again = fresh.cells[0].clone();
    assert_eq!(fresh.cells[0].keep_readings_of(&again), 0);
}

#[test]
fn a_changed_value_names_scenario_observation_driver_and_versions() {
    let before = baseline(
        vec![cell("s", "a", "true", 5.0), cell("s", "b", "true", 5.0)],
        "0.14.1",
        "Fast",
    );
    let after = baseline(
        vec![cell("s", "a", "true", 5.0), cell("s", "b", "false", 5.0)],
        "0.14.2",
        "Clean",
    );
    let c = compare(&before, &after, Tolerance::default(), &|_| true);
    assert_eq!(c.compared, 2);
    assert_eq!(c.diffs.len(), 1);
    let text = c.render(&before, Path::new("reports/baseline"), "PostgreSQL 17.11 (local)", None);
    assert!(
        text.contains("s × b (deadpool-postgres 0.14.1 → 0.14.2; configuration Fast → Clean)"),
        "{text}"
    );
    assert!(text.contains("`held`: true → false"), "{text}");
    assert!(!text.contains("s × a"), "{text}");
}

#[test]
fn times_are_compared_within_the_tolerance() {
    let before = baseline(vec![cell("s", "a", "true", 200.0)], "1", "x");
    let near = baseline(vec![cell("s", "a", "true", 390.0)], "1", "x");
    let far = baseline(vec![cell("s", "a", "true", 10_000.0)], "1", "x");
    assert!(compare(&before, &near, Tolerance::default(), &|_| true).is_clean());
    let c = compare(&before, &far, Tolerance::default(), &|_| true);
    assert_eq!(c.diffs.len(), 1);
    assert!(
        c.diffs[0].changes[0].contains("time: p50 200 ms → 10000 ms"),
        "{:?}",
        c.diffs
    );
}

#[test]
fn times_keep_two_digits_and_fast_steps_none() {
    assert_eq!(two_digits(200.6), 200.0);
    assert_eq!(two_digits(1001.6), 1000.0);
    assert_eq!(two_digits(276.3), 280.0);
    assert_eq!(two_digits(52.4), 52.0);
    let mut fast = cell("s", "a", "true", 1.0);
    fast.observations[0].p50_ms = None;
    let mut hung = cell("s", "a", "true", 10_000.0);
    hung.observations[0].p50_ms = Some(10_000.0);
    let c = compare(
        &baseline(vec![fast], "1", "x"),
        &baseline(vec![hung], "1", "x"),
        Tolerance::default(),
        &|_| true,
    );
    assert!(
        c.diffs[0].changes[0].contains("p50 under 50 ms → 10000 ms"),
        "{:?}",
        c.diffs
    );
}

/// A cell whose repeats read `held` as each of `readings` (in that many
/// repeats each).
fn varying(readings: &[(&str, usize)]) -> BaselineCell {
    let mut c = cell("s", "a", readings[0].0, 1.0);
    c.status = crate::outcome::Status::Varies;
    c.variants = readings
        .iter()
        .map(|(held, n)| crate::outcome::Variant {
            repeats: *n,
            outcome: cell("s", "a", held, 1.0).outcome(),
        })
        .collect();
    c
}

#[test]
fn a_varying_cell_compares_by_its_set_of_readings() {
    let before = baseline(vec![varying(&[("true", 2), ("false", 1)])], "1", "x");
    let compared = |after: BaselineCell| {
        compare(&before, &baseline(vec![after], "1", "x"), Tolerance::default(), &|_| {
            true
        })
    };
    // A run that read one of the baseline's readings in every repeat: the
    // other is information (a short run misses a rare one).
    let c = compared(cell("s", "a", "false", 1.0));
    assert!(c.is_clean(), "{:?}", c.diffs);
    assert!(c.notes[0].changes[0].contains("not read this time"), "{:?}", c.notes);
    // Varying over the same readings, in other shares: nothing to say.
    let c = compared(varying(&[("false", 2), ("true", 1)]));
    assert!(c.is_clean() && c.notes.is_empty(), "{:?} {:?}", c.diffs, c.notes);
    // A reading none of the baseline's repeats read is a difference.
    let c = compared(varying(&[("true", 2), ("maybe", 1)]));
    assert_eq!(c.diffs.len(), 1);
    assert!(
        c.diffs[0].changes[0].contains("maybe read, never in the baseline's repeats (true ×2, false ×1)"),
        "{:?}",
        c.diffs
    );
    // And so is a cell that fails.
    let mut failed = cell("s", "a", "true", 1.0);
    failed.status = crate::outcome::Status::Fail;
    let c = compared(failed);
    assert!(
        c.diffs[0].changes[0].contains("outcome: varies → fail"),
        "{:?}",
        c.diffs
    );
}

#[test]
fn new_and_missing_cells_are_differences() {
    let before = baseline(
        vec![cell("s", "a", "true", 1.0), cell("gone", "a", "true", 1.0)],
        "1",
        "x",
    );
    let after = baseline(
        vec![cell("s", "a", "true", 1.0), cell("new", "a", "true", 1.0)],
        "1",
        "x",
    );
    let c = compare(&before, &after, Tolerance::default(), &|_| true);
    // a selection that left out scenario `gone` does not expect it
    let only_s = compare(&before, &after, Tolerance::default(), &|c| c.scenario == "s");
    assert_eq!(only_s.diffs.len(), 1, "{:?}", only_s.diffs);
    let text: Vec<String> = c
        .diffs
        .iter()
        .map(|d| format!("{} {:?}", d.scenario, d.changes))
        .collect();
    assert_eq!(c.diffs.len(), 2, "{text:?}");
    assert!(
        text[0].starts_with("new") && text[0].contains("not in the baseline"),
        "{text:?}"
    );
    assert!(
        text[1].starts_with("gone") && text[1].contains("not in this run"),
        "{text:?}"
    );
}

/// A cell of a scenario whose readings vary by nature (`readings_vary:` in
/// the file) compares by status alone on both sides; a cell of another
/// scenario in the same column still compares every reading.
#[test]
fn a_scenario_whose_readings_vary_compares_by_status_alone() {
    let mut before = cell("migrator", "pgbouncer-transaction", "1: ok", 1.0);
    before.readings_vary = true;
    let mut after = cell("migrator", "pgbouncer-transaction", "1: failed", 1.0);
    after.readings_vary = true;
    let c = compare(
        &baseline(vec![before], "1", "x"),
        &baseline(vec![after], "1", "x"),
        Tolerance::default(),
        &|_| true,
    );
    assert!(c.is_clean(), "{:?}", c.diffs);
    assert!(c.notes[0].changes[0].contains("not compared"), "{:?}", c.notes);
    let c = compare(
        &baseline(vec![cell("other", "pgbouncer-transaction", "1: ok", 1.0)], "1", "x"),
        &baseline(vec![cell("other", "pgbouncer-transaction", "1: failed", 1.0)], "1", "x"),
        Tolerance::default(),
        &|_| true,
    );
    assert!(!c.is_clean(), "a scenario without readings_vary compares its readings");
}

/// A baseline written before the variation rule keeps no variants of a cell
/// it called unstable: that compares by status alone, as then.
#[test]
fn an_unstable_cell_of_an_old_baseline_compares_by_status_alone() {
    let mut old = cell("s", "a", "true", 1.0);
    old.status = crate::outcome::Status::Varies;
    let before = baseline(vec![old], "1", "x");
    let c = compare(
        &before,
        &baseline(vec![cell("s", "a", "false", 1.0)], "1", "x"),
        Tolerance::default(),
        &|_| true,
    );
    assert!(c.is_clean(), "{:?}", c.diffs);
    let mut failed = cell("s", "a", "true", 1.0);
    failed.status = crate::outcome::Status::Fail;
    let c = compare(
        &before,
        &baseline(vec![failed], "1", "x"),
        Tolerance::default(),
        &|_| true,
    );
    assert_eq!(c.diffs.len(), 1, "{:?}", c.diffs);
}
