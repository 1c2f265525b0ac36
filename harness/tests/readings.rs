//! Tests against a real PostgreSQL server of the readings the lab takes
//! beyond "who holds and who waits": `held_count` (a session's re-entrant
//! count of a lock, probed without letting the lock go) and the `detail`
//! of an `observe` snapshot (each backend's wait event and whether it holds
//! an xmin). A libtest-mimic harness (`harness = false`) like `server.rs`,
//! so that under nextest the processes share one server
//! (`common::init_binary`).

mod common;

use std::path::Path;

use libtest_mimic::Trial;
use locklab::outcome::{RunResult, Value, WaitEvent};
use locklab::runner;
use locklab::scenario;

use common::server;

/// The columns the `held_count` tests run on: the unpooled baseline and a
/// pool (a checked-out connection whose session keeps its locks).
const COLUMNS: [&str; 2] = ["tokio-postgres", "deadpool-fast"];

fn main() {
    let args = common::init_binary();
    let mut trials: Vec<Trial> = Vec::new();
    for driver in COLUMNS {
        for times in [1, 2, 5] {
            trials.push(common::trial(
                format!("held_count_is_the_number_of_unlocks_a_release_takes::{driver}::{times}"),
                move || common::block_on_multi(held_count_is_the_number_of_unlocks_a_release_takes(driver, times)),
            ));
        }
        trials.push(common::trial(
            format!("held_count_never_lets_a_queued_waiter_in::{driver}"),
            move || common::block_on_multi(held_count_never_lets_a_queued_waiter_in(driver)),
        ));
    }
    trials.push(common::trial(
        "observe_detail_is_what_pg_stat_activity_says_and_only_when_asked",
        || common::block_on_multi(observe_detail_is_what_pg_stat_activity_says_and_only_when_asked()),
    ));
    for (case, expect, wanted) in WAITERS_CASES {
        trials.push(common::trial(
            format!("the_waiters_expectation_fails_when_it_does_not_hold::{case}"),
            move || common::block_on_multi(the_waiters_expectation_fails_when_it_does_not_hold(expect, wanted)),
        ));
    }
    libtest_mimic::run(&args, trials).exit();
}

/// Parses `text` (reported as `inline.yaml`) and runs it through `driver`.
async fn run_inline(text: &str, driver: &str) -> RunResult {
    let s = scenario::parse(Path::new("inline.yaml"), text)
        .unwrap_or_else(|e| panic!("{e:?}"))
        .remove(0);
    let d = locklab_drivers::find(driver).unwrap();
    runner::run(server(), &s, d.as_ref()).await
}

/// The recorded values named `name`, in step order.
fn recorded<'r>(r: &'r RunResult, name: &str) -> Vec<&'r Value> {
    r.observations
        .iter()
        .filter(|o| o.name == name)
        .map(|o| &o.value)
        .collect()
}

/// Taking a key `times` times makes `held_count` read `times`, twice in a
/// row (the probe changes nothing), after which it takes exactly `times`
/// `pg_advisory_unlock` calls that answer true and the next answers false:
/// the count is the number of unlocks a release takes. The shared mode is
/// counted apart from the exclusive one, and a transaction-level hold is
/// not counted.
async fn held_count_is_the_number_of_unlocks_a_release_takes(driver: &str, times: usize) {
    let mut steps = String::from("  - { actor: w, do: checkout }\n");
    for _ in 0..times {
        steps.push_str("  - { actor: w, sql: select pg_advisory_lock(21) }\n");
        steps.push_str("  - { actor: w, sql: select pg_advisory_lock_shared(22) }\n");
    }
    steps.push_str("  - { actor: w, held_count: 21, record: count_1 }\n");
    steps.push_str("  - { actor: w, held_count: 21, record: count_2 }\n");
    steps.push_str("  - { actor: w, held_count: 22, shared: true, record: shared }\n");
    steps.push_str("  - { actor: w, held_count: 22, record: exclusive_of_shared }\n");
    steps.push_str("  - { actor: w, do: begin }\n  - { actor: w, sql: select pg_advisory_xact_lock(21) }\n");
    steps.push_str("  - { actor: w, held_count: 21, record: in_transaction }\n  - { actor: w, do: commit }\n");
    for _ in 0..times {
        steps.push_str("  - { actor: w, sql: select pg_advisory_unlock(21), expect: { value: true } }\n");
        steps.push_str("  - { actor: w, sql: select pg_advisory_unlock_shared(22), expect: { value: true } }\n");
    }
    steps.push_str("  - { actor: w, sql: select pg_advisory_unlock(21), expect: { value: false } }\n");
    steps.push_str("  - { actor: w, sql: select pg_advisory_unlock_shared(22), expect: { value: false } }\n");
    steps.push_str("  - { actor: w, held_count: 21, record: released }\n  - { actor: w, do: return }\n");
    let text = format!("name: held-count\ndescription: d\nactors: {{ w: {{ via: pool }} }}\nsteps:\n{steps}");
    let r = run_inline(&text, driver).await;
    assert_eq!(r.failure, None, "{driver}");
    let n = times as i64;
    let exclusive = |count| Value::HeldCount { count, shared: false };
    assert_eq!(recorded(&r, "count_1"), [&exclusive(n)], "{driver}");
    assert_eq!(recorded(&r, "count_2"), [&exclusive(n)], "{driver}");
    assert_eq!(
        recorded(&r, "shared"),
        [&Value::HeldCount { count: n, shared: true }],
        "{driver}"
    );
    assert_eq!(recorded(&r, "exclusive_of_shared"), [&exclusive(0)], "{driver}");
    assert_eq!(recorded(&r, "in_transaction"), [&exclusive(n)], "{driver}");
    assert_eq!(recorded(&r, "released"), [&exclusive(0)], "{driver}");
}

