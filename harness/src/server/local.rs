//! The `local` backend: a throw-away cluster from PostgreSQL binaries.
//!
//! `initdb` into a temporary directory and `postgres` listening on 127.0.0.1
//! only, on a free port, with trust authentication. When the harness runs as
//! root, both run as an unprivileged user (`nobody`, or `LOCKLAB_PG_USER`),
//! since PostgreSQL refuses to run as root.
//!
//! Cleanup: [`LocalCluster`]'s `Drop` stops the postmaster (fast shutdown) and
//! deletes the directory. For the cases where `Drop` never runs (a panic that
//! aborts, SIGINT, SIGKILL, a test process that exits with statics alive) a
//! small watchdog process, started before the directory exists, holds a pipe
//! from us: when our process is gone the pipe reaches end-of-file and the
//! watchdog stops `initdb` or the postmaster and deletes the directory. The
//! watchdog, `initdb` and the postmaster share a process group of their own, so
//! a Ctrl-C on the terminal reaches only us.

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use locklab_drivers::{ConnectSpec, DirectConn};

mod binaries;

pub use binaries::{install_script, resolve_binaries};

use crate::observe::{Polled, poll_until};

/// The role the local cluster is initialised with (a superuser).
pub(super) const LOCAL_SUPERUSER: &str = "locklab";

/// The unprivileged account a root harness runs PostgreSQL as.
#[derive(Clone)]
pub(super) struct RunAs {
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) name: String,
}

pub(super) fn run_as() -> Result<Option<RunAs>> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let name = std::env::var("LOCKLAB_PG_USER").unwrap_or_else(|_| "nobody".into());
    let user = nix::unistd::User::from_name(&name)?
        .ok_or_else(|| anyhow!("running as root, PostgreSQL needs an unprivileged user, but user '{name}' does not exist (set LOCKLAB_PG_USER)"))?;
    Ok(Some(RunAs {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        name,
    }))
}

pub(super) fn command(program: &Path, who: Option<&RunAs>) -> Command {
    let mut c = Command::new(program);
    if let Some(u) = who {
        // std clears root's supplementary groups when it sets the uid.
        c.uid(u.uid).gid(u.gid);
    }
    c.env_remove("PGDATA").env("LC_ALL", "C");
    c
}

/// The cleanup watchdog (POSIX sh), for a local cluster and for PgBouncer. It
/// leads a process group that the processes it watches join, and waits for
/// end-of-file on its stdin, which comes when our process ends or drops the
/// [`Watchdog`]. Then it sends signal `$2` to the group (SIGINT: the
/// postmaster does a fast shutdown, an unfinished `initdb` aborts; SIGTERM for
/// PgBouncer), waits up to `$4` tenths of a second for the process named by
/// pid file `$3`, kills it if need be, and removes directory `$1`. (dash's
/// `kill` takes no `--`, so the group is named as `-PGID` directly.)
const WATCHDOG: &str = r#"
trap '' INT TERM HUP
read -r _ || true
kill -"$2" "-$$" 2>/dev/null
pidfile="$3"
n=0
while [ -f "$pidfile" ] && [ "$n" -lt "$4" ]; do
  pid=$(head -n 1 "$pidfile" 2>/dev/null)
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
  n=$((n+1))
done
if [ -f "$pidfile" ]; then
  pid=$(head -n 1 "$pidfile" 2>/dev/null)
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
fi
# An aborting initdb may still be writing: retry until the directory is gone.
n=0
while [ -e "$1" ] && [ "$n" -lt 50 ]; do
  rm -rf "$1" 2>/dev/null
  [ -e "$1" ] && sleep 0.1
  n=$((n+1))
done
"#;

/// The running watchdog; dropping it starts the cleanup and waits for it.
pub(super) struct Watchdog(Child);

impl Watchdog {
    /// The watchdog of a local cluster in `dir`: SIGINT, 10 s for the postmaster.
    fn start(dir: &Path) -> Result<Watchdog> {
        Watchdog::start_for(dir, "INT", &dir.join("data/postmaster.pid"), 100)
    }

