//! Tests against real PostgreSQL servers of what the scenario language and
//! the runner do, beyond the scenario × driver matrix (`matrix.rs`): key
//! decoding, `blocked`, failing expectations, `order`, client timeouts, the
//! end-of-run Verify, the leak guard, exhausted pools, and that what the
//! harness starts listens on loopback only. A libtest-mimic harness
//! (`harness = false`), so that under nextest the test processes share one
//! server per run (`common::init_binary`); the local cluster (or the server
//! `LOCKLAB_DSN` names) is shared by every test here.

mod common;

use std::path::Path;

use libtest_mimic::Trial;
use locklab::keys::AdvisoryKey;
use locklab::observe;
use locklab::outcome::{Cancel, Checkout, RunResult, Value};
use locklab::runner;
use locklab::scenario::{self, Scenario};
use locklab_drivers::{Conn, DirectConn};

use common::server;

/// The pools whose checkout from an exhausted pool is tested.
const EXHAUSTIBLE: [&str; 6] = ["deadpool-fast", "bb8", "sqlx", "mobc", "r2d2", "diesel-async"];

fn main() {
    let args = common::init_binary();
    let mut trials: Vec<Trial> = vec![
        common::trial("advisory_keys_decode_as_the_server_stores_them", || {
            common::block_on_multi(advisory_keys_decode_as_the_server_stores_them())
        }),
        common::trial("blocked_fails_when_the_step_is_not_blocked", || {
            common::block_on_multi(blocked_fails_when_the_step_is_not_blocked())
        }),
        common::trial("a_wrong_expectation_fails_with_expected_and_actual", || {
            common::block_on_multi(a_wrong_expectation_fails_with_expected_and_actual())
        }),
        common::trial("namespaced_key_in_rust_equals_the_sql_expression", || {
            common::block_on_multi(namespaced_key_in_rust_equals_the_sql_expression())
        }),
        common::trial("order_fails_when_the_steps_completed_otherwise", || {
            common::block_on_multi(order_fails_when_the_steps_completed_otherwise())
        }),
        common::trial("run_databases_are_dropped", || {
            common::block_on_multi(run_databases_are_dropped())
        }),
        common::trial("locks_left_waits_for_closed_connections_to_be_released", || {
            common::block_on_multi(locks_left_waits_for_closed_connections_to_be_released())
        }),
        common::trial("a_checkout_that_gives_up_is_recorded_and_later_steps_say_so", || {
            common::block_on_multi(a_checkout_that_gives_up_is_recorded_and_later_steps_say_so())
        }),
        common::trial("the_leak_guard_reports_and_ends_what_a_run_left", || {
            common::block_on_multi(the_leak_guard_reports_and_ends_what_a_run_left())
        }),
        common::trial("servers_the_harness_starts_listen_on_loopback_only", || {
            common::block_on_multi(servers_the_harness_starts_listen_on_loopback_only())
        }),
        common::trial("each_poolers_settings_pass_is_what_it_does", || {
            common::block_on_multi(each_poolers_settings_pass_is_what_it_does())
        }),
    ];
    for (case, step, wanted) in V2_CASES {
        trials.push(common::trial(
            format!("v2_expectations_fail_when_they_do_not_hold::{case}"),
            move || common::block_on_multi(v2_expectations_fail_when_they_do_not_hold(step, wanted)),
        ));
    }
    for on_timeout in ["drop", "cancel"] {
        trials.push(common::trial(
            format!("a_client_timeout_is_recorded_and_the_server_side_is_observed::{on_timeout}"),
            move || common::block_on_multi(a_client_timeout_is_recorded_and_the_server_side_is_observed(on_timeout)),
        ));
    }
    for driver in EXHAUSTIBLE {
        trials.push(common::trial(
            format!("a_checkout_from_an_exhausted_pool_fails_at_its_deadline::{driver}"),
            move || common::block_on_multi(a_checkout_from_an_exhausted_pool_fails_at_its_deadline(driver)),
        ));
    }
    libtest_mimic::run(&args, trials).exit();
}

async fn admin() -> DirectConn {
    server().admin().await.expect("admin connection")
}

/// Runs `statement` on `conn` (a test's own database made or dropped).
async fn sql(conn: &DirectConn, statement: &str) {
    conn.client()
        .simple_query(statement)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
}

