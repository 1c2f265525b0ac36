//! The scenario × driver matrix as test cases, generated when the tests run
//! from the files in `scenarios/` and from `locklab_drivers::registry()`
//! (libtest-mimic, `harness = false`): a new scenario file or a newly
//! registered driver is a new set of trials, with no edit here.
//!
//! - `SCENARIO::DRIVER::local` and `SCENARIO::DRIVER::container` (SCENARIO is
//!   the instance name, with `[param=value,…]` for a parameterised file): the
//!   cell runs once on that backend (a local cluster; a PostgreSQL 17
//!   container, ignored as "needs Docker" when no Docker engine answers).
//!   A configuration behind a pooler that runs in a container (PgBouncer
//!   1.24, Pgpool-II, pgagroal, Odyssey) runs on the local cluster only, and
//!   is `n/a` ("needs Docker", not a failure) without a Docker engine. Of
//!   two configurations behind the same pooler and mode, a scenario runs
//!   through one, in turn (`matrix/plan.rs`).
//!   It must pass (the scenario's fixed expectations are asserted by the
//!   runner), its observations must be present and well-formed, and its
//!   outcome must equal its cell in the committed baseline,
//!   `reports/baseline/NAME.json` (a scenario without that file fails with
//!   the command that writes and accepts it)
//!   (timings within `Tolerance::default()`; a race cell's shares are
//!   information, [`RACE_SHARES`]): a changed behaviour fails with the
//!   per-cell diff. No answer is hard-coded here.
//! - `deadline_fails_with_step_name::DRIVER`,
//!   `holders_named_after_latest_actor::DRIVER`,
//!   `aborted_transaction_is_recorded_not_fatal::DRIVER`: properties every
//!   driver must have, on the local cluster.
//! - After the trials: every driver-protocol line of the run (requests to
//!   the adapters, their answers) is valid by the shipped
//!   `drivers/adapters/protocol.schema.json`; an invalid one fails the binary.
//! - `baseline_has_a_cell_for_every_scenario_and_driver`: without a server,
//!   the baseline's cells are exactly scenarios × registered drivers; and
//!   `one_file_of_the_baseline_reads_as_in_the_whole_directory`: the
//!   shortcut a one-trial process (nextest's) takes to read its cells (its
//!   scenario's file) gives what reading the whole directory gives.
//!
//! The servers are shared: one per backend per test process under `cargo
//! test`, one per backend per run under `cargo nextest run`
//! (`locklab::server::shared`).

mod common;
#[path = "matrix/plan.rs"]
mod plan;
#[path = "matrix/timing.rs"]
mod timing;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use libtest_mimic::{Arguments, Failed, Trial};
use locklab::baseline::{self, Baseline, BaselineDir, Tolerance};
use locklab::outcome::{Phase, RunResult, Value};
use locklab::report::Report;
use locklab::runner;
use locklab::scenario::{self, BlockedStep, GrantedStep, OrderStep, Scenario, StepKind, When};
use locklab::server::{Backend, Server};
use locklab_drivers::{DriverKind, PoolerMode};

/// Trials per race cell (scenarios with `trials:`) under `cargo test`.
const TEST_TRIALS: u32 = 12;

/// How a race cell's shares compare here: as information. Its 12 trials run
/// in a debug build among the binary's other cells, a load that CPU
/// pressure does not tell apart from the report's (CI, 2026-12-04:
/// asyncpg's `cancel-races-grant` read `true` in 11 of 12 trials against
/// 22 % of the baseline's 1,000, both at over 80 % pressure). Its readings
/// and must-hold invariants are still checked on every trial.
const RACE_SHARES: baseline::Shares = baseline::Shares::Information(
    "cargo test's 12 trials of a race compare their shares as information only; `just check` compares them",
);

/// Where the committed baseline is, relative to the workspace.
const BASELINE: &str = "reports/baseline";

