//! The driver protocol's failure paths, with a deliberately broken adapter
//! (`fixtures/adapters/broken.py`, run by the system's `python3`): one that
//! crashes, prints garbage, hangs, answers a request that was never sent, or
//! rejects a request. Each must give a cell failure that names the adapter,
//! the request and the end of its stderr, within the step's deadline, and
//! leave no adapter process running. Against the shared local cluster (the
//! adapter never connects to it; the runner's own connections do). And a
//! deliberately wrong one (`fixtures/adapters/splitting.py`) that runs a
//! query of several statements as separate autocommit statements:
//! `adapter check` must fail it on that.
//!
//! And the protocol's adapter end for Rust pools (`locklab pool-adapter`,
//! `pool.process: child`): a Rust pool hosted in a process of its own must
//! behave as the in-process one does, scenario by scenario, through
//! checkout, return, transactions, client-side bounds, cancel requests,
//! abandoned calls and the advisory-lock guard.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use locklab::runner;
use locklab::scenario;
use locklab_drivers::external::{AdapterSpec, ExternalDriver};

/// The step deadline of the scenario below, in ms.
const DEADLINE_MS: u64 = 2000;

fn main() {
    let args = common::init_binary();
    let modes = ["crash", "garbage", "hang", "unknown", "reject"];
    let mut trials = Vec::new();
    for mode in modes {
        trials.push(common::trial(
            format!("a_broken_adapter_fails_the_cell_clearly::{mode}"),
            move || a_broken_adapter_fails_the_cell_clearly(mode),
        ));
    }
    trials.push(common::trial(
        "adapter_check_names_what_the_broken_adapter_does_wrong",
        adapter_check_names_what_the_broken_adapter_does_wrong,
    ));
    trials.push(common::trial(
        "adapter_check_fails_an_adapter_that_splits_statements",
        adapter_check_fails_an_adapter_that_splits_statements,
    ));
    trials.push(common::trial(
        "a_missing_toolchain_is_na_with_its_install_command",
        a_missing_toolchain_is_na_with_its_install_command,
    ));
    trials.push(common::trial(
        "a_failed_install_is_na_with_its_reason",
        a_failed_install_is_na_with_its_reason,
    ));
    let no_python = std::process::Command::new("python3").arg("--version").output().is_err();
    let mut trials = common::ignore_when(
        trials,
        |_| true,
        "needs python3",
        no_python.then_some("no python3 on PATH"),
        &args,
    );
    // Every shipped out-of-process column; one whose toolchain is missing
    // here is ignored with the reason (its cells are n/a, which fails under CI).
    for d in locklab_drivers::external::declared() {
        use locklab_drivers::Driver as _;
        let id = d.info().id;
        let trial = common::trial(format!("adapter_check_passes_the_shipped_adapter::{id}"), move || {
            adapter_check_passes_the_shipped_adapter(id)
        });
        trials.push(match d.unavailable() {
            Some(why) => trial.with_ignored_flag(true).with_kind(why),
            None => trial,
        });
    }
    trials.push(common::trial(
        "adapter_check_passes_the_rust_pool_adapter",
        adapter_check_passes_the_rust_pool_adapter,
    ));
    trials.push(common::trial(
        "try_of_a_version_in_the_build_matches_its_builtin_column",
        try_of_a_version_in_the_build_matches_its_builtin_column,
    ));
    for family in HOSTED_SCENARIOS {
        for driver in HOSTED_DRIVERS {
            trials.push(common::trial(
                format!("a_hosted_rust_pool_behaves_as_in_process::{family}::{driver}"),
                move || a_hosted_rust_pool_behaves_as_in_process(family, driver),
            ));
        }
    }
    libtest_mimic::run(&args, trials).exit();
}

/// Scenarios whose steps use every request of the protocol.
const HOSTED_SCENARIOS: [&str; 6] = [
    "session-lock-pool-return",
    "xact-released-by-rollback",
    "cancel-timeout-session-lock",
    "cancel-drop-connection-mid-call",
    "lock-guard-api",
    "lock-timeout-200ms",
];

