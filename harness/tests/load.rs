//! Load runs (docs/src/load.md) on a local cluster of their own: the
//! right patterns keep mutual exclusion and every update through each
//! driver and through pgbench; the wrong one (a session-level lock taken on
//! one connection, the section run on another) is caught with the two
//! overlapping sections as evidence. Short runs (hundreds of sections): the
//! throughput and the curves belong to `just load`.

use locklab::load::{self, Client, LoadResult, LoadSpec, Pattern};
use std::sync::OnceLock;

use locklab::server::{BackendChoice, DEFAULT_PG_MAJOR, Server, ServerOptions};
use rstest::rstest;

fn spec(pattern: Pattern, workers: u32, keys: u32, count: u64) -> LoadSpec {
    LoadSpec {
        pattern,
        workers,
        keys,
        seconds: 0,
        count: Some(count),
        lock_timeout_ms: 2000,
        hold_us: 0,
    }
}

/// The most workers a test here runs.
const MAX_TEST_WORKERS: u32 = 6;

/// How many tests here may run at once (the test threads): the server's
/// connections are sized for that many runs of [`MAX_TEST_WORKERS`], each
/// with its harness connection and pgbench's or a pool's extra one.
const MAX_PARALLEL_RUNS: u32 = 16;

/// One load server for this test binary (each run has a database of its
/// own on it); the local backend's watchdog removes it when the process ends.
fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        load::start_server(DEFAULT_PG_MAJOR, MAX_PARALLEL_RUNS * (MAX_TEST_WORKERS + 2)).expect("load server")
    })
}

fn run(driver: Option<&str>, spec: &LoadSpec) -> LoadResult {
    assert!(spec.workers <= MAX_TEST_WORKERS);
    let server = server();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let boxed;
    let client = match driver {
        Some(id) => {
            boxed = locklab_drivers::find(id).expect("driver");
            Client::Driver(boxed.as_ref())
        }
        None => Client::Pgbench(
            locklab::server::resolve_binaries(&ServerOptions::new(BackendChoice::Local, DEFAULT_PG_MAJOR)).unwrap(),
        ),
    };
    rt.block_on(load::run(server, client, spec)).expect("load run")
}

/// Every right pattern, through a pool and through the direct driver: no
/// overlap, no lost update (no double claim for the queue), and sections
/// were made: a run that made none would pass any checker.
#[rstest]
fn right_patterns_keep_mutual_exclusion(
    #[values(Pattern::XactWait, Pattern::XactTry, Pattern::SessionDedicated, Pattern::SkipLocked)] pattern: Pattern,
    #[values("deadpool-fast", "tokio-postgres", "bb8")] driver: &str,
) {
    let r = run(Some(driver), &spec(pattern, 6, 3, 600));
    assert_eq!(r.attempts, 600, "{r:?}");
    assert!(r.sections >= 30, "too few sections to check: {r:?}");
    assert_eq!(r.counts.errors, 0, "{:?}", r.counts.first_error);
    assert_eq!(r.violations(), 0, "{pattern:?} through {driver}: {r:#?}");
    if pattern == Pattern::SkipLocked {
        assert_eq!(r.double_claims.as_ref().map(|v| v.checked), Some(r.sections));
    } else {
        assert_eq!(r.mutual_exclusion.checked, r.sections);
    }
}

/// pgbench runs the same SQL and its history passes the same checkers.
#[rstest]
fn pgbench_runs_the_same_sections(
    #[values(Pattern::XactWait, Pattern::XactTry, Pattern::SkipLocked)] pattern: Pattern,
) {
    let r = run(None, &spec(pattern, 4, 3, 400));
    assert_eq!(r.attempts, 400, "pgbench's -t 100 per client: {r:?}");
    assert!(r.sections >= 20, "{r:?}");
    assert_eq!(r.counts.errors, 0, "{:?}", r.counts.first_error);
    assert_eq!(r.violations(), 0, "{r:#?}");
    assert!(
        r.latency_ms.p50 > 0.0 && r.latency_ms.p50 <= r.latency_ms.p99,
        "{:?}",
        r.latency_ms
    );
}

/// The wrong pattern through the direct driver: the connection that took
/// the lock closes at "return", which releases it, so the sections run
/// unprotected and overlap. The evidence is two sections on one key whose
/// times cross.
#[test]
fn wrong_pattern_is_caught_with_evidence() {
    let mut s = spec(Pattern::SessionAcrossCheckouts, 6, 1, 0);
    s.count = None;
    s.seconds = 2;
    s.hold_us = 1000;
    let r = run(Some("tokio-postgres"), &s);
    assert!(r.sections > 0, "{r:?}");
    assert!(
        r.mutual_exclusion.violations > 0,
        "no overlap in {} sections: {r:#?}",
        r.sections
    );
    let o = &r.mutual_exclusion.evidence[0];
    assert_eq!(o.first.key, o.second.key);
    assert!(
        o.first.start_us <= o.second.start_us && o.second.start_us < o.first.end_us,
        "the evidence does not overlap: {o:?}"
    );
}
