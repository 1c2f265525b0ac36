//! The container backend against a real Docker engine, and the backend choice.
//!
//! Tests that need Docker are `#[ignore]`d — reported as skipped, by name — when
//! no Docker engine answered when the tests were built (`cfg(locklab_docker)`,
//! set by `build.rs`). Every container the harness creates carries the label
//! `locklab.pid=<pid of the process that created it>`; "nothing left behind"
//! means no container, running or stopped, with that label. Waiting is done by
//! asking Docker, with a deadline.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use locklab::server::{Backend, BackendChoice, Server, ServerOptions, container::PID_LABEL};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rstest::rstest;

/// `docker` with `args`; its stdout (panics when the command fails).
fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("the docker command");
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Ids of containers (any state) created by process `pid`.
fn containers_of(pid: u32) -> Vec<String> {
    let filter = format!("label={PID_LABEL}={pid}");
    docker(&["ps", "-aq", "--filter", &filter])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether a container with this id still exists (any state).
fn exists(id: &str) -> bool {
    !docker(&["ps", "-aq", "--no-trunc", "--filter", &format!("id={id}")]).is_empty()
}

/// Waits up to 30 s for `check` to hold, asking Docker every 100 ms.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "after 30 s: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn container_opts() -> ServerOptions {
    ServerOptions::new(BackendChoice::Container, 17)
}

#[test]
#[cfg_attr(
    not(locklab_docker),
    ignore = "needs Docker: no Docker engine answered when the tests were built"
)]
fn a_container_server_is_postgres_on_loopback_and_is_removed_on_drop() {
    let server = Server::start(&container_opts()).unwrap();
    assert_eq!(server.backend(), Backend::Container);
    assert!(server.version().starts_with("PostgreSQL 17."), "{}", server.version());
    assert_eq!(server.id(), "pg17");
    let image = server.image().expect("a container server names its image").to_owned();
    assert!(image.ends_with(":17"), "{image}");
    let id = server.container_id().unwrap().to_owned();
    assert!(exists(&id));
    // Published on loopback only.
    let bindings = docker(&["port", &id, "5432/tcp"]);
    assert!(
        !bindings.is_empty() && bindings.lines().all(|l| l.starts_with("127.0.0.1:")),
        "{bindings}"
    );
    // The configured role is a superuser that can create the run databases.
    common::block_on(async {
        let admin = server.admin().await.unwrap();
        let rows = locklab_drivers::simple_query_rows(admin.client(), "select current_setting('max_connections')")
            .await
            .unwrap();
        assert_eq!(rows.first_value(), Some(Some("300")));
        admin.close().await;
    });
    drop(server);
    // Drop removes the container before returning.
    assert!(!exists(&id), "container {id} left behind");
}

#[test]
#[cfg_attr(
    not(locklab_docker),
    ignore = "needs Docker: no Docker engine answered when the tests were built"
)]
fn a_panic_while_a_container_runs_removes_it() {
    let (tx, rx) = std::sync::mpsc::channel();
    let joined = std::thread::spawn(move || {
        let server = Server::start(&container_opts()).unwrap();
        tx.send(server.container_id().unwrap().to_owned()).unwrap();
        panic!("a step panicked");
    })
    .join();
    assert!(joined.is_err(), "the thread was meant to panic");
    let id = rx.recv().expect("the server started before the panic");
    assert!(!exists(&id), "container {id} left behind after a panic");
}

#[test]
#[cfg_attr(
    not(locklab_docker),
    ignore = "needs Docker: no Docker engine answered when the tests were built"
)]
fn a_missing_image_is_one_clear_error_and_leaves_nothing() {
    let began = Instant::now();
    let opts = ServerOptions {
        image: Some("locklab-test/no-such-image:{major}".into()),
        ..container_opts()
    };
    let err = format!("{:#}", Server::start(&opts).unwrap_err());
    assert!(
        err.contains("locklab-test/no-such-image:17") && err.contains("not present and cannot be pulled"),
        "{err}"
    );
    assert!(began.elapsed() < Duration::from_secs(60), "took {:?}", began.elapsed());
    assert!(
        !docker(&["ps", "-a", "--format", "{{.Image}}"]).contains("no-such-image"),
        "a container was left"
    );
}

