//! Scenario files without a server: every shipped scenario validates, and every
//! deliberately broken fixture gives its expected error at its expected place.

mod common;

use std::path::{Path, PathBuf};

use locklab::scenario::{self, BackgroundStep, BlockedStep, Scalar, StepKind};
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
    common::assert_expected_error(&path, scenario::load_file(&path));
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
    assert!(matches!(
        s.steps[2].kind,
        StepKind::Background(BackgroundStep { actor: 0, .. })
    ));
    assert_eq!(
        s.steps[3].kind,
        StepKind::Blocked(BlockedStep {
            observer: 1,
            targets: vec![0],
            or_finished: false,
        })
    );
    assert_eq!(s.pooler_server_connections, None);
    let StepKind::Await(a) = &s.steps[4].kind else {
        panic!("not an await: {:?}", s.steps[4].kind)
    };
    assert_eq!((a.target, a.actor), (2, 0));
    assert_eq!(a.expect.as_ref().unwrap().value, Some(Scalar::Null));
    let StepKind::Observe(o) = &s.steps[5].kind else {
        panic!("not an observe: {:?}", s.steps[5].kind)
    };
    assert_eq!(o.key, Some(locklab::keys::AdvisoryKey::Pair(1, -2)));
    assert_eq!(o.expect.as_ref().unwrap().holder_state.as_deref(), Some("idle"));
    let StepKind::Sql(sql) = &s.steps[6].kind else {
        panic!("not sql: {:?}", s.steps[6].kind)
    };
    assert_eq!(sql.expect.as_ref().unwrap().error.as_deref(), Some("55P03"));
    assert_eq!(sql.when, Some(scenario::When::Pooled));
    assert_eq!((s.steps[6].pos.line, s.steps[6].pos.column), (27, 5));
}

/// `pooler.server_connections` and a recorded `blocked` with `or_finished`
/// reach the model.
#[test]
fn pooler_cap_and_or_finished_parse_into_the_model() {
    let text = r#"
name: queue-check
description: a capped pooler and a bounded blocked step
pooler: { server_connections: 1 }
actors:
  w: { via: pool }
  obs: { via: direct }
steps:
  - { actor: w, do: checkout }
  - { actor: w, id: bg, sql: select 1, background: true }
  - { actor: obs, blocked: w, or_finished: true, record: wait }
  - { await: bg }
"#;
    let all = scenario::parse(Path::new("inline.yaml"), text).unwrap_or_else(|e| panic!("{e:?}"));
    let s = &all[0];
    assert_eq!(s.pooler_server_connections, Some(1));
    assert_eq!(
        s.steps[2].kind,
        StepKind::Blocked(BlockedStep {
            observer: 1,
            targets: vec![0],
            or_finished: true,
        })
    );
    assert_eq!(s.steps[2].record.as_deref(), Some("wait"));
}

#[test]
fn condition_names_map_to_sqlstates() {
    let text = "name: c\ndescription: d\nactors: { a: { via: pool } }\nsteps:\n  - { actor: a, do: checkout }\n  - { actor: a, sql: select 1, expect: { error: deadlock_detected } }\n";
    let s = &scenario::parse(Path::new("c.yaml"), text).unwrap()[0];
    let StepKind::Sql(sql) = &s.steps[1].kind else { panic!() };
    assert_eq!(sql.expect.as_ref().unwrap().error.as_deref(), Some("40P01"));
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

/// The shipped JSON Schema is the one generated from the scenario types
/// (regenerate with `cargo locklab schema > scenarios/scenario.schema.json`).
#[test]
fn shipped_schema_is_up_to_date() {
    let shipped: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("scenarios/scenario.schema.json")).unwrap()).unwrap();
    assert!(
        shipped == scenario::json_schema(),
        "scenarios/scenario.schema.json is stale: run `cargo locklab schema > scenarios/scenario.schema.json`"
    );
}

/// The shipped driver-protocol schema is the one generated from the
/// protocol's types (regenerate with `cargo locklab schema protocol >
/// drivers/adapters/protocol.schema.json`).
#[test]
fn shipped_protocol_schema_is_up_to_date() {
    let path = root().join("drivers/adapters/protocol.schema.json");
    let shipped: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(
        shipped == locklab_drivers::external::protocol::schema(),
        "drivers/adapters/protocol.schema.json is stale: run \
         `cargo locklab schema protocol > drivers/adapters/protocol.schema.json`"
    );
}

