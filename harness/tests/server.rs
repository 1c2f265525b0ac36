//! Tests against real PostgreSQL servers, each started once per test process
//! and shared by every test here: a throw-away local cluster (or the server
//! `LOCKLAB_DSN` names) for everything, and a PostgreSQL 17 container started
//! with testcontainers for the scenario × driver matrix (skipped, as ignored
//! tests, when no Docker engine answered at build time).
//!
//! The scenario × driver matrix is one test case per pair: the fixed
//! expectations written in the scenario file are asserted by the runner; the
//! per-driver observations are only required to be present and well-formed,
//! never compared with a hard-coded answer.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::server;

use locklab::keys::AdvisoryKey;
use locklab::observe;
use locklab::outcome::{RunResult, Value};
use locklab::runner;
use locklab::scenario::{self, Scenario, StepKind, When};
use locklab::server::{BackendChoice, Server, ServerOptions};
use locklab_drivers::{Conn, DirectConn};
use rstest::rstest;
use rstest_reuse::{self, apply, template};

/// A PostgreSQL 17 container (testcontainers), removed when the test process
/// ends (by the container watchdog: statics are never dropped).
fn container_server() -> &'static Server {
    static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
    SERVER
        .get_or_init(|| Server::start(&ServerOptions::new(BackendChoice::Container, 17)).map_err(|e| format!("{e:#}")))
        .as_ref()
        .unwrap_or_else(|e| panic!("no PostgreSQL container for the tests: {e}"))
}

/// Every registered driver id, for the per-driver tests (`#[apply(every_driver)]`);
/// must equal the registry (checked below).
#[template]
#[rstest]
fn every_driver(
    #[values(
        "tokio-postgres",
        "deadpool-fast",
        "deadpool-verified",
        "deadpool-clean",
        "deadpool-custom",
        "bb8",
        "sqlx",
        "sqlx-after-release",
        "mobc",
        "r2d2",
        "diesel-async",
        "pgbouncer-session",
        "pgbouncer-session+deadpool",
        "pgbouncer-transaction",
        "pgbouncer-transaction+deadpool"
    )]
    driver: &str,
) {
}

/// The driver ids this file tests; must equal the registry (checked below).
const DRIVERS: [&str; 15] = [
    "tokio-postgres",
    "deadpool-fast",
    "deadpool-verified",
    "deadpool-clean",
    "deadpool-custom",
    "bb8",
    "sqlx",
    "sqlx-after-release",
    "mobc",
    "r2d2",
    "diesel-async",
    "pgbouncer-session",
    "pgbouncer-session+deadpool",
    "pgbouncer-transaction",
    "pgbouncer-transaction+deadpool",
];

#[test]
fn every_registered_driver_is_in_the_matrix_tests() {
    assert_eq!(
        locklab_drivers::ids(),
        DRIVERS,
        "update DRIVERS and the #[values] list of every_driver"
    );
}

