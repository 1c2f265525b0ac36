//! Scenario files without a server: every shipped scenario validates, and every
//! deliberately broken fixture gives its expected error at its expected place.

use std::path::{Path, PathBuf};

use locklab::scenario::{self, Scalar, StepKind};
use rstest::rstest;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn shipped_scenarios_validate() {
    let scenarios = scenario::load_dir(&root().join("scenarios")).unwrap_or_else(|errors| {
        panic!(
            "{}",
            errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n")
        )
    });
    let names: Vec<&str> = scenarios.iter().map(|s| s.name.as_str()).collect();
    for required in [
        "xact-lock-competition",
        "lock-timeout-200ms",
        "session-lock-pool-return",
    ] {
        assert!(names.contains(&required), "missing scenario {required}; have {names:?}");
    }
}

/// Each fixture's first line is `# expect: LINE:COLUMN message-prefix`.
#[rstest]
fn broken_fixture_reports_its_error_and_location(#[files("tests/fixtures/invalid/*.yaml")] path: PathBuf) {
    let text = std::fs::read_to_string(&path).unwrap();
    let header = text
        .lines()
        .next()
        .unwrap()
        .strip_prefix("# expect: ")
        .expect("fixture lacks '# expect: L:C message'");
    let (at, message) = header.split_once(' ').unwrap();
    let errors = match scenario::load_file(&path) {
        Ok(_) => panic!("{} loaded without error", path.display()),
        Err(e) => e,
    };
    let first = &errors[0];
    let rendered = first.to_string();
    assert_eq!(
        format!("{}:{}", first.pos.line, first.pos.column),
        at,
        "wrong location in: {rendered}"
    );
    assert!(
        rendered.starts_with(&format!("{}:{at}: ", path.display())),
        "not file:line:col: {rendered}"
    );
    assert!(
        first.message.starts_with(message.trim()),
        "message {:?} does not start with {:?}",
        first.message,
        message.trim()
    );
}

#[test]
fn a_missing_file_is_an_error_not_a_panic() {
    let errors = scenario::load_file(Path::new("no/such/file.yaml")).unwrap_err();
    assert!(
        errors[0]
            .to_string()
            .starts_with("no/such/file.yaml:1:1: cannot read file"),
        "{}",
        errors[0]
    );
}

#[test]
fn format_features_parse_into_the_model() {
    let text = r#"
name: parse-check
description: every step kind
step_deadline_ms: 2500
pool: { max_size: 2 }
actors:
  w: { via: pool }
  obs: { via: direct }
steps:
  - { actor: w, do: checkout }
  - actor: w
    sql: select pg_backend_pid()
    save: w_pid
  - actor: w
    id: bg
    sql: select pg_advisory_lock(1, -2)
    background: true
    deadline_ms: 700
  - { actor: obs, blocked: w }
  - await: bg
    expect: { value: null, elapsed_ms: { max: 900 } }
  - actor: obs
    observe: advisory_locks
    key: [1, -2]
    expect: { held: true, holders: { pid: w_pid, state: idle } }
    record: held
  - actor: w
    when: pooled
    sql: select ${w_pid}
    expect: { error: 55P03 }
"#;
    let all = scenario::parse(Path::new("inline.yaml"), text).unwrap_or_else(|e| panic!("{e:?}"));
    let s = &all[0];
    assert_eq!(s.pool_max_size, 2);
    assert_eq!(s.steps.len(), 7);
    assert_eq!(s.steps[1].deadline_ms, 2500);
    assert_eq!(s.steps[2].deadline_ms, 700);
    assert!(s.steps[2].background);
    assert_eq!(s.steps[3].kind, StepKind::Blocked(vec![0]));
    assert_eq!(s.steps[4].kind, StepKind::Await(2));
    assert_eq!(s.steps[4].actor, 0);
    assert_eq!(s.steps[4].expect.as_ref().unwrap().value, Some(Scalar::Null));
    assert_eq!(
        s.steps[5].kind,
        StepKind::Observe(
            scenario::ObserveKind::AdvisoryLocks,
            Some(locklab::keys::AdvisoryKey::Pair(1, -2))
        )
    );
    assert_eq!(s.steps[6].expect.as_ref().unwrap().error.as_deref(), Some("55P03"));
    assert_eq!((s.steps[6].pos.line, s.steps[6].pos.column), (27, 5));
}

#[test]
fn condition_names_map_to_sqlstates() {
    let text = "name: c\ndescription: d\nactors: { a: { via: pool } }\nsteps:\n  - { actor: a, do: checkout }\n  - { actor: a, sql: select 1, expect: { error: deadlock_detected } }\n";
    let s = &scenario::parse(Path::new("c.yaml"), text).unwrap()[0];
    assert_eq!(s.steps[1].expect.as_ref().unwrap().error.as_deref(), Some("40P01"));
}

#[test]
fn scalars_compare_with_postgres_text_output() {
    assert!(Scalar::Bool(true).matches(Some("t")));
    assert!(!Scalar::Bool(true).matches(Some("f")));
    assert!(Scalar::Int(-9223372036854775808).matches(Some("-9223372036854775808")));
    assert!(!Scalar::Int(7).matches(Some("7.5")));
    assert!(Scalar::Null.matches(None));
    assert!(!Scalar::Null.matches(Some("")));
    assert!(Scalar::Text("0".into()).matches(Some("0")));
    assert!(!Scalar::Text("t".into()).matches(None));
}