/// pg_locks decoding against the server itself: bigint keys above 2^32,
/// negative and extreme keys, and two-int keys.
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
    let rows = observe::advisory_locks(&mut observer, None, false).await.unwrap();
    assert!(rows.iter().all(|r| r.activity.is_none()), "activity read unasked");
    let mut seen: Vec<AdvisoryKey> = rows.iter().filter(|r| r.pid == pid).map(|r| r.key).collect();
    seen.sort();
    let mut want = keys.to_vec();
    want.sort();
    assert_eq!(seen, want);
    let only = observe::advisory_locks(&mut observer, Some(AdvisoryKey::Big((1 << 32) + 5)), true)
        .await
        .unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].state.as_deref(), Some("idle"));
    // An idle session (no transaction) waits for no lock and holds no snapshot.
    let activity = only[0].activity.as_ref().expect("activity asked for");
    assert!(
        !activity.wait_event.as_deref().unwrap_or_default().starts_with("Lock:"),
        "{activity:?}"
    );
    assert!(!activity.holds_xmin, "{activity:?}");
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

/// `blocked:` is decided by the server: a background step that does not block
/// (the key is free) fails the assertion instead of passing it.
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

/// The cases of [`v2_expectations_fail_when_they_do_not_hold`]: name, the
/// step (or setup) that must fail, and what the failure must say.
const V2_CASES: [(&str, &str, &str); 4] = [
    (
        "notices",
        "  - { actor: o, sql: select pg_advisory_unlock(5), expect: { notices: [] } }\n",
        "expected notices [], got [WARNING: you don't own a lock",
    ),
    (
        "message",
        "  - { actor: o, sql: select 1/0, expect: { error: 22012, message: '^lock' } }\n",
        "its message \"division by zero\" does not match /^lock/",
    ),
    (
        "rows",
        "  - { actor: o, sql: 'select 1, 2 union all select 3, 4', expect: { rows: [[1, 2], [3, 5]] } }\n",
        "expected rows [1, 2] [3, 5], got [1, 2] [3, 4]",
    ),
    (
        "setup_error",
        "  - { actor: o, sql: select 1 }\nsetup: [select * from no_such_table]\n",
        "setup statement 1 at inline.yaml:6:9 failed: server error 42P01",
    ),
];

/// The v2 expectations fail when they do not hold, each saying what differed.
async fn v2_expectations_fail_when_they_do_not_hold(step: &str, wanted: &str) {
    let text = format!("name: v2\ndescription: d\nactors: {{ o: {{ via: direct }} }}\nsteps:\n{step}");
    let r = run_inline(&text, "tokio-postgres").await;
    let msg = r.failure.expect("must fail");
    assert!(msg.contains(wanted), "{wanted:?} not in: {msg}");
}

/// `order` compares the client-side completion order of background steps:
/// stating the reverse of what the server does fails.
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
    assert_eq!(
        r.observation("o").map(|o| &o.value),
        Some(&Value::Order(vec!["one".into(), "two".into()]))
    );
}

/// Each run gets its own database, dropped afterwards.
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

/// `client_timeout_ms` drops the call's future when it elapses: the step
/// records that (not a failure), within bounds, and the server is not told:
/// the backend still waits. `on_timeout: cancel` sends a cancel request and
/// records the statement's own outcome.
async fn a_client_timeout_is_recorded_and_the_server_side_is_observed(on_timeout: &str) {
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
            assert_eq!(
                call.value,
                Value::Dropped {
                    at_ms: 200,
                    cancel: Cancel::None
                }
            );
            assert_eq!(waiters.len(), 1, "{}", after.seen());
        }
        _ => {
            assert_eq!(call.sqlstate.as_deref(), Some("57014"), "{}", call.seen());
            assert!(waiters.is_empty(), "{}", after.seen());
        }
    }
}

/// A bounded checkout that gives up leaves the actor without a connection:
/// its later steps record that instead of failing the run.
async fn a_checkout_that_gives_up_is_recorded_and_later_steps_say_so() {
    let r = run_inline(
        "name: full\ndescription: d\npool: { max_size: 1 }\nactors: { a: { via: pool }, b: { via: pool } }\nsteps:\n  - { actor: a, do: checkout }\n  - { actor: b, do: checkout, client_timeout_ms: 300, record: second }\n  - { actor: b, sql: select 1, record: probe }\n  - { actor: b, do: return }\n  - { actor: a, do: return }\n",
        "deadpool-fast",
    )
    .await;
    assert!(r.passed(), "{:?}", r.failure);
    assert_eq!(
        r.observation("second").unwrap().value,
        Value::Checkout(Checkout::Dropped(300))
    );
    assert!(matches!(r.observation("probe").unwrap().value, Value::NoConnection(_)));
}

