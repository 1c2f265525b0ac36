//! Helpers shared by the test files: the shared test servers, libtest-mimic
//! trials (for the binaries with `harness = false`), and starting the
//! `locklab` binary as a child process.

#![allow(dead_code)] // each test file uses a subset

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use libtest_mimic::{Arguments, Trial};
use locklab::server::{BackendChoice, Server, ServerOptions, shared};

/// Whether this binary can be its own server keeper (see [`init_binary`]).
static KEEPER_CAPABLE: AtomicBool = AtomicBool::new(false);

/// First thing in the `main` of a test binary with `harness = false`: when
/// the process was started as the keeper of a server shared by a nextest run,
/// serves it and exits (`locklab::server::shared`); otherwise lets [`server`]
/// and [`container_server`] share one server per backend across the whole
/// nextest run. Returns the command-line arguments, with `--test-threads`
/// taken from `RUST_TEST_THREADS` when not given (as the built-in harness
/// does; `.cargo/config.toml` sets it).
pub fn init_binary() -> Arguments {
    shared::serve_if_keeper();
    KEEPER_CAPABLE.store(true, Ordering::Relaxed);
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        args.test_threads = std::env::var("RUST_TEST_THREADS").ok().and_then(|n| n.parse().ok());
    }
    args
}

/// The keeper executable for `shared::start_for_tests`: this binary, when
/// its `main` called [`init_binary`].
fn keeper() -> Option<PathBuf> {
    if KEEPER_CAPABLE.load(Ordering::Relaxed) {
        std::env::current_exe().ok()
    } else {
        None
    }
}

/// The local (or external) server of [`server`], once started.
static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
/// The container of [`container_server`], once started.
static CONTAINER: OnceLock<Result<Server, String>> = OnceLock::new();

/// The servers this process has started so far (none asked for is started).
pub fn started_servers() -> Vec<&'static Server> {
    [&SERVER, &CONTAINER]
        .into_iter()
        .filter_map(|s| s.get().and_then(|r| r.as_ref().ok()))
        .collect()
}

/// The local cluster (PostgreSQL 17), or the server `LOCKLAB_DSN` names:
/// under `cargo test` started once per test process and shared by its tests;
/// under nextest, in a binary that called [`init_binary`], one per nextest
/// run, shared by every test process (`locklab::server::shared`).
pub fn server() -> &'static Server {
    let backend = if ServerOptions::default().external_dsn().is_some() {
        BackendChoice::External
    } else {
        BackendChoice::Local
    };
    SERVER
        .get_or_init(|| {
            shared::start_for_tests(&ServerOptions::new(backend, 17), keeper().as_deref()).map_err(|e| format!("{e:#}"))
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("no PostgreSQL server for the tests: {e}"))
}

