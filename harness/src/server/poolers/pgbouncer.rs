//! PgBouncer in front of a server: Debian 12's (1.18) as a process of the
//! harness ([`PgBouncer`]), and the configuration Debian 13's (1.24) gets in
//! a container too ([`config`], [`super::pgbouncer_trixie`]); its console's
//! `KILL` and `SHOW CLIENTS`.
//!
//! Debian 12's binary is Debian's `pgbouncer` package, unpacked into
//! `.cache/pgbouncer` by `harness/scripts/install-pgbouncer.sh` on first use
//! (or given by `LOCKLAB_PGBOUNCER`). Each instance gets a directory
//! `locklab-pg-bouncer-…` next to the local clusters with its configuration,
//! log and a copy of the binary, listens on a free loopback port, runs as the
//! unprivileged user when we are root (PgBouncer refuses root), and joins the
//! process group of a watchdog that stops it and removes the directory when
//! our process ends without dropping it (see `local.rs`).
//!
//! Configuration (PgBouncer docs, "Configuration"): one wildcard database
//! `* = host=… port=… user=…` (every run database reaches the same server as
//! the harness's own role), `auth_type = scram-sha-256` for the clients with
//! a random password made for this instance (so another local user cannot
//! borrow the harness's role through the loopback port), the given
//! `pool_mode`, `server_reset_query` left at its default `DISCARD ALL` (used
//! in session mode only) unless the column's check-in sets it and
//! `server_reset_query_always` (`locklab_drivers::CheckIn`), and `ignore_startup_parameters = extra_float_digits`
//! (sent by sqlx). PgBouncer 1.18 rejects the `options` startup parameter, so
//! connection settings cannot pass through it.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use locklab_drivers::{CheckIn, DirectConn, PoolerMode};

use super::{Product, Setup, Started, Upstream, random_password};
use crate::server::local::{RunAs, Startup, Watchdog, chown_tree, command, free_port, run_as, tail, wait_accepting};

/// Where `install-pgbouncer.sh` is.
pub fn install_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-pgbouncer.sh")
}

/// The `pgbouncer` launcher to use: `LOCKLAB_PGBOUNCER`, else
/// `.cache/pgbouncer/bin/pgbouncer`, installed there on first use.
///
/// # Errors
/// A `LOCKLAB_PGBOUNCER` that is not a file, or an install that failed (with
/// the script's output).
pub fn resolve_binary() -> Result<PathBuf> {
    // One install attempt per process: a failed one is not retried for every
    // run of the report.
    static INSTALLED: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| find_or_install().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow::anyhow!(e))
}