/// The leak guard finds a backend left in a run's database and the advisory
/// lock it holds, names both, and ends the backend; on an empty database it
/// finds nothing.
async fn the_leak_guard_reports_and_ends_what_a_run_left() {
    let admin = server().admin().await.unwrap();
    let db = format!("ll_leak_guard_{}", std::process::id());
    sql(&admin, &format!("create database \"{db}\"")).await;
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
    sql(&admin, &format!("drop database \"{db}\" with (force)")).await;
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
            found.push(match addr {
                "00000000000000000000000001000000" => "::1".to_owned(),
                "00000000000000000000000000000000" => "::".to_owned(),
                // An IPv4 address, in the kernel's byte order.
                v4 if v4.len() == 8 => u32::from_str_radix(v4, 16)
                    .map(|n| std::net::Ipv4Addr::from(n.swap_bytes()).to_string())
                    .unwrap_or_else(|_| v4.to_owned()),
                other => other.to_owned(),
            });
        }
    }
    found
}

/// What the harness starts listens on loopback only: the local cluster's
/// postmaster (`listen_addresses`) and every pooler (PgBouncer's
/// `listen_addr`, Pgpool-II's `listen_addresses`, pgagroal's `host`,
/// Odyssey's `listen`; those in containers on the host's network when
/// Docker answers), as the
/// kernel's socket table shows them. (A container's published port:
/// `container.rs`.)
async fn servers_the_harness_starts_listen_on_loopback_only() {
    let mut ports = Vec::new();
    if server().backend() == locklab::server::Backend::Local {
        ports.push(("the local cluster".to_owned(), server().spec("postgres", "").port));
    }
    use locklab_drivers::{Pooler, PoolerKind, PoolerMode};
    let poolers = [
        (PoolerKind::PgBouncer, PoolerMode::Session),
        (PoolerKind::PgBouncer, PoolerMode::Transaction),
        (PoolerKind::PgBouncerTrixie, PoolerMode::Session),
        (PoolerKind::PgBouncerTrixie, PoolerMode::Transaction),
        (PoolerKind::Pgpool, PoolerMode::Session),
        (PoolerKind::Pgagroal, PoolerMode::Session),
        (PoolerKind::Pgagroal, PoolerMode::Transaction),
        (PoolerKind::Odyssey, PoolerMode::Session),
        (PoolerKind::Odyssey, PoolerMode::Transaction),
    ];
    for (kind, mode) in poolers {
        let pooler = Pooler::new(kind, mode);
        if let Some(why) = locklab::server::poolers::unavailable(pooler) {
            eprintln!("skipping {}: {why}", pooler.label());
            continue;
        }
        let (port, _, _) = server().pooler(pooler).await.unwrap();
        ports.push((pooler.label(), port));
    }
    for (what, port) in ports {
        let addrs = listeners(port);
        assert!(!addrs.is_empty(), "{what}: nothing listens on port {port}");
        assert!(
            addrs.iter().all(|a| a == "127.0.0.1"),
            "{what} listens on {addrs:?} (port {port})"
        );
    }
    // The fault cells' server of its own: on loopback and on the host side
    // of the run's own veth pair, and nowhere else.
    if nix::unistd::Uid::effective().is_root() {
        let own = locklab::faults::server::for_major(17).await.unwrap();
        let ns = locklab::faults::netns::Namespace::get().unwrap();
        let port = own.spec("postgres", "").port;
        let mut addrs = listeners(port);
        addrs.sort();
        let mut want = vec!["127.0.0.1".to_owned(), ns.host_addr().to_string()];
        want.sort();
        assert_eq!(addrs, want, "the fault server (port {port}) listens on {addrs:?}");
    }
}

