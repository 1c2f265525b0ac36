//! Property files without a server: the shipped ones validate against the
//! shipped scenarios, every broken fixture gives its error at its place, the
//! schema is the generated one, and on the committed report every property
//! can fail: a real column violates it, or, where none does, a cell made
//! deliberately wrong (one reading replaced) does.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use locklab::baseline::{Baseline, BaselineCell};
use locklab::outcome::{Reading, Seen, Value};
use locklab::properties::{self, Column, Mark, Property, Scope};
use locklab::scenario::{self, Scenario};
use rstest::rstest;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn scenarios() -> &'static [Scenario] {
    static S: OnceLock<Vec<Scenario>> = OnceLock::new();
    S.get_or_init(|| scenario::load_dir(&root().join("scenarios")).unwrap())
}

fn shipped() -> &'static [Property] {
    static P: OnceLock<Vec<Property>> = OnceLock::new();
    P.get_or_init(|| {
        properties::load_dir(&root().join("properties"), scenarios()).unwrap_or_else(|errors| {
            panic!(
                "{}",
                errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
            )
        })
    })
}

/// The committed report.
fn committed_report() -> &'static locklab::report::Report {
    static R: OnceLock<locklab::report::Report> = OnceLock::new();
    R.get_or_init(|| locklab::judge::load(&root().join("reports/matrix.json")).unwrap())
}

/// The committed report's cells, as the baseline keeps them.
fn committed() -> &'static Baseline {
    static B: OnceLock<Baseline> = OnceLock::new();
    B.get_or_init(|| Baseline::from_report(committed_report()).unwrap())
}

/// The committed report's columns, with whether each is pooled and its pooler's mode.
fn drivers() -> Vec<Column> {
    committed_report().drivers.iter().map(Column::of).collect()
}

#[test]
fn shipped_properties_validate() {
    let ids: Vec<&str> = shipped().iter().map(|p| p.id.as_str()).collect();
    // The guide's Verification list and the starting set.
    for required in [
        "session-lock-released-on-return",
        "lock-timeout-ends-wait",
        "set-local-confined-to-transaction",
        "given-up-call-leaves-no-ghost-lock",
        "cancel-request-ends-wait",
        "lock-error-means-not-held",
        "crashed-holder-released",
        "unlock-reaches-the-session",
        "session-semantics-hold",
        "connection-usable-after-given-up-call",
        "lock-guard-releases",
    ] {
        assert!(ids.contains(&required), "missing property {required}; have {ids:?}");
    }
}

/// Each fixture's first line is `# expect: LINE:COLUMN message-prefix`.
#[rstest]
fn broken_property_reports_its_error_and_location(
    #[files("tests/fixtures/invalid-properties/properties/*.yaml")] path: PathBuf,
) {
    common::assert_expected_error(&path, properties::load_file(&path, scenarios()));
}

/// `locklab validate` on the fixtures' directory: every error, located, exit 1.
#[test]
fn validate_names_every_broken_property_file() {
    let dir = root().join("harness/tests/fixtures/invalid-properties/properties");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_locklab"))
        .arg("validate")
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let fixtures = std::fs::read_dir(&dir).unwrap().count();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().path();
        assert!(
            stderr.contains(&format!("{}:", name.display())),
            "{} not named in:\n{stderr}",
            name.display()
        );
    }
    assert!(fixtures >= 10);
}

/// The shipped schema is the one generated from the property types
/// (regenerate with `cargo locklab schema property > properties/property.schema.json`).
#[test]
fn shipped_property_schema_is_up_to_date() {
    let shipped: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("properties/property.schema.json")).unwrap())
            .unwrap();
    assert!(
        shipped == properties::json_schema(),
        "properties/property.schema.json is stale: run `cargo locklab schema property > properties/property.schema.json`"
    );
}

/// Every reading of the committed report that decides a property is read by
/// one of its rules: no verdict is undecided (a new reading, say after a
/// pool upgrade, makes the property say what it means by it). A cell whose
/// repeats read differently is judged over each of them (the variation
/// rule); only a baseline written before that rule, which kept no variants,
/// leaves it undecided, for that reason alone.
#[test]
fn every_deciding_reading_of_the_committed_report_is_read() {
    let verdicts = properties::evaluate(shipped(), &committed().cells, &drivers());
    let undecided: Vec<String> = verdicts
        .iter()
        .flat_map(|p| {
            p.columns
                .iter()
                .filter(|c| c.verdict == Mark::Undecided)
                .filter(|c| !c.reasons.iter().all(|r| r == properties::VARIES_UNKEPT))
                .map(move |c| format!("{} × {}: {}", p.id, c.driver, c.reasons.join("; ")))
        })
        .collect();
    assert!(undecided.is_empty(), "undecided:\n{}", undecided.join("\n"));
}