/// The exchange docs/src/protocol.md shows (its `→`/`←` lines) is valid
/// protocol, by the shipped schema and by the types; and the schema is not
/// a schema that accepts anything.
#[test]
fn the_documented_exchange_is_valid_protocol() {
    let doc = std::fs::read_to_string(root().join("docs/src/protocol.md")).unwrap();
    let lines: Vec<&str> = doc
        .lines()
        .filter(|l| l.starts_with("→ ") || l.starts_with("← "))
        .collect();
    let (requests, answers) = common::check_protocol_lines(&lines.join("\n")).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        requests >= 10 && answers >= 10,
        "{requests} requests, {answers} answers in docs/src/protocol.md"
    );
    for wrong in [
        r#"→ {"id":1,"op":"querry","conn":"c1","sql":"select 1"}"#,
        r#"→ {"id":1,"op":"query","sql":"select 1"}"#,
        r#"→ {"id":1,"op":"query","conn":"c1","sql":"select 1","timeout":5}"#,
        r#"← {"id":3,"ok":{},"dropped":true}"#,
        r#"← {"id":3,"error":{"kind":"server","message":"x"}}"#,
        r#"← {"id":3,"ok":{"returned":"to_the_pool"}}"#,
        r#"← {"id":3}"#,
    ] {
        assert!(common::check_protocol_lines(wrong).is_err(), "accepted: {wrong}");
    }
}

fn schema_validator() -> jsonschema::Validator {
    jsonschema::validator_for(&scenario::json_schema()).expect("the generated schema is a valid JSON Schema")
}

fn yaml_as_json(path: &Path) -> serde_json::Value {
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// What editors check (the schema) agrees with `locklab validate` on every
/// shipped scenario: each one validates against the schema.
#[test]
fn shipped_scenarios_validate_against_the_schema() {
    let validator = schema_validator();
    let mut checked = 0;
    for entry in std::fs::read_dir(root().join("scenarios")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let doc = yaml_as_json(&path);
            let errors: Vec<String> = validator
                .iter_errors(&doc)
                .map(|e| format!("{e} at {}", e.instance_path()))
                .collect();
            assert!(errors.is_empty(), "{}: {}", path.display(), errors.join("; "));
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} scenario files");
}

/// Fixtures whose error is structural (unknown key, wrong type, bad enum value)
/// are rejected by the schema too, so an editor flags them before `validate` does.
#[rstest]
#[case("unknown-field.yaml")]
#[case("unknown-via.yaml")]
#[case("wrong-type.yaml")]
#[case("expectation-value-type.yaml")]
#[case("bad-params-shape.yaml")]
#[case("blocked-wrong-type.yaml")]
#[case("detail-unknown.yaml")]
#[case("pooler-unknown-key.yaml")]
#[case("pooler-server-connections-range.yaml")]
fn structural_fixture_errors_are_schema_errors(#[case] file: &str) {
    let doc = yaml_as_json(&root().join("harness/tests/fixtures/invalid").join(file));
    assert!(!schema_validator().is_valid(&doc), "{file} passes the schema");
}

#[test]
fn params_expand_to_one_scenario_per_combination() {
    let text = r#"
name: fam
description: d
params:
  key: [7, -1]
  fn: [pg_try_advisory_lock, pg_try_advisory_lock_shared]
actors: { a: { via: direct } }
steps:
  - { actor: a, sql: "select ${fn}(${key})", expect: { value: true } }
"#;
    let all = scenario::parse(Path::new("fam.yaml"), text).unwrap_or_else(|e| panic!("{e:?}"));
    let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "fam[key=7,fn=pg_try_advisory_lock]",
            "fam[key=7,fn=pg_try_advisory_lock_shared]",
            "fam[key=-1,fn=pg_try_advisory_lock]",
            "fam[key=-1,fn=pg_try_advisory_lock_shared]",
        ]
    );
    assert!(all.iter().all(|s| s.family == "fam"));
    let StepKind::Sql(sql) = &all[3].steps[0].kind else {
        panic!()
    };
    assert_eq!(sql.sql, "select pg_try_advisory_lock_shared(-1)");
    assert_eq!(
        all[2].params,
        [
            ("key".to_owned(), "-1".to_owned()),
            ("fn".to_owned(), "pg_try_advisory_lock".to_owned())
        ]
    );
}