fn find_or_install() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("LOCKLAB_PGBOUNCER").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("LOCKLAB_PGBOUNCER={} is not a file", p.display());
        }
        return Ok(p);
    }
    let bin = crate::server::workspace_root().join(".cache/pgbouncer/bin/pgbouncer");
    if bin.is_file() {
        return Ok(bin);
    }
    eprintln!(
        "locklab: no PgBouncer in {}; installing it (once) from Debian's packages",
        bin.parent().and_then(Path::parent).unwrap_or(&bin).display()
    );
    let out = Command::new("bash")
        .arg(install_script())
        .output()
        .context("cannot run bash for install-pgbouncer.sh")?;
    if !out.status.success() || !bin.is_file() {
        bail!(
            "PgBouncer is not installed and {} failed ({}):\n{}{}\n\
             (install Debian's pgbouncer package's binary there, or set LOCKLAB_PGBOUNCER)",
            install_script().display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(bin)
}

/// A running PgBouncer.
pub struct PgBouncer {
    dir: PathBuf,
    /// The loopback port it listens on.
    pub port: u16,
    /// The password clients give (scram-sha-256), made for this instance.
    pub password: String,
    /// Its `pool_mode`.
    pub mode: PoolerMode,
    /// `PgBouncer 1.18.0`, from `--version`.
    pub version: String,
    child: Child,
    _watchdog: Watchdog,
}

impl PgBouncer {
    /// Starts PgBouncer in `mode` with `check_in`'s settings in front of `up`; ready (a `select 1`
    /// through it answers) within `timeout`.
    ///
    /// # Errors
    /// No binary, a directory or configuration that cannot be written,
    /// PgBouncer exiting or not ready in time (with the end of its log).
    /// `pool_size`: its `default_pool_size` ([`DEFAULT_POOL_SIZE`] unless a
    /// scenario caps it for a cell of its own).
    pub(super) async fn start(
        up: &Upstream<'_>,
        mode: PoolerMode,
        check_in: CheckIn,
        pool_size: u32,
        timeout: Duration,
    ) -> Result<PgBouncer> {
        let launcher = resolve_binary()?;
        let who = run_as()?;
        let dir = bouncer_dir_name();
        // SIGTERM: an immediate shutdown up to PgBouncer 1.22 (from 1.23 it
        // waits for clients); SIGKILL after 1 s. Nothing here needs a clean one.
        let watchdog = Watchdog::start_for(&dir, "TERM", &dir.join("pgbouncer.pid"), 10)?;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        // A copy of the launcher, binary and libraries that the unprivileged
        // user can reach (ours may live under /root).
        let install = launcher
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_else(|| dir.clone());
        let own = dir.join("pgbouncer");
        let bin = if install.join("bin/pgbouncer.real").is_file() {
            crate::server::local::copy_tree(&install, &own)?;
            own.join("bin/pgbouncer")
        } else {
            launcher.clone()
        };
        let version = Command::new(&bin)
            .arg("--version")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.lines().next().map(str::to_owned))
            .unwrap_or_else(|| "PgBouncer (version unknown)".into());
        let port = free_port()?;
        if [up.user, up.password.unwrap_or_default()]
            .iter()
            .any(|v| v.contains(['\n', '\r', '"']))
        {
            bail!(
                "the server's user name or password contains a newline or '\"', which PgBouncer's configuration cannot hold"
            );
        }
        let password = random_password()?;
        let quote = |v: &str| format!("'{}'", v.replace('\'', "''"));
        let mut server = format!("host={} port={} user={}", up.host, up.port, quote(up.user));
        if let Some(p) = up.password {
            server.push_str(&format!(" password={}", quote(p)));
        }
        let ini = config(
            &server,
            port,
            &dir.display().to_string(),
            mode,
            check_in,
            up.user,
            pool_size,
        );
        let config = dir.join("pgbouncer.ini");
        write_private(&config, &ini)?;
        write_private(&dir.join("userlist.txt"), &format!("\"{}\" \"{password}\"\n", up.user))?;
        if let Some(u) = &who {
            chown_tree(&dir, u)?;
        }
        let child = spawn(&bin, &dir, &config, who.as_ref(), watchdog.group())?;
        let mut bouncer = PgBouncer {
            dir,
            port,
            password,
            mode,
            version,
            child,
            _watchdog: watchdog,
        };
        bouncer.wait_ready(up, timeout).await?;
        Ok(bouncer)
    }

    async fn wait_ready(&mut self, up: &Upstream<'_>, timeout: Duration) -> Result<()> {
        let spec = crate::server::loopback_spec(self.port, up.user, &self.password, up.admin_db, "locklab-ready");
        let log = self.dir.join("pgbouncer.log");
        match wait_accepting(&mut self.child, &spec, Instant::now() + timeout).await? {
            Startup::Ready => Ok(()),
            Startup::Exited(status) => bail!(
                "PgBouncer exited during start-up ({status}); end of its log:\n{}\n{}",
                tail(&log, 15),
                tail(&self.dir.join("pgbouncer.stderr"), 15)
            ),
            Startup::TimedOut(last_error) => bail!(
                "PgBouncer ({} mode) was not ready within {} s (last error: {last_error}); end of its log:\n{}",
                self.mode.as_str(),
                timeout.as_secs(),
                tail(&log, 15)
            ),
        }
    }
}

/// PgBouncer's `default_pool_size`: server connections per (database,
/// user) pair, unless a scenario caps them (`pooler.server_connections`).
pub const DEFAULT_POOL_SIZE: u32 = 100;

/// PgBouncer's configuration (see the module documentation): `server` is
/// the wildcard database's connection string, `dir` holds `userlist.txt`,
/// the log and the pid file, `check_in` adds its settings
/// ([`CheckIn::pgbouncer_settings`]), `admin` is the console's admin user,
/// `pool_size` its `default_pool_size`.
pub(super) fn config(
    server: &str,
    port: u16,
    dir: &str,
    mode: PoolerMode,
    check_in: CheckIn,
    admin: &str,
    pool_size: u32,
) -> String {
    let mut ini = format!(
        "[databases]\n\
         * = {server}\n\
         \n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = scram-sha-256\n\
         auth_file = {dir}/userlist.txt\n\
         admin_users = {admin}\n\
         pool_mode = {mode}\n\
         max_client_conn = 1000\n\
         default_pool_size = {pool_size}\n\
         ignore_startup_parameters = extra_float_digits\n\
         logfile = {dir}/pgbouncer.log\n\
         pidfile = {dir}/pgbouncer.pid\n\
         log_connections = 0\n\
         log_disconnections = 0\n",
        mode = mode.as_str(),
    );
    for line in check_in.pgbouncer_settings() {
        ini.push_str(&line);
        ini.push('\n');
    }
    ini
}