/// An image whose entrypoint prints a line and never starts PostgreSQL, made
/// from the image the container backend uses (no registry needed).
fn never_ready_image() -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server_image = rt
        .block_on(locklab::server::container::image_for(&container_opts()))
        .unwrap();
    let tag = "locklab-test/never-ready:17";
    /// Removes the container the image is committed from, whatever happens.
    struct Created(String);
    impl Drop for Created {
        fn drop(&mut self) {
            let _ = Command::new("docker").args(["rm", "-f", &self.0]).output();
        }
    }
    let created = Created(docker(&["create", &server_image]));
    docker(&[
        "commit",
        "--change",
        r#"ENTRYPOINT ["sh", "-c", "echo locklab-test: not starting postgres; exec sleep 600"]"#,
        "--change",
        "CMD []",
        &created.0,
        tag,
    ]);
    tag.to_owned()
}

#[test]
#[cfg_attr(
    not(locklab_docker),
    ignore = "needs Docker: no Docker engine answered when the tests were built"
)]
fn a_container_that_never_becomes_ready_times_out_with_its_log() {
    let image = never_ready_image();
    let opts = ServerOptions {
        image: Some(image.clone()),
        start_timeout: Duration::from_secs(3),
        ..container_opts()
    };
    let began = Instant::now();
    let err = format!("{:#}", Server::start(&opts).unwrap_err());
    let took = began.elapsed();
    assert!(err.contains("did not accept connections within 3 s"), "{err}");
    assert!(
        err.contains("locklab-test: not starting postgres"),
        "no log lines in: {err}"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let ancestors = docker(&["ps", "-aq", "--filter", &format!("ancestor={image}")]);
    let _ = Command::new("docker").args(["rmi", &image]).output();
    assert!(ancestors.is_empty(), "containers left: {ancestors}");
}

/// Starts `locklab run --backend container` on `scenarios` (one driver, and
/// only the scenarios named in `only`, all when empty) and reads its stderr
/// until the container is up; returns the short container id.
fn start_child(scenarios: &std::path::Path, only: &[&str]) -> (Child, String, std::thread::JoinHandle<String>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locklab"));
    cmd.args(["run", "--backend", "container", "-d", "tokio-postgres", "--scenarios"])
        .arg(scenarios);
    for name in only {
        cmd.args(["-s", name]);
    }
    common::start_until(cmd, |line| {
        let rest = line.split_once(" ready in ")?.1.split_once("(container ")?.1;
        Some(rest.split_whitespace().next()?.to_owned())
    })
}

#[test]
#[cfg_attr(
    not(locklab_docker),
    ignore = "needs Docker: no Docker engine answered when the tests were built"
)]
fn a_normal_run_removes_its_container_before_exiting() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    // A few scenarios, one of them with a child process per actor: the whole
    // directory takes minutes (fault cells wait for keepalives, races run
    // their trials) and proves nothing more about the container's removal.
    let (mut child, id, drain) = start_child(
        &root,
        &["xact-lock-competition", "session-lock-pool-return", "crash-xact-holder"],
    );
    let pid = child.id();
    assert!(exists(&id));
    let status = child.wait().unwrap();
    let log = drain.join().unwrap();
    assert!(status.success(), "locklab run failed: {log}");
    assert!(
        containers_of(pid).is_empty(),
        "containers left: {:?}",
        containers_of(pid)
    );
}

#[rstest]
#[case::sigint(Signal::SIGINT)]
#[case::sigterm(Signal::SIGTERM)]
#[case::sigkill(Signal::SIGKILL)]
#[cfg_attr(
    not(locklab_docker),
    ignore = "needs Docker: no Docker engine answered when the tests were built"
)]
fn a_signalled_run_leaves_no_container_behind(#[case] signal: Signal) {
    let scenarios = common::slow_scenario();
    let (mut child, id, _drain) = start_child(scenarios.path(), &[]);
    let pid = child.id();
    assert!(exists(&id));
    kill(Pid::from_raw(pid as i32), signal).unwrap();
    let status = child.wait().unwrap();
    if signal == Signal::SIGKILL {
        // No destructor runs: the watchdog removes it once we are gone.
        eventually(&format!("containers of pid {pid} still exist"), || {
            containers_of(pid).is_empty()
        });
    } else {
        // The harness itself removes it before exiting with 128 + signal.
        assert_eq!(status.code(), Some(128 + signal as i32), "{status:?}");
        assert!(containers_of(pid).is_empty(), "left: {:?}", containers_of(pid));
    }
}