#[test]
fn params_cases_and_hidden_names() {
    let text = r#"
name: cases
description: d
params:
  - { timeout: 200ms, _error: lock_not_available }
  - { timeout: 0, _error: query_canceled }
actors: { a: { via: direct } }
steps:
  - { actor: a, sql: "set lock_timeout = '${timeout}'", expect: { error: "${_error}" } }
"#;
    let all = scenario::parse(Path::new("cases.yaml"), text).unwrap_or_else(|e| panic!("{e:?}"));
    let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["cases[timeout=200ms]", "cases[timeout=0]"]);
    assert_eq!(sql_expect(&all[1].steps[0]).error.as_deref(), Some("57014"));
}

/// An error that only some parameter sets have names the set.
#[test]
fn an_error_in_one_parameter_set_names_it() {
    let text = "name: p\ndescription: d\nparams: { code: [55P03, nonsense] }\nactors: { a: { via: direct } }\nsteps:\n  - { actor: a, sql: select 1, expect: { error: \"${code}\" } }\n";
    let errors = scenario::parse(Path::new("p.yaml"), text).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0]
            .message
            .starts_with("with code=nonsense: step 1: 'nonsense' is neither"),
        "{}",
        errors[0]
    );
    assert_eq!((errors[0].pos.line, errors[0].pos.column), (6, 40));
}

/// A parameter works in flow style too, quoted or not (unquoted, the raw file
/// is not YAML until the value is in).
#[test]
fn params_in_flow_style() {
    let text = "name: flow\ndescription: d\nparams: { key: [7, 8] }\nactors: { a: { via: direct } }\nsteps:\n  - { actor: a, sql: 'select ${key}', expect: { value: ${key} } }\n  - { actor: a, observe: advisory_locks, key: [1, ${key}] }\n";
    let all = scenario::parse(Path::new("flow.yaml"), text).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(all.len(), 2);
    assert_eq!(sql_expect(&all[1].steps[0]).value, Some(Scalar::Int(8)));
    let StepKind::Observe(o) = &all[1].steps[1].kind else {
        panic!()
    };
    assert_eq!(o.key, Some(locklab::keys::AdvisoryKey::Pair(1, 8)));
}

/// A file far too large to be a scenario is refused before it is read into
/// memory (and so before the YAML parser sees it), with a clear error.
#[test]
fn an_oversized_file_is_refused_with_its_size_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.yaml");
    let mut text = String::from("name: huge\ndescription: a 2 MiB comment\n# ");
    text.push_str(&"x".repeat(2 << 20));
    std::fs::write(&path, &text).unwrap();
    let errors = scenario::load_file(&path).unwrap_err();
    assert_eq!((errors[0].pos.line, errors[0].pos.column), (1, 1));
    assert!(
        errors[0].message.contains(&scenario::MAX_FILE_BYTES.to_string()),
        "{}",
        errors[0]
    );
    let errors = scenario::parse(&path, &text).unwrap_err();
    assert!(errors[0].message.starts_with("the file has "), "{}", errors[0]);
}

/// Inputs the fuzzer (`just fuzz`) found, kept as regression cases: each
/// parses to scenarios or errors, without a panic, and every error is placed
/// inside the text as YAML counts lines (`\n`, `\r\n` or a lone `\r`).
#[rstest]
fn fuzzer_findings_stay_fixed(#[files("tests/fixtures/fuzz/*")] path: PathBuf) {
    let bytes = std::fs::read(&path).unwrap();
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return;
    };
    if let Err(errors) = scenario::parse(&path, text) {
        let breaks = text
            .replace("\r\n", "\n")
            .chars()
            .filter(|&c| c == '\n' || c == '\r')
            .count() as u64;
        for e in &errors {
            assert!(e.pos.line >= 1 && e.pos.line <= breaks + 2 && e.pos.column >= 1, "{e}");
        }
    }
}

/// A scenario directory with nothing to run (a wrong path, `.yml` files) is
/// an error, not an empty pass.
#[test]
fn a_directory_without_scenario_files_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lock.yml"), "name: lock\n").unwrap();
    let errors = scenario::load_dir(dir.path()).unwrap_err();
    assert!(
        errors[0].message.starts_with("no scenario files (*.yaml)"),
        "{}",
        errors[0]
    );
}

/// The expectations of an `sql` step.
fn sql_expect(step: &scenario::Step) -> &scenario::SqlExpect {
    match &step.kind {
        StepKind::Sql(s) => s.expect.as_ref().expect("an expectation"),
        other => panic!("not an sql step: {other:?}"),
    }
}