fn load(path: &Path) -> Vec<Scenario> {
    scenario::load_file(path)
        .unwrap_or_else(|e| panic!("{}", e.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n")))
}

#[apply(every_driver)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_through_driver(#[files("../scenarios/*.yaml")] path: PathBuf, driver: &str) {
    let d = locklab_drivers::find(driver).unwrap();
    for scenario in load(&path) {
        let r = runner::run(server(), &scenario, d.as_ref()).await;
        assert!(r.passed(), "{}", r.failure.as_deref().unwrap_or_default());
        assert_observations_well_formed(&scenario, &r, d.info().kind == locklab_drivers::DriverKind::Pooled);
    }
}

/// The same matrix against a PostgreSQL 17 container started by testcontainers.
#[apply(every_driver)]
#[cfg_attr(
    not(locklab_docker),
    ignore = "needs Docker: no Docker engine answered when the tests were built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_through_driver_in_container(#[files("../scenarios/*.yaml")] path: PathBuf, driver: &str) {
    let d = locklab_drivers::find(driver).unwrap();
    let server = container_server();
    assert_eq!(server.backend(), locklab::server::Backend::Container);
    assert_eq!(server.major(), 17, "{}", server.version());
    for scenario in load(&path) {
        let r = runner::run(server, &scenario, d.as_ref()).await;
        assert!(r.passed(), "{}", r.failure.as_deref().unwrap_or_default());
        assert_eq!(r.server, "pg17");
        assert_observations_well_formed(&scenario, &r, d.info().kind == locklab_drivers::DriverKind::Pooled);
    }
}

fn assert_observations_well_formed(s: &Scenario, r: &RunResult, pooled: bool) {
    if r.skipped.is_some() {
        assert!(r.observations.iter().all(|o| o.display.starts_with("n/a")), "{r:?}");
        return;
    }
    for step in s.steps.iter().filter(|st| st.record.is_some()) {
        let name = step.record.as_deref().unwrap();
        let Some(o) = r.observation(name) else {
            // A deviation stops the run where the expectation failed.
            assert!(r.deviation.is_some(), "observation {name} missing");
            continue;
        };
        assert_eq!(o.step, step.index + 1);
        assert!(!o.display.is_empty(), "{name}: empty display");
        let applies = match step.when() {
            Some(When::Pooled) => pooled,
            Some(When::Direct) => !pooled,
            None => true,
        };
        if !applies {
            assert_eq!(
                o.display, "n/a",
                "{name}: a step that does not apply recorded {}",
                o.display
            );
            continue;
        }
        match &step.kind {
            StepKind::Observe(..) => {
                let snapshot = o
                    .value
                    .locks()
                    .unwrap_or_else(|| panic!("{name}: not a lock snapshot: {:?}", o.value));
                assert_eq!(
                    snapshot.held,
                    !snapshot.holders.is_empty(),
                    "{name}: held flag disagrees with holders"
                );
                for h in &snapshot.holders {
                    assert!(h.pid > 0, "{name}: holder without pid: {h:?}");
                    assert!(h.state.is_some(), "{name}: holder without state: {h:?}");
                }
            }
            StepKind::Order { steps: ids } => {
                let Value::Order(got) = &o.value else {
                    panic!("{name}: not a list: {:?}", o.value)
                };
                assert_eq!(got.len(), ids.len(), "{name}: {got:?}");
            }
            _ if matches!(o.value, Value::NoConnection { .. } | Value::Unsupported { .. }) => {
                assert!(o.elapsed_ms.is_none(), "{name}: {:?}", o.value);
            }
            _ => {
                let ms = o.elapsed_ms.unwrap_or_else(|| panic!("{name}: no timing"));
                assert!(
                    ms >= 0.0 && ms < step.deadline_ms as f64 + 1000.0,
                    "{name}: elapsed {ms} ms outside the step deadline"
                );
                if let Some(code) = &o.sqlstate {
                    assert_eq!(code.len(), 5, "{name}: SQLSTATE {code}");
                }
            }
        }
    }
}

async fn admin() -> DirectConn {
    server().admin().await.expect("admin connection")
}

/// pg_locks decoding against the server itself: bigint keys above 2^32,
/// negative and extreme keys, and two-int keys.
#[tokio::test]
async fn advisory_keys_decode_as_the_server_stores_them() {
    let holder = admin().await;
    let mut observer = admin().await;
    let keys = [
        AdvisoryKey::Big(7),
        AdvisoryKey::Big(-1),
        AdvisoryKey::Big(i64::MAX),
        AdvisoryKey::Big(i64::MIN),
        AdvisoryKey::Big((1 << 32) + 5),
        AdvisoryKey::Pair(3, 4),
        AdvisoryKey::Pair(-2, i32::MIN),
    ];
    for k in keys {
        let sql = match k {
            AdvisoryKey::Big(b) => format!("select pg_advisory_lock('{b}'::bigint)"),
            AdvisoryKey::Pair(a, b) => format!("select pg_advisory_lock({a}, {b})"),
        };
        holder.client().simple_query(&sql).await.unwrap();
    }
    let pid: i32 = holder
        .client()
        .query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let rows = observe::advisory_locks(&mut observer, None).await.unwrap();
    let mut seen: Vec<AdvisoryKey> = rows.iter().filter(|r| r.pid == pid).map(|r| r.key).collect();
    seen.sort();
    let mut want = keys.to_vec();
    want.sort();
    assert_eq!(seen, want);
    let only = observe::advisory_locks(&mut observer, Some(AdvisoryKey::Big((1 << 32) + 5)))
        .await
        .unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].state.as_deref(), Some("idle"));
    holder.close().await;
}

fn inline(text: &str) -> Scenario {
    scenario::parse(Path::new("inline.yaml"), text)
        .unwrap_or_else(|e| panic!("{e:?}"))
        .remove(0)
}

/// Parses `text` (reported as `inline.yaml`) and runs it through `driver`.
async fn run_inline(text: &str, driver: &str) -> RunResult {
    let d = locklab_drivers::find(driver).unwrap();
    runner::run(server(), &inline(text), d.as_ref()).await
}

/// A step waiting on a lock nobody releases fails at its deadline, naming the
/// scenario, the driver, the actor and the step; the run then ends the stuck
/// backends and cleans up promptly, whatever the pool.
#[apply(every_driver)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_past_its_deadline_fails_the_scenario_with_its_name(driver: &str) {
    let started = std::time::Instant::now();
    let r = run_inline(
        "name: hangs\ndescription: b waits forever\nactors: { a: { via: direct }, b: { via: pool } }\nsteps:\n  - { actor: a, sql: select pg_advisory_lock(99) }\n  - { actor: b, do: checkout }\n  - { actor: b, sql: select pg_advisory_lock(99), deadline_ms: 300 }\n",
        driver,
    )
    .await;
    let msg = r.failure.expect("the hanging step must fail");
    for part in [
        "scenario 'hangs'".to_owned(),
        format!("driver '{driver}'"),
        "step 3 (b: select pg_advisory_lock(99))".to_owned(),
        "inline.yaml:7:".to_owned(),
        "deadline of 300 ms exceeded".to_owned(),
        // What was waiting, on what, and that the harness ended it.
        "ended by the harness: backend ".to_owned(),
        "(actor 'b') waiting on Lock/advisory, blocked by backend ".to_owned(),
        "(actor 'a'): select pg_advisory_lock(99)".to_owned(),
    ] {
        assert!(msg.contains(&part), "{part:?} not in: {msg}");
    }
    // The stuck waiter is among the backends the harness reports it ended,
    // and once the run is over nothing is left in its database.
    assert!(!r.cleaned_backends.is_empty(), "{:?}", r.steps);
    assert!(r.backends_left.is_empty(), "{:?}", r.backends_left);
    // Bound, not a timing measurement: cleanup must not wait out pool timeouts (10 s).
    let took = started.elapsed();
    assert!(took.as_secs() < 8, "the failed run took {took:?} to clean up");
}

/// `blocked:` is decided by the server: a background step that does not block
/// (the key is free) fails the assertion instead of passing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_fails_when_the_step_is_not_blocked() {
    let r = run_inline(
        "name: not-blocked\ndescription: nothing holds key 5\nactors: { a: { via: pool }, observer: { via: direct } }\nsteps:\n  - { actor: a, do: checkout }\n  - { actor: a, id: t, sql: select pg_advisory_lock(5), background: true }\n  - { actor: observer, blocked: a, deadline_ms: 2000 }\n  - { await: t }\n",
        "tokio-postgres",
    )
    .await;
    let msg = r.failure.expect("blocked must fail when nothing blocks");
    assert!(
        msg.contains("instead of blocking") || msg.contains("was not blocked"),
        "{msg}"
    );
}

/// A fixed expectation that does not hold fails the run with both values.
#[tokio::test]
async fn a_wrong_expectation_fails_with_expected_and_actual() {
    let r = run_inline(
        "name: wrong\ndescription: the lock is free, so try returns true\nactors: { a: { via: pool } }\nsteps:\n  - { actor: a, do: checkout }\n  - { actor: a, sql: select pg_try_advisory_lock(6), expect: { value: false } }\n",
        "bb8",
    )
    .await;
    let msg = r.failure.expect("must fail");
    assert!(msg.contains("expected false, got true"), "{msg}");
    // The Verify step still ran after the failure and saw the session lock that
    // `a` (still checked out when the run failed) holds.
    assert!(
        r.locks_left.iter().any(|l| l.key == AdvisoryKey::Big(6)),
        "{:?}",
        r.locks_left
    );
}

/// The Rust fixed-width key (`keys::namespaced_key`) is the same number the
/// SQL expression of scenario `string-keys-fixed-width-hash` computes.
#[tokio::test]
async fn namespaced_key_in_rust_equals_the_sql_expression() {
    let mut a = admin().await;
    for (ns, id) in [
        ("rollup", "42"),
        ("billing", "42"),
        ("mail", ""),
        ("job", "ünïcödé"),
        ("x", "-1"),
    ] {
        let rows = a
            .simple_query(&format!(
                "select ('x' || left(encode(sha256(convert_to('{ns}' || ':' || '{id}', 'UTF8')), 'hex'), 16))::bit(64)::bigint"
            ))
            .await
            .unwrap();
        let want = locklab::keys::namespaced_key(ns, id).to_string();
        assert_eq!(rows.first_value(), Some(Some(want.as_str())), "{ns}:{id}");
    }
}

/// The v2 expectations fail when they do not hold, each saying what differed.
#[rstest]
#[case::notices(
    "  - { actor: o, sql: select pg_advisory_unlock(5), expect: { notices: [] } }\n",
    "expected notices [], got [WARNING: you don't own a lock"
)]
#[case::message(
    "  - { actor: o, sql: select 1/0, expect: { error: 22012, message: '^lock' } }\n",
    "its message \"division by zero\" does not match /^lock/"
)]
#[case::rows(
    "  - { actor: o, sql: 'select 1, 2 union all select 3, 4', expect: { rows: [[1, 2], [3, 5]] } }\n",
    "expected rows [1, 2] [3, 5], got [1, 2] [3, 4]"
)]
#[case::setup_error(
    "  - { actor: o, sql: select 1 }\nsetup: [select * from no_such_table]\n",
    "setup statement 1 at inline.yaml:6:9 failed: server error 42P01"
)]
#[tokio::test]
async fn v2_expectations_fail_when_they_do_not_hold(#[case] step: &str, #[case] wanted: &str) {
    let text = format!("name: v2\ndescription: d\nactors: {{ o: {{ via: direct }} }}\nsteps:\n{step}");
    let r = run_inline(&text, "tokio-postgres").await;
    let msg = r.failure.expect("must fail");
    assert!(msg.contains(wanted), "{wanted:?} not in: {msg}");
}

/// `order` compares the client-side completion order of background steps:
/// stating the reverse of what the server does fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_fails_when_the_steps_completed_otherwise() {
    let r = run_inline(
        "name: order\ndescription: d\nactors: { h: { via: direct }, w1: { via: direct }, w2: { via: direct }, o: { via: direct } }\nsteps:\n  - { actor: h, sql: select pg_advisory_lock(3) }\n  - { actor: w1, id: one, sql: 'select pg_advisory_xact_lock(3), pg_sleep(0.3)', background: true }\n  - { actor: o, blocked: w1 }\n  - { actor: w2, id: two, sql: 'select pg_advisory_xact_lock(3), pg_sleep(0.3)', background: true }\n  - { actor: o, blocked: [w1, w2] }\n  - { actor: h, sql: select pg_advisory_unlock(3) }\n  - { await: one }\n  - { await: two }\n  - { order: [two, one], record: o }\n",
        "tokio-postgres",
    )
    .await;
    let msg = r.failure.clone().expect("must fail");
    assert!(
        msg.contains("expected completion order two → one, got one → two"),
        "{msg}"
    );
    assert_eq!(r.observation("o").map(|o| o.display.as_str()), Some("one → two"));
}

/// Each run gets its own database, dropped afterwards.
#[tokio::test]
async fn run_databases_are_dropped() {
    let r = run_inline(
        "name: tiny\ndescription: one step\nactors: { o: { via: direct } }\nsteps:\n  - { actor: o, sql: select 1 }\n",
        "sqlx",
    )
    .await;
    assert!(r.passed(), "{:?}", r.failure);
    let mut a = admin().await;
    let rows = a
        .simple_query("select count(*) from pg_database where datname like 'll\\_tiny\\_%'")
        .await
        .unwrap();
    assert_eq!(rows.first_value(), Some(Some("0")));
}

/// The end-of-run Verify waits for connections that a return closed: a
/// direct connection holding many session locks and never returned explicitly
/// leaves nothing behind (the server releases them as its backend exits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_left_waits_for_closed_connections_to_be_released() {
    let s = inline(
        "name: many\ndescription: 500 session locks, no explicit return\npool: { max_size: 1 }\nactors: { w: { via: pool } }\nsteps:\n  - { actor: w, do: checkout }\n  - { actor: w, sql: \"select count(pg_advisory_lock(g)) from generate_series(1, 500) g\" }\n",
    );
    let scenarios = vec![s; 10];
    let drivers = vec![locklab_drivers::find("tokio-postgres").unwrap()];
    let runs = locklab::matrix::run_all(std::slice::from_ref(server()), &scenarios, &drivers, 10, 1, |_, _| {}).await;
    for r in &runs {
        assert!(r.passed(), "{:?}", r.failure);
        assert!(
            r.locks_left.is_empty(),
            "{} locks reported left, first {:?}",
            r.locks_left.len(),
            r.locks_left.first()
        );
    }
}

/// A holder is named after the actor that most recently checked its backend
/// out, even when another actor used the same pooled connection before.
#[apply(every_driver)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_are_named_after_the_latest_actor_on_that_backend(driver: &str) {
    let r = run_inline(
        "name: reuse\ndescription: two actors on one pooled connection\npool: { max_size: 1 }\nactors: { first: { via: pool }, second: { via: pool }, o: { via: direct } }\nsteps:\n  - { actor: first, do: checkout }\n  - { actor: first, sql: select pg_advisory_lock(1) }\n  - { actor: first, do: return }\n  - { actor: second, do: checkout }\n  - { actor: second, sql: select pg_advisory_lock(2) }\n  - { actor: o, observe: advisory_locks, key: 2, record: who_holds_2 }\n",
        driver,
    )
    .await;
    assert!(r.passed(), "{:?}", r.failure);
    let o = r.observation("who_holds_2").unwrap();
    // Behind transaction pooling a backend is nobody's: named as such.
    let want = if driver.starts_with("pgbouncer-transaction") {
        "held by server connection ("
    } else {
        "held by second ("
    };
    assert!(o.display.starts_with(want), "{}", o.display);
}

/// A checkout that hands out a connection in an aborted transaction does not
/// fail the checkout step; the scenario's own recorded query sees what the
/// pool handed out (what it sees differs by pool, so only presence is checked).
#[apply(every_driver)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_returned_in_an_aborted_transaction_is_recorded_not_fatal(driver: &str) {
    let r = run_inline(
        "name: aborted\ndescription: return in an aborted transaction\npool: { max_size: 1 }\nactors: { w: { via: pool } }\nsteps:\n  - { actor: w, do: checkout }\n  - { actor: w, do: begin }\n  - { actor: w, sql: select 1/0, expect: { error: \"22012\" } }\n  - { actor: w, do: return }\n  - { actor: w, do: checkout }\n  - { actor: w, sql: select 1, record: first_query_after_checkout }\n",
        driver,
    )
    .await;
    assert!(r.passed(), "{:?}", r.failure);
    let o = r.observation("first_query_after_checkout").unwrap();
    assert!(o.display == "1" || o.sqlstate.is_some(), "{o:?}");
}

/// `client_timeout_ms` drops the call's future when it elapses: the step
/// records that (not a failure), within bounds, and the server is not told:
/// the backend still waits. `on_timeout: cancel` sends a cancel request and
/// records the statement's own outcome.
#[rstest]
#[case::drop("drop")]
#[case::cancel("cancel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_timeout_is_recorded_and_the_server_side_is_observed(#[case] on_timeout: &str) {
    let r = run_inline(
        &format!(
            "name: bounded\ndescription: d\nactors: {{ holder: {{ via: direct }}, w: {{ via: direct }}, observer: {{ via: direct }} }}\nsteps:\n  - {{ actor: holder, sql: select pg_advisory_lock(98) }}\n  - {{ actor: w, sql: select pg_advisory_lock(98), client_timeout_ms: 200, on_timeout: {on_timeout}, record: call }}\n  - {{ actor: observer, observe: advisory_locks, key: 98, record: after }}\n  - {{ actor: holder, sql: select pg_advisory_unlock(98) }}\n"
        ),
        "tokio-postgres",
    )
    .await;
    assert!(r.passed(), "{:?}", r.failure);
    let call = r.observation("call").unwrap();
    let ms = call.elapsed_ms.unwrap();
    assert!((200.0..5000.0).contains(&ms), "{ms} ms");
    let after = r.observation("after").unwrap();
    let waiters = &after.value.locks().unwrap().waiters;
    match on_timeout {
        "drop" => {
            assert_eq!(call.display, "dropped at 200 ms");
            assert_eq!(waiters.len(), 1, "{}", after.display);
        }
        _ => {
            assert_eq!(call.sqlstate.as_deref(), Some("57014"), "{}", call.display);
            assert!(waiters.is_empty(), "{}", after.display);
        }
    }
}

/// A bounded checkout that gives up leaves the actor without a connection:
/// its later steps record that instead of failing the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkout_that_gives_up_is_recorded_and_later_steps_say_so() {
    let r = run_inline(
        "name: full\ndescription: d\npool: { max_size: 1 }\nactors: { a: { via: pool }, b: { via: pool } }\nsteps:\n  - { actor: a, do: checkout }\n  - { actor: b, do: checkout, client_timeout_ms: 300, record: second }\n  - { actor: b, sql: select 1, record: probe }\n  - { actor: b, do: return }\n  - { actor: a, do: return }\n",
        "deadpool-fast",
    )
    .await;
    assert!(r.passed(), "{:?}", r.failure);
    assert_eq!(r.observation("second").unwrap().display, "checkout dropped at 300 ms");
    assert!(r.observation("probe").unwrap().display.starts_with("no connection"));
}

/// The leak guard finds a backend left in a run's database and the advisory
/// lock it holds, names both, and ends the backend; on an empty database it
/// finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leak_guard_reports_and_ends_what_a_run_left() {
    let admin = server().admin().await.unwrap();
    let db = format!("ll_leak_guard_{}", std::process::id());
    admin
        .client()
        .simple_query(&format!("create database \"{db}\""))
        .await
        .unwrap();
    assert_eq!(
        runner::leak_guard(admin.client(), &db).await.unwrap(),
        Vec::<String>::new()
    );
    let leaked = locklab_drivers::DirectConn::connect(&server().spec(&db, "leaky"))
        .await
        .unwrap();
    let pid: i32 = leaked
        .client()
        .query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    leaked
        .client()
        .simple_query("select pg_advisory_lock(5), pg_advisory_lock(1, -2)")
        .await
        .unwrap();
    let left = runner::leak_guard(admin.client(), &db).await.unwrap();
    assert_eq!(
        left,
        vec![
            "lock (1, -2) (pid {pid})".replace("{pid}", &pid.to_string()),
            format!("lock 5 (pid {pid})"),
            format!("pid {pid} (leaky, idle)"),
        ]
    );
    // Ended: the connection is closed by the server.
    assert!(leaked.client().simple_query("select 1").await.is_err());
    admin
        .client()
        .simple_query(&format!("drop database \"{db}\" with (force)"))
        .await
        .unwrap();
    admin.close().await;
}

/// The addresses of the TCP sockets listening on `port` in this network
/// namespace, from /proc/net/tcp and /proc/net/tcp6 (state 0A = LISTEN;
/// addresses in the kernel's hex, IPv4 little-endian): `127.0.0.1`, `::1`,
/// `0.0.0.0`, `::`, or the hex of anything else.
fn listeners(port: u16) -> Vec<String> {
    let mut found = Vec::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (f.get(1), f.get(3)) else {
                continue;
            };
            let Some((addr, p)) = local.split_once(':') else {
                continue;
            };
            if *state != "0A" || u16::from_str_radix(p, 16).ok() != Some(port) {
                continue;
            }
            found.push(
                match addr {
                    "0100007F" => "127.0.0.1",
                    "00000000" => "0.0.0.0",
                    "00000000000000000000000001000000" => "::1",
                    "00000000000000000000000000000000" => "::",
                    other => other,
                }
                .to_owned(),
            );
        }
    }
    found
}

/// What the harness starts listens on loopback only: the local cluster's
/// postmaster (`listen_addresses`) and both PgBouncers (`listen_addr`), as the
/// kernel's socket table shows them. (A container's published port:
/// `container.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_the_harness_starts_listen_on_loopback_only() {
    let mut ports = Vec::new();
    if server().backend() == locklab::server::Backend::Local {
        ports.push(("the local cluster", server().spec("postgres", "").port));
    }
    for mode in [
        locklab_drivers::PoolerMode::Session,
        locklab_drivers::PoolerMode::Transaction,
    ] {
        let (port, _, _) = server().pooler(mode).await.unwrap();
        ports.push((
            if mode == locklab_drivers::PoolerMode::Session {
                "PgBouncer (session)"
            } else {
                "PgBouncer (transaction)"
            },
            port,
        ));
    }
    for (what, port) in ports {
        let addrs = listeners(port);
        assert!(!addrs.is_empty(), "{what}: nothing listens on port {port}");
        assert!(
            addrs.iter().all(|a| a == "127.0.0.1"),
            "{what} listens on {addrs:?} (port {port})"
        );
    }
}

/// A checkout that waits for a connection a full pool never frees fails at
/// the step's deadline, saying the pool handed out none (the pools' own
/// checkout timeout, 10 s, is longer), and the run still cleans up promptly.
#[rstest::rstest]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkout_from_an_exhausted_pool_fails_at_its_deadline(
    #[values("deadpool-fast", "bb8", "sqlx", "mobc", "r2d2", "diesel-async")] driver: &str,
) {
    let started = std::time::Instant::now();
    let r = run_inline(
        "name: exhausted\ndescription: b waits for the only connection\npool: { max_size: 1 }\nactors: { a: { via: pool }, b: { via: pool } }\nsteps:\n  - { actor: a, do: checkout }\n  - { actor: b, do: checkout, deadline_ms: 300 }\n",
        driver,
    )
    .await;
    let msg = r.failure.clone().expect("the checkout must fail");
    for part in [
        "step 2 (b: checkout)",
        "deadline of 300 ms exceeded: the pool had handed out no connection (max_size 1)",
    ] {
        assert!(msg.contains(part), "{part:?} not in: {msg}");
    }
    assert!(r.backends_left.is_empty(), "{:?}", r.backends_left);
    let took = started.elapsed();
    assert!(took.as_secs() < 8, "the failed run took {took:?}");
}