    /// A watchdog for `dir` that sends `signal` (`INT`, `TERM`) to its group
    /// and waits `tenths` tenths of a second for the process in `pidfile`.
    pub(super) fn start_for(dir: &Path, signal: &str, pidfile: &Path, tenths: u32) -> Result<Watchdog> {
        let tenths = tenths.to_string();
        let child = super::spawn_watchdog(
            WATCHDOG,
            "locklab-watchdog",
            &[dir.as_os_str(), signal.as_ref(), pidfile.as_os_str(), tenths.as_ref()],
        )
        .context("cannot start the cleanup watchdog (sh)")?;
        Ok(Watchdog(child))
    }

    /// The process group that the processes it watches join.
    pub(super) fn group(&self) -> i32 {
        self.0.id() as i32
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// How a started server process came up ([`wait_accepting`]).
pub(super) enum Startup {
    /// A connection and `select 1` on it succeeded.
    Ready,
    /// The process exited first, with this status.
    Exited(std::process::ExitStatus),
    /// Not ready by the deadline; the last connection error.
    TimedOut(String),
}

/// Polls until a connection to `spec` answers `select 1` (the PostgreSQL
/// server, or PgBouncer, which accepts a connection before it has reached the
/// server), until `deadline`, or until `child` exits.
///
/// # Errors
/// Only when the child's state cannot be read.
pub(super) async fn wait_accepting(child: &mut Child, spec: &ConnectSpec, deadline: Instant) -> Result<Startup> {
    let mut last_error = String::new();
    let polled = poll_until(deadline, async || {
        if let Some(status) = child.try_wait()? {
            return Ok::<_, anyhow::Error>(Some(Startup::Exited(status)));
        }
        match DirectConn::connect(spec).await {
            Ok(c) => {
                let answer = locklab_drivers::simple_query_rows(c.client(), "select 1").await;
                c.close().await;
                match answer {
                    Ok(_) => Ok(Some(Startup::Ready)),
                    Err(e) => {
                        last_error = e.to_string();
                        Ok(None)
                    }
                }
            }
            Err(e) => {
                last_error = e.to_string();
                Ok(None)
            }
        }
    })
    .await?;
    Ok(match polled {
        Polled::Done(s) => s,
        Polled::TimedOut => Startup::TimedOut(last_error),
    })
}

/// A running throw-away cluster.
pub(super) struct LocalCluster {
    pub(super) dir: PathBuf,
    pub(super) port: u16,
    /// The postmaster (replaced by [`LocalCluster::restart`]).
    pub(super) postgres: std::sync::Mutex<Child>,
    /// How the postmaster was started, to start it again.
    spawn: Postmaster,
    /// Held for its `Drop`, which runs after ours: the last-resort cleanup.
    _watchdog: Watchdog,
}

/// The postmaster could not bind its port (another process took it between
/// our probe and its start): worth a retry on another port.
#[derive(Debug, thiserror::Error)]
#[error("port {0} was taken before PostgreSQL could bind it")]
struct PortClash(u16);

impl LocalCluster {
    /// Starts a cluster from the binaries in `bin`; ready within `timeout`.
    /// `settings`: more `name=value` server settings (after the harness's own).
    /// `hba_lines`: more `pg_hba.conf` lines, before initdb's.
    /// `from_template`: copy the data directory from this process's
    /// [`Template`] for `bin` instead of running `initdb`.
    pub(super) async fn start(
        bin: &Path,
        timeout: Duration,
        settings: &[String],
        hba_lines: &[String],
        from_template: bool,
    ) -> Result<LocalCluster> {
        let mut attempt = 0;
        loop {
            match LocalCluster::start_once(bin, timeout, settings, hba_lines, from_template).await {
                Err(e) if e.is::<PortClash>() && attempt < 3 => attempt += 1,
                other => return other,
            }
        }
    }

    async fn start_once(
        bin: &Path,
        timeout: Duration,
        settings: &[String],
        hba_lines: &[String],
        from_template: bool,
    ) -> Result<LocalCluster> {
        let who = run_as()?;
        let (dir, watchdog) = watched_dir(who.as_ref())?;
        let given = bin;
        let mut bin = bin.to_path_buf();
        if let Some(u) = &who {
            if !runs_as(&bin, u) {
                // The binaries live where the unprivileged user cannot reach them
                // (e.g. under /root): copy them next to the data directory.
                let copy = dir.join("pg");
                copy_tree(bin.parent().unwrap_or(&bin), &copy)?;
                chown_tree(&copy, u)?;
                bin = copy.join("bin");
                if !runs_as(&bin, u) {
                    bail!(
                        "user '{}' cannot run {}; set LOCKLAB_PG_USER to another user",
                        u.name,
                        bin.display()
                    );
                }
            }
        }
        let data = dir.join("data");
        if from_template {
            Template::copy(given, &bin, who.as_ref(), &data)?;
        } else {
            initdb(&bin, &data, who.as_ref(), watchdog.group())?;
        }
        if !hba_lines.is_empty() {
            let hba = data.join("pg_hba.conf");
            let initdb = std::fs::read_to_string(&hba).with_context(|| format!("cannot read {}", hba.display()))?;
            // Before initdb's lines (the first line that matches decides), so
            // that they can also refuse what initdb's `trust` lines admit.
            let mut text = String::new();
            for line in hba_lines {
                text.push_str(line);
                text.push('\n');
            }
            text.push_str(&initdb);
            std::fs::write(&hba, text).with_context(|| format!("cannot write {}", hba.display()))?;
        }
        let log_path = dir.join("postgres.log");
        let port = free_port()?;
        let spawn = Postmaster {
            bin: bin.clone(),
            who,
            data,
            port,
            settings: settings.to_vec(),
            group: watchdog.group(),
            log: log_path.clone(),
        };
        let postgres = spawn.start()?;
        let mut cluster = LocalCluster {
            dir,
            port,
            postgres: std::sync::Mutex::new(postgres),
            spawn,
            _watchdog: watchdog,
        };
        if let Err(e) = cluster.wait_ready(&log_path, timeout).await {
            let log = tail(&log_path, 15);
            if log.contains("could not bind") || log.contains("already in use") {
                return Err(PortClash(port).into());
            }
            return Err(e);
        }
        Ok(cluster)
    }

    async fn wait_ready(&mut self, _log_path: &Path, timeout: Duration) -> Result<()> {
        self.wait_started(timeout, "during start-up").await
    }

    /// Waits (within `timeout`) until the postmaster accepts connections;
    /// `when` names the moment in the errors (`during start-up`).
    async fn wait_started(&self, timeout: Duration, when: &str) -> Result<()> {
        let spec = ConnectSpec {
            host: "127.0.0.1".into(),
            port: self.port,
            user: LOCAL_SUPERUSER.into(),
            password: None,
            dbname: "postgres".into(),
            application_name: "locklab-ready".into(),
            options: Vec::new(),
        };
        // The postmaster is waited on outside the lock, a placeholder in its place.
        let mut child = std::mem::replace(
            &mut *self.postgres.lock().unwrap_or_else(|p| p.into_inner()),
            self.spawn.placeholder()?,
        );
        let started = wait_accepting(&mut child, &spec, Instant::now() + timeout).await;
        *self.postgres.lock().unwrap_or_else(|p| p.into_inner()) = child;
        match started? {
            Startup::Ready => Ok(()),
            Startup::Exited(status) => bail!(
                "postgres exited {when} ({status}); end of its log:\n{}",
                tail(&self.spawn.log, 15)
            ),
            Startup::TimedOut(last_error) => bail!(
                "PostgreSQL was not ready within {} s {when} (last error: {last_error}); end of its log:\n{}",
                timeout.as_secs(),
                tail(&self.spawn.log, 15)
            ),
        }
    }

    /// Fast shutdown (SIGINT), escalating to SIGKILL after 10 s; reaps the child.
    fn stop_postmaster(&mut self) {
        use nix::sys::signal::{Signal, kill};
        let postgres = self.postgres.get_mut().unwrap_or_else(|p| p.into_inner());
        let pid = nix::unistd::Pid::from_raw(postgres.id() as i32);
        if matches!(postgres.try_wait(), Ok(None)) {
            let _ = kill(pid, Signal::SIGINT);
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(postgres.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = postgres.kill();
        }
        let _ = postgres.wait();
    }

    /// The postmaster's process id now.
    pub(super) fn postmaster_pid(&self) -> u32 {
        self.postgres.lock().unwrap_or_else(|p| p.into_inner()).id()
    }

    /// Restarts the server on the same port and data directory: stops the
    /// postmaster with SIGINT (`fast`: backends are ended with SIGTERM, their
    /// clients get 57P01 admin_shutdown) or SIGQUIT (`immediate`: backends
    /// quit at once, crash recovery at the next start; PostgreSQL docs §19.5
    /// Shutting Down the Server), waits until it has exited (at most 30 s),
    /// starts it again and waits until it accepts connections (`timeout`).
    ///
    /// # Errors
    /// The postmaster did not exit, or did not come back.
    pub(super) async fn restart(&self, immediate: bool, timeout: Duration) -> Result<()> {
        use nix::sys::signal::{Signal, kill};
        let mut old = std::mem::replace(
            &mut *self.postgres.lock().unwrap_or_else(|p| p.into_inner()),
            self.spawn.placeholder()?,
        );
        let pid = nix::unistd::Pid::from_raw(old.id() as i32);
        let _ = kill(pid, if immediate { Signal::SIGQUIT } else { Signal::SIGINT });
        let deadline = Instant::now() + Duration::from_secs(30);
        // Gone when reaped, and (should something else have reaped it) when
        // the pid answers no signal and postmaster.pid is gone.
        let data = self.spawn.data.clone();
        let running = |old: &mut Child| match old.try_wait() {
            Ok(None) => true,
            Ok(Some(_)) => false,
            Err(_) => kill(pid, None).is_ok() || data.join("postmaster.pid").exists(),
        };
        while running(&mut old) {
            if Instant::now() >= deadline {
                let _ = old.kill();
                let _ = old.wait();
                bail!("the postmaster (pid {pid}) had not exited 30 s after the restart's signal");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let new = self.spawn.start()?;
        *self.postgres.lock().unwrap_or_else(|p| p.into_inner()) = new;
        self.wait_started(timeout, "after its restart").await
    }
}

/// How a cluster's postmaster is started (again, for a restart).
struct Postmaster {
    bin: PathBuf,
    who: Option<RunAs>,
    data: PathBuf,
    port: u16,
    settings: Vec<String>,
    group: i32,
    log: PathBuf,
}

impl Postmaster {
    /// Starts the postmaster, appending to its log.
    fn start(&self) -> Result<Child> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        command(&self.bin.join("postgres"), self.who.as_ref())
            .arg("-D")
            .arg(&self.data)
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="])
            .args(super::server_setting_args())
            .args(self.settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(self.group)
            .spawn()
            .with_context(|| format!("cannot run {}", self.bin.join("postgres").display()))
    }

    /// A child that has already exited (`true`), to hold the postmaster's
    /// place while the real one is waited on outside the lock.
    fn placeholder(&self) -> Result<Child> {
        let mut c = Command::new("true")
            .stdin(Stdio::null())
            .spawn()
            .context("cannot run `true`")?;
        let _ = c.wait();
        Ok(c)
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop_postmaster();
        let _ = std::fs::remove_dir_all(&self.dir);
        // The watchdog (dropped after this) finds nothing left to do and exits.
    }
}

fn runs_as(bin: &Path, u: &RunAs) -> bool {
    command(&bin.join("postgres"), Some(u))
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `initdb` for a data directory at `data` (which must not exist),
/// as `who` when given, in process group `group` (a [`Watchdog`]'s).
///
/// # Errors
/// `initdb` cannot be run or fails (with its output).
fn initdb(bin: &Path, data: &Path, who: Option<&RunAs>, group: i32) -> Result<()> {
    let out = command(&bin.join("initdb"), who)
        .arg("-D")
        .arg(data)
        .args([
            "-U",
            LOCAL_SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
        ])
        .process_group(group)
        .output()
        .with_context(|| format!("cannot run {}", bin.join("initdb").display()))?;
    if !out.status.success() {
        bail!(
            "initdb failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// A data directory `initdb` made once in this process, for the clusters
/// that are made many times over (the restart cells', one per cell) to copy:
/// `initdb` took 0.33 s of CPU on this project's machine, a copy of its
/// 38 MB 0.05 s (timed by hand, docs/src/speed.md). One per binaries
/// directory, in a directory of its own ([`cluster_dir_name`]); never
/// started, so never changed. [`remove_templates`] removes them at the end
/// of a run, and each one's [`Watchdog`] when this process ends, however it
/// ends.
struct Template {
    dir: PathBuf,
    _watchdog: Watchdog,
}

impl Template {
    /// Copies the template data directory for the binaries in `given` to
    /// `to` (`cp -a`: it keeps the owner, the cluster user, and the 0700
    /// mode). The template is made on first use with `initdb` from `bin`
    /// (`given`, or a copy of it the cluster user can run) as `who` when
    /// given. Under the templates' lock, so that [`remove_templates`] never
    /// removes one being copied.
    ///
    /// # Errors
    /// The directory cannot be made, `initdb` fails, or the copy fails.
    fn copy(given: &Path, bin: &Path, who: Option<&RunAs>, to: &Path) -> Result<()> {
        let mut templates = templates();
        if let Some(t) = templates.get(given) {
            return copy_tree(&t.dir.join("data"), to);
        }
        let (dir, watchdog) = watched_dir(who)?;
        initdb(bin, &dir.join("data"), who, watchdog.group())?;
        let data = dir.join("data");
        templates.insert(
            given.to_path_buf(),
            Template {
                dir,
                _watchdog: watchdog,
            },
        );
        copy_tree(&data, to)
    }
}

/// A new cluster directory ([`cluster_dir_name`]), mode 0700, owned by
/// `who` when given, and the [`Watchdog`] that removes it. The watchdog
/// starts before the directory exists, so that there is no moment in which
/// the directory exists and nothing would remove it.
///
/// # Errors
/// The watchdog cannot start, or the directory cannot be made or given to `who`.
fn watched_dir(who: Option<&RunAs>) -> Result<(PathBuf, Watchdog)> {
    let dir = cluster_dir_name();
    let watchdog = Watchdog::start(&dir)?;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    if let Some(u) = who {
        nix::unistd::chown(&dir, Some(u.uid.into()), Some(u.gid.into()))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok((dir, watchdog))
}

/// This process's [`Template`]s, by the binaries directory they were made with.
fn templates() -> std::sync::MutexGuard<'static, std::collections::HashMap<PathBuf, Template>> {
    static TEMPLATES: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<PathBuf, Template>>> =
        std::sync::OnceLock::new();
    TEMPLATES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Removes the template data directories this process made (see
/// `ServerOptions::from_template`), waiting until they are gone; a later
/// cluster that asks for one makes it again. Called when the last matrix
/// run in flight in this process ends (`matrix::run_shard`).
pub fn remove_templates() {
    let gone = std::mem::take(&mut *templates());
    drop(gone);
}

pub(super) fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let status = Command::new("cp").arg("-a").arg(from).arg(to).status()?;
    if !status.success() {
        bail!("copying {} to {} failed", from.display(), to.display());
    }
    Ok(())
}

pub(super) fn chown_tree(dir: &Path, u: &RunAs) -> Result<()> {
    let status = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", u.uid, u.gid))
        .arg(dir)
        .status()?;
    if !status.success() {
        bail!("chown of {} failed", dir.display());
    }
    Ok(())
}

/// Free space `/dev/shm` needs to be used for a cluster, in bytes (1 GiB).
const SHM_MIN_FREE: u64 = 1 << 30;

/// Where cluster directories go: `LOCKLAB_CLUSTER_DIR` when set, else
/// `/dev/shm` when it is a writable directory with at least 1 GiB free (a tmpfs: each run's
/// `CREATE DATABASE` copies ~300 files, about 6× faster there than on a disk
/// file system), else the temporary directory (`TMPDIR`, `/tmp`).
pub fn cluster_parent() -> PathBuf {
    if let Some(d) = std::env::var_os("LOCKLAB_CLUSTER_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    let writable = nix::unistd::access(shm, nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK).is_ok();
    // A cluster with a few run databases in flight needs a few hundred MB;
    // Docker gives containers a 64 MB /dev/shm by default.
    let roomy = nix::sys::statvfs::statvfs(shm)
        .is_ok_and(|v| (v.blocks_available() as u64).saturating_mul(v.fragment_size() as u64) >= SHM_MIN_FREE);
    if shm.is_dir() && writable && roomy {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// A new path `<cluster_parent>/locklab-pg-<pid>-<n>` that does not exist yet.
pub(super) fn cluster_dir_name() -> PathBuf {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let parent = cluster_parent();
    loop {
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = parent.join(format!("locklab-pg-{}-{n}", std::process::id()));
        if !dir.exists() {
            return dir;
        }
    }
}

pub(super) fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")
        .context("cannot bind a loopback port")?
        .local_addr()?
        .port())
}

pub(super) fn tail(path: &Path, lines: usize) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