/// A PostgreSQL 17 container (testcontainers), shared as [`server`] is.
/// Removed when the test process ends (by the container watchdog: statics
/// are never dropped), or, shared by a nextest run, when the run ends.
pub fn container_server() -> &'static Server {
    CONTAINER
        .get_or_init(|| {
            shared::start_for_tests(&ServerOptions::new(BackendChoice::Container, 17), keeper().as_deref())
                .map_err(|e| format!("{e:#}"))
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("no PostgreSQL container for the tests: {e}"))
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Whether this process runs under cargo-nextest (which sets `NEXTEST_RUN_ID`
/// while listing and running tests).
pub fn under_nextest() -> bool {
    std::env::var_os(shared::RUN_ID_ENV).is_some_and(|v| !v.is_empty())
}

/// A trial that passes unless `f` panics (libtest-mimic reports the panic's
/// message as the failure).
pub fn trial(name: impl Into<String>, f: impl FnOnce() + Send + 'static) -> Trial {
    Trial::test(name, move || {
        f();
        Ok(())
    })
}

/// Marks the trials whose `needs(trial)` is true as ignored when `missing`
/// gives a reason, and says so once on stderr (`what`, e.g. "needs Docker",
/// and the reason). The built-in harness would print `ignored, <reason>`;
/// libtest-mimic prints no reason for an ignored trial, so under `cargo test`
/// the trial also gets `what` as its kind: `test [needs Docker] NAME ...
/// ignored`. Not under nextest, which would take the kind for part of the
/// name; nextest reports the trials as skipped (`--status-level skip` lists
/// them by name).
pub fn ignore_when(
    trials: Vec<Trial>,
    needs: impl Fn(&Trial) -> bool,
    what: &str,
    missing: Option<&str>,
    args: &Arguments,
) -> Vec<Trial> {
    let Some(why) = missing else {
        return trials;
    };
    let by_name = by_name(args);
    let mut ignored = 0;
    let out: Vec<Trial> = trials
        .into_iter()
        .map(|t| {
            if !needs(&t) {
                return t;
            }
            if !by_name.is_filtered_out(&t) {
                ignored += 1;
            }
            let t = t.with_ignored_flag(true);
            if under_nextest() { t } else { t.with_kind(what) }
        })
        .collect();
    if ignored > 0 && !args.list {
        eprintln!("{ignored} test(s) ignored, {what}: {why}");
    }
    out
}

/// Whether any of `trials` that `needs` picks is selected by the name
/// filters of these arguments (whether or not it is, or will be, ignored:
/// `--ignored` lists and runs exactly the ignored ones), e.g. to decide
/// whether to probe for Docker at all.
pub fn any_selected(trials: &[Trial], needs: impl Fn(&Trial) -> bool, args: &Arguments) -> bool {
    let by_name = by_name(args);
    trials.iter().any(|t| needs(t) && !by_name.is_filtered_out(t))
}

/// `args` without `--ignored`: its filters select by name only.
fn by_name(args: &Arguments) -> Arguments {
    Arguments {
        ignored: false,
        ..args.clone()
    }
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

/// Runs `f` to completion on a new multi-threaded tokio runtime with two
/// workers (as `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]`),
/// for the tests that run scenarios.
pub fn block_on_multi<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(f)
}

/// Checks lines of the driver protocol, as
/// `locklab_drivers::external::record_to` writes them (`→ REQUEST` or
/// `← ANSWER`), against the shipped `drivers/adapters/protocol.schema.json`
/// (requests against `$defs/Request`, answers against `$defs/Answer`) and
/// against the protocol's serde types. Returns how many requests and answers
/// were checked, or a message for each line that fails (at most 20).
pub fn check_protocol_lines(text: &str) -> Result<(usize, usize), String> {
    use locklab_drivers::external::protocol::{Answer, Request};
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("drivers/adapters/protocol.schema.json"))
            .map_err(|e| format!("drivers/adapters/protocol.schema.json: {e}"))?,
    )
    .map_err(|e| format!("drivers/adapters/protocol.schema.json: {e}"))?;
    let part = |def: &str| {
        let mut s = schema.clone();
        if let Some(o) = s.as_object_mut() {
            o.remove("anyOf");
            o.insert("$ref".into(), format!("#/$defs/{def}").into());
        }
        jsonschema::validator_for(&s).map_err(|e| format!("$defs/{def}: {e}"))
    };
    let (request, answer) = (part("Request")?, part("Answer")?);
    let (mut requests, mut answers, mut bad) = (0, 0, Vec::new());
    for (n, line) in text.lines().enumerate() {
        let (validator, json, typed) = if let Some(l) = line.strip_prefix("→ ") {
            requests += 1;
            (&request, l, serde_json::from_str::<Request>(l).err())
        } else if let Some(l) = line.strip_prefix("← ") {
            answers += 1;
            (&answer, l, serde_json::from_str::<Answer>(l).err())
        } else {
            bad.push(format!("line {}: neither → nor ←: {line:?}", n + 1));
            continue;
        };
        let value: serde_json::Value = match serde_json::from_str(json) {
            Ok(v) => v,
            Err(e) => {
                bad.push(format!("line {}: not JSON ({e}): {json}", n + 1));
                continue;
            }
        };
        let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
        if !errors.is_empty() {
            bad.push(format!("line {}: {} — {json}", n + 1, errors.join("; ")));
        } else if let Some(e) = typed {
            bad.push(format!(
                "line {}: valid by the schema, but not by the types ({e}): {json}",
                n + 1
            ));
        }
    }
    if bad.is_empty() {
        Ok((requests, answers))
    } else {
        let shown = bad.len().min(20);
        Err(format!(
            "{} protocol line(s) fail:\n{}",
            bad.len(),
            bad[..shown].join("\n")
        ))
    }
}

/// Checks the first error of a broken fixture against the fixture's first
/// line, `# expect: LINE:COLUMN message-prefix`: the place, `FILE:LINE:COLUMN:`
/// in front of the message, and the message's start. (The file is read
/// lossily: a fixture may deliberately not be UTF-8 after its first line.)
pub fn assert_expected_error<T>(path: &Path, loaded: Result<T, Vec<locklab::scenario::ScenarioError>>) {
    let text = String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
    let header = text
        .lines()
        .next()
        .unwrap()
        .strip_prefix("# expect: ")
        .expect("fixture lacks '# expect: L:C message'");
    let (at, message) = header.split_once(' ').unwrap();
    let errors = match loaded {
        Ok(_) => panic!("{} loaded without error", path.display()),
        Err(e) => e,
    };
    let first = &errors[0];
    let rendered = first.to_string();
    assert_eq!(
        format!("{}:{}", first.pos.line, first.pos.column),
        at,
        "wrong location in: {rendered}"
    );
    assert!(
        rendered.starts_with(&format!("{}:{at}: ", path.display())),
        "not file:line:col: {rendered}"
    );
    assert!(
        first.message.starts_with(message.trim()),
        "message {:?} does not start with {:?}",
        first.message,
        message.trim()
    );
}

/// Runs the `locklab` binary of this build with `args`, without the
/// environment that would point it elsewhere than the test expects
/// (`LOCKLAB_DSN`, `LOCKLAB_SCENARIOS`, `LOCKLAB_COLUMNS`), and waits for it.
pub fn locklab(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(args)
        .env_remove("LOCKLAB_DSN")
        .env_remove("LOCKLAB_SCENARIOS")
        .env_remove("LOCKLAB_COLUMNS")
        .output()
        .expect("run locklab")
}
