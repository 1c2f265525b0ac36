//! The evaluator on hand-built cells: holds, violated, n/a and undecided for
//! each kind of rule, race rows, status rules, and verdict changes.

use indexmap::IndexMap;

use super::*;
use crate::baseline::{BaselineObservation, Share};
use crate::outcome::{LocksLeft, Value, Verdict};
use crate::properties::{ReadingRule, When};

fn rule(when: When, reads: Reads) -> ReadingRule {
    ReadingRule {
        when,
        reads,
        says: None,
        advice: None,
    }
}

fn is(b: bool) -> When {
    When {
        is: Some(super::super::Scalar::Bool(b)),
        ..When::default()
    }
}

/// A property decided by `record` of scenario `s`: true holds, false violated.
fn property(s: &str, record: Option<&str>, readings: Vec<ReadingRule>) -> Property {
    Property {
        id: "p".into(),
        rule: "r".into(),
        source: "s".into(),
        severity: Severity::Unsafe,
        scope: Scope::Column,
        advice: "a".into(),
        for_poolers: None,
        remedies: Vec::new(),
        dimensions: Vec::new(),
        witnesses: Vec::new(),
        decided_by: vec![Decider {
            scenario: s.into(),
            record: record.map(str::to_owned),
            readings,
            witness: None,
            coordinates: Default::default(),
        }],
        file: "p.yaml".into(),
    }
}

fn bool_property() -> Property {
    property(
        "s",
        Some("x"),
        vec![rule(is(true), Reads::Holds), rule(is(false), Reads::Violated)],
    )
}

fn obs(value: Value) -> BaselineObservation {
    BaselineObservation {
        seen: Seen::Value(Reading::plain(value)),
        sqlstate: None,
        p50_ms: None,
        shares: None,
        trials: None,
    }
}

fn cell(scenario: &str, status: Status, observations: Vec<(&str, BaselineObservation)>) -> BaselineCell {
    BaselineCell {
        scenario: scenario.into(),
        driver: "d".into(),
        status,
        observations: observations
            .into_iter()
            .map(|(n, o)| (n.to_owned(), o))
            .collect::<IndexMap<_, _>>(),
        locks_left: LocksLeft::default(),
        cleaned_backends: 0,
        backends_left: 0,
        pressure: None,
        readings_vary: false,
        variants: Vec::new(),
    }
}

fn verdict(p: &Property, cells: &[BaselineCell]) -> ColumnVerdict {
    evaluate(
        std::slice::from_ref(p),
        cells,
        &[crate::properties::Column::unknown("d")],
    )[0]
    .columns[0]
        .clone()
}

#[test]
fn a_reading_holds_or_violates() {
    let p = bool_property();
    let holds = verdict(&p, &[cell("s", Status::Pass, vec![("x", obs(Value::Bool(true)))])]);
    assert_eq!(holds.verdict, Mark::Holds);
    let violated = verdict(&p, &[cell("s", Status::Pass, vec![("x", obs(Value::Bool(false)))])]);
    assert_eq!(violated.verdict, Mark::Violated);
    assert_eq!(violated.evidence[0].reading, "false");
    // Every parameter set of the file decides: one violating set is enough.
    let sets = verdict(
        &p,
        &[
            cell("s[k=1]", Status::Pass, vec![("x", obs(Value::Bool(true)))]),
            cell("s[k=2]", Status::Pass, vec![("x", obs(Value::Bool(false)))]),
        ],
    );
    assert_eq!(sets.verdict, Mark::Violated);
    assert_eq!(sets.evidence.len(), 2);
}