/// Interrupted while the container is still starting (right after the start
/// is announced): exit 128 + signal, and nothing remains once the watchdog
/// has looked (it keeps looking in case a create was in flight).
#[rstest]
#[case::sigint(Signal::SIGINT)]
#[case::sigterm(Signal::SIGTERM)]
#[cfg_attr(
    not(locklab_docker),
    ignore = "needs Docker: no Docker engine answered when the tests were built"
)]
fn a_run_interrupted_during_container_start_leaves_nothing(#[case] signal: Signal) {
    let scenarios = common::slow_scenario();
    let mut child = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(["run", "--backend", "container", "-d", "tokio-postgres", "--scenarios"])
        .arg(scenarios.path())
        .env_remove("LOCKLAB_DSN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let announced = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("starting PostgreSQL"));
    assert!(announced, "no start-up line");
    kill(Pid::from_raw(pid as i32), signal).unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + signal as i32), "{status:?}: {rest:?}");
    eventually(&format!("containers of pid {pid} still exist"), || {
        containers_of(pid).is_empty()
    });
}

/// A run whose scenario fails, by a failed expectation or by a panic inside
/// a step, still removes its container (and exits 1).
#[rstest]
#[cfg_attr(
    not(locklab_docker),
    ignore = "needs Docker: no Docker engine answered when the tests were built"
)]
fn a_failing_run_removes_its_container(#[values(false, true)] panic_in_step: bool) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("wrong.yaml"),
        "name: wrong\ndescription: expects the wrong value\nactors: { a: { via: direct } }\nsteps:\n  - { actor: a, sql: select 1, expect: { value: 2 } }\n",
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(["run", "--backend", "container", "-d", "tokio-postgres", "--scenarios"])
        .arg(dir.path())
        .env_remove("LOCKLAB_DSN")
        .env("LOCKLAB_TEST_PANIC_AT_STEP", if panic_in_step { "1" } else { "" })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("FAIL"), "{stdout}");
    assert_eq!(
        stdout.contains("panicked: LOCKLAB_TEST_PANIC_AT_STEP"),
        panic_in_step,
        "{stdout}"
    );
    assert!(
        containers_of(pid).is_empty(),
        "containers left: {:?}",
        containers_of(pid)
    );
}

/// The pooler containers (name and id) that process `pid` has now.
fn pooler_containers_of(pid: u32) -> Vec<(String, String)> {
    let filter = format!("label={PID_LABEL}={pid}");
    docker(&[
        "ps",
        "-a",
        "--no-trunc",
        "--filter",
        &filter,
        "--format",
        "{{.Names}} {{.ID}}",
    ])
    .lines()
    .filter_map(|l| l.split_once(' '))
    .filter(|(name, _)| name.starts_with("locklab-pgagroal-") || name.starts_with("locklab-odyssey-"))
    .map(|(name, id)| (name.to_owned(), id.to_owned()))
    .collect()
}