fn main() {
    let args = common::init_binary();
    // The races' short version: enough trials to exercise the machinery and
    // the verdicts, compared with the baseline's 1,000 by the race rule.
    locklab::runner::set_max_trials(Some(TEST_TRIALS));
    let _ = SINGLE_TRIAL.set(args.exact && args.filter.is_some());
    let scenarios: Vec<Arc<Scenario>> = scenarios_for(&args).into_iter().map(Arc::new).collect();
    // Asked once, up front: which backend every cell runs on depends on it.
    let docker = locklab::server::container::docker_answers()
        .err()
        .map(|e| format!("no Docker engine answered ({e:#})"));
    let plan = plan::Plan::new(&scenarios, docker.is_none());
    // The scenarios whose cells run on the fault server, from its network namespace.
    let namespaced: Vec<String> = scenarios
        .iter()
        .filter(|s| s.placement() == locklab::scenario::steps::Placement::FaultServer)
        .map(|s| s.name.clone())
        .collect();
    let namespaced_names: Vec<String> = {
        let mut families: Vec<String> = scenarios
            .iter()
            .filter(|s| s.placement() == locklab::scenario::steps::Placement::FaultServer)
            .map(|s| s.family.clone())
            .collect();
        families.dedup();
        families
    };
    let mut trials = Vec::new();
    for c in plan.cells {
        let s = Arc::clone(&scenarios[c.scenario]);
        let name = format!(
            "{}::{}::{}",
            s.name,
            c.driver.unwrap_or("all-drivers"),
            c.backend_label()
        );
        let kind = c.kind.clone();
        let backend = c.backend;
        let turn = c.turn;
        trials.push(match c.driver {
            Some(id) => Trial::test(name.clone(), move || {
                timed(&name, &kind, backend, || cell(backend, &s, id))
            }),
            None => Trial::test(name.clone(), move || {
                timed(&name, &kind, backend, || all_drivers(backend, &s, turn))
            }),
        });
    }
    // The runner's own checks through each column's pool, in raw SQL: a
    // column of the lock crate runs the crate's scenarios only (raw SQL
    // through its pool is its wrapped column's, checked here under that id).
    let raw_sql_columns = locklab_drivers::registry()
        .into_iter()
        .map(|d| d.info())
        .filter(|i| i.crate_name != locklab_drivers::libraries::LOCK_CRATE)
        .map(|i| i.id);
    for id in raw_sql_columns {
        trials.push(common::trial(
            format!("deadline_fails_with_step_name::{id}"),
            move || deadline_fails_with_step_name(id),
        ));
        trials.push(common::trial(
            format!("holders_named_after_latest_actor::{id}"),
            move || holders_named_after_latest_actor(id),
        ));
        trials.push(common::trial(
            format!("aborted_transaction_is_recorded_not_fatal::{id}"),
            move || aborted_transaction_is_recorded_not_fatal(id),
        ));
    }
    trials.push(common::trial(
        "or_finished_reads_a_call_that_finishes_first_and_leaves_it_to_its_await",
        or_finished_reads_a_call_that_finishes_first_and_leaves_it_to_its_await,
    ));
    let queued = common::trial(
        "a_queued_call_reads_alike_behind_every_transaction_pooler::container",
        a_queued_call_reads_alike_behind_every_transaction_pooler,
    );
    trials.push(queued);
    trials.push(common::trial(
        "a_reading_outside_the_declared_outcomes_or_one_violation_fails_a_race_cell",
        a_reading_outside_the_declared_outcomes_or_one_violation_fails_a_race_cell,
    ));
    trials.push(common::trial(
        "baseline_has_a_cell_for_every_scenario_and_driver",
        baseline_has_a_cell_for_every_scenario_and_driver,
    ));
    trials.push(common::trial(
        "one_file_of_the_baseline_reads_as_in_the_whole_directory",
        one_file_of_the_baseline_reads_as_in_the_whole_directory,
    ));
    trials.push(common::trial(
        "every_race_reading_the_baseline_knows_is_a_declared_outcome",
        every_race_reading_the_baseline_knows_is_a_declared_outcome,
    ));
    // The cells on the container backend, and those of a column whose pooler
    // runs in a container (Debian 13's PgBouncer, Pgpool-II, pgagroal, Odyssey).
    let pooler_in_container: Vec<String> = locklab_drivers::registry()
        .iter()
        .map(|d| d.info())
        .filter(|i| i.pooler.is_some_and(|p| p.kind.in_container()))
        .map(|i| format!("::{}::", i.id))
        .collect();
    let in_container = |t: &Trial| {
        t.name().ends_with("::container") || pooler_in_container.iter().any(|id| t.name().contains(id.as_str()))
    };
    let trials = common::ignore_when(trials, in_container, "needs Docker", docker.as_deref(), &args);
    // The fault cells with a `network: namespace` actor need root (and `ip`,
    // `nft`, `ss`): ignored, with the reason and the command that runs them.
    let namespaced = namespaced.iter().map(|n| format!("{n}::")).collect::<Vec<_>>();
    let in_namespace = |t: &Trial| namespaced.iter().any(|n| t.name().starts_with(n.as_str()));
    let no_namespace = locklab::faults::netns::unavailable().map(|why| {
        let commands: Vec<String> = namespaced_names
            .iter()
            .map(|n| format!("`cargo test -p locklab --test matrix -- {n}`"))
            .collect();
        format!("{why}; as root, {} runs them", commands.join(", "))
    });
    let trials = common::ignore_when(trials, in_namespace, "needs root", no_namespace.as_deref(), &args);
    let recorded = tempfile::NamedTempFile::new().expect("a temporary file for the protocol lines");
    locklab_drivers::external::record_to(recorded.path()).expect("recording the protocol lines");
    let usage = timing::Usage::now();
    let conclusion = libtest_mimic::run(&args, trials);
    timing::summary(usage);
    // The databases the cells left for each other go with the run (`exit`
    // runs no destructors).
    for server in common::started_servers() {
        let spare = sharing(server.backend()).take();
        if let Err(e) = runtime().block_on(spare.finish([server])) {
            eprintln!("the run's spare databases were not all dropped: {e}");
        }
    }
    // Every request sent to an adapter (Python, or a Rust pool hosted in a
    // process of its own) and every answer read from one, in this run.
    let lines = std::fs::read_to_string(recorded.path()).unwrap_or_default();
    // (`exit` runs no destructors: removed here.)
    drop(recorded);
    match common::check_protocol_lines(&lines) {
        Ok((0, 0)) => {}
        Ok((requests, answers)) => eprintln!(
            "driver protocol: the run's {requests} requests and {answers} answers are valid by drivers/adapters/protocol.schema.json"
        ),
        Err(e) => {
            eprintln!("driver protocol: {e}");
            std::process::exit(101);
        }
    }
    conclusion.exit();
}

