//! A test server shared by every test process of one `cargo nextest run`.
//!
//! nextest runs every test in a process of its own, and a server start costs
//! about 1.5 s (a local cluster; a container more). Under nextest
//! (`NEXTEST_RUN_ID` set, the same in every process of one run),
//! [`start_for_tests`] therefore does not start the server in the test process:
//!
//! 1. the first test process that needs a server of a backend starts a
//!    **keeper**, a process of its own (the test binary re-executed with
//!    [`KEEPER_ENV`] set; its `main` calls [`serve_if_keeper`] first), in a
//!    process group of its own, with its output in a log file;
//! 2. the keeper starts the server and both PgBouncers in front of it, and
//!    publishes how to reach them in `info.json` in a directory
//!    `<temp dir>/locklab-pg-keeper-<run id>-<backend>-<major>`, written
//!    atomically (a rename). An `flock` on `lock` in that directory makes the
//!    processes that ask at the same time wait for the first one, so only one
//!    keeper starts;
//! 3. every test process reads `info.json` and attaches: a [`Server`] that
//!    reports the backend the keeper started and [`Server::keeper_pid`], whose
//!    PgBouncers are the keeper's;
//! 4. the keeper watches the nextest process (the parent of the test process
//!    that started it, through a pidfd): once that is gone, however the run
//!    ended (all passed, a failure, Ctrl-C, SIGKILL), it drops the server
//!    (postmaster and cluster directory, or container; the PgBouncers) and
//!    removes its directory. SIGINT, SIGTERM or SIGHUP sent to the keeper
//!    itself do the same. If the keeper is SIGKILLed, the server's own
//!    watchdogs remove the cluster or container (see [`super::local`] and
//!    [`super::container`]); only the small keeper directory stays.
//!
//! A server that cannot start is recorded in `failed` in that directory, so
//! that the other tests of the run fail with the same message at once instead
//! of trying again; the keeper still waits for the run's end to remove it.
//!
//! Without `NEXTEST_RUN_ID` (plain `cargo test`, where all tests of a binary
//! share one process), or without a keeper executable, [`start_for_tests`] is
//! [`Server::start`]. An external server (`LOCKLAB_DSN`) is never kept: every
//! process connects to it.

use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use locklab_drivers::PoolerMode;
use serde::{Deserialize, Serialize};

use super::{Backend, BackendChoice, Server, ServerOptions};

/// Set (to the keeper's directory) in the environment of a keeper process;
/// [`serve_if_keeper`] acts on it.
pub const KEEPER_ENV: &str = "LOCKLAB_TEST_KEEPER";

/// The variable nextest sets, to one UUID per `cargo nextest run`, in every
/// test process (and while listing tests).
pub const RUN_ID_ENV: &str = "NEXTEST_RUN_ID";

/// The process the keeper watches (its exit ends the keeper).
const WATCH_ENV: &str = "LOCKLAB_KEEPER_WATCH";
/// `local` or `container`.
const BACKEND_ENV: &str = "LOCKLAB_KEEPER_BACKEND";
/// The PostgreSQL major version.
const MAJOR_ENV: &str = "LOCKLAB_KEEPER_MAJOR";
/// [`ServerOptions::start_timeout`], in s.
const TIMEOUT_ENV: &str = "LOCKLAB_KEEPER_START_TIMEOUT";

/// How long a test process waits for a keeper's server: the start itself is
/// bounded by the keeper (start timeout, image build, binary install), this
/// only guards against a keeper that hangs.
const KEEPER_WAIT: Duration = Duration::from_secs(1200);

/// What a keeper publishes in `info.json`.
#[derive(Serialize, Deserialize)]
struct Published {
    keeper_pid: u32,
    backend: String,
    host: String,
    port: u16,
    user: String,
    password: Option<String>,
    admin_db: String,
    version: String,
    version_num: u32,
    image: Option<String>,
    startup_ms: f64,
    image_ms: f64,
    poolers: Vec<PublishedPooler>,
}