/// Processes of the host whose cgroup names one of the container ids (a
/// container's processes are in a cgroup named after it): `pid cmdline`.
fn processes_of_containers(ids: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let cgroup = std::fs::read_to_string(entry.path().join("cgroup")).unwrap_or_default();
        if ids.iter().any(|id| cgroup.contains(id.as_str())) {
            let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push(format!("{pid} {}", String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    found
}

/// pgagroal (an instance per cell database) and Odyssey, in both modes, in
/// front of the local cluster: after a run that passes, one whose
/// expectation fails, and one stopped by SIGINT or SIGTERM once each of its
/// four cells has its pooler's container (starting or serving), no pooler
/// container of the run is left, nor any process of one (pgagroal, its
/// workers, socat, Odyssey).
#[rstest]
#[cfg_attr(
    not(locklab_docker),
    ignore = "needs Docker: no Docker engine answered when the tests were built"
)]
fn no_pgagroal_or_odyssey_container_or_process_outlives_a_run(
    #[values("pass", "failure", "sigint", "sigterm")] end: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let expect = if end == "failure" { 2 } else { 1 };
    std::fs::write(
        dir.path().join("pooled.yaml"),
        format!(
            "name: pooled\ndescription: a pooled statement that takes a while\nactors: {{ a: {{ via: pool }} }}\nsteps:\n  - {{ actor: a, do: checkout }}\n  - {{ actor: a, sql: select 1 from pg_sleep(2), expect: {{ value: {expect} }} }}\n  - {{ actor: a, do: return }}\n"
        ),
    )
    .unwrap();
    let drivers = [
        "pgagroal-session",
        "pgagroal-transaction",
        "odyssey-session",
        "odyssey-transaction",
    ];
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locklab"));
    cmd.args(["run", "--backend", "local", "--jobs", "4", "--scenarios"])
        .arg(dir.path())
        .env_remove("LOCKLAB_DSN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for d in drivers {
        cmd.args(["-d", d]);
    }
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    let stderr = child.stderr.take().unwrap();
    let drain = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
            .join("\n")
    });
    // Every pooler container the run has, watched until it exits (or, for
    // a signal, until each of the four cells has its pooler: one pgagroal
    // per cell, one Odyssey per mode).
    let mut seen: std::collections::BTreeMap<String, String> = Default::default();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        for (name, id) in pooler_containers_of(pid) {
            seen.insert(name, id);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if matches!(end, "sigint" | "sigterm") && seen.len() >= drivers.len() {
            let signal = if end == "sigint" {
                Signal::SIGINT
            } else {
                Signal::SIGTERM
            };
            kill(Pid::from_raw(pid as i32), signal).unwrap();
            break child.wait().unwrap();
        }
        assert!(Instant::now() < deadline, "the run took over 120 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = drain.join().unwrap();
    let names: Vec<&String> = seen.keys().collect();
    assert!(
        names.iter().any(|n| n.starts_with("locklab-pgagroal-"))
            && names.iter().any(|n| n.starts_with("locklab-odyssey-")),
        "the run started no pgagroal or no Odyssey container: {names:?}; its log:\n{log}"
    );
    let want = match end {
        "pass" => Some(0),
        "failure" => Some(1),
        "sigint" => Some(128 + Signal::SIGINT as i32),
        _ => Some(128 + Signal::SIGTERM as i32),
    };
    assert_eq!(status.code(), want, "{status:?}; its log:\n{log}");
    let ids: Vec<String> = seen.values().cloned().collect();
    assert!(
        containers_of(pid).is_empty(),
        "containers left: {:?}",
        containers_of(pid)
    );
    eventually("processes of the pooler containers are left", || {
        processes_of_containers(&ids).is_empty()
    });
}

/// Runs the binary with `args` and `DOCKER_HOST` pointing at nothing.
fn without_docker(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(args)
        .env_remove("LOCKLAB_DSN")
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .unwrap()
}

#[test]
fn without_docker_the_container_backend_is_a_clear_error() {
    let out = without_docker(&["run", "--backend", "container", "-s", "xact-lock-competition"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("needs a Docker engine"), "{err}");
    assert!(err.contains("/nonexistent/docker.sock"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn without_docker_auto_falls_back_to_the_local_backend() {
    let out = without_docker(&["run", "-s", "xact-lock-competition", "-d", "tokio-postgres"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("(local backend, chosen by --backend auto)"), "{err}");
    assert!(err.contains("(local cluster in "), "{err}");
}

#[test]
fn conflicting_backend_options_are_rejected() {
    let out = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(["run", "--backend", "local", "--dsn", "postgresql://u@127.0.0.1:1/x"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--backend local starts its own server, but --dsn names one"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(["run", "--pg", "13"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--pg") && err.contains("13"), "{err}");
    for (var, value, want) in [
        (
            "LOCKLAB_PG",
            "16,13",
            "LOCKLAB_PG=16,13: '13' is not a PostgreSQL major version from 14 to 18",
        ),
        (
            "LOCKLAB_BACKEND",
            "docker",
            "LOCKLAB_BACKEND=docker: 'docker' is not one of auto, container, local, external",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_locklab"))
            .args(["run", "-s", "xact-lock-competition"])
            .env(var, value)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
    }
}

/// Empty variables count as unset; list items may carry spaces.
#[test]
fn version_and_backend_variables_are_forgiving_about_blanks() {
    let out = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(["run", "-s", "xact-lock-competition", "-d", "tokio-postgres"])
        .env_remove("LOCKLAB_DSN")
        .env("LOCKLAB_PG", " 16 , 17 ")
        .env("LOCKLAB_BACKEND", " local ")
        .env("LOCKLAB_PG_IMAGE", "")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("starting PostgreSQL 16, 17 (local backend)"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args([
            "run",
            "--backend",
            "local",
            "-s",
            "xact-lock-competition",
            "-d",
            "tokio-postgres",
        ])
        .env_remove("LOCKLAB_DSN")
        .env("LOCKLAB_PG", "")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("starting PostgreSQL 17 (local backend)"), "{err}");
}

/// `--pg 16,17`: one server per version, each its own column group in the
/// report, with its exact `version()` (local backend: no Docker needed).
#[test]
fn a_report_over_two_versions_has_a_column_group_per_version() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args([
            "report",
            "--backend",
            "local",
            "--pg",
            "16,17",
            "-s",
            "xact-lock-competition",
            "-d",
            "tokio-postgres",
            "-d",
            "bb8",
            "--out",
        ])
        .arg(out_dir.path())
        .env_remove("LOCKLAB_DSN")
        .env_remove("LOCKLAB_PG_BIN")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.path().join("matrix.json")).unwrap()).unwrap();
    let servers = json["servers"].as_array().unwrap();
    let ids: Vec<&str> = servers.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["pg16", "pg17"]);
    for (s, major) in servers.iter().zip([16, 17]) {
        assert_eq!(s["major"], major);
        assert!(
            s["version"]
                .as_str()
                .unwrap()
                .starts_with(&format!("PostgreSQL {major}.")),
            "{s}"
        );
        assert_eq!(s["backend"], "local");
        assert!(s["startup_ms"].as_f64().unwrap() > 0.0);
    }
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    for id in ["pg16", "pg17"] {
        assert_eq!(runs.iter().filter(|r| r["server"] == id).count(), 2, "{id}");
    }
    let md = std::fs::read_to_string(out_dir.path().join("matrix.md")).unwrap();
    // A row per server × driver, server-major.
    let rows: Vec<&str> = md
        .lines()
        .filter(|l| l.starts_with("| `pg1"))
        .map(|l| l.split(" | ").next().unwrap())
        .collect();
    // (each table has them, in this order)
    assert_eq!(rows.len() % 4, 0, "{rows:?}");
    assert_eq!(
        rows[..4],
        [
            "| `pg16 · tokio-postgres`",
            "| `pg16 · bb8`",
            "| `pg17 · tokio-postgres`",
            "| `pg17 · bb8`"
        ]
    );
    // Verdicts per server version.
    assert!(md.contains("## Verdicts on PostgreSQL 16."), "{md}");
    assert!(md.contains("## Verdicts on PostgreSQL 17."), "{md}");
    assert!(md.contains("## Servers"), "{md}");
}

/// `--pg 16` with binaries of another version is an error, not a mislabelled column.
#[test]
fn a_local_server_of_another_version_than_asked_is_an_error() {
    let bin = locklab::server::resolve_binaries(&ServerOptions::new(BackendChoice::Local, 17)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(["run", "--backend", "local", "--pg", "16", "--pg-bin"])
        .arg(&bin)
        .env_remove("LOCKLAB_DSN")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("asked for PostgreSQL 16, but the binaries"), "{err}");
    assert!(err.contains("runs PostgreSQL 17."), "{err}");
}

/// The same for an image named without `{major}`.
#[test]
#[cfg_attr(
    not(locklab_docker),
    ignore = "needs Docker: no Docker engine answered when the tests were built"
)]
fn a_container_of_another_version_than_asked_is_an_error() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let image = rt
        .block_on(locklab::server::container::image_for(&container_opts()))
        .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(["run", "--backend", "container", "--pg", "16", "--image", &image])
        .env_remove("LOCKLAB_DSN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "asked for PostgreSQL 16, but image {image} runs PostgreSQL 17."
        )),
        "{err}"
    );
    assert!(containers_of(pid).is_empty(), "left: {:?}", containers_of(pid));
}
