//! Nothing the harness starts outlives it (local backend; the container
//! backend's equivalents are in `container.rs`): the `locklab` binary is run as a
//! child process and stopped normally, by SIGINT, by SIGTERM and by SIGKILL
//! (no destructor runs at all), also while its cluster is still starting;
//! afterwards its cluster directory and its postmaster must be gone. Against an
//! external server, an interrupted run drops the databases it created. Waiting
//! is done by watching the file system, the process table or the server, with a
//! deadline.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rstest::rstest;

/// Starts `locklab run --backend local` on `scenarios` (default: the shipped
/// lock-timeout scenario) and reads its stderr until the local cluster is up:
/// its directory and postmaster pid.
fn start(scenarios: Option<&Path>) -> (Child, PathBuf, i32, std::thread::JoinHandle<String>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locklab"));
    match scenarios {
        Some(dir) => cmd
            .args(["run", "--backend", "local", "-d", "tokio-postgres", "--scenarios"])
            .arg(dir),
        None => cmd.args(["run", "--backend", "local", "--scenario", "lock-timeout-200ms"]),
    };
    let (child, (dir, pid), drain) = common::start_until(cmd, |line| {
        let rest = line.split_once("(local cluster in ")?.1;
        let (dir, pid) = rest.trim_end_matches(')').split_once(", postmaster pid ")?;
        Some((PathBuf::from(dir), pid.parse().ok()?))
    });
    (child, dir, pid, drain)
}

fn alive(pid: i32) -> bool {
    // Signal 0 checks existence; a zombie no one has reaped yet is not "running"
    // as far as /proc/<pid>/stat is concerned.
    kill(Pid::from_raw(pid), None).is_ok()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.split_whitespace().nth(2).is_none_or(|st| st != "Z"))
}

fn wait_until_gone(dir: &Path, pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while dir.exists() || alive(pid) {
        assert!(
            Instant::now() < deadline,
            "after 30 s: dir exists = {}, postmaster {pid} alive = {}",
            dir.exists(),
            alive(pid)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_normal_run_removes_its_cluster_before_exiting() {
    let (mut child, dir, pid, drain) = start(None);
    assert!(dir.exists() && alive(pid));
    let status = child.wait().unwrap();
    let log = drain.join().unwrap();
    assert!(status.success(), "locklab run failed: {log}");
    // Drop stopped the postmaster and removed the directory before exit.
    assert!(!dir.exists(), "{} left behind", dir.display());
    wait_until_gone(&dir, pid);
}

#[rstest]
#[case::sigint(Signal::SIGINT)]
#[case::sigterm(Signal::SIGTERM)]
#[case::sigkill(Signal::SIGKILL)]
fn a_signalled_run_leaves_no_server_behind(#[case] signal: Signal) {
    let scenarios = common::slow_scenario();
    let (mut child, dir, pid, _drain) = start(Some(scenarios.path()));
    assert!(dir.exists() && alive(pid));
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    let status = child.wait().unwrap();
    if signal != Signal::SIGKILL {
        assert_eq!(status.code(), Some(128 + signal as i32), "{status:?}");
        // The harness stopped and removed the cluster before exiting.
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
    wait_until_gone(&dir, pid);
}

/// A temporary directory the unprivileged cluster user can traverse, used as
/// the child's LOCKLAB_CLUSTER_DIR so that its cluster directory can be found early.
fn private_tmpdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::Builder::new().prefix("locklab-test-tmp-").tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// Processes whose command line mentions `needle` (e.g. a postmaster or initdb
/// working in a given directory).
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) && !cmd.contains("locklab-watchdog") {
                found.push(cmd);
            }
        }
    }
    found
}