/// A PgBouncer the keeper runs.
#[derive(Serialize, Deserialize)]
struct PublishedPooler {
    mode: String,
    port: u16,
    version: String,
    password: String,
}

const MODES: [PoolerMode; 2] = [PoolerMode::Session, PoolerMode::Transaction];

/// A server for tests: under nextest (`NEXTEST_RUN_ID` set) and with a
/// `keeper` executable, the one server of that backend shared by every test
/// process of the run (started by a keeper on first use, see the module
/// documentation); otherwise [`Server::start`]. `keeper` must be a program
/// whose `main` calls [`serve_if_keeper`] before anything else (a test binary
/// passes `std::env::current_exe()`).
///
/// # Errors
/// As [`Server::start`], plus: the keeper cannot be started, exited before
/// its server was ready (with the end of its log), or its server failed to
/// start (the keeper's error, also for every later test of the run).
pub fn start_for_tests(opts: &ServerOptions, keeper: Option<&Path>) -> Result<Server> {
    let run_id = std::env::var(RUN_ID_ENV).ok().filter(|r| !r.is_empty());
    let (Some(exe), Some(run_id)) = (keeper, run_id) else {
        return Server::start(opts);
    };
    let backend = opts.resolve_backend()?;
    let watch = nix::unistd::getppid().as_raw();
    if backend == Backend::External || watch <= 1 {
        return Server::start(opts);
    }
    shared(opts, backend, exe, &run_id, watch as u32)
}

/// The keeper directory of a run, backend and major version.
fn keeper_dir(run_id: &str, backend: Backend, major: u32) -> PathBuf {
    let id: String = run_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
        .collect();
    std::env::temp_dir().join(format!("locklab-pg-keeper-{id}-{}-{major}", backend.as_str()))
}

/// A keeper that a test process waits for.
enum Keeper {
    /// Started by this process.
    Child(Child),
    /// Started by another test process (which may have been ended since).
    Pid(u32),
}