/// A copy of `cell` whose observation `record` reads `value`.
fn with_reading(cell: &BaselineCell, record: &str, value: Value) -> BaselineCell {
    let mut cell = cell.clone();
    let o = cell
        .observations
        .get_mut(record)
        .unwrap_or_else(|| panic!("{} records {record}", cell.scenario));
    o.seen = Seen::Value(Reading::plain(value));
    o.shares = None;
    o.trials = None;
    cell
}

/// No property is a check that cannot fail. Where a column of the
/// committed report violates it, that is the proof; where none does, the
/// tokio-postgres column (the sqlx column, for a property of sqlx's guard
/// or of a job queue; a column of the lock crate for one only its cells decide)
/// is made deliberately wrong in one reading (the value a broken driver
/// would have given) and must then violate it.
#[test]
fn every_property_is_violated_by_a_column_or_by_a_deliberately_wrong_cell() {
    let cells = &committed().cells;
    let drivers = drivers();
    let held = || {
        Value::Locks(locklab::outcome::LockSnapshot {
            held: true,
            holders: vec![locklab::outcome::LockHolder {
                actor: Some("worker".into()),
                pid: 0,
                state: Some("idle".into()),
                key: locklab::keys::AdvisoryKey::Big(1),
                mode: "ExclusiveLock".into(),
                wait: None,
                xmin: None,
            }],
            waiters: vec![],
        })
    };
    // property → (scenario, record, the broken reading)
    let wrong: Vec<(&str, &str, &str, Value)> = vec![
        (
            "set-local-confined-to-transaction",
            "set-local-confined-to-transaction",
            "after_commit",
            Value::Text("123ms".into()),
        ),
        (
            "lock-timeout-ends-wait",
            "lock-timeout-200ms",
            "lock_timeout_wait",
            Value::Bool(true),
        ),
        (
            "xact-lock-released-at-transaction-end",
            "xact-released-by-rollback",
            "held_after_rollback",
            held(),
        ),
        (
            "pooler-unpins-after-release",
            "pooler-released-lock-unpins[release=failed-try]",
            "other_client_while_first_idle",
            Value::Wait(locklab::outcome::Wait::QueuedInPooler),
        ),
        (
            "lock-guard-deferred-unlock-runs",
            "lock-guard-deferred-unlock[acquire=wait]",
            "held_after_return",
            held(),
        ),
        (
            "job-worker-lock-ends-with-job",
            "job-queue-worker[queue=graphile-worker,end=kill]",
            "worker",
            Value::Text(
                "worker: running; advisory locks while the job runs: 0; worker: killed; advisory locks left: 1; the job ran 1×"
                    .into(),
            ),
        ),
        (
            "rails-migrator-runs-once",
            "rails-migrator-concurrent[kill_first=false]",
            "migrators",
            Value::Text(
                "1: ok, 2: ok, 3: failed (ConcurrentMigrationError); the migration ran 2×; advisory locks left: 0".into(),
            ),
        ),
        (
            "library-error-means-not-held",
            "lock-crate-races[race=lock_timeout]",
            "invariant not-acquired-leaves-no-lock",
            Value::Invariant(locklab::outcome::Verdict::Violated),
        ),
        (
            "cancel-request-ends-wait",
            "cancel-timeout-session-lock[on_timeout=cancel]",
            "lock_call",
            Value::Dropped {
                at_ms: 200,
                cancel: locklab::outcome::Cancel::NoEffect(1000),
            },
        ),
    ];
    let real = properties::evaluate(shipped(), cells, &drivers);
    for p in shipped() {
        let verdicts = real.iter().find(|v| v.id == p.id).unwrap();
        if verdicts.count(Mark::Violated) > 0 {
            continue;
        }
        let Some((_, scenario, record, value)) = wrong.iter().find(|w| w.0 == p.id) else {
            panic!(
                "no column of the committed report violates {} and the test has no deliberately wrong cell for it",
                p.id
            );
        };
        // A property of an API only some drivers have (sqlx's guard, a
        // job queue on sqlx 0.9, Rails' migrator on ActiveRecord) is broken
        // on such a column; the others are n/a there.
        let column = if p.id.starts_with("lock-guard-") || p.id.starts_with("job-") {
            "sqlx"
        } else if p.id.starts_with("rails-") {
            "activerecord"
        } else if p.id.starts_with("library-error-") {
            // Decided by the lock crate's cells only.
            "pg-advisory-lock+deadpool"
        } else {
            "tokio-postgres"
        };
        assert!(
            matches!(
                verdicts.of(column).unwrap().verdict,
                Mark::Holds | Mark::HoldsWhereTried
            ),
            "{} holds (where tried) with {column} before the change",
            p.id
        );
        let broken: Vec<BaselineCell> = cells
            .iter()
            .map(|c| {
                if c.driver == column && c.scenario == *scenario {
                    with_reading(c, record, value.clone())
                } else {
                    c.clone()
                }
            })
            .collect();
        let after = properties::evaluate(std::slice::from_ref(p), &broken, &drivers);
        let v = after[0].of(column).unwrap();
        assert_eq!(v.verdict, Mark::Violated, "{}: {v:?}", p.id);
        assert_eq!(after[0].count(Mark::Violated), 1, "{}: only the broken column", p.id);
    }
}