/// With a waiter queued behind the actor's lock, repeated probes never let
/// the lock go: afterwards the actor's own backend still holds it (by pid)
/// and the waiter still waits on the lock; the waiter gets it once the
/// actor has unlocked as often as the probe said.
async fn held_count_never_lets_a_queued_waiter_in(driver: &str) {
    let mut steps = String::from(concat!(
        "  - { actor: w, do: checkout }\n",
        "  - { actor: w, sql: select pg_backend_pid(), save: w_pid }\n",
        "  - { actor: w, sql: select pg_advisory_lock(23) }\n",
        "  - { actor: w, sql: select pg_advisory_lock(23) }\n",
        "  - { actor: waiter, id: waits, sql: select pg_advisory_lock(23), background: true }\n",
        "  - { actor: observer, blocked: waiter }\n",
    ));
    for i in 0..10 {
        steps.push_str(&format!("  - {{ actor: w, held_count: 23, record: count_{i} }}\n"));
    }
    steps.push_str(concat!(
        "  - actor: observer\n    observe: advisory_locks\n    key: 23\n",
        "    expect: { held: true, holders: { pid: w_pid }, waiters: { wait_event: \"Lock:advisory\" } }\n",
        "  - { actor: w, sql: select pg_advisory_unlock(23), expect: { value: true } }\n",
        "  - actor: observer\n    observe: advisory_locks\n    key: 23\n",
        "    expect: { holders: { pid: w_pid }, waiters: { wait_event: \"Lock:advisory\" } }\n",
        "  - { actor: w, sql: select pg_advisory_unlock(23), expect: { value: true } }\n",
        "  - { await: waits }\n",
        "  - { actor: waiter, held_count: 23, record: waiter }\n",
        "  - { actor: waiter, sql: select pg_advisory_unlock(23) }\n",
        "  - { actor: w, do: return }\n",
    ));
    let text = format!(
        "name: held-count-waiter\ndescription: d\nactors: {{ w: {{ via: pool }}, waiter: {{ via: direct }}, observer: {{ via: direct }} }}\nsteps:\n{steps}"
    );
    let r = run_inline(&text, driver).await;
    assert_eq!(r.failure, None, "{driver}");
    let counts: Vec<&Value> = (0..10).flat_map(|i| recorded(&r, &format!("count_{i}"))).collect();
    assert_eq!(counts.len(), 10);
    assert!(
        counts.iter().all(|v| **v
            == Value::HeldCount {
                count: 2,
                shared: false
            }),
        "{driver}: {counts:?}"
    );
    assert_eq!(
        recorded(&r, "waiter"),
        [&Value::HeldCount {
            count: 1,
            shared: false
        }]
    );
}