/// Whether connection settings pass a pooler (`PoolerFacts::settings_pass`,
/// which decides whether a scenario with `pool.settings` runs behind it) is
/// what the pooler does. In each mode of its columns a client connects
/// through it with `options=-c lock_timeout=1234ms` (as the pools do for
/// `pool.settings`) and reads its `lock_timeout` and its backend pid, in
/// rounds: in each round three other clients without the option first take
/// a server connection each in a transaction and end it, so that the
/// pooler has idle server connections that other clients used, and then
/// the client's statement runs. The rule: settings pass when in every mode
/// the client connects and every statement reads `1234ms`; behind
/// transaction pooling one of its statements must also have run on a server
/// connection another client used first (else the test says so and fails:
/// the fact would rest on connections made for the client). They do not
/// pass when the pooler refuses the client or a statement reads another
/// value.
async fn each_poolers_settings_pass_is_what_it_does() {
    use locklab_drivers::{Pooler, PoolerKind, PoolerMode};
    // A database of the test's own: a pooler started per database (pgagroal)
    // gets an instance of its own, which the other tests do not use.
    let db = format!("locklab_settings_{}", locklab::server::unique_token());
    let admin = admin().await;
    sql(&admin, &format!("create database \"{db}\"")).await;
    let mut seen = Vec::new();
    let mut started = Vec::new();
    for kind in PoolerKind::ALL {
        let mut passes = true;
        let mut measured = false;
        for column in kind.facts().columns {
            let pooler = Pooler::new(kind, column.mode);
            if let Some(why) = locklab::server::poolers::unavailable(pooler) {
                eprintln!("skipping {}: {why}", pooler.label());
                continue;
            }
            let (port, _, password) = server().pooler_for(pooler, &db).await.unwrap();
            started.push(pooler);
            let spec = |options: bool| {
                let mut spec = server().spec(&db, "locklab-settings");
                spec.host = "127.0.0.1".into();
                spec.port = port;
                spec.password = Some(password.clone());
                if options {
                    spec.options = vec![("lock_timeout".into(), "1234ms".into())];
                }
                spec
            };
            measured = true;
            let client = match DirectConn::connect(&spec(true)).await {
                Ok(c) => c,
                Err(e) => {
                    eprintln!(
                        "{}: the pooler does not take the setting (a reading, not an error): {e}",
                        pooler.label()
                    );
                    passes = false;
                    continue;
                }
            };
            let mut others = Vec::new();
            for _ in 0..3 {
                others.push(DirectConn::connect(&spec(false)).await.unwrap());
            }
            let mut reads = Vec::new();
            let mut theirs = std::collections::HashSet::new();
            for _ in 0..4 {
                for o in &others {
                    let rows = o
                        .client()
                        .simple_query("BEGIN; SELECT pg_backend_pid()::text")
                        .await
                        .unwrap();
                    theirs.extend(rows.iter().filter_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                        _ => None,
                    }));
                }
                for o in &others {
                    o.client().simple_query("COMMIT").await.unwrap();
                }
                let rows = client
                    .client()
                    .simple_query("SELECT current_setting('lock_timeout'), pg_backend_pid()::text")
                    .await
                    .unwrap();
                let row = rows
                    .iter()
                    .find_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(r) => Some((
                            r.get(0).unwrap_or_default().to_owned(),
                            r.get(1).unwrap_or_default().to_owned(),
                        )),
                        _ => None,
                    })
                    .unwrap();
                reads.push(row);
            }
            for o in others {
                o.close().await;
            }
            client.close().await;
            eprintln!(
                "{}: (lock_timeout, backend pid) {reads:?}; the other clients' backends {theirs:?}",
                pooler.label()
            );
            let all = reads.iter().all(|(v, _)| v == "1234ms");
            if all && column.mode == PoolerMode::Transaction {
                assert!(
                    reads.iter().any(|(_, pid)| theirs.contains(pid)),
                    "{}: every statement read the setting, but none ran on a server connection another client used: not shown to pass",
                    pooler.label()
                );
            }
            passes &= all;
        }
        if measured {
            seen.push((kind, passes));
        }
    }
    for pooler in started {
        server().pooler_close_database(pooler, &db, false, None).await.unwrap();
    }
    sql(&admin, &format!("drop database \"{db}\" with (force)")).await;
    admin.close().await;
    for (kind, passes) in seen {
        assert_eq!(
            kind.settings_pass(),
            passes,
            "{}: settings_pass is declared {}, and a client's setting {} the server through it",
            kind.as_str(),
            kind.settings_pass(),
            if passes { "reached" } else { "did not reach" }
        );
    }
}

/// A checkout that waits for a connection a full pool never frees fails at
/// the step's deadline, saying the pool handed out none (the pools' own
/// checkout timeout, 10 s, is longer), and the run still cleans up promptly.
async fn a_checkout_from_an_exhausted_pool_fails_at_its_deadline(driver: &str) {
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
