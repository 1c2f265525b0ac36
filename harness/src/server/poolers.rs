//! Poolers in containers: Debian 13's PgBouncer, Pgpool-II and pgagroal,
//! and Debian sid's Odyssey, for the configurations behind
//! [`PoolerKind::PgBouncerTrixie`], [`PoolerKind::Pgpool`],
//! [`PoolerKind::Pgagroal`] and [`PoolerKind::Odyssey`] (Debian 12's
//! PgBouncer runs as a process: [`super::pgbouncer`]).
//!
//! Image: `LOCKLAB_POOLER_IMAGE` when set (an image of the user's own with
//! `pgbouncer`, `pgpool`, `pgagroal`, `pgagroal-admin`, `odyssey` and
//! `socat` on its `PATH`, `sh`, and a user that may write `/tmp`), else
//! `locklab/poolers:trixie-2`, built once with
//! `harness/scripts/build-pooler-image.sh` when missing (Debian 13 "trixie"
//! from Debian's packages; trixie's binaries need a newer C library than
//! Debian 12's).
//!
//! The container: host networking (so it reaches the server on loopback,
//! whichever backend runs it), the pooler listening on 127.0.0.1 on a free
//! port only, clients authenticated with scram-sha-256 and a password made
//! for this instance, the configuration written at start-up from environment
//! variables (never on a command line, never in a file locklab writes on the
//! host; Docker itself keeps a container's environment in its own state
//! while the container exists). It
//! carries `locklab.pid=<our pid>` and `locklab.owner=<token>`; dropping
//! [`ContainerPooler`] removes it, and the container watchdog removes it when
//! our process ends without dropping it. Each pooler's files and start-up
//! script: [`super::pooler_setup`].

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use locklab_drivers::{DirectConn, Pooler, PoolerKind};
use testcontainers::bollard::Docker;
use testcontainers::bollard::models::{ContainerCreateBody, HostConfig};
use testcontainers::bollard::query_parameters::CreateContainerOptionsBuilder;

use super::container::{PID_LABEL, docker_answers, docker_host, log_lines};
use super::pgbouncer::Upstream;
use super::pooler_setup::{
    SERVER_CONNECTIONS, free_four_digit_port, pgagroal_backends, port_taken, product_version, server_connection, setup,
};

/// The pooler image when `LOCKLAB_POOLER_IMAGE` is not set (the suffix goes
/// up whenever what `build-pooler-image.sh` puts in it changes).
pub const DEFAULT_POOLER_IMAGE: &str = "locklab/poolers:trixie-2";

/// Where `build-pooler-image.sh` is.
pub fn build_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-pooler-image.sh")
}

/// Why a pooler column cannot run here, if it cannot: `Some("needs Docker
/// …")` for a pooler in a container when no Docker engine answers.
pub fn unavailable(pooler: Pooler) -> Option<String> {
    if !pooler.kind.in_container() {
        return None;
    }
    // Asked once per process: whether the engine answers does not change
    // within a run, and every cell behind such a pooler asks.
    static NO_ENGINE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    NO_ENGINE
        .get_or_init(|| docker_answers().err().map(|e| format!("{e:#}")))
        .as_ref()
        .map(|e| format!("needs Docker ({} runs in a container): {e}", pooler.kind.product()))
}