/// An `observe` with `detail` reads each backend's `pg_stat_activity` row:
/// a backend shown waiting (an ungranted `pg_locks` row) waits on a `Lock`
/// wait event, and whether it holds an xmin agrees with the server's own
/// `backend_xmin` of that backend read in a separate statement while it
/// still waits. Without `detail` the snapshot carries neither, and its text
/// is what it has always been.
async fn observe_detail_is_what_pg_stat_activity_says_and_only_when_asked() {
    let text = concat!(
        "name: detail\ndescription: d\n",
        "actors: { waiter: { via: pool }, holder: { via: direct }, observer: { via: direct } }\n",
        "steps:\n",
        "  - { actor: holder, sql: select pg_advisory_lock(24) }\n",
        "  - { actor: waiter, do: checkout }\n",
        "  - { actor: waiter, sql: select pg_backend_pid(), save: waiter_pid }\n",
        "  - { actor: waiter, id: waits, sql: select pg_advisory_lock(24), background: true }\n",
        "  - { actor: observer, blocked: waiter }\n",
        "  - { actor: observer, observe: advisory_locks, key: 24, record: plain }\n",
        "  - { actor: observer, observe: advisory_locks, key: 24, detail: [xmin, wait_event], record: detailed }\n",
        "  - actor: observer\n",
        "    sql: select backend_xmin is not null from pg_stat_activity where pid = ${waiter_pid}\n",
        "    record: server_xmin\n",
        "  - { actor: observer, blocked: waiter }\n",
        "  - { actor: holder, sql: select pg_advisory_unlock(24) }\n",
        "  - { await: waits }\n",
        "  - { actor: waiter, sql: select pg_advisory_unlock(24) }\n",
        "  - { actor: waiter, do: return }\n",
    );
    let r = run_inline(text, "tokio-postgres").await;
    assert_eq!(r.failure, None);
    let plain = recorded(&r, "plain")[0].locks().expect("a snapshot").clone();
    assert!(
        plain
            .holders
            .iter()
            .chain(&plain.waiters)
            .all(|h| h.wait.is_none() && h.xmin.is_none()),
        "{plain:?}"
    );
    assert_eq!(plain.to_string(), "held by holder (idle); waiting: waiter");
    let detailed = recorded(&r, "detailed")[0].locks().expect("a snapshot").clone();
    assert_eq!(detailed.waiters.len(), 1, "{detailed:?}");
    let waiter = &detailed.waiters[0];
    assert!(
        matches!(&waiter.wait, Some(WaitEvent::On(w)) if w.starts_with("Lock:")),
        "{waiter:?}"
    );
    let Value::Bool(server_xmin) = recorded(&r, "server_xmin")[0] else {
        panic!("{:?}", recorded(&r, "server_xmin"));
    };
    assert_eq!(waiter.xmin, Some(*server_xmin), "{waiter:?}");
    assert!(
        detailed.holders.iter().all(|h| h.wait.is_some() && h.xmin.is_some()),
        "{detailed:?}"
    );
}

/// The cases of [`the_waiters_expectation_fails_when_it_does_not_hold`]:
/// name, the `expect` of an observe of key 25 while a waiter is queued (or,
/// for `no_waiter`, of key 26 that nobody takes), and what the failure says.
const WAITERS_CASES: [(&str, &str, &str); 3] = [
    (
        "xmin",
        "key: 25, expect: { waiters: { xmin: false } }",
        "to hold no xmin, but backend",
    ),
    (
        "wait_event",
        "key: 25, expect: { waiters: { wait_event: \"Client:ClientRead\" } }",
        "expected every waiter to wait on Client:ClientRead, but backend",
    ),
    (
        "no_waiter",
        "key: 26, expect: { waiters: { xmin: true } }",
        "expected waiters, but not held",
    ),
];

/// `expect.waiters` fails the run, saying what it saw, when a waiter is not
/// so or when nobody waits.
async fn the_waiters_expectation_fails_when_it_does_not_hold(expect: &str, wanted: &str) {
    let text = format!(
        "name: waiters\ndescription: d\nactors: {{ holder: {{ via: direct }}, waiter: {{ via: direct }}, observer: {{ via: direct }} }}\nsteps:\n  - {{ actor: holder, sql: select pg_advisory_lock(25) }}\n  - {{ actor: waiter, id: waits, sql: select pg_advisory_lock(25), background: true }}\n  - {{ actor: observer, blocked: waiter }}\n  - {{ actor: observer, observe: advisory_locks, {expect} }}\n  - {{ actor: holder, sql: select pg_advisory_unlock(25) }}\n  - {{ await: waits }}\n"
    );
    let r = run_inline(&text, "tokio-postgres").await;
    let msg = r.failure.expect("must fail");
    assert!(msg.contains(wanted), "{wanted:?} not in: {msg}");
}
