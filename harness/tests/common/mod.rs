//! Helpers shared by the test files: the shared test server, and starting the
//! `locklab` binary as a child process.

#![allow(dead_code)] // each test file uses a subset

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread::JoinHandle;

use locklab::server::{BackendChoice, Server, ServerOptions};

/// The local cluster (PostgreSQL 17), or the server `LOCKLAB_DSN` names,
/// started once per test process and shared by its tests.
pub fn server() -> &'static Server {
    static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
    let backend = if ServerOptions::default().external_dsn().is_some() {
        BackendChoice::External
    } else {
        BackendChoice::Local
    };
    SERVER
        .get_or_init(|| Server::start(&ServerOptions::new(backend, 17)).map_err(|e| format!("{e:#}")))
        .as_ref()
        .unwrap_or_else(|e| panic!("no PostgreSQL server for the tests: {e}"))
}

/// Starts `cmd` (the `locklab` binary, stderr piped) and reads its stderr line
/// by line until `pick` finds what it waits for in a line. Returns the child,
/// what `pick` found, and a thread that keeps draining stderr (so the child
/// never blocks on a full pipe) and returns the rest of it. Panics, with all
/// stderr so far, when the child exits first.
pub fn start_until<T>(mut cmd: Command, pick: impl Fn(&str) -> Option<T>) -> (Child, T, JoinHandle<String>) {
    let mut child = cmd
        .env_remove("LOCKLAB_DSN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("locklab binary");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if let Some(found) = pick(&line) {
            let drain = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"));
            return (child, found, drain);
        }
    }
    let _ = child.kill();
    let status = child.wait();
    panic!("locklab exited ({status:?}) before the awaited line:\n{seen}");
}

/// A scenario directory with one run that lasts until it is signalled (8 s,
/// within the default 10 s step deadline).
pub fn slow_scenario() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("slow.yaml"),
        "name: slow\ndescription: holds the run open\nactors: { o: { via: direct } }\nsteps:\n  - { actor: o, sql: select pg_sleep(8) }\n",
    )
    .unwrap();
    dir
}

/// Runs `f` to completion on a new current-thread tokio runtime (for the
/// synchronous tests that query a server).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(f)
}