/// Closes every client and server connection the PgBouncer on `port` has for
/// database `dbname` (`KILL db` on its admin console, PgBouncer docs "Admin
/// console"; `user` is in its `admin_users`), so that its server connections
/// (which it keeps after the clients close, up to `server_idle_timeout`) do not
/// outlive a run. `KILL` leaves the database paused (new clients wait);
/// with `resume`, `RESUME db` follows, for a database a later cell may use
/// again. Connect and each command have 10 s.
///
/// # Errors
/// The console refuses the connection or a command, or does not answer in time.
pub(super) async fn kill_database(port: u16, password: &str, user: &str, dbname: &str, resume: bool) -> Result<()> {
    let spec = crate::server::loopback_spec(port, user, password, "pgbouncer", "locklab-console");
    let console = DirectConn::connect(&spec)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open PgBouncer's admin console: {e}"))?;
    let commands: &[&str] = if resume { &["KILL", "RESUME"] } else { &["KILL"] };
    let mut outcome = Ok(());
    for command in commands {
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            console.client().simple_query(&format!("{command} \"{dbname}\"")),
        )
        .await;
        outcome = match r {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(anyhow::anyhow!("PgBouncer's console refused {command} {dbname}: {e}")),
            Err(_) => Err(anyhow::anyhow!(
                "PgBouncer's console did not answer {command} {dbname} within 10 s"
            )),
        };
        if outcome.is_err() {
            break;
        }
    }
    console.close().await;
    outcome
}

impl PgBouncer {
    /// When PgBouncer has exited: its exit status and the end of its log.
    pub(super) fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!(
                "{status}; end of its log:\n{}\n{}",
                tail(&self.dir.join("pgbouncer.log"), 15),
                tail(&self.dir.join("pgbouncer.stderr"), 15)
            )),
            _ => None,
        }
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = kill(nix::unistd::Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(1);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn spawn(bin: &Path, dir: &Path, config: &Path, who: Option<&RunAs>, group: i32) -> Result<Child> {
    // Our launcher is a shell script that execs the binary (same pid); a
    // binary given by LOCKLAB_PGBOUNCER runs as itself.
    let script = std::fs::read(bin).is_ok_and(|b| b.starts_with(b"#!"));
    let mut c = if script {
        let mut c = command(Path::new("/bin/sh"), who);
        c.arg(bin);
        c
    } else {
        command(bin, who)
    };
    let out = std::fs::File::create(dir.join("pgbouncer.stderr"))?;
    if let Some(u) = who {
        nix::unistd::chown(&dir.join("pgbouncer.stderr"), Some(u.uid.into()), Some(u.gid.into()))?;
    }
    c.arg(config)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(group);
    c.spawn().with_context(|| format!("cannot run {}", bin.display()))
}

fn write_private(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// `<cluster_parent>/locklab-pg-bouncer-<pid>-<n>`: named like the clusters so
/// the same leftover checks find it.
fn bouncer_dir_name() -> PathBuf {
    let d = crate::server::local::cluster_dir_name();
    let name = d
        .file_name()
        .map(|n| n.to_string_lossy().replacen("locklab-pg-", "locklab-pg-bouncer-", 1))
        .unwrap_or_else(|| "locklab-pg-bouncer".into());
    d.with_file_name(name)
}

/// Debian 12's PgBouncer, run as a process ([`PgBouncer::start`]), not in a
/// container.
pub(super) struct Debian12;

impl Product for Debian12 {
    fn container(&self, _: PoolerMode, _: &Setup<'_>) -> Result<Started> {
        bail!("Debian 12's PgBouncer runs as a process of the harness, not in a container")
    }

    fn queue(&self) -> super::Queue {
        CONSOLE_QUEUE
    }
}

/// PgBouncer's queue on its admin console: `SHOW CLIENTS` in database
/// `pgbouncer`, whose `state` is `waiting` for clients that "have sent
/// queries but have not yet got a server connection" (PgBouncer docs,
/// "SHOW CLIENTS"; 1.18 and 1.24 alike).
pub(super) const CONSOLE_QUEUE: super::Queue = super::Queue::Console {
    database: "pgbouncer",
    waiting_state: "waiting",
};
