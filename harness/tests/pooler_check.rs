//! `locklab pooler-check`: the pooler conformance kit through each pooler
//! here (as locklab's own columns, and as a pooler a user runs, at its
//! address), judged as the committed report judged the same configuration;
//! and its bad input, each one line with nothing started.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use locklab::baseline::Baseline;
use locklab::properties::{self, Column};
use locklab_drivers::{Pooler, PoolerKind, PoolerMode};

use common::locklab;

/// `pooler-check ARGS --json`: its output read as JSON, its exit code and
/// its stdout (for messages).
fn pooler_check_json(args: &[&str]) -> (serde_json::Value, Option<i32>, String) {
    let mut all = vec!["pooler-check", "--json"];
    all.extend_from_slice(args);
    let out = locklab(&all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    (json, out.status.code(), stdout)
}

/// The test server's DSN, and Debian 12's PgBouncer in `mode` in front of
/// it (started as its columns' is): its port, its client password, and the
/// server's role.
fn server_and_pgbouncer(mode: PoolerMode) -> (String, u16, String, String) {
    let server = common::server();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (port, _, password) = rt
        .block_on(server.pooler(Pooler::new(PoolerKind::PgBouncer, mode)))
        .unwrap();
    let spec = server.spec("postgres", "");
    let dsn = match &spec.password {
        Some(p) => format!("postgres://{}:{p}@{}:{}/postgres", spec.user, spec.host, spec.port),
        None => format!("postgres://{}@{}:{}/postgres", spec.user, spec.host, spec.port),
    };
    (dsn, port, password, spec.user)
}

/// The verdict of each property for `column` judged, as `pooler-check`
/// judges, from the kit's cells alone (the scenarios tagged `pooler`) of the
/// committed report.
fn committed(column: &str) -> BTreeMap<String, String> {
    let root = common::root();
    let report = locklab::judge::load(&root.join("reports/matrix.json")).unwrap();
    let scenarios = locklab::scenario::load_dir(&root.join("scenarios")).unwrap();
    let kit: BTreeSet<String> = scenarios
        .iter()
        .filter(|s| s.tags.iter().any(|t| t == "pooler"))
        .map(|s| s.name.clone())
        .collect();
    let shipped = properties::load_dir(&root.join("properties"), &scenarios).unwrap();
    let cells: Vec<_> = Baseline::from_report(&report)
        .unwrap()
        .cells
        .into_iter()
        .filter(|c| c.driver == column && kit.contains(&c.scenario))
        .collect();
    let drivers: Vec<Column> = report
        .drivers
        .iter()
        .filter(|d| d.id == column)
        .map(Column::of)
        .collect();
    properties::evaluate(&shipped, &cells, &drivers)
        .into_iter()
        .filter_map(|p| p.of(column).map(|v| (p.id.clone(), v.verdict.as_str().to_owned())))
        .collect()
}

/// Whether column `id`'s readings vary by nature (pgagroal, Odyssey): its
/// verdicts are then not compared with the committed report's.
fn varies(id: &str) -> bool {
    locklab_drivers::registry()
        .iter()
        .find(|d| d.info().id == id)
        .and_then(|d| d.info().pooler)
        .is_some_and(|p| p.kind.readings_vary())
}

/// Checks one column of `pooler-check --json`'s output against the
/// committed report's verdicts of `as_column`, and returns whether it
/// violated (or could not judge) a property.
fn check_column(c: &serde_json::Value, as_column: &str) -> bool {
    let id = c["column"].as_str().unwrap();
    assert_eq!(c["failed_cells"].as_array().unwrap().len(), 0, "{id}: {c:#}");
    assert!(c["cells"].as_u64().unwrap() > 0, "{id}: no cell ran");
    let props = c["properties"].as_array().unwrap();
    assert!(
        props.iter().any(|p| p["property"] == "pooler-pins-while-held"),
        "{id}: the kit's own property is judged: {c:#}"
    );
    let want = committed(as_column);
    let mut bad = false;
    for p in props {
        let (prop, verdict) = (p["property"].as_str().unwrap(), p["verdict"].as_str().unwrap());
        if matches!(verdict, "violated" | "undecided") {
            bad = true;
            assert!(
                p["for_poolers"].as_str().is_some_and(|m| !m.is_empty()),
                "{id}: {prop} is {verdict} and says what that means for a pooler"
            );
        }
        // Compared as violated (or not judged) or not: a reading that varies
        // under load (which Pgpool-II child serves a client) can leave a
        // dimension untried, "holds where tried" instead of "holds".
        let bad_here = matches!(verdict, "violated" | "undecided");
        if !varies(as_column)
            && let Some(committed) = want.get(prop)
        {
            assert_eq!(
                bad_here,
                matches!(committed.as_str(), "violated" | "undecided"),
                "{id}: {prop} reads {verdict} here and {committed} in the committed report's {as_column} cells of the kit"
            );
        }
    }
    bad
}

/// The kit through each pooler locklab runs, in every mode, in one run:
/// the verdicts are the committed report's for the same columns, and the
/// exit code is 1 exactly when a column violates one.
/// `pooler-check --column` through a column of each mode and of each
/// place its pooler runs (PgBouncer 1.18 here, 1.24 in a container): the
/// command's path, judged as the committed report judged the column. (The
/// kit's cells themselves run through every pooler column in the matrix,
/// compared with the baseline: running them all again here cost over a
/// minute of the test budget.)
#[test]
fn pooler_check_runs_the_kit_through_each_pooler_here() {
    let mut columns: Vec<&str> = vec!["pgbouncer-session", "pgbouncer-trixie-transaction"];
    let in_container = |id: &str| {
        locklab_drivers::registry()
            .iter()
            .find(|d| d.info().id == id)
            .and_then(|d| d.info().pooler)
            .and_then(locklab::server::poolers::unavailable)
    };
    if let Some(why) = in_container("pgbouncer-trixie-transaction") {
        eprintln!("pooler-check: only PgBouncer 1.18 here: {why}");
        columns.retain(|c| in_container(c).is_none());
    }
    let mut args = Vec::new();
    for c in &columns {
        args.extend(["--column", c]);
    }
    let (json, code, stdout) = pooler_check_json(&args);
    let judged = json["columns"].as_array().unwrap();
    assert_eq!(judged.len(), columns.len());
    let mut any_bad = false;
    for c in judged {
        let id = c["column"].as_str().unwrap();
        any_bad |= check_column(c, id);
    }
    assert_eq!(code, Some(if any_bad { 1 } else { 0 }), "{stdout}");
}

/// The path a pooler's author takes: a pooler at an address, in front of a
/// server given by its DSN. Here Debian 12's PgBouncer in transaction mode,
/// started as the `pgbouncer-transaction` column's is, with a client
/// password of its own: the verdicts are that column's in the committed
/// report.
#[test]
fn pooler_check_reaches_a_pooler_you_run() {
    let (dsn, port, password, user) = server_and_pgbouncer(PoolerMode::Transaction);
    let pooler = format!("postgres://{user}:{password}@127.0.0.1:{port}");
    let (json, code, stdout) = pooler_check_json(&[
        "--dsn",
        &dsn,
        "--pooler",
        &pooler,
        "--mode",
        "transaction",
        "--no-cancel",
    ]);
    let c = &json["columns"][0];
    assert_eq!(c["column"], "your-pooler-transaction");
    let bad = check_column(c, "pgbouncer-transaction");
    assert_eq!(code, Some(if bad { 1 } else { 0 }), "{stdout}");
}

/// Bad input: one line on stderr, exit code 2, and nothing run.
#[test]
fn pooler_check_bad_input_is_one_line() {
    let (dsn, port, _, user) = server_and_pgbouncer(PoolerMode::Session);
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // A role the server takes and PgBouncer does not know (its auth_file
    // holds the harness's role only): the pooler refuses it.
    let other_role = "locklab_pooler_check_other";
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let admin = common::server().admin().await.unwrap();
        admin
            .client()
            .batch_execute(&format!(
                "do $$ begin create role {other_role} login createdb; exception when duplicate_object then null; end $$"
            ))
            .await
            .unwrap();
        admin.close().await;
    });
    let other_dsn = dsn.replacen(&format!("//{user}"), &format!("//{other_role}"), 1);
    let pooler_address = format!("127.0.0.1:{port}");
    let no_server = format!("postgres://nobody@127.0.0.1:{closed}/postgres");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "pooler-check",
                "--dsn",
                &no_server,
                "--pooler",
                "127.0.0.1:6432",
                "--mode",
                "session",
            ],
            "does not answer",
        ),
        (
            vec![
                "pooler-check",
                "--dsn",
                &other_dsn,
                "--pooler",
                &pooler_address,
                "--mode",
                "session",
            ],
            "does not take the server's role",
        ),
        (
            vec!["pooler-check", "--column", "no-such-column"],
            "not one of locklab's pooler columns",
        ),
        (
            vec![
                "pooler-check",
                "--dsn",
                &dsn,
                "--pooler",
                "nowhere",
                "--mode",
                "session",
            ],
            "expected HOST:PORT",
        ),
        (
            vec!["pooler-check", "--dsn", &dsn, "--pooler", "127.0.0.1:6432"],
            "needs --mode",
        ),
    ];
    for (args, says) in cases {
        let out = locklab(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing run");
    }
    rt.block_on(async {
        let admin = common::server().admin().await.unwrap();
        let _ = admin
            .client()
            .batch_execute(&format!("drop role if exists {other_role}"))
            .await;
        admin.close().await;
    });
}