#[test]
fn not_applicable_and_its_reasons() {
    let p = bool_property();
    // No deciding cell.
    let none = verdict(&p, &[cell("other", Status::Pass, vec![])]);
    assert_eq!(none.verdict, Mark::NotApplicable);
    assert_eq!(none.reasons, ["no deciding cell in this run"]);
    // The cell is n/a: its own reason.
    let skipped = verdict(
        &p,
        &[cell(
            "s",
            Status::NotApplicable,
            vec![("x", obs(Value::SettingsCannotPass))],
        )],
    );
    assert_eq!(skipped.verdict, Mark::NotApplicable);
    assert!(skipped.reasons[0].starts_with("n/a ("), "{:?}", skipped.reasons);
    // A value that does not apply, unmatched by a rule.
    let step = verdict(&p, &[cell("s", Status::Pass, vec![("x", obs(Value::NotApplicable))])]);
    assert_eq!(step.verdict, Mark::NotApplicable);
    // An explicit n/a rule on one record makes the cell's other records decide nothing.
    let mut gated = bool_property();
    gated.decided_by.push(Decider {
        scenario: "s".into(),
        record: Some("api".into()),
        readings: vec![ReadingRule {
            says: Some("no such API".into()),
            ..rule(
                When {
                    kind: Some("unsupported".into()),
                    ..When::default()
                },
                Reads::NotApplicable,
            )
        }],
        witness: None,
        coordinates: Default::default(),
    });
    let v = verdict(
        &gated,
        &[cell(
            "s",
            Status::Pass,
            vec![
                ("x", obs(Value::Bool(false))),
                ("api", obs(Value::Unsupported(String::new()))),
            ],
        )],
    );
    assert_eq!(v.verdict, Mark::NotApplicable, "{v:?}");
    assert_eq!(v.reasons, ["no such API"]);
}

#[test]
fn undecided_when_a_cell_failed_or_a_reading_is_not_read() {
    let p = bool_property();
    let failed = verdict(&p, &[cell("s", Status::Fail, vec![("x", obs(Value::Bool(true)))])]);
    assert_eq!(failed.verdict, Mark::Undecided);
    assert_eq!(failed.reasons, ["the cell is fail"]);
    let unread = verdict(&p, &[cell("s", Status::Pass, vec![("x", obs(Value::Int(7)))])]);
    assert_eq!(unread.verdict, Mark::Undecided);
    assert!(unread.reasons[0].contains("`7` is not read"), "{:?}", unread.reasons);
    // A violation elsewhere still decides.
    let both = verdict(
        &p,
        &[
            cell("s[k=1]", Status::Fail, vec![]),
            cell("s[k=2]", Status::Pass, vec![("x", obs(Value::Bool(false)))]),
        ],
    );
    assert_eq!(both.verdict, Mark::Violated);
}

#[test]
fn a_race_row_violates_when_any_trial_did() {
    let p = property(
        "s",
        Some("invariant i"),
        vec![
            rule(
                When {
                    invariant: Some(Verdict::Holds),
                    ..When::default()
                },
                Reads::Holds,
            ),
            rule(
                When {
                    invariant: Some(Verdict::Violated),
                    ..When::default()
                },
                Reads::Violated,
            ),
        ],
    );
    let race = |holds: u64, violated: u64| {
        let n = holds + violated;
        let share = |v: Verdict, c: u64| Share {
            reading: Reading::plain(Value::Invariant(v)),
            share: c as f64 / n.max(1) as f64,
            count: Some(c),
        };
        BaselineObservation {
            seen: Seen::Value(Reading::plain(Value::Invariant(Verdict::Finding))),
            sqlstate: None,
            p50_ms: None,
            shares: Some(vec![share(Verdict::Holds, holds), share(Verdict::Violated, violated)]),
            trials: Some(n),
        }
    };
    let v = verdict(&p, &[cell("s", Status::Pass, vec![("invariant i", race(990, 10))])]);
    assert_eq!(v.verdict, Mark::Violated);
    assert_eq!(v.evidence[0].trials, Some(TrialCount { violated: 10, of: 1000 }));
    let v = verdict(&p, &[cell("s", Status::Pass, vec![("invariant i", race(1000, 0))])]);
    assert_eq!(v.verdict, Mark::Holds);
    assert_eq!(v.evidence[0].trials, Some(TrialCount { violated: 0, of: 1000 }));
    let v = verdict(&p, &[cell("s", Status::Pass, vec![("invariant i", race(0, 0))])]);
    assert_eq!(v.verdict, Mark::NotApplicable);
}

#[test]
fn a_status_rule_reads_the_cell() {
    let p = property(
        "s",
        None,
        vec![
            rule(
                When {
                    status: Some(Status::Pass),
                    ..When::default()
                },
                Reads::Holds,
            ),
            rule(
                When {
                    status: Some(Status::Deviates),
                    ..When::default()
                },
                Reads::Violated,
            ),
        ],
    );
    assert_eq!(verdict(&p, &[cell("s", Status::Pass, vec![])]).verdict, Mark::Holds);
    assert_eq!(
        verdict(&p, &[cell("s", Status::Deviates, vec![])]).verdict,
        Mark::Violated
    );
}