/// Rust pools of different kinds: async with a cancel API, sqlx (guard API,
/// no cancel), a synchronous pool.
const HOSTED_DRIVERS: [&str; 3] = ["deadpool-fast", "sqlx", "r2d2"];

fn a_hosted_rust_pool_behaves_as_in_process(family: &str, driver: &str) {
    let server = common::server();
    let file = common::root().join(format!("scenarios/{family}.yaml"));
    let instances = scenario::load_file(&file).unwrap_or_else(|e| panic!("{e:?}"));
    let d = locklab_drivers::find(driver).unwrap();
    for s in instances {
        let in_process = common::block_on_multi(runner::run(server, &s, d.as_ref()));
        let mut hosted_scenario = s.clone();
        hosted_scenario.pool_process = scenario::Process::Child;
        let hosted = common::block_on_multi(runner::run(server, &hosted_scenario, d.as_ref()));
        for (how, r) in [("in-process", &in_process), ("hosted", &hosted)] {
            assert!(r.passed(), "{} through {driver}, {how}: {:?}", s.name, r.failure);
        }
        let (a, b) = (in_process.outcome(), hosted.outcome());
        let changes = locklab::compare::diff(&a, &b, None);
        assert!(
            changes.is_empty(),
            "{} through {driver}: hosted in 'locklab pool-adapter' it differs from in-process:\n{}\nin-process failure: {:?}\nhosted failure: {:?}",
            s.name,
            changes.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"),
            in_process.failure,
            hosted.failure,
        );
    }
}