/// Killed while the cluster is still being set up: as soon as its directory
/// exists, once `initdb` is writing `data/`, and once the postmaster has been
/// started (its log file exists): the watchdog still removes everything.
#[rstest]
fn a_run_killed_during_server_start_leaves_nothing(
    #[values(Signal::SIGKILL, Signal::SIGINT)] signal: Signal,
    #[values("", "data", "postgres.log")] stage: &str,
) {
    let tmp = private_tmpdir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(["run", "--backend", "local", "--scenario", "xact-lock-competition"])
        .env_remove("LOCKLAB_DSN")
        .env("LOCKLAB_CLUSTER_DIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let cluster = std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .next()
            .map(|e| e.path());
        if cluster.is_some_and(|c| c.join(stage).exists()) {
            break;
        }
        assert!(Instant::now() < deadline, "stage {stage:?} never reached");
        assert!(
            child.try_wait().unwrap().is_none(),
            "locklab exited before stage {stage:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    child.wait().unwrap();
    let needle = tmp.path().to_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        let procs = processes_mentioning(&needle);
        if left.is_empty() && procs.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after 30 s: left {left:?}, processes {procs:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Against an external server (here: one this test starts), an interrupted run
/// drops the per-run databases it had created.
#[test]
fn an_interrupted_run_on_an_external_server_drops_its_databases() {
    use locklab::server::{BackendChoice, Server, ServerOptions};
    let server = Server::start(&ServerOptions::new(BackendChoice::Local, 17)).unwrap();
    let spec = server.spec("postgres", "");
    let dsn = format!("postgresql://{}@{}:{}/postgres", spec.user, spec.host, spec.port);
    let scenarios = tempfile::tempdir().unwrap();
    std::fs::write(
        scenarios.path().join("slow.yaml"),
        "name: slow\ndescription: holds the run open\nactors: { o: { via: direct } }\nsteps:\n  - { actor: o, sql: select pg_sleep(60) }\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(["run", "--scenarios"])
        .arg(scenarios.path())
        .env("LOCKLAB_DSN", &dsn)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let count = || {
        rt.block_on(async {
            let admin = server.admin().await.unwrap();
            let n: i64 = admin
                .client()
                .query_one(
                    "select count(*) from pg_database where datname like 'll\\_slow\\_%'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            admin.close().await;
            n
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while count() < 5 {
        assert!(Instant::now() < deadline, "the run databases never appeared");
        assert!(child.try_wait().unwrap().is_none(), "locklab exited early");
        std::thread::sleep(Duration::from_millis(20));
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "exit status after SIGINT");
    assert_eq!(count(), 0, "run databases left on the server");
}

/// The server backends (pid, process title `postgres: user db host SELECT`,
/// from /proc) serving the run databases of locklab process `pid`: their
/// names end in `_{pid}_{n}`.
fn backends_of(pid: u32) -> Vec<(u32, String)> {
    let tag = format!("_{pid}_");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(backend) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.starts_with("postgres: ") && cmd.contains(" ll_") && cmd.contains(&tag) {
                found.push((backend, cmd.trim().to_owned()));
            }
        }
    }
    found
}

/// A scenario directory with one scenario, `ending`, that ends as `ending`
/// says: passes; fails an expectation (`failed-expectation`); or sits in
/// `pg_sleep(60)` holding advisory lock 7 until a signal (`sig…`).
fn ending_scenario(ending: &str) -> tempfile::TempDir {
    let scenarios = tempfile::tempdir().unwrap();
    // The sleep's deadline outlasts the wait for every column to reach it
    // (an adapter starting, a first-use install).
    let last = match ending {
        "failed-expectation" => "sql: select 1, expect: { value: 2 }",
        e if e.starts_with("sig") => "sql: select pg_sleep(600), deadline_ms: 600000",
        _ => "sql: select 1, expect: { value: 1 }",
    };
    std::fs::write(
        scenarios.path().join("ending.yaml"),
        format!(
            "name: ending\ndescription: ends as the test says\nactors: {{ w: {{ via: pool }} }}\nsteps:\n  \
             - {{ actor: w, do: checkout }}\n  - {{ actor: w, sql: select pg_advisory_lock(7) }}\n  \
             - {{ actor: w, {last} }}\n"
        ),
    )
    .unwrap();
    scenarios
}

/// Waits until, for each of `columns`, a backend of run `child` (its run
/// database names the column) has shown `SELECT` for 200 ms on end: the
/// column's `pg_sleep(60)` runs (the other statements take a few ms).
fn wait_until_sleeping(child: &mut Child, columns: &[&str], within: Duration) {
    let pid = child.id();
    let deadline = Instant::now() + within;
    let mut since: std::collections::HashMap<u32, Instant> = Default::default();
    loop {
        let busy = backends_of(pid);
        since.retain(|b, _| busy.iter().any(|(p, t)| p == b && t.ends_with("SELECT")));
        for (p, t) in &busy {
            if t.ends_with("SELECT") {
                since.entry(*p).or_insert_with(Instant::now);
            }
        }
        let sleeping = |column: &str| {
            let tag = format!(
                "_{}_",
                column.replace(|c: char| !c.is_ascii_alphanumeric(), "_").to_lowercase()
            );
            busy.iter().any(|(p, t)| {
                t.contains(&tag) && since.get(p).is_some_and(|s| s.elapsed() >= Duration::from_millis(200))
            })
        };
        if columns.iter().all(|c| sleeping(c)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not every column reached pg_sleep: {busy:?} (columns {columns:?})"
        );
        assert!(child.try_wait().unwrap().is_none(), "locklab exited before the signal");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// However a run ends (all of its cells pass; an expectation fails; a step
/// panics; SIGINT or SIGTERM while its statements run on the server), on a
/// local cluster of its own or on an external server, directly and through
/// PgBouncer: afterwards none of its temporary directories (cluster, PgBouncer),
/// postgres or PgBouncer processes, backends or run databases is left. The
/// run's TMPDIR and cluster directory are a private directory that must be
/// empty when it has exited.
#[rstest]
fn nothing_of_a_run_remains_however_it_ends(
    #[values("pass", "failed-expectation", "panic-in-step", "sigint", "sigterm")] ending: &str,
    #[values("local", "external")] backend: &str,
) {
    let tmp = private_tmpdir();
    let scenarios = ending_scenario(ending);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locklab"));
    cmd.args([
        "run",
        "-d",
        "tokio-postgres",
        "-d",
        "deadpool-fast",
        "-d",
        "pgbouncer-session",
        "--scenarios",
    ])
    .arg(scenarios.path())
    .env("LOCKLAB_CLUSTER_DIR", tmp.path())
    .env("TMPDIR", tmp.path())
    .env_remove("LOCKLAB_DSN")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if backend == "external" {
        let spec = common::server().spec("postgres", "");
        cmd.env(
            "LOCKLAB_DSN",
            format!("postgresql://{}@{}:{}/postgres", spec.user, spec.host, spec.port),
        );
    } else {
        cmd.args(["--backend", "local"]);
    }
    if ending == "panic-in-step" {
        cmd.env("LOCKLAB_TEST_PANIC_AT_STEP", "3");
    }
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    if let Some(signal) = match ending {
        "sigint" => Some(Signal::SIGINT),
        "sigterm" => Some(Signal::SIGTERM),
        _ => None,
    } {
        // Mid-run: the runs through PgBouncer and without a pool are inside
        // `pg_sleep(60)`, holding advisory lock 7.
        wait_until_sleeping(
            &mut child,
            &["pgbouncer-session", "tokio-postgres"],
            Duration::from_secs(120),
        );
        kill(Pid::from_raw(pid as i32), signal).unwrap();
    }
    let (out, log) = output_and_log(child);
    let code = match ending {
        "pass" => 0,
        "failed-expectation" | "panic-in-step" => 1,
        "sigint" => 130,
        _ => 143,
    };
    assert_eq!(out.status.code(), Some(code), "{ending}: {log}");
    match ending {
        "failed-expectation" => assert!(log.contains("expected 2"), "{log}"),
        "panic-in-step" => {
            // The panic fails its step like any error: named, and the locks
            // held when it failed are reported.
            assert!(log.contains("step 3 (w: select 1)"), "{log}");
            assert!(log.contains("panicked: LOCKLAB_TEST_PANIC_AT_STEP"), "{log}");
            assert!(log.contains("locks left after run") && log.contains("key 7"), "{log}");
        }
        "pass" => assert!(log.contains("3 passed"), "{log}"),
        _ => {}
    }
    // Exited means cleaned up: the harness removes its directories before it
    // exits (no watchdog involved) ...
    let left: Vec<PathBuf> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        left.is_empty(),
        "{ending}/{backend}: left in the temporary directory: {left:?}\n{log}"
    );
    // ... and its processes and backends end within moments (a postmaster
    // exits after it is told to; a backend once its client is gone).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let procs = processes_mentioning(tmp.path().to_str().unwrap());
        let backends = backends_of(pid);
        if procs.is_empty() && backends.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{ending}/{backend}: after 10 s: processes {procs:?}, backends {backends:?}\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    if backend == "external" {
        let left: Vec<String> = common::block_on(async {
            let admin = common::server().admin().await.unwrap();
            let rows = admin
                .client()
                .query(
                    "select datname from pg_database where datname like $1",
                    &[&format!("ll\\_%\\_{pid}\\_%")],
                )
                .await
                .unwrap();
            admin.close().await;
            rows.iter().map(|r| r.get(0)).collect()
        });
        assert!(left.is_empty(), "{ending}: run databases left: {left:?}");
    }
}

/// Processes (pid, command line) whose environment holds `marker`: every
/// process a run started, however deep (an adapter's JVM or Node process, a
/// Go binary, a Python interpreter), inherits it. Not this test process.
fn processes_marked(marker: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    let needle = marker.as_bytes();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || !alive(pid as i32) {
            continue;
        }
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|v| v == needle) {
            let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push((pid, String::from_utf8_lossy(&cmd).replace('\0', " ").trim().to_owned()));
        }
    }
    found
}

/// No adapter process outlives a run, however it ends (all cells pass; an
/// expectation fails; SIGINT or SIGTERM while every adapter column's
/// statement runs on the server; SIGKILL, when no destructor runs and an
/// adapter must notice that its stdin closed): every out-of-process column
/// of `drivers/adapters/adapters.yaml` whose toolchain is here (Python, Java,
/// Go, Node) runs one scenario in one `locklab run`, and afterwards no
/// process that inherited the run's environment is left.
#[rstest]
fn no_adapter_process_outlives_a_run(
    #[values("pass", "failed-expectation", "sigint", "sigterm", "sigkill")] ending: &str,
) {
    use locklab_drivers::Driver as _;
    let columns: Vec<String> = locklab_drivers::external::declared()
        .into_iter()
        .filter(|d| d.unavailable().is_none())
        .map(|d| d.info().id.to_owned())
        .collect();
    assert!(
        !columns.is_empty(),
        "no out-of-process column can run here (each names its missing toolchain)"
    );
    let tmp = private_tmpdir();
    let scenarios = ending_scenario(ending);
    let marker = format!("LOCKLAB_TEST_MARK={}-{}", std::process::id(), rand::random::<u64>());
    let (key, value) = marker.split_once('=').unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locklab"));
    // Every column's cell at once: they must all be mid-statement together.
    cmd.args(["run", "--backend", "local", "--jobs", &columns.len().to_string()]);
    for c in &columns {
        cmd.args(["-d", c]);
    }
    cmd.arg("--scenarios")
        .arg(scenarios.path())
        .env("LOCKLAB_CLUSTER_DIR", tmp.path())
        .env("TMPDIR", tmp.path())
        .env(key, value)
        .env_remove("LOCKLAB_DSN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    let signal = match ending {
        "sigint" => Some(Signal::SIGINT),
        "sigterm" => Some(Signal::SIGTERM),
        "sigkill" => Some(Signal::SIGKILL),
        _ => None,
    };
    if let Some(signal) = signal {
        // Each adapter is mid-statement, holding advisory lock 7. (First use
        // may install a column's packages: minutes, not hours.)
        let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
        wait_until_sleeping(&mut child, &columns, Duration::from_secs(600));
        // The marker reaches the run's descendants: locklab and at least one
        // adapter process per column (so an empty list below means gone).
        let marked = processes_marked(&marker);
        assert!(
            marked.len() > columns.len(),
            "the run's processes should carry {marker}: {marked:?}"
        );
        kill(Pid::from_raw(pid as i32), signal).unwrap();
    }
    let (out, log) = output_and_log(child);
    let code = match ending {
        "pass" => Some(0),
        "failed-expectation" => Some(1),
        "sigint" => Some(130),
        "sigterm" => Some(143),
        _ => None,
    };
    assert_eq!(out.status.code(), code, "{ending}: {log}");
    if ending == "pass" {
        let want = format!("{} passed", columns.len());
        assert!(log.contains(&want), "{ending}: want {want:?}:\n{log}");
    }
    // Gone within moments: an adapter ends when locklab ends it or when its
    // stdin closes; after SIGKILL the watchdog stops the cluster.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = processes_marked(&marker);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{ending}: 30 s after locklab exited, processes of the run remain: {left:?}\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for `child` and returns its output with its stdout and stderr as
/// one text, for the assertions' messages.
fn output_and_log(child: std::process::Child) -> (std::process::Output, String) {
    let out = child.wait_with_output().unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, log)
}