fn shared(opts: &ServerOptions, backend: Backend, exe: &Path, run_id: &str, watch: u32) -> Result<Server> {
    let dir = keeper_dir(run_id, backend, opts.major());
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("lock"))
        .with_context(|| format!("cannot open {}", dir.join("lock").display()))?;
    let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow!("cannot lock {}: {e}", dir.join("lock").display()))?;
    let mut keeper = match std::fs::read_to_string(dir.join("keeper.pid")) {
        Ok(pid) => Keeper::Pid(pid.trim().parse().context("a keeper.pid that is not a pid")?),
        Err(_) => {
            let log = File::create(dir.join("keeper.log")).context("cannot create the keeper's log")?;
            let mut cmd = Command::new(exe);
            // The argument only names the keeper on its command line (`pgrep -f locklab-pg-`).
            cmd.arg(format!("--locklab-keeper={}", dir.display()))
                .env(KEEPER_ENV, &dir)
                .env(WATCH_ENV, watch.to_string())
                .env(BACKEND_ENV, backend.as_str())
                .env(MAJOR_ENV, opts.major().to_string())
                .env(TIMEOUT_ENV, opts.start_timeout.as_secs().to_string())
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                // Not in the terminal's process group: Ctrl-C ends nextest,
                // and the keeper cleans up once nextest is gone.
                .process_group(0);
            if let Some(bin) = &opts.pg_bin {
                cmd.env("LOCKLAB_PG_BIN", bin);
            }
            if let Some(image) = &opts.image {
                cmd.env("LOCKLAB_PG_IMAGE", image);
            }
            let child = cmd
                .spawn()
                .with_context(|| format!("cannot start the server keeper {}", exe.display()))?;
            write_atomic(&dir.join("keeper.pid"), child.id().to_string().as_bytes())?;
            Keeper::Child(child)
        }
    };
    let deadline = Instant::now() + KEEPER_WAIT;
    loop {
        if let Some(p) = published(&dir)? {
            return attach(p, &dir);
        }
        if let Ok(why) = std::fs::read_to_string(dir.join("failed")) {
            bail!(
                "the {} server shared by this nextest run could not be started: {why}",
                backend.as_str()
            );
        }
        let exited = match &mut keeper {
            Keeper::Child(c) => c.try_wait()?.map(|status| format!("exited ({status})")),
            Keeper::Pid(pid) => (!alive(*pid)).then(|| format!("(pid {pid}) has exited")),
        };
        if let Some(how) = exited {
            bail!(
                "the keeper of the shared {} server {how} before the server was ready; end of {}:\n{}",
                backend.as_str(),
                dir.join("keeper.log").display(),
                super::local::tail(&dir.join("keeper.log"), 20)
            );
        }
        if Instant::now() > deadline {
            if let Keeper::Child(c) = &keeper {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(c.id() as i32),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            bail!(
                "the shared {} server was not ready within {} s; end of {}:\n{}",
                backend.as_str(),
                KEEPER_WAIT.as_secs(),
                dir.join("keeper.log").display(),
                super::local::tail(&dir.join("keeper.log"), 20)
            );
        }
        // Polling a file the keeper writes, with the deadline above.
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: u32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok()
}

/// `info.json` of `dir`, once the keeper has written it.
fn published(dir: &Path) -> Result<Option<Published>> {
    match std::fs::read_to_string(dir.join("info.json")) {
        Ok(text) => Ok(Some(
            serde_json::from_str(&text).with_context(|| format!("{}: not a keeper's info", dir.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", dir.join("info.json").display())),
    }
}

/// A [`Server`] for what a keeper published.
fn attach(p: Published, dir: &Path) -> Result<Server> {
    if !alive(p.keeper_pid) {
        bail!(
            "the keeper process {} of the shared server has exited; end of {}:\n{}",
            p.keeper_pid,
            dir.join("keeper.log").display(),
            super::local::tail(&dir.join("keeper.log"), 20)
        );
    }
    let backend = match p.backend.as_str() {
        "local" => Backend::Local,
        "container" => Backend::Container,
        other => bail!("the keeper published an unknown backend {other:?}"),
    };
    let mut s = Server::at(backend, &p.host, p.port, &p.user, p.password, &p.admin_db);
    s.version = p.version;
    s.version_num = p.version_num;
    s.image = p.image;
    s.startup = Duration::from_secs_f64(p.startup_ms.max(0.0) / 1e3);
    s.image_time = Duration::from_secs_f64(p.image_ms.max(0.0) / 1e3);
    s.keeper = Some(p.keeper_pid);
    for pooler in p.poolers {
        if let Some(mode) = MODES.into_iter().find(|m| m.as_str() == pooler.mode) {
            s.attached_poolers
                .insert(mode, (pooler.port, pooler.version, pooler.password));
        }
    }
    Ok(s)
}

/// Writes `bytes` to `path` (mode 0600) through a temporary file and a rename,
/// so that a reader sees all of it or nothing.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        let mut f = File::options()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        f.write_all(bytes)?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// In a process started as a keeper ([`KEEPER_ENV`] set): serves the shared
/// server until the nextest run is over, removes everything, and exits the
/// process. Otherwise returns at once. Call it first in the `main` of a test
/// binary that passes itself to [`start_for_tests`].
pub fn serve_if_keeper() {
    let Some(dir) = std::env::var_os(KEEPER_ENV).filter(|d| !d.is_empty()) else {
        return;
    };
    std::process::exit(keep(Path::new(&dir)));
}

/// The keeper: see the module documentation.
fn keep(dir: &Path) -> i32 {
    use nix::sys::signal::{SigSet, Signal};
    // Blocked here, before any thread exists, so that every thread inherits
    // the mask and the signals wait for `sigwait` below. (Processes we start
    // get an empty mask: std resets it in the child.)
    let mut signals = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP, Signal::SIGUSR1] {
        signals.add(s);
    }
    if let Err(e) = signals.thread_block() {
        eprintln!("locklab keeper: cannot block signals: {e}");
        return 1;
    }
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    let Ok(watch) = env(WATCH_ENV).parse::<i32>() else {
        eprintln!("locklab keeper: {WATCH_ENV} is not a pid");
        return 1;
    };
    let me = nix::unistd::getpid();
    std::thread::spawn(move || {
        wait_for_exit(watch);
        let _ = nix::sys::signal::kill(me, Signal::SIGUSR1);
    });
    let backend = match env(BACKEND_ENV).as_str() {
        "container" => BackendChoice::Container,
        _ => BackendChoice::Local,
    };
    let mut opts = ServerOptions::new(backend, env(MAJOR_ENV).parse().unwrap_or(super::DEFAULT_PG_MAJOR));
    if let Ok(s) = env(TIMEOUT_ENV).parse() {
        opts.start_timeout = Duration::from_secs(s);
    }
    eprintln!(
        "locklab keeper {me}: starting the {} server shared by the nextest run of process {watch}",
        backend.as_str()
    );
    let started = serve(dir, &opts);
    match &started {
        Ok((server, _)) => eprintln!("locklab keeper: {}", server.describe()),
        Err(e) => {
            eprintln!("locklab keeper: {e:#}");
            let _ = write_atomic(&dir.join("failed"), format!("{e:#}").as_bytes());
        }
    }
    match signals.wait() {
        Ok(Signal::SIGUSR1) => eprintln!("locklab keeper: process {watch} is gone; stopping"),
        Ok(s) => eprintln!("locklab keeper: {s}; stopping"),
        Err(e) => eprintln!("locklab keeper: sigwait failed ({e}); stopping"),
    }
    drop(started);
    let _ = std::fs::remove_dir_all(dir);
    0
}

/// Starts the server and its PgBouncers and publishes them in `info.json` in
/// `dir`; returns the server and the runtime the PgBouncers were started on.
/// (A nextest run that ends meanwhile is noticed once this returns.)
fn serve(dir: &Path, opts: &ServerOptions) -> Result<(Server, tokio::runtime::Runtime)> {
    let server = Server::start(opts)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut poolers = Vec::new();
    for mode in MODES {
        // Without PgBouncer the server is still useful; a test that needs
        // PgBouncer then starts its own and fails with the reason.
        match rt.block_on(server.pooler(locklab_drivers::Pooler::pgbouncer(mode))) {
            Ok((port, version, password)) => poolers.push(PublishedPooler {
                mode: mode.as_str().to_owned(),
                port,
                version,
                password,
            }),
            Err(e) => eprintln!("locklab keeper: no PgBouncer in {} mode: {e:#}", mode.as_str()),
        }
    }
    let info = Published {
        keeper_pid: std::process::id(),
        backend: server.backend.as_str().to_owned(),
        host: server.host.clone(),
        port: server.port,
        user: server.user.clone(),
        password: server.password.clone(),
        admin_db: server.admin_db.clone(),
        version: server.version.clone(),
        version_num: server.version_num,
        image: server.image.clone(),
        startup_ms: server.startup.as_secs_f64() * 1e3,
        image_ms: server.image_time.as_secs_f64() * 1e3,
        poolers,
    };
    write_atomic(&dir.join("info.json"), serde_json::to_string(&info)?.as_bytes())?;
    Ok((server, rt))
}

/// Returns once process `pid` has exited: a pidfd (Linux 5.3) polled for
/// readability, else, on older kernels, `kill(pid, 0)` every 200 ms.
fn wait_for_exit(pid: i32) {
    use nix::libc;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd >= 0 {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd, no timeout.
            let n = unsafe { libc::poll(&mut p, 1, -1) };
            if n > 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                break;
            }
        }
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(fd) };
        return;
    }
    if std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return;
    }
    while alive(pid as u32) {
        std::thread::sleep(Duration::from_millis(200));
    }
}