/// Runs one trial's body, recording its wall time under its kind and
/// backend for the run's summary ([`timing`]).
fn timed(name: &str, kind: &str, backend: Backend, f: impl FnOnce() -> Result<(), Failed>) -> Result<(), Failed> {
    let started = Instant::now();
    let r = f();
    timing::record(name, kind, backend.as_str(), started.elapsed().as_secs_f64());
    r
}

/// The shipped scenarios. A process that runs one trial by its exact name
/// (nextest runs each trial so, in a process of its own) parses only that
/// trial's file: a scenario's name starts with its file's stem.
fn scenarios_for(args: &Arguments) -> Vec<Scenario> {
    let dir = common::root().join("scenarios");
    if let (true, Some(name)) = (args.exact, &args.filter) {
        let stem = name.split(['[', ':']).next().unwrap_or_default();
        let file = dir.join(format!("{stem}.yaml"));
        if !stem.is_empty()
            && file.is_file()
            && let Ok(s) = scenario::load_file(&file)
        {
            return s;
        }
    }
    all_scenarios()
}

fn all_scenarios() -> Vec<Scenario> {
    let dir = common::root().join("scenarios");
    scenario::load_dir(&dir)
        .unwrap_or_else(|e| panic!("{}", e.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n")))
}

fn server_for(backend: Backend) -> &'static Server {
    match backend {
        Backend::Container => common::container_server(),
        _ => common::server(),
    }
}

/// Whether this process runs a single trial (nextest's way: one process per
/// trial, named exactly); set by `main`.
static SINGLE_TRIAL: OnceLock<bool> = OnceLock::new();

/// The committed baseline directory, read once per process.
fn committed_dir() -> &'static BaselineDir {
    static B: OnceLock<BaselineDir> = OnceLock::new();
    B.get_or_init(|| BaselineDir::load(&common::root().join(BASELINE)).unwrap_or_else(|e| panic!("{e:#}")))
}

/// The committed baseline, read whole once per process.
fn committed() -> &'static Baseline {
    static B: OnceLock<Baseline> = OnceLock::new();
    B.get_or_init(|| committed_dir().whole())
}

/// The committed baseline of scenario file `family`: all of it under `cargo
/// test` (read once, shared by every cell), but only that scenario's file in
/// a process that runs one trial; `None` when the scenario has no accepted
/// file.
fn committed_for(family: &str) -> Option<std::borrow::Cow<'static, Baseline>> {
    if SINGLE_TRIAL.get() == Some(&true) {
        let dir =
            BaselineDir::load_some(&common::root().join(BASELINE), Some(&[family])).unwrap_or_else(|e| panic!("{e:#}"));
        let file = dir.files.get(family)?;
        return Some(std::borrow::Cow::Owned(file.as_baseline(file.race_rows())));
    }
    committed_dir()
        .files
        .contains_key(family)
        .then(|| std::borrow::Cow::Borrowed(committed()))
}

/// Every driver's cell of `s` at once on `backend` (the fault server for a
/// scenario that needs it), each checked as [`cell`] checks one; of the
/// pooler columns that take turns, those whose turn `turn` is
/// ([`plan::in_turn`]).
fn all_drivers(backend: Backend, s: &Scenario, turn: usize) -> Result<(), Failed> {
    let server = server_for(backend);
    let turns = plan::turns();
    let drivers: Vec<_> = locklab_drivers::registry()
        .into_iter()
        .filter(|d| plan::in_turn(&turns, d.info().id, turn))
        .collect();
    // A cluster per cell (restart): four at a time, each starts and stops
    // one. On the fault server: four, so that a cell reaches its partition
    // well within the 2 s of `idle_session_timeout-2s` (more at once, under
    // the other test thread's load, and the timeout ended some holders
    // before their cut). On the shared server, where the other test
    // thread's cells run too: six, so that the pools' connections stay well
    // under its max_connections (300; a pool opens up to ten).
    // A pool in a process of its own (a crash of the pool): three, since
    // each cell starts that process (a Python interpreter importing its
    // library, on a fresh clone compiling it first), and six at once stalled
    // the others' clients by over a second.
    let jobs = if s.pool_process == locklab::scenario::Process::Child {
        3
    } else if s.needs_own_cluster() || s.needs_fault_server() {
        4
    } else {
        6
    };
    let results = common::block_on_multi(locklab::matrix::run_all(
        std::slice::from_ref(server),
        std::slice::from_ref(s),
        &drivers,
        jobs,
        1,
        |_, _| {},
    ));
    let mut failures = Vec::new();
    for (driver, r) in drivers.iter().zip(results) {
        let id = driver.info().id;
        if let Err(e) = check_cell(backend, server, s, driver.as_ref(), r) {
            failures.push(format!("{} × {id}: {}", s.name, e.message().unwrap_or("failed")));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n\n").into())
    }
}

/// One runtime for every single cell of this process, so that the run
/// databases and admin connections [`sharing`] keeps stay usable from cell
/// to cell (a connection lives on the runtime that opened it).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// The run databases and admin connections the single cells leave each
/// other, as `locklab report` and `check` do (`runner::run_sharing_databases`):
/// a cell that leaves its database clean saves the next one a `create
/// database`, a `drop database` and a connection, the largest part of a short
/// cell's cost on the server. One per backend: both servers are `pg17`, the
/// id a `Sharing` keys its databases by. Dropped at the end of `main`.
fn sharing(backend: Backend) -> &'static runner::Sharing {
    static LOCAL: OnceLock<runner::Sharing> = OnceLock::new();
    static CONTAINER: OnceLock<runner::Sharing> = OnceLock::new();
    match backend {
        Backend::Container => CONTAINER.get_or_init(runner::Sharing::new),
        _ => LOCAL.get_or_init(runner::Sharing::new),
    }
}