/// `locklab try` on the version of bb8-postgres the build already has
/// (`bb8@=VERSION`, `--offline`: no network; the crates are in cargo's
/// cache): the driver is built from `drivers/src/bb8_pg.rs` in a scratch
/// project outside the repository (the first time: about a minute), hosted
/// in a process of its own, run through the scenarios next to the built-in
/// `bb8` column (hosted the same way by `locklab pool-adapter bb8`) on a
/// local cluster, and compared with it as `check --upgrade` compares: no
/// cell may differ (exit 0), and the tried column reports the version it
/// was built with.
fn try_of_a_version_in_the_build_matches_its_builtin_column() {
    let version = locklab_drivers::crate_version("bb8-postgres");
    let mut args: Vec<String> = [
        "try",
        &format!("bb8@={version}"),
        "--offline",
        "--backend",
        "local",
        "--full",
    ]
    .map(str::to_owned)
    .to_vec();
    let scenarios: Vec<&str> = HOSTED_SCENARIOS.iter().chain(&ALSO_TRIED).copied().collect();
    for s in &scenarios {
        args.extend(["-s".to_owned(), (*s).to_owned()]);
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(&args)
        .output()
        .expect("locklab runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let tried = format!("bb8+try-{version}");
    assert!(
        stdout.contains(&format!("{tried}: bb8-postgres {version} (bb8 ")),
        "the tried column's version line:\n{stdout}\n{stderr}"
    );
    let cells = scenarios
        .iter()
        .map(|s| scenario::load_file(&common::root().join(format!("scenarios/{s}.yaml"))).map_or(0, |i| i.len()))
        .sum::<usize>();
    assert!(
        stdout.contains(&format!("bb8+try-built-in → {tried}: 0 of {cells} cell(s) differ")),
        "{stdout}\n{stderr}"
    );
    assert!(
        out.status.success(),
        "exit {:?}:\n{stdout}\n{stderr}",
        out.status.code()
    );
}

/// The scenarios of the `try` test besides [`HOSTED_SCENARIOS`] (every
/// request of the protocol): a crash of the pool's process with a lock
/// leaked into it, a user report's leak behind a pool, lock waits queued
/// behind a pool's checkouts.
const ALSO_TRIED: [&str; 3] = [
    "crash-pool-with-leaked-lock",
    "report-mockforge-968",
    "waiters-queue-fifo",
];

fn a_broken_adapter_fails_the_cell_clearly(mode: &str) {
    let server = common::server();
    let text = format!(
        "name: broken-{mode}\ndescription: one checkout, one statement\nactors: {{ w: {{ via: pool }} }}\nsteps:\n  - {{ actor: w, do: checkout, deadline_ms: {DEADLINE_MS} }}\n  - {{ actor: w, sql: select 1, deadline_ms: {DEADLINE_MS} }}\n  - {{ actor: w, do: return }}\n"
    );
    let s = scenario::parse(Path::new("inline.yaml"), &text)
        .unwrap_or_else(|e| panic!("{e:?}"))
        .remove(0);
    let script = common::root().join("harness/tests/fixtures/adapters/broken.py");
    let id = format!("broken-{mode}");
    let driver = ExternalDriver::new(AdapterSpec {
        id: id.clone(),
        package: "broken".into(),
        version: "0".into(),
        configuration: format!("misbehaves: {mode}"),
        install: Vec::new(),
        command: vec!["python3".into(), script.to_string_lossy().into_owned(), mode.into()],
        toolchain: None,
        base: None,
        kind: locklab_drivers::external::ColumnKind::Adapter,
        pooler: None,
        notices: true,
        queries_at_connect: None,
    });
    let began = Instant::now();
    let r = common::block_on_multi(runner::run(server, &s, &driver));
    let took = began.elapsed();
    let msg = r
        .failure
        .unwrap_or_else(|| panic!("a {mode} adapter must fail the cell; steps: {:?}", r.steps));
    for part in [
        format!("adapter '{id}'"),
        "(query)".to_owned(),
        format!("broken adapter: misbehaving ({mode})"),
    ] {
        assert!(msg.contains(&part), "the failure should name {part:?}:\n{msg}");
    }
    let why = match mode {
        "crash" => "exited (exit status: 3)",
        "garbage" => "not a protocol answer",
        "hang" => "within the deadline of 2000 ms",
        "unknown" => "which was never sent",
        _ => "rejected request",
    };
    assert!(msg.contains(why), "the failure should say {why:?}:\n{msg}");
    // Within the deadline of the step that met the fault, plus the clean-up
    // (a hung adapter is pinged for 3 s before it is ended).
    assert!(
        took < Duration::from_millis(DEADLINE_MS) + Duration::from_secs(10),
        "the cell took {took:?}"
    );
    // The adapter named in the message is gone (or, for the one that only
    // rejected a request, still the one serving this column: ended at exit).
    let pid: u32 = msg
        .split(&format!("adapter '{id}' (pid "))
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no adapter pid in:\n{msg}"));
    if mode != "reject" {
        let gone_by = Instant::now() + Duration::from_secs(5);
        while Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid) {
            assert!(Instant::now() < gone_by, "adapter pid {pid} still runs after the cell");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// `locklab adapter check -- COMMAND` on a local cluster of its own: exit
/// code, stdout, stderr.
fn adapter_check(command: &[&str]) -> (i32, String, String) {
    let mut args = vec!["--"];
    args.extend_from_slice(command);
    adapter_check_args(&args)
}

/// `locklab adapter check ARGS` on a local cluster of its own: exit code,
/// stdout, stderr.
fn adapter_check_args(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(["adapter", "check"])
        .args(args)
        .current_dir(common::root())
        .output()
        .expect("locklab runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The number of checks `adapter check` printed, passed and failed.
fn counted(stdout: &str) -> (usize, usize) {
    (
        stdout.lines().filter(|l| l.trim_start().starts_with("✓ ")).count(),
        stdout.lines().filter(|l| l.trim_start().starts_with("✗ ")).count(),
    )
}

/// `locklab adapter check --column ID` for a column of
/// `drivers/adapters/adapters.yaml`: installed first (on first use), then
/// every check must pass.
fn adapter_check_passes_the_shipped_adapter(id: &str) {
    let (code, stdout, stderr) = adapter_check_args(&["--column", id]);
    let (passed, failed) = counted(&stdout);
    assert!(
        code == 0 && failed == 0 && passed >= 20,
        "the shipped adapter of column {id} must pass every check: exit {code}, {passed} passed, {failed} failed\n{stdout}\n{stderr}"
    );
}

fn adapter_check_passes_the_rust_pool_adapter() {
    let bin = env!("CARGO_BIN_EXE_locklab");
    let (code, stdout, stderr) = adapter_check(&[bin, "pool-adapter", "sqlx"]);
    let (passed, failed) = counted(&stdout);
    assert!(
        code == 0 && failed == 0 && passed >= 20,
        "`locklab pool-adapter sqlx` must pass every check: exit {code}, {passed} passed, {failed} failed\n{stdout}\n{stderr}"
    );
}

fn adapter_check_names_what_the_broken_adapter_does_wrong() {
    let script = common::root().join("harness/tests/fixtures/adapters/broken.py");
    // It does not answer some requests: each such check waits out the
    // answer bound, here 2 s instead of the default 10.
    let (code, stdout, stderr) = adapter_check_args(&[
        "--answer-timeout",
        "2",
        "--",
        "python3",
        &script.to_string_lossy(),
        "reject",
    ]);
    assert_eq!(
        code, 1,
        "a broken adapter must fail the check (exit 1)\n{stdout}\n{stderr}"
    );
    // It answers hello (without saying why it has no cancel), open_pool and
    // checkout like a real adapter and rejects every query: the checks
    // that need a query fail, each by name, with what it answered.
    for (check, why) in [
        ("hello", "`no_cancel_reason` must say why"),
        ("query: values in PostgreSQL's text format", "unknown request 'query'"),
        ("bad: a return without a checkout", "expected an `error`"),
        (
            "checkout timeout_ms: gave_up while the pool is exhausted (or at once, an error)",
            "expected ok.gave_up true",
        ),
        ("bad: an unknown op (kind protocol)", "no answer to request"),
    ] {
        assert_fails_by_name(&stdout, check, why);
    }
    assert!(
        stdout.contains("✓ stdin closed: the adapter exits"),
        "what it does right passes:\n{stdout}"
    );
    assert!(stderr.contains("checks failed"), "{stderr}");
}

/// The shipped psycopg adapter with its `query` split into separate
/// autocommit statements (`fixtures/adapters/splitting.py`): `adapter check`
/// must fail exactly the checks of a query of several statements as one
/// implicit transaction, each by name with what the statements read, and
/// pass the rest (so the failure is the splitting's, not a broken adapter's).
fn adapter_check_fails_an_adapter_that_splits_statements() {
    let root = common::root();
    let install = std::process::Command::new("bash")
        .args(["drivers/adapters/python/install.sh", "psycopg-3.3"])
        .current_dir(&root)
        .output()
        .expect("bash runs");
    assert!(
        install.status.success(),
        "installing the psycopg-3.3 set failed:\n{}",
        String::from_utf8_lossy(&install.stderr)
    );
    let python = root.join(".cache/python/psycopg-3.3/bin/python");
    let script = root.join("harness/tests/fixtures/adapters/splitting.py");
    let adapters = root.join("drivers/adapters/python");
    let (code, stdout, stderr) = adapter_check(&[
        &python.to_string_lossy(),
        &script.to_string_lossy(),
        &adapters.to_string_lossy(),
    ]);
    assert_eq!(
        code, 1,
        "a splitting adapter must fail the check (exit 1)\n{stdout}\n{stderr}"
    );
    let failed: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("✗ "))
        .collect();
    assert_eq!(
        failed,
        [
            "query: several statements run as one implicit transaction",
            "query: an error in a later statement rolls back the earlier ones",
        ],
        "exactly the implicit-transaction checks must fail:\n{stdout}\n{stderr}"
    );
    for (check, why) in [
        (
            "query: several statements run as one implicit transaction",
            "got [\"0\",\"0\"]",
        ),
        (
            "query: an error in a later statement rolls back the earlier ones",
            "table ll_check_rolled_back exists after it",
        ),
    ] {
        assert_fails_by_name(&stdout, check, why);
    }
    let (passed, _) = counted(&stdout);
    assert!(passed >= 20, "the rest must pass:\n{stdout}");
}

/// A columns file outside the repository whose column needs a program that
/// is not on PATH: its cells are n/a with the install command; under CI the
/// run fails, unless LOCKLAB_ALLOW_MISSING names the column.
fn a_missing_toolchain_is_na_with_its_install_command() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("columns.yaml");
    std::fs::write(
        &file,
        "- id: needs-a-toolchain\n  package: nothing\n  version: \"0\"\n  configuration: a column whose toolchain is missing\n  \
         toolchain: {program: locklab-no-such-toolchain, install: \"apt-get install locklab-no-such-toolchain\"}\n  \
         command: [locklab-no-such-toolchain, adapter.x]\n",
    )
    .unwrap();
    let run = |ci: Option<&str>, allow: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_locklab"));
        cmd.args([
            "run",
            "-s",
            "session-lock-pool-return",
            "-d",
            "needs-a-toolchain",
            "--backend",
            "local",
        ])
        .arg("--columns")
        .arg(&file)
        .env_remove("CI")
        .env_remove("LOCKLAB_ALLOW_MISSING");
        if let Some(v) = ci {
            cmd.env("CI", v);
        }
        if let Some(v) = allow {
            cmd.env("LOCKLAB_ALLOW_MISSING", v);
        }
        let out = cmd.output().expect("locklab runs");
        (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (code, text) = run(None, None);
    assert_eq!(code, 0, "n/a is not a failure:\n{text}");
    assert!(
        text.contains("1 not applicable, 0 failed")
            && text.contains("needs `locklab-no-such-toolchain`, which is not on PATH; install it with: apt-get install locklab-no-such-toolchain"),
        "the cell must be n/a with the reason and the install command:\n{text}"
    );
    let (code, text) = run(Some("true"), None);
    assert_eq!(code, 1, "under CI a missing toolchain fails the run:\n{text}");
    assert!(text.contains("LOCKLAB_ALLOW_MISSING=needs-a-toolchain"), "{text}");
    let (code, text) = run(Some("true"), Some("other,needs-a-toolchain"));
    assert_eq!(code, 0, "LOCKLAB_ALLOW_MISSING names it:\n{text}");
}

/// A column whose install fails (no network, say): its cells are n/a with
/// the install's last line, as for a missing toolchain, not failed.
fn a_failed_install_is_na_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("columns.yaml");
    std::fs::write(
        &file,
        "- id: install-fails\n  package: nothing\n  version: \"0\"\n  configuration: a column whose install fails\n  \
         install: [sh, -c, \"echo 'cannot reach the package index' >&2; exit 1\"]\n  command: [sh, adapter.x]\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args([
            "run",
            "-s",
            "session-lock-pool-return",
            "-d",
            "install-fails",
            "--backend",
            "local",
        ])
        .arg("--columns")
        .arg(&file)
        .env_remove("CI")
        .output()
        .expect("locklab runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "n/a is not a failure:\n{text}");
    assert!(
        text.contains("1 not applicable, 0 failed")
            && text.contains("failed (exit status: 1): cannot reach the package index"),
        "the cell must be n/a with the install's reason:\n{text}"
    );
}

/// `adapter check`'s output (`stdout`) names `check` as failed (`✗ CHECK`)
/// and says `why` on the line after it.
fn assert_fails_by_name(stdout: &str, check: &str, why: &str) {
    let line = stdout
        .lines()
        .position(|l| l.trim_start() == format!("✗ {check}"))
        .unwrap_or_else(|| panic!("check {check:?} should fail by name:\n{stdout}"));
    let detail = stdout.lines().nth(line + 1).unwrap_or_default();
    assert!(
        detail.contains(why),
        "check {check:?} should say {why:?}, says: {detail}"
    );
}