/// The example of a server finding: `lock-error-means-not-held` is
/// a server property, violated through most columns that run the race
/// cells (PostgreSQL grants the lock as the timeout fires), and a column
/// without a cancel API has no trial that decides it.
#[test]
fn the_lock_error_race_is_a_server_finding() {
    let verdicts = properties::evaluate(shipped(), &committed().cells, &drivers());
    let p = verdicts.iter().find(|v| v.id == "lock-error-means-not-held").unwrap();
    assert_eq!(p.scope, Scope::Server);
    let violated = p.count(Mark::Violated);
    let decided = violated + p.count(Mark::Holds);
    assert!(violated * 2 > decided, "{violated} of {decided}");
    for c in p.columns.iter().filter(|c| c.verdict == Mark::Violated) {
        let trials = c.evidence.iter().filter_map(|e| e.trials).find(|t| t.violated > 0);
        assert!(trials.is_some(), "{}: a race verdict names its trials", c.driver);
    }
}

use common::locklab;

/// `locklab verdict` as a CI gate on the committed report: a column with
/// no unsafe violation passes `--require-severity unsafe`, one with a
/// violation fails it naming the property and the deciding cell, and
/// `--require` of a property the column does not violate passes; an
/// unknown property id is refused.
#[test]
fn verdict_require_gates_a_column() {
    let matrix = root().join("reports/matrix.json");
    let matrix = matrix.to_str().unwrap();
    let ok = locklab(&[
        "verdict",
        "--from",
        matrix,
        "-d",
        "asyncpg-0.32",
        "--require-severity",
        "unsafe",
    ]);
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(stdout.contains("### `asyncpg-0.32`"), "no card:\n{stdout}");
    assert!(
        !stdout.contains("### `deadpool-fast`"),
        "-d selects the cards:\n{stdout}"
    );

    let bad = locklab(&[
        "verdict",
        "--from",
        matrix,
        "-d",
        "deadpool-fast",
        "--require-severity",
        "unsafe",
    ]);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("deadpool-fast violates session-lock-released-on-return (unsafe, required) on pg17: session-lock-pool-return · held_after_return"),
        "{stderr}"
    );
    // The server finding fails no column.
    assert!(!stderr.contains("lock-error-means-not-held"), "{stderr}");

    let one = locklab(&[
        "verdict",
        "--from",
        matrix,
        "-d",
        "deadpool-fast",
        "--require",
        "lock-timeout-ends-wait,set-local-confined-to-transaction",
    ]);
    assert_eq!(one.status.code(), Some(0), "{}", String::from_utf8_lossy(&one.stderr));

    let unknown = locklab(&["verdict", "--from", matrix, "--require", "no-such-property"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no property 'no-such-property'"));
}

/// A server finding that no selected cell decides is marked undecided and
/// says so, not "holds through all 0 columns" (found by an outsider running
/// `verdict` on three scenarios): one cell on a local cluster.
#[test]
fn a_finding_no_selected_cell_decides_says_so() {
    let out = locklab(&[
        "verdict",
        "-s",
        "session-lock-pool-return",
        "-d",
        "tokio-postgres",
        "--backend",
        "local",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("? **dead-holder-noticed** (informational)") && stdout.contains("No selected cell decides it."),
        "{stdout}"
    );
    assert!(!stdout.contains("through all 0 columns"), "{stdout}");
}

/// `check` prints a changed verdict first, above the value change that
/// caused it: the committed report against a copy of its baseline with one
/// value changed (psycopg-pool's lock after the return: held → not held).
#[test]
fn check_shows_the_verdict_change_first() {
    let dir = tempfile::tempdir().unwrap();
    let matrix = root().join("reports/matrix.json");
    let report = locklab::judge::load(&matrix).unwrap();
    let mut baseline = Baseline::from_report(&report).unwrap();
    // The baseline as it would be if psycopg_pool released the lock on
    // return: every lock snapshot of its cells of the two scenarios that
    // decide the property reads not held.
    let mut changed = 0;
    for cell in baseline
        .cells
        .iter_mut()
        .filter(|c| c.scenario.starts_with("session-lock-pool-return") && c.driver == "psycopg-pool")
    {
        for o in cell.observations.values_mut() {
            if matches!(&o.seen, Seen::Value(r) if matches!(r.value, Value::Locks(_))) {
                o.seen = Seen::Value(Reading::plain(Value::Locks(locklab::outcome::LockSnapshot {
                    held: false,
                    holders: vec![],
                    waiters: vec![],
                })));
                changed += 1;
            }
        }
    }
    assert!(changed >= 2, "no lock snapshot of psycopg-pool to change");
    let path = dir.path().join("baseline");
    baseline.save_as_dir(&path).unwrap();
    let out = locklab(&[
        "check",
        "--from",
        matrix.to_str().unwrap(),
        "--baseline",
        path.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    // `holds` or `holds where tried` before, as the baseline's cells cover it.
    let verdict = stdout
        .lines()
        .position(|l| {
            l.contains("session-lock-released-on-return × psycopg-pool: holds")
                && l.contains("→ violated (unsafe; decided by session-lock-pool-return")
        })
        .map(|n| stdout.lines().take(n).map(|l| l.len() + 1).sum::<usize>())
        .unwrap_or_else(|| panic!("no verdict line:\n{stdout}"));
    let value = stdout
        .find("`held_after_return`: not held → held by worker (idle)")
        .unwrap_or_else(|| panic!("no value line:\n{stdout}"));
    assert!(verdict < value, "the verdict comes first:\n{stdout}");
}

/// Issue 52: every unsafe property declares every dimension (the loader
/// refuses one that does not: `undeclared-dimension.yaml`), and on the
/// committed report each of its column verdicts says what it was tried
/// across; a verdict with an untried value of a dimension that applies is
/// never ✓ (it is ◐ "holds where tried"), in the verdicts and in the
/// Markdown the report shows.
#[test]
fn an_untried_dimension_is_never_shown_as_holds() {
    let verdicts = properties::evaluate(shipped(), &committed().cells, &drivers());
    let mut partly = 0;
    for p in verdicts.iter().filter(|p| p.severity == properties::Severity::Unsafe) {
        let declared = shipped().iter().find(|q| q.id == p.id).unwrap();
        assert_eq!(
            declared.dimensions.len(),
            properties::Dimension::ALL.len(),
            "{} declares {:?}",
            p.id,
            declared.dimensions
        );
        for c in &p.columns {
            if matches!(c.verdict, Mark::Holds | Mark::Violated | Mark::HoldsWhereTried) {
                assert!(c.coverage.is_some(), "{} × {}: no coverage", p.id, c.driver);
            }
            let untried = c.coverage.as_ref().is_some_and(properties::Coverage::has_untried);
            assert!(
                !(untried && c.verdict == Mark::Holds),
                "{} × {} reads holds with {}",
                p.id,
                c.driver,
                c.coverage.as_ref().unwrap().untried_text()
            );
            if c.verdict == Mark::HoldsWhereTried {
                assert!(
                    untried,
                    "{} × {}: holds where tried, with nothing untried",
                    p.id, c.driver
                );
                partly += 1;
            }
        }
    }
    // The rendered grid marks them so: as many ◐ links as such verdicts.
    let md = std::fs::read_to_string(root().join("reports/matrix.md")).unwrap();
    let grid = md
        .split("### Properties × columns")
        .nth(1)
        .unwrap()
        .split("### A card per column")
        .next()
        .unwrap();
    let all_partly = verdicts
        .iter()
        .filter(|p| p.scope == Scope::Column)
        .flat_map(|p| &p.columns)
        .filter(|c| c.verdict == Mark::HoldsWhereTried)
        .count();
    assert_eq!(
        grid.matches("[◐]").count(),
        all_partly,
        "reports/matrix.md is stale: just report --from"
    );
    assert!(partly > 0 || all_partly == 0);
}

/// Issue 52: on the committed report, every card's "Do:" for an unsafe
/// violation is a remedy proven in the same report (a column of the same pool
/// or pooler that follows it and holds the property, or a cell of the same
/// column), and names what proves it.
#[test]
fn every_unsafe_violation_on_a_card_names_the_cell_that_proves_its_advice() {
    let report = committed_report();
    let view = locklab::report::verdicts::VerdictView::of(report);
    let mut unproven = Vec::new();
    let mut proven = 0;
    for s in &view.servers {
        for card in &s.cards {
            for line in card
                .lines
                .iter()
                .filter(|l| l.verdict == "violated" && l.severity == "unsafe")
            {
                match &line.proven {
                    Some(p) => {
                        proven += 1;
                        assert!(report.drivers.iter().any(|d| d.id == p.column), "{p:?}");
                        assert!(!p.proof.is_empty());
                    }
                    None => unproven.push(format!("{} × {}", line.id, card.driver)),
                }
            }
        }
    }
    assert!(unproven.is_empty(), "no proven remedy:\n{}", unproven.join("\n"));
    assert!(proven > 0);
    // Every column a remedy names is a column of the report: a typo proves nothing.
    for p in shipped() {
        for r in &p.remedies {
            if let properties::Proof::Columns(ids) | properties::Proof::Instead(ids) = &r.proven_by {
                for id in ids {
                    assert!(
                        report.drivers.iter().any(|d| &d.id == id),
                        "{}: remedy names column '{id}', which the committed report does not have",
                        p.id
                    );
                }
            }
        }
    }
}

/// Issue 52: every recorded reading of a kind a property is about decides
/// it. A recorded step that calls pg_advisory_unlock in a form the witness
/// cannot read fails here, with why (it would decide nothing); every kind
/// of witness is selected by a shipped property; and every witness of a
/// shipped scenario, the user reports' included, is one of its deciders.
#[test]
fn every_recorded_witness_decides_a_property() {
    use locklab::properties::witness::{self, WitnessKind};
    let unread: Vec<String> = scenarios()
        .iter()
        .flat_map(|s| {
            witness::unread(s)
                .into_iter()
                .map(move |(record, why)| format!("{} · {record}: {why}", s.name))
        })
        .collect();
    assert!(
        unread.is_empty(),
        "recorded readings that decide nothing:\n{}",
        unread.join("\n")
    );
    for kind in WitnessKind::ALL {
        let selecting: Vec<&Property> = shipped().iter().filter(|p| p.witnesses.contains(kind)).collect();
        assert!(
            !selecting.is_empty(),
            "no property selects the witness {}",
            kind.as_str()
        );
        for s in scenarios() {
            for w in witness::of_scenario(s).into_iter().filter(|w| w.meaning.kind == *kind) {
                for p in &selecting {
                    assert!(
                        p.decided_by
                            .iter()
                            .any(|d| d.scenario == w.scenario && d.record.as_deref() == Some(w.record.as_str())),
                        "{} · {} witnesses {} but does not decide {}",
                        w.scenario,
                        w.record,
                        kind.as_str(),
                        p.id
                    );
                }
            }
        }
    }
    // The user reports that record an unlock decide the unlock property.
    let unlock = shipped().iter().find(|p| p.id == "unlock-reaches-the-session").unwrap();
    for report in [
        "report-mockforge-968",
        "report-oban-52",
        "report-rails-32622",
        "report-authentik-23876",
    ] {
        assert!(
            unlock.decided_by.iter().any(|d| d.scenario == report),
            "{report} does not decide unlock-reaches-the-session"
        );
    }
}