/// One cell: run once on `backend`, passed, well-formed, equal to the baseline.
fn cell(backend: Backend, s: &Scenario, id: &str) -> Result<(), Failed> {
    let server = server_for(backend);
    let driver = locklab_drivers::find(id).map_err(|e| e.to_string())?;
    // Behind a pooler in a container (Pgpool-II caches server connections
    // per database), a cell gets a database of its own, as before sharing:
    // a reused name would hand it connections an earlier cell left cached.
    let behind_container_pooler = driver.info().pooler.is_some_and(|p| p.kind.in_container());
    if behind_container_pooler {
        // Pgpool-II resets a returned connection (`DISCARD ALL`) in its own
        // time and hands the next connection to whichever of its children
        // accepts it first: on a loaded machine a cell behind it can read
        // the other side of that race (2026-12-03: 3 of 6 whole-matrix runs
        // had one such cell differ). The rule for these columns: a cell fails
        // when two runs of it both differ from the baseline; a change of
        // behaviour differs every time.
        let first = runtime().block_on(runner::run(server, s, driver.as_ref()));
        let Err(first) = check_cell(backend, server, s, driver.as_ref(), first) else {
            return Ok(());
        };
        let again = runtime().block_on(runner::run(server, s, driver.as_ref()));
        return check_cell(backend, server, s, driver.as_ref(), again).map_err(|again| {
            format!(
                "differs from the baseline in two runs (behind a pooler in a container, one differing run is \
                 allowed):\n{}\nsecond run:\n{}",
                first.message().unwrap_or("failed"),
                again.message().unwrap_or("failed")
            )
            .into()
        });
    }
    let r = runtime().block_on(runner::run_sharing_databases(
        server,
        s,
        driver.as_ref(),
        sharing(backend),
    ));
    check_cell(backend, server, s, driver.as_ref(), r)
}

/// A cell's result: passed, well-formed, equal to the baseline.
fn check_cell(
    backend: Backend,
    server: &Server,
    s: &Scenario,
    driver: &dyn locklab_drivers::Driver,
    r: RunResult,
) -> Result<(), Failed> {
    assert_eq!(server.backend(), backend, "{}", server.describe());
    assert_eq!(server.major(), 17, "{}", server.version());
    let id = driver.info().id;
    // A machine that cannot make a network namespace (not root, no nft)
    // cannot run the fault cells that need one: n/a, not a difference.
    if r.skipped.as_deref().is_some_and(|why| why.starts_with("a fault cell")) {
        eprintln!(
            "{} × {id}: not run here: {}",
            s.name,
            r.skipped.as_deref().unwrap_or_default()
        );
        return Ok(());
    }
    // A pooler in a container, on a machine without Docker: n/a.
    if r.skipped.as_deref().is_some_and(|why| why.starts_with("needs Docker")) {
        eprintln!(
            "{} × {id}: not run here: {}",
            s.name,
            r.skipped.as_deref().unwrap_or_default()
        );
        return Ok(());
    }
    if let Some(failure) = &r.failure {
        return Err(failure.as_str().into());
    }
    assert_eq!(r.server, "pg17");
    assert_observations_well_formed(s, &r, driver.info().kind == DriverKind::Pooled);
    let drivers = vec![locklab_drivers::find(id).map_err(|e| e.to_string())?];
    // The baseline keeps the runs, not the verdicts: the report is not judged.
    let report = Report::new(
        std::slice::from_ref(server),
        std::slice::from_ref(s),
        &drivers,
        vec![r],
        0.0,
        locklab::report::Environment::current(),
    );
    let fresh = Baseline::from_report(&report).map_err(|e| format!("{e:#}"))?;
    let Some(before) = committed_for(&s.family) else {
        return Err(format!(
            "no baseline for scenario {0}: {BASELINE}/{0}.json is missing; `cargo locklab check --update -s {0}` runs \
             its cells and writes it (or `cargo locklab check -s {0}`, then `cargo locklab review`)",
            s.family
        )
        .into());
    };
    let before = before.as_ref();
    let comparison = baseline::compare_with(before, &fresh, Tolerance::default(), RACE_SHARES, &|_| false);
    if comparison.is_clean() {
        return Ok(());
    }
    Err(format!(
        "{}\n`just check` compares the whole matrix the same way (`just check -s '{}' -d {id}` this cell) and \
         writes what differs as pending files; if the change is intended, accept them with `cargo locklab review` \
         (or `cargo locklab check --update -s {}` rewrites the scenario's cells that differ).",
        comparison.render(
            before,
            &Path::new(BASELINE).join(format!("{}.json", s.family)),
            &format!("this test ({} server)", backend.as_str()),
            None
        ),
        s.name,
        s.family
    )
    .into())
}