/// The pooler image: `LOCKLAB_POOLER_IMAGE`, else [`DEFAULT_POOLER_IMAGE`],
/// built on first use (once per process).
///
/// # Errors
/// A given image that is not present (it is not pulled), or a build that failed.
async fn image(docker: &Docker) -> Result<String> {
    if let Some(given) = std::env::var("LOCKLAB_POOLER_IMAGE").ok().filter(|s| !s.is_empty()) {
        if docker.inspect_image(&given).await.is_err() {
            bail!("LOCKLAB_POOLER_IMAGE={given} is not present in the Docker engine");
        }
        return Ok(given);
    }
    if docker.inspect_image(DEFAULT_POOLER_IMAGE).await.is_ok() {
        return Ok(DEFAULT_POOLER_IMAGE.to_owned());
    }
    static BUILT: tokio::sync::OnceCell<Result<(), String>> = tokio::sync::OnceCell::const_new();
    BUILT
        .get_or_init(|| async {
            eprintln!(
                "locklab: no {DEFAULT_POOLER_IMAGE}; building it (once, a few minutes) with {}",
                build_script().display()
            );
            let out = tokio::process::Command::new("bash")
                .arg(build_script())
                .output()
                .await
                .map_err(|e| format!("cannot run bash for build-pooler-image.sh: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{} failed ({}):\n{}",
                    build_script().display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        })
        .await
        .clone()
        .map_err(|e| anyhow!(e))?;
    Ok(DEFAULT_POOLER_IMAGE.to_owned())
}

/// A pooler running in a container.
pub(super) struct ContainerPooler {
    id: String,
    host: String,
    /// The loopback port it listens on.
    pub(super) port: u16,
    /// The password its clients give (scram-sha-256).
    pub(super) password: String,
    /// What the binary says of its version, e.g. `PgBouncer 1.24.1`.
    pub(super) version: String,
    _watchdog: Option<super::container::Watchdog>,
}

/// How a start-up error says that pgagroal made none of its server
/// connections (retried by [`ContainerPooler::start`]).
const NONE_MADE: &str = "had made none of";

impl ContainerPooler {
    /// Starts `pooler` in front of `up`; ready (a `select 1` through it
    /// answers) within `timeout`. `database`: the one database it serves,
    /// for a pooler started per database
    /// ([`PoolerKind::one_instance_per_database`]).
    ///
    /// # Errors
    /// No Docker engine or image; Docker refusing the container; the pooler
    /// exiting or not ready in time (with its last log lines). No container
    /// is left behind in these cases.
    /// `cap`: a scenario's limit on its server connections
    /// ([`super::pooler_setup::setup`]).
    pub(super) async fn start(
        pooler: Pooler,
        up: &Upstream<'_>,
        database: Option<&str>,
        cap: Option<u32>,
        timeout: Duration,
    ) -> Result<ContainerPooler> {
        let host = docker_host()?;
        docker_answers().context("this pooler runs in a container and needs a Docker engine")?;
        let docker = Docker::connect_with_defaults().context("cannot reach the Docker engine")?;
        let image = image(&docker).await?;
        // The free port is chosen before the pooler binds it: another
        // process may take it meanwhile (Pgpool-II then runs on without
        // listening). That is retried on another port, twice. So is a
        // pgagroal that made none of its server connections: it makes them
        // once, at start, and when the first attempt finds its way to the
        // server not yet open ("pgagroal: No connection to 127.0.0.1:PORT",
        // its socat still starting) it never tries again (seen twice in the
        // committed report of 2026-12-06, as cells that could not run).
        let mut attempt = 0;
        loop {
            attempt += 1;
            match ContainerPooler::start_on(&docker, &host, &image, pooler, up, (database, cap), timeout).await {
                Err(e) if attempt < 3 && port_taken(&format!("{e:#}")).is_some() => {
                    tracing::warn!("{}: its port was taken before it bound it; another try", pooler.label());
                }
                Err(e) if attempt < 3 && format!("{e:#}").contains(NONE_MADE) => {
                    tracing::warn!("{}: made none of its server connections; another try", pooler.label());
                }
                other => return other,
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_on(
        docker: &Docker,
        host: &str,
        image: &str,
        pooler: Pooler,
        up: &Upstream<'_>,
        (database, cap): (Option<&str>, Option<u32>),
        timeout: Duration,
    ) -> Result<ContainerPooler> {
        let host = host.to_owned();
        let image = image.to_owned();
        let port = if pooler.kind == PoolerKind::Pgagroal {
            free_four_digit_port()?
        } else {
            super::local::free_port()?
        };
        // Pgpool-II and pgagroal authenticate to the server with the
        // password their clients give: it must be the server's, when it has one.
        let password = match (pooler.kind, up.password) {
            (PoolerKind::Pgpool | PoolerKind::Pgagroal, Some(p)) => p.to_owned(),
            _ => super::pgbouncer::random_password()?,
        };
        let token = super::unique_token();
        let (script, env) = setup(pooler, up, port, &password, database, cap)?;
        // pgagroal's backends in the database before this instance makes its own.
        let before = match database.filter(|_| pooler.kind == PoolerKind::Pgagroal) {
            Some(db) => {
                let admin = server_connection(up).await?;
                let n = pgagroal_backends(&admin, db).await;
                admin.close().await;
                Some(n?)
            }
            None => None,
        };
        let watchdog = super::container::Watchdog::start(&host, &token);
        let labels = [
            (super::container::OWNER_LABEL.to_owned(), token.clone()),
            (PID_LABEL.to_owned(), std::process::id().to_string()),
        ];
        let body = ContainerCreateBody {
            image: Some(image.clone()),
            cmd: Some(vec!["sh".into(), "-c".into(), script]),
            env: Some(env),
            labels: Some(labels.into_iter().collect()),
            host_config: Some(HostConfig {
                network_mode: Some("host".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let name = format!("locklab-{}-{}", pooler.kind.as_str(), token);
        let created = docker
            .create_container(Some(CreateContainerOptionsBuilder::default().name(&name).build()), body)
            .await
            .with_context(|| {
                format!(
                    "Docker could not create a {} container from {image}",
                    pooler.kind.product()
                )
            })?;
        let mut running = ContainerPooler {
            id: created.id,
            host,
            port,
            password,
            version: format!("{} (version unknown)", pooler.kind.product()),
            _watchdog: watchdog,
        };
        docker
            .start_container(&running.id, None)
            .await
            .with_context(|| format!("Docker could not start the {} container", pooler.kind.product()))?;
        let prefilled = database
            .zip(before)
            .map(|(db, n)| (db, n, cap.unwrap_or(SERVER_CONNECTIONS)));
        running.wait_ready(docker, pooler, up, prefilled, timeout).await?;
        if let Some(v) = log_lines(docker, &running.id, 200)
            .await
            .lines()
            .find_map(|l| l.strip_prefix("locklab-version: "))
        {
            running.version = product_version(v);
        }
        Ok(running)
    }

    async fn wait_ready(
        &self,
        docker: &Docker,
        pooler: Pooler,
        up: &Upstream<'_>,
        database: Option<(&str, i64, u32)>,
        timeout: Duration,
    ) -> Result<()> {
        let spec = super::loopback_spec(
            self.port,
            up.user,
            &self.password,
            database.map_or(up.admin_db, |(db, _, _)| db),
            "locklab-ready",
        );
        let deadline = Instant::now() + timeout;
        if let Some((db, before, made)) = database {
            // pgagroal makes its server connections for `db` after it starts
            // listening; a client before they are all made could make one
            // itself, and hang or crash (`PoolerKind::Pgagroal`).
            // Observed on the server: its backends in `db`.
            self.wait_prefilled(docker, pooler, up, (db, before, made), deadline)
                .await?;
        }
        loop {
            let last_error = match tokio::time::timeout(Duration::from_secs(5), DirectConn::connect(&spec)).await {
                Ok(Ok(c)) => {
                    let answered =
                        tokio::time::timeout(Duration::from_secs(5), c.client().simple_query("select 1")).await;
                    c.close().await;
                    match answered {
                        Ok(Ok(_)) => return Ok(()),
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => "`select 1` did not answer within 5 s".into(),
                    }
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => "connect attempt timed out after 5 s".into(),
            };
            let running = docker
                .inspect_container(&self.id, None)
                .await
                .ok()
                .and_then(|i| i.state)
                .and_then(|s| s.running)
                .unwrap_or(false);
            if !running {
                bail!(
                    "{} exited during start-up; its last log lines:\n{}",
                    pooler.label(),
                    log_lines(docker, &self.id, 15).await
                );
            }
            let log = log_lines(docker, &self.id, 15).await;
            if let Some(line) = port_taken(&log) {
                bail!("{} could not listen on port {}: {line}", pooler.label(), self.port);
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} was not ready within {} s (last error: {last_error}); its last log lines:\n{}",
                    pooler.label(),
                    timeout.as_secs(),
                    log_lines(docker, &self.id, 15).await
                );
            }
            // Polling interval for a pooler that is still starting.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the server has `made` ([`SERVER_CONNECTIONS`] unless a
    /// scenario caps them) more backends in
    /// `db` that pgagroal made than the `before` it had when this instance
    /// started (their `application_name` is `pgagroal`: it does not pass a
    /// client's on; another instance may serve `db` too), by asking the
    /// server every 50 ms.
    ///
    /// # Errors
    /// The container stopped, a port was taken, or `deadline` passed (with
    /// the pooler's last log lines).
    async fn wait_prefilled(
        &self,
        docker: &Docker,
        pooler: Pooler,
        up: &Upstream<'_>,
        (db, before, made): (&str, i64, u32),
        deadline: Instant,
    ) -> Result<()> {
        let admin = server_connection(up)
            .await
            .with_context(|| format!("cannot connect to the server to watch {} start", pooler.label()))?;
        let mut seen = 0i64;
        let out = loop {
            if let Ok(n) = pgagroal_backends(&admin, db).await {
                seen = n - before;
                if seen >= i64::from(made) {
                    break Ok(());
                }
            }
            let log = log_lines(docker, &self.id, 15).await;
            if let Some(line) = port_taken(&log) {
                break Err(anyhow!(
                    "{} could not listen on port {}: {line}",
                    pooler.label(),
                    self.port
                ));
            }
            let why = if self.exited().await.is_some() {
                "it exited"
            } else if Instant::now() >= deadline {
                "the start-up deadline passed"
            } else {
                // Polling interval for a pooler that is still making its connections.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let text = if seen == 0 {
                NONE_MADE.to_owned()
            } else {
                format!("had made {seen} of")
            };
            break Err(anyhow!(
                "{} {text} its {made} server connections to {db} when {why}; its last log lines:\n{log}",
                pooler.label()
            ));
        };
        admin.close().await;
        out
    }

    /// When the container has stopped: what its log ends with.
    pub(super) async fn exited(&self) -> Option<String> {
        let docker = Docker::connect_with_defaults().ok()?;
        let state = docker.inspect_container(&self.id, None).await.ok()?.state?;
        if state.running == Some(true) {
            return None;
        }
        Some(format!(
            "exit code {}; its last log lines:\n{}",
            state.exit_code.unwrap_or(-1),
            log_lines(&docker, &self.id, 15).await
        ))
    }
}

impl Drop for ContainerPooler {
    fn drop(&mut self) {
        // Synchronous, from any thread or runtime: the docker command.
        let _ = std::process::Command::new("docker")
            .args(["-H", &self.host, "rm", "-f", "-v", &self.id])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// A pooler the harness started: Debian 12's PgBouncer as a process, the
/// others in a container.
pub(super) enum RunningPooler {
    Process(super::pgbouncer::PgBouncer),
    Container(ContainerPooler),
}

impl RunningPooler {
    /// Port, version and client password.
    fn address(&self) -> (u16, String, String) {
        match self {
            RunningPooler::Process(b) => (b.port, b.version.clone(), b.password.clone()),
            RunningPooler::Container(c) => (c.port, c.version.clone(), c.password.clone()),
        }
    }

    async fn exited(&mut self) -> Option<String> {
        match self {
            RunningPooler::Process(b) => b.exited(),
            RunningPooler::Container(c) => c.exited().await,
        }
    }
}

impl super::Server {
    /// Points `spec` at `pooler` in front of this server: a pooler the
    /// harness starts (on first use, on a free loopback port, stopped with
    /// the server) with its client password, or a user's own pooler
    /// ([`PoolerKind::External`]) at its address.
    ///
    /// # Errors
    /// The pooler cannot be installed or started (no Docker engine or image
    /// for one in a container), or is not ready within 30 s.
    pub async fn route(&self, pooler: Pooler, spec: &mut locklab_drivers::ConnectSpec) -> Result<()> {
        self.route_capped(pooler, spec, None).await
    }

    /// As [`Server::route`], with a scenario's cap on the pooler's server
    /// connections (`pooler.server_connections`): behind a transaction-mode
    /// pooler ([`caps`]), the cell's database gets an instance of its own
    /// started with that limit, stopped by [`Server::pooler_close_database`].
    ///
    /// # Errors
    /// As [`Server::route`]; a cap on a pooler the harness does not start
    /// (a user's own, or a PgBouncer attached to a shared server).
    pub async fn route_capped(
        &self,
        pooler: Pooler,
        spec: &mut locklab_drivers::ConnectSpec,
        cap: Option<u32>,
    ) -> Result<()> {
        let cap = cap.filter(|_| caps(pooler));
        if cap.is_some()
            && (pooler.kind == PoolerKind::External
                || (pooler.kind == PoolerKind::PgBouncer && self.attached_poolers.contains_key(&pooler.mode)))
        {
            bail!(
                "the scenario caps the pooler's server connections (pooler.server_connections), and locklab does not start {}",
                pooler.label()
            );
        }
        if let (PoolerKind::External, Some((host, port))) = (pooler.kind, pooler.address) {
            // The user's pooler authenticates the server's role as the
            // server does (its password, if any, stays).
            spec.host = host.to_owned();
            spec.port = port;
            return Ok(());
        }
        let (port, _, password) = self.pooler_instance(pooler, &spec.dbname, cap).await?;
        spec.host = "127.0.0.1".into();
        spec.port = port;
        spec.password = Some(password);
        Ok(())
    }

    /// The pooler `pooler` in front of this server, started on first use:
    /// its port, version and client password. (One started per database
    /// serves the server's admin database: [`Server::pooler_for`].)
    ///
    /// # Errors
    /// It cannot be started; a user's own pooler ([`PoolerKind::External`]),
    /// which is not started here ([`Server::route`]).
    pub async fn pooler(&self, pooler: Pooler) -> Result<(u16, String, String)> {
        let admin_db = self.admin_db.clone();
        self.pooler_for(pooler, &admin_db).await
    }

    /// The pooler `pooler` in front of this server for clients of database
    /// `dbname`, started on first use (one for all databases, or one for
    /// `dbname` when [`PoolerKind::one_instance_per_database`]): its port,
    /// version and client password.
    ///
    /// # Errors
    /// As [`Server::pooler`].
    pub async fn pooler_for(&self, pooler: Pooler, dbname: &str) -> Result<(u16, String, String)> {
        self.pooler_instance(pooler, dbname, None).await
    }

    /// As [`Server::pooler_for`], for a cell whose scenario caps the
    /// pooler's server connections at `cap` ([`caps`] says where): an
    /// instance for `dbname` alone, started with that limit.
    ///
    /// # Errors
    /// As [`Server::pooler`].
    pub async fn pooler_instance(
        &self,
        pooler: Pooler,
        dbname: &str,
        cap: Option<u32>,
    ) -> Result<(u16, String, String)> {
        if pooler.kind == PoolerKind::External {
            bail!("a pooler of your own is not started by locklab");
        }
        let cap = cap.filter(|_| caps(pooler));
        if pooler.kind == PoolerKind::PgBouncer
            && cap.is_none()
            && let Some(attached) = self.attached_poolers.get(&pooler.mode)
        {
            return Ok(attached.clone());
        }
        let key = (
            pooler,
            (pooler.kind.one_instance_per_database() || cap.is_some()).then(|| dbname.to_owned()),
        );
        let mut poolers = self.poolers.lock().await;
        let own_database = key.1.is_some();
        if let Some(b) = poolers.get_mut(&key) {
            match b.exited().await {
                None => return Ok(b.address()),
                Some(why) => {
                    tracing::warn!("{} exited: {why}; starting a new one", pooler.label());
                    eprintln!("locklab: {} exited: {why}; starting a new one", pooler.label());
                    poolers.remove(&key);
                }
            }
        }
        // An instance for one cell's database: no other cell asks for it,
        // and the others need not wait for its start.
        let held = (!own_database).then_some(poolers);
        let up = super::pgbouncer::Upstream {
            host: &self.host,
            port: self.port,
            user: &self.user,
            password: self.password.as_deref(),
            admin_db: &self.admin_db,
        };
        let started = if pooler.kind.in_container() {
            RunningPooler::Container(
                ContainerPooler::start(pooler, &up, key.1.as_deref(), cap, Duration::from_secs(30))
                    .await
                    .with_context(|| format!("cannot start {}", pooler.label()))?,
            )
        } else {
            RunningPooler::Process(
                super::pgbouncer::PgBouncer::start(
                    &up,
                    pooler.mode,
                    cap.unwrap_or(super::pgbouncer::DEFAULT_POOL_SIZE),
                    Duration::from_secs(30),
                )
                .await
                .with_context(|| format!("cannot start PgBouncer in {} mode", pooler.mode.as_str()))?,
            )
        };
        let out = started.address();
        if let Ok(mut seen) = self.pooler_versions_seen.lock() {
            seen.insert(pooler, out.1.clone());
        }
        match held {
            Some(mut poolers) => poolers.insert(key, started),
            None => self.poolers.lock().await.insert(key, started),
        };
        Ok(out)
    }

    /// The version of each pooler started in front of this server (or
    /// attached to it), e.g. `pgbouncer-trixie/session` → `PgBouncer 1.24.1`,
    /// including those started for one database and stopped since.
    /// (A pooler being started at that moment is left out.)
    pub fn pooler_versions(&self) -> std::collections::HashMap<Pooler, String> {
        let mut out: std::collections::HashMap<Pooler, String> = self
            .attached_poolers
            .iter()
            .map(|(mode, (_, version, _))| (Pooler::pgbouncer(*mode), version.clone()))
            .collect();
        if let Ok(seen) = self.pooler_versions_seen.lock() {
            out.extend(seen.iter().map(|(p, v)| (*p, v.clone())));
        }
        out
    }

    /// After a run through `pooler` in database `dbname`: closes the
    /// pooler's client and server connections to it. PgBouncer: `KILL db`
    /// on its admin console (see `PgBouncer::kill_database`), then, with
    /// `reuse`, `RESUME db` for a later cell. Pgpool-II, pgagroal and
    /// Odyssey are given no such command for one database: the server
    /// connections they keep for `dbname` are ended from the server
    /// (`pg_terminate_backend`), as the database is never used again (these
    /// cells do not share databases); so are a user's own pooler's
    /// ([`PoolerKind::External`]), whose console locklab does not use. An
    /// instance started for `dbname` alone is stopped first. `spare`: a
    /// backend of the harness's own in `dbname` that is not the pooler's and
    /// stays (the monitor connection a cell keeps for the next one in a
    /// shared database, e.g. after a scenario that capped PgBouncer's server
    /// connections had an instance of its own).
    ///
    /// # Errors
    /// PgBouncer's admin console or the server refuses the connection or a command.
    pub async fn pooler_close_database(
        &self,
        pooler: Pooler,
        dbname: &str,
        reuse: bool,
        spare: Option<i32>,
    ) -> Result<()> {
        // An instance for `dbname` alone (pgagroal's, or one a scenario's
        // cap started) stops (its container removed, or its process ended;
        // the lock is not held meanwhile), then whatever of its server
        // connections is left is ended from the server, as below.
        let stopped = self.poolers.lock().await.remove(&(pooler, Some(dbname.to_owned())));
        let own_instance = stopped.is_some() || pooler.kind.one_instance_per_database();
        if stopped.is_some() {
            // Its removal (`docker rm -f`, or waiting for the process) blocks.
            let _ = tokio::task::spawn_blocking(move || drop(stopped)).await;
        }
        // The console is reached without holding the lock that every run's
        // `pooler()` takes.
        let from_server = pooler.kind == PoolerKind::External || own_instance;
        let target = match self.attached_poolers.get(&pooler.mode) {
            Some((port, _, password)) if pooler.kind == PoolerKind::PgBouncer && !from_server => {
                Some((*port, password.clone()))
            }
            // A user's own pooler, or one that was started for this database
            // alone: server connections are ended from the server.
            _ if from_server => Some((0, String::new())),
            _ => self.poolers.lock().await.get(&(pooler, None)).map(|b| {
                let (port, _, password) = b.address();
                (port, password)
            }),
        };
        match (target, pooler.kind) {
            (None, _) => Ok(()),
            (Some((port, password)), PoolerKind::PgBouncer | PoolerKind::PgBouncerTrixie) if !from_server => {
                super::pgbouncer::kill_database(port, &password, &self.user, dbname, reuse).await
            }
            (Some(_), _) => {
                let admin = self.admin().await?;
                let ended = tokio::time::timeout(
                    Duration::from_secs(10),
                    admin.client().execute(
                        crate::observe::TERMINATE_DATABASE_BACKENDS_SQL,
                        &[&dbname, &spare.unwrap_or(0)],
                    ),
                )
                .await;
                admin.close().await;
                match ended {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(anyhow!(
                        "cannot end {}'s server connections: {e}",
                        pooler.kind.product()
                    )),
                    Err(_) => Err(anyhow!(
                        "ending {}'s server connections took over 10 s",
                        pooler.kind.product()
                    )),
                }
            }
        }
    }
}

/// Whether a scenario's cap on server connections (`pooler.server_connections`)
/// applies behind `pooler`: in transaction mode, where a server connection
/// serves one client's transaction at a time and others queue for it. In
/// session mode a client keeps its server connection while connected, so a
/// cap would hold up connecting rather than a statement; Pgpool-II has no
/// transaction mode.
pub fn caps(pooler: Pooler) -> bool {
    pooler.mode == locklab_drivers::PoolerMode::Transaction && pooler.kind != PoolerKind::Pgpool
}