#[test]
fn changes_name_the_property_column_and_cell() {
    let p = bool_property();
    let before = evaluate(
        std::slice::from_ref(&p),
        &[cell("s", Status::Pass, vec![("x", obs(Value::Bool(true)))])],
        &[crate::properties::Column::unknown("d")],
    );
    let after = evaluate(
        std::slice::from_ref(&p),
        &[cell("s", Status::Pass, vec![("x", obs(Value::Bool(false)))])],
        &[crate::properties::Column::unknown("d")],
    );
    assert!(changes(&before, &before).is_empty());
    let c = changes(&before, &after);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].before, c[0].after), (Mark::Holds, Mark::Violated));
    assert_eq!(c[0].cells, ["s"]);
    assert!(!c[0].race);
}

/// A property that declares pool size: a column tried at pool size 1 only
/// holds where tried, with what was not tried; tried at both, it holds; a
/// violation is a violation whatever was tried; a column without a pool has
/// no pool size to try.
#[test]
fn an_untried_dimension_value_reads_holds_where_tried() {
    use crate::properties::{Applies, Column, Coordinates, Dimension};
    let mut p = bool_property();
    p.dimensions = vec![
        (Dimension::PoolSize, Applies::Applies),
        (Dimension::GiveUp, Applies::DoesNotApply("nothing is given up".into())),
    ];
    let at = |n: u32| Coordinates {
        pool_size: Some(n),
        ..Coordinates::default()
    };
    p.decided_by[0].scenario = "s".into();
    p.decided_by[0].coordinates = [("s[n=1]".to_owned(), at(1)), ("s[n=2]".to_owned(), at(2))].into();
    let pooled = Column::unknown("d");
    let judge = |cells: &[BaselineCell], column: &Column| {
        evaluate(std::slice::from_ref(&p), cells, std::slice::from_ref(column))[0].columns[0].clone()
    };
    let one = cell("s[n=1]", Status::Pass, vec![("x", obs(Value::Bool(true)))]);
    let two = cell("s[n=2]", Status::Pass, vec![("x", obs(Value::Bool(true)))]);
    let v = judge(std::slice::from_ref(&one), &pooled);
    assert_eq!(v.verdict, Mark::HoldsWhereTried, "{v:?}");
    let c = v.coverage.unwrap();
    assert_eq!(c.untried_text(), "pool size ≥ 2");
    assert_eq!(c.tried_text(), "pool size 1");
    let v = judge(&[one.clone(), two], &pooled);
    assert_eq!(v.verdict, Mark::Holds, "{v:?}");
    assert_eq!(v.coverage.unwrap().tried_text(), "pool size 1, pool size ≥ 2");
    let broken = cell("s[n=1]", Status::Pass, vec![("x", obs(Value::Bool(false)))]);
    assert_eq!(judge(&[broken], &pooled).verdict, Mark::Violated);
    let direct = Column {
        id: "d".into(),
        pooled: false,
        pooler: None,
        lock_crate: false,
    };
    assert_eq!(judge(&[one], &direct).verdict, Mark::Holds);
}

/// A cell whose repeats read `x` as each of `readings`, that many repeats each.
fn varying(readings: &[(bool, usize)]) -> BaselineCell {
    let mut c = cell("s", Status::Varies, vec![("x", obs(Value::Bool(readings[0].0)))]);
    c.variants = readings
        .iter()
        .map(|(b, n)| crate::outcome::Variant {
            repeats: *n,
            outcome: crate::outcome::Outcome {
                status: Status::Pass,
                observations: vec![crate::outcome::Recorded {
                    name: "x".into(),
                    seen: Seen::Value(Reading::plain(Value::Bool(*b))),
                    sqlstate: None,
                }],
                locks_left: LocksLeft::default(),
                cleaned_backends: 0,
                backends_left: 0,
            },
        })
        .collect();
    c
}

/// The variation rule: a cell whose repeats read differently is judged
/// over every repeat, never undecided for varying.
#[test]
fn a_varying_cell_is_violated_when_one_repeat_violated() {
    let p = bool_property();
    let once = verdict(&p, &[varying(&[(true, 2), (false, 1)])]);
    assert_eq!(once.verdict, Mark::Violated);
    assert_eq!(
        once.evidence[0].repeats,
        Some(crate::properties::RepeatCount { violated: 1, of: 3 })
    );
    assert_eq!(once.evidence[0].reading, "varied over 3 repeats: true ×2; false ×1");
    // Every repeat held: holds.
    let both = varying(&[(true, 2), (true, 1)]);
    assert_eq!(verdict(&p, &[both]).verdict, Mark::Holds);
}