/// The per-driver observations are present and well-formed (no answer is
/// expected: the baseline comparison is what checks the values).
fn assert_observations_well_formed(s: &Scenario, r: &RunResult, pooled: bool) {
    if r.skipped.is_some() {
        assert!(r.observations.iter().all(|o| o.value.is_not_applicable()), "{r:?}");
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
        assert!(!o.seen().to_string().is_empty(), "{name}: empty cell");
        let applies = match step.when() {
            Some(When::Pooled) => pooled,
            Some(When::Direct) => !pooled,
            None => true,
        };
        if !applies {
            assert_eq!(
                o.value,
                Value::NotApplicable,
                "{name}: a step that does not apply recorded {}",
                o.seen()
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
            StepKind::Order(OrderStep { steps: ids }) => {
                let Value::Order(got) = &o.value else {
                    panic!("{name}: not a list: {:?}", o.value)
                };
                assert_eq!(got.len(), ids.len(), "{name}: {got:?}");
            }
            StepKind::Blocked(BlockedStep { .. }) => {
                // What the call was doing when the wait ended; the step's
                // own time is the poll's, not the call's.
                assert!(matches!(o.value, Value::Wait(_)), "{name}: {:?}", o.value);
                assert!(o.elapsed_ms.is_none(), "{name}: a blocked step with a time");
            }
            StepKind::Await(a) if timed_by_granted(s, a, step.index) => {
                assert!(
                    o.elapsed_ms.is_none(),
                    "{name}: a call a `granted` step timed has a time of its own"
                );
            }
            _ if matches!(o.value, Value::NoConnection(_) | Value::Unsupported(_)) => {
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

/// Whether a `granted` step between the awaited background step and its
/// `await` (step `at`) timed the call: the runner then records no time.
fn timed_by_granted(s: &Scenario, a: &locklab::scenario::AwaitStep, at: usize) -> bool {
    s.steps[a.target + 1..at]
        .iter()
        .any(|st| matches!(st.kind, StepKind::Granted(GrantedStep { target, .. }) if target == a.actor))
}

/// Parses `text` (reported as `inline.yaml`) and runs it through `driver` on
/// the local cluster.
fn run_inline(text: &str, driver: &str) -> RunResult {
    let s = scenario::parse(Path::new("inline.yaml"), text)
        .unwrap_or_else(|e| panic!("{e:?}"))
        .remove(0);
    let d = locklab_drivers::find(driver).unwrap();
    common::block_on_multi(runner::run(common::server(), &s, d.as_ref()))
}

/// A step waiting on a lock nobody releases fails at its deadline, naming the
/// scenario, the driver, the actor and the step; the run then ends the stuck
/// backends and cleans up promptly, whatever the pool.
fn deadline_fails_with_step_name(driver: &str) {
    common::server();
    let started = Instant::now();
    let r = run_inline(
        "name: hangs\ndescription: b waits forever\nactors: { a: { via: direct }, b: { via: pool } }\nsteps:\n  - { actor: a, sql: select pg_advisory_lock(99) }\n  - { actor: b, do: checkout }\n  - { actor: b, sql: select pg_advisory_lock(99), deadline_ms: 300 }\n",
        driver,
    );
    // pgagroal 1.6.0 closes a client connection when one of its workers
    // crashes, which the runner records as a deviation (its measured
    // behaviour, `runner::POOLER_CLOSED`): then the step ended, not by the
    // deadline, and only what follows the step is checked. Any other run
    // that does not fail is a failure of this test.
    let closes = locklab_drivers::find(driver)
        .ok()
        .and_then(|d| d.info().pooler)
        .is_some_and(|p| p.kind.closes_client_connections());
    let pooler_closed = closes
        && r.failure.is_none()
        && r.deviation
            .as_deref()
            .is_some_and(|d| d.contains(runner::POOLER_CLOSED));
    match (&r.failure, pooler_closed) {
        (Some(msg), _) => deadline_message_names_the_step(driver, msg, &r),
        (None, true) => eprintln!(
            "{driver}: {} (not the deadline); the cleanup is checked",
            r.deviation.as_deref().unwrap_or_default()
        ),
        (None, false) => panic!(
            "the hanging step must fail; deviation: {:?}; steps: {:?}",
            r.deviation, r.steps
        ),
    }
    // Once the run is over nothing is left in its database.
    assert!(r.backends_left.is_empty(), "{:?}", r.backends_left);
    // Bound, not a timing measurement: cleanup (the phases after the steps)
    // must not wait out pool timeouts (10 s). The run's start is not counted:
    // behind a pooler with an instance per database (pgagroal) it includes
    // starting that instance in its container, seconds on a loaded machine.
    let cleanup: f64 = r
        .phases_ms
        .iter()
        .filter(|(p, _)| **p > Phase::Steps)
        .map(|(_, ms)| ms)
        .sum();
    assert!(
        cleanup < 8000.0,
        "the failed run took {cleanup:.0} ms to clean up (phases: {:?}; the whole run {:?})",
        r.phases_ms,
        started.elapsed()
    );
}

/// The deadline's failure names the scenario, driver, step and file
/// position, and what was waiting on what (unless the driver's own giving
/// up reached the server).
fn deadline_message_names_the_step(driver: &str, msg: &str, r: &RunResult) {
    for part in [
        "scenario 'hangs'".to_owned(),
        format!("driver '{driver}'"),
        "step 3 (b: select pg_advisory_lock(99))".to_owned(),
        "inline.yaml:7:".to_owned(),
        "deadline of 300 ms exceeded".to_owned(),
    ] {
        assert!(msg.contains(&part), "{part:?} not in: {msg}");
    }
    // What was waiting, on what, and that the harness ended it; unless the
    // driver's own giving up reached the server (asyncio's cancellation makes
    // asyncpg and psycopg send a cancel request), so nothing was stuck.
    if msg.contains("ended by the harness") {
        // Behind a pooler that hands a client any of its server connections
        // (pgagroal, Odyssey: their readings vary), b's statement may run on
        // another backend than the one its checkout saw, so the waiter may
        // be unnamed.
        let any_backend = locklab_drivers::find(driver)
            .ok()
            .and_then(|d| d.info().pooler)
            .is_some_and(|p| p.kind.readings_vary());
        let waiter = if any_backend {
            " waiting on Lock/advisory, blocked by backend "
        } else {
            "(actor 'b') waiting on Lock/advisory, blocked by backend "
        };
        for part in [
            "ended by the harness: backend ",
            waiter,
            "(actor 'a'): select pg_advisory_lock(99)",
        ] {
            assert!(msg.contains(part), "{part:?} not in: {msg}");
        }
        // The stuck waiter is among the backends the harness reports it ended.
        assert!(!r.cleaned_backends.is_empty(), "{:?}", r.steps);
    } else {
        assert!(
            msg.contains("adapter '"),
            "a Rust driver's dropped future never reaches the server: the harness must have ended b's backend: {msg}"
        );
    }
}

/// A holder is named after the actor that most recently checked its backend
/// out, even when another actor used the same pooled connection before
/// (behind transaction pooling: "server connection", when the lock is still
/// held at all).
fn holders_named_after_latest_actor(driver: &str) {
    let r = run_inline(
        "name: reuse\ndescription: two actors on one pooled connection\npool: { max_size: 1 }\nactors: { first: { via: pool }, second: { via: pool }, o: { via: direct } }\nsteps:\n  - { actor: first, do: checkout }\n  - { actor: first, sql: select pg_advisory_lock(1) }\n  - { actor: first, do: return }\n  - { actor: second, do: checkout }\n  - { actor: second, sql: select pg_advisory_lock(2) }\n  - { actor: o, observe: advisory_locks, key: 2, record: who_holds_2 }\n",
        driver,
    );
    assert!(r.passed(), "{:?}", r.failure);
    let o = r.observation("who_holds_2").unwrap();
    // Behind transaction pooling a backend is nobody's: named as such.
    let behind_transaction_pooling =
        locklab_drivers::find(driver).unwrap().info().pooler_mode() == Some(PoolerMode::Transaction);
    let want = if behind_transaction_pooling {
        "server connection"
    } else {
        "second"
    };
    let holders = &o.value.locks().expect("a lock snapshot").holders;
    if behind_transaction_pooling && holders.is_empty() {
        // A transaction pooler that resets a server connection after each
        // transaction (Odyssey's `pool_discard`) has released the session
        // lock already: nobody to name (the `session-lock-*` cells record
        // that; this test is about names).
        return;
    }
    assert_eq!(holders.len(), 1, "{}", o.seen());
    assert_eq!(holders[0].actor.as_deref(), Some(want), "{}", o.seen());
}

/// `blocked` with `or_finished`: a background call that finishes before it
/// is seen waiting is read as `finished first` with its value, and its
/// `await` still checks and records the same outcome.
fn or_finished_reads_a_call_that_finishes_first_and_leaves_it_to_its_await() {
    let r = run_inline(
        "name: finishes\ndescription: a call that never waits\nactors: { a: { via: direct }, o: { via: direct } }\nsteps:\n  - { actor: a, id: bg, sql: select 42, background: true }\n  - { actor: o, blocked: a, or_finished: true, record: wait }\n  - { await: bg, expect: { value: 42 }, record: outcome }\n",
        "tokio-postgres",
    );
    assert!(r.passed(), "{:?}", r.failure);
    let wait = r.observation("wait").unwrap();
    assert_eq!(
        wait.value,
        Value::Wait(locklab::outcome::Wait::FinishedFirst(Box::new(Value::Int(42)))),
        "{}",
        wait.seen()
    );
    assert_eq!(r.observation("outcome").unwrap().value, Value::Int(42));
}

/// The shipped `waiter-queued-in-pooler` through the four transaction-mode
/// poolers (PgBouncer 1.18 and 1.24, pgagroal, Odyssey): the `blocked`
/// step reads the same in all four, well before its deadline (a queued
/// call is recognised, not timed out), and not what a client with a
/// connection of its own reads (tokio-postgres without a pooler).
fn a_queued_call_reads_alike_behind_every_transaction_pooler() {
    let s = all_scenarios()
        .into_iter()
        .find(|s| s.name == "waiter-queued-in-pooler")
        .expect("the shipped scenario waiter-queued-in-pooler");
    let step = s
        .steps
        .iter()
        .find(|st| st.record.as_deref() == Some("waiter_while_holder_in_transaction"))
        .expect("its blocked step");
    let read = |driver: &str| {
        let d = locklab_drivers::find(driver).unwrap();
        let r = common::block_on_multi(runner::run(common::server(), &s, d.as_ref()));
        assert!(r.passed(), "{driver}: {:?}", r.failure);
        let took = r
            .steps
            .iter()
            .find(|rep| rep.step == step.index + 1)
            .map(|rep| rep.elapsed_ms)
            .unwrap_or(f64::MAX);
        assert!(
            took < step.deadline_ms as f64 / 2.0,
            "{driver}: the blocked step took {took} ms of its {} ms deadline",
            step.deadline_ms
        );
        r.observation("waiter_while_holder_in_transaction")
            .unwrap()
            .value
            .clone()
    };
    let poolers = [
        "pgbouncer-transaction",
        "pgbouncer-trixie-transaction",
        "pgagroal-transaction",
        "odyssey-transaction",
    ];
    let readings: Vec<(&str, Value)> = poolers.iter().map(|d| (*d, read(d))).collect();
    for (d, v) in &readings {
        assert_eq!(
            v, &readings[0].1,
            "{d} reads otherwise than {}: {readings:?}",
            readings[0].0
        );
    }
    let own = read("tokio-postgres");
    assert_ne!(
        own, readings[0].1,
        "a client with a server connection of its own reads as the poolers' queued one"
    );
}

/// A checkout that hands out a connection in an aborted transaction does not
/// fail the checkout step; the scenario's own recorded query sees what the
/// pool handed out (what it sees differs by pool, so only presence is checked).
fn aborted_transaction_is_recorded_not_fatal(driver: &str) {
    let r = run_inline(
        "name: aborted\ndescription: return in an aborted transaction\npool: { max_size: 1 }\nactors: { w: { via: pool } }\nsteps:\n  - { actor: w, do: checkout }\n  - { actor: w, do: begin }\n  - { actor: w, sql: select 1/0, expect: { error: \"22012\" } }\n  - { actor: w, do: return }\n  - { actor: w, do: checkout }\n  - { actor: w, sql: select 1, record: first_query_after_checkout }\n",
        driver,
    );
    assert!(r.passed(), "{:?}", r.failure);
    let o = r.observation("first_query_after_checkout").unwrap();
    assert!(o.value == Value::Int(1) || o.sqlstate.is_some(), "{o:?}");
}

/// The committed baseline has exactly one cell per shipped scenario ×
/// registered driver: a new scenario or driver without its cells, or cells of
/// one that is gone, is named. (Each cell's values are the matrix trials'.)
fn baseline_has_a_cell_for_every_scenario_and_driver() {
    let b = committed();
    let want: BTreeSet<(String, String)> = all_scenarios()
        .iter()
        .flat_map(|s| {
            locklab_drivers::ids()
                .into_iter()
                .map(|d| (s.name.clone(), d.to_owned()))
        })
        .collect();
    let mut have = BTreeSet::new();
    let mut twice = Vec::new();
    for c in &b.cells {
        if !have.insert((c.scenario.clone(), c.driver.clone())) {
            twice.push(format!("{} × {}", c.scenario, c.driver));
        }
    }
    let missing: Vec<String> = want.difference(&have).map(|(s, d)| format!("{s} × {d}")).collect();
    let extra: Vec<String> = have.difference(&want).map(|(s, d)| format!("{s} × {d}")).collect();
    assert!(
        missing.is_empty() && extra.is_empty() && twice.is_empty(),
        "{BASELINE} does not have one cell per scenario × driver:\n  missing: {}\n  not a scenario × driver: {}\n  twice: {}\n\
         `cargo locklab check --update -s NAME` writes a scenario's file from a fresh run of its cells.",
        if missing.is_empty() {
            "none".into()
        } else {
            missing.join(", ")
        },
        if extra.is_empty() {
            "none".into()
        } else {
            extra.join(", ")
        },
        if twice.is_empty() {
            "none".into()
        } else {
            twice.join(", ")
        },
    );
    let drivers: BTreeSet<&str> = b.drivers.keys().map(String::as_str).collect();
    let ids: BTreeSet<&str> = locklab_drivers::ids().into_iter().collect();
    assert_eq!(drivers, ids, "the baseline's driver columns");
}

/// Every reading of a race cell in the committed baseline is among its
/// scenario's declared `outcomes:` (so that the baseline, rewritten, loses no
/// outcome it knew: what is possible is in the scenario files).
fn every_race_reading_the_baseline_knows_is_a_declared_outcome() {
    let scenarios = all_scenarios();
    let mut unknown = Vec::new();
    for c in &committed().cells {
        let Some(s) = scenarios.iter().find(|s| s.name == c.scenario) else {
            continue;
        };
        let Some(t) = &s.trials else { continue };
        for (name, list) in &t.outcomes {
            let Some(o) = c.observations.get(name) else { continue };
            for share in o.shares.iter().flatten() {
                let v = &share.reading.value;
                if !matches!(v, Value::NotApplicable | Value::SettingsCannotPass)
                    && !list.iter().any(|p| runner::possible(p, v))
                {
                    unknown.push(format!(
                        "{} × {}: `{name}` read {}",
                        c.scenario, c.driver, share.reading
                    ));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "readings the baseline knows that the scenarios do not declare under `outcomes:`:\n  {}",
        unknown.join("\n  ")
    );
}

/// A race cell fails on a reading outside its scenario's `outcomes:`, even
/// in one trial, and on one violation of a must-hold invariant; a reading in
/// the list and a finding's violations do not fail it.
fn a_reading_outside_the_declared_outcomes_or_one_violation_fails_a_race_cell() {
    let race = |outcomes: &str, invariant: &str| {
        run_inline(
            &format!(
                "name: race\ndescription: a race of one\ntrials: 3\npool: {{ max_size: 1 }}\n\
                 actors: {{ w: {{ via: pool }}, o: {{ via: direct }} }}\nsteps:\n\
                 \x20 - {{ actor: w, do: checkout }}\n\
                 \x20 - {{ actor: w, sql: select pg_advisory_lock(77), record: call }}\n\
                 \x20 - {{ actor: o, observe: advisory_locks, key: 77, record: after }}\n\
                 \x20 - {{ actor: w, sql: select pg_advisory_unlock_all() }}\n\
                 \x20 - {{ actor: w, do: return }}\n\
                 outcomes:\n  call: {outcomes}\n  after: [{{ held_by: w }}]\n\
                 invariants:\n  none-held:\n    observe: after\n    max_holders: 0\n{invariant}"
            ),
            "deadpool-fast",
        )
    };
    let ok = race(r#"[{ value: "" }]"#, "    finding: true\n");
    assert!(ok.passed(), "{:?}", ok.failure);
    let outside = race("[{ value: true }]", "    finding: true\n");
    let msg = outside.failure.expect("a reading outside the list fails the cell");
    assert!(
        msg.contains("`call` read (empty) in 3 of 3 trials, not among its possible outcomes (value: true)"),
        "{msg}"
    );
    let violated = race(r#"[{ value: "" }]"#, "");
    let msg = violated
        .failure
        .expect("a must-hold invariant's violation fails the cell");
    assert!(msg.contains("invariant none-held violated in 3 of 3 trials"), "{msg}");
}

/// A process that runs one trial reads only its scenario's file
/// ([`committed_for`]): its cells are what the whole directory has for that
/// scenario, and the file's columns are the directory's entries for them.
fn one_file_of_the_baseline_reads_as_in_the_whole_directory() {
    let whole = committed();
    let n = whole.cells.len();
    assert!(n > 0);
    for c in [&whole.cells[0], &whole.cells[n / 2], &whole.cells[n - 1]] {
        let name = baseline::family(&c.scenario);
        let one = BaselineDir::load_some(&common::root().join(BASELINE), Some(&[name])).unwrap();
        let file = &one.files[name];
        let from_whole: Vec<_> = whole
            .cells
            .iter()
            .filter(|w| baseline::family(&w.scenario) == name)
            .collect();
        assert_eq!(file.cells.iter().collect::<Vec<_>>(), from_whole, "{name}");
        for (id, d) in &file.drivers {
            assert_eq!(Some(d), whole.drivers.get(id), "{name}: column {id}");
        }
    }
    let none = BaselineDir::load_some(&common::root().join(BASELINE), Some(&["no-such-scenario"])).unwrap();
    assert!(none.files.is_empty());
}
