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
//! variables (never on the command line, never in a file on the host). It
//! carries `locklab.pid=<our pid>` and `locklab.owner=<token>`; dropping
//! [`ContainerPooler`] removes it, and the container watchdog removes it when
//! our process ends without dropping it.
//!
//! Configurations (each product's docs, "Configuration"):
//! - PgBouncer: as Debian 12's ([`super::pgbouncer::config`]).
//! - Pgpool-II: `backend_clustering_mode = 'raw'` with one backend,
//!   `connection_cache = on`, `reset_query_list = 'ABORT; DISCARD ALL'` (its
//!   default: run when a client disconnects, before the server connection is
//!   cached), `num_init_children = 64` (the most clients at once),
//!   `max_pool = 4`, health and replication checks off, `pool_hba.conf`
//!   asking every client for scram-sha-256 and `pool_passwd` holding the
//!   password as text (Pgpool-II docs, "pool_passwd").
//! - pgagroal 1.6.0: listening on a free four-digit port, the server
//!   reached through socat on another (see [`PoolerKind::Pgagroal`]),
//!   `max_connections = 16`, `idle_timeout = 0`, `validation = off`,
//!   `blocking_timeout = 0` (a client waits for a server connection as long
//!   as it takes), `pgagroal_hba.conf` asking every client for
//!   scram-sha-256, a users file made at start with `pgagroal-admin` (its
//!   master key in the container's home) holding the server's password
//!   (pgagroal authenticates to the server with it), and a limits file
//!   naming the cell's database with 16 server connections made at start
//!   (an instance per cell: see [`PoolerKind::Pgagroal`]). Session pipeline:
//!   `DISCARD ALL` when a client disconnects (pgagroal docs, "Pipelines").
//!   Transaction pipeline: `allow_unknown_users = off`, as it requires (its
//!   configuration check).
//! - Odyssey 1.5.2: one `database default` / `user default` route with
//!   `pool "session"` or `pool "transaction"`, `pool_size 16`, its reset
//!   defaults (`pool_discard yes`, `pool_rollback yes`), clients asked for
//!   scram-sha-256, the server's user and password as `storage_user` and
//!   `storage_password` (Odyssey docs, "Rules").

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use locklab_drivers::{DirectConn, Pooler, PoolerKind, PoolerMode};
use testcontainers::bollard::Docker;
use testcontainers::bollard::models::{ContainerCreateBody, HostConfig};
use testcontainers::bollard::query_parameters::CreateContainerOptionsBuilder;

use super::container::{PID_LABEL, docker_answers, docker_host, log_lines};
use super::pgbouncer::Upstream;

/// What a pooler's log says when its port was taken: the system's message
/// (PgBouncer, Pgpool-II, Odyssey, socat), or pgagroal's own.
const PORT_TAKEN: [&str; 2] = ["Address already in use", "Could not bind to 127.0.0.1:"];

/// Whether `log` says a port was taken ([`PORT_TAKEN`]).
fn port_taken(log: &str) -> bool {
    PORT_TAKEN.iter().any(|m| log.contains(m))
}

/// The pooler image when `LOCKLAB_POOLER_IMAGE` is not set (the suffix goes
/// up whenever what `build-pooler-image.sh` puts in it changes).
pub const DEFAULT_POOLER_IMAGE: &str = "locklab/poolers:trixie-2";

/// How many server connections pgagroal and Odyssey may hold (pgagroal's
/// `max_connections`, and in its transaction pipeline the connections made
/// at start for the cell's database; Odyssey's `pool_size`).
const SERVER_CONNECTIONS: u32 = 16;

/// A loopback port below 10000 that was free a moment ago, for pgagroal
/// 1.6.0 (see [`PoolerKind::Pgagroal`]): tried at random in 2000..10000 (ports
/// below are often taken by well-known services), the first that binds.
///
/// # Errors
/// None of 200 tries binds.
fn free_four_digit_port() -> Result<u16> {
    for _ in 0..200 {
        let port = rand::random_range(2000..10000);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free loopback port below 10000 in 200 tries (pgagroal 1.6.0 needs one)")
}

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
    pub(super) async fn start(
        pooler: Pooler,
        up: &Upstream<'_>,
        database: Option<&str>,
        timeout: Duration,
    ) -> Result<ContainerPooler> {
        let host = docker_host()?;
        docker_answers().context("this pooler runs in a container and needs a Docker engine")?;
        let docker = Docker::connect_with_defaults().context("cannot reach the Docker engine")?;
        let image = image(&docker).await?;
        // The free port is chosen before the pooler binds it: another
        // process may take it meanwhile (Pgpool-II then runs on without
        // listening). That is retried on another port, twice.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match ContainerPooler::start_on(&docker, &host, &image, pooler, up, database, timeout).await {
                Err(e) if attempt < 3 && port_taken(&format!("{e:#}")) => {
                    tracing::warn!("{}: its port was taken before it bound it; another try", pooler.label());
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
        database: Option<&str>,
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
        let (script, env) = setup(pooler, up, port, &password, database)?;
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
        running.wait_ready(docker, pooler, up, database, timeout).await?;
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
        database: Option<&str>,
        timeout: Duration,
    ) -> Result<()> {
        let spec = super::loopback_spec(
            self.port,
            up.user,
            &self.password,
            database.unwrap_or(up.admin_db),
            "locklab-ready",
        );
        let deadline = Instant::now() + timeout;
        if let Some(db) = database {
            // pgagroal makes its server connections for `db` after it starts
            // listening; a client before they are all made could make one
            // itself, and hang or crash (`PoolerKind::Pgagroal`).
            // Observed on the server: its backends in `db`.
            self.wait_prefilled(docker, pooler, up, db, deadline).await?;
        }
        loop {
            let last_error = match tokio::time::timeout(Duration::from_secs(5), DirectConn::connect(&spec)).await {
                Ok(Ok(c)) => {
                    let answered = c.client().simple_query("select 1").await;
                    c.close().await;
                    match answered {
                        Ok(_) => return Ok(()),
                        Err(e) => e.to_string(),
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
            if port_taken(&log) {
                bail!(
                    "{} could not listen on port {}: {}",
                    pooler.label(),
                    self.port,
                    PORT_TAKEN[0]
                );
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

    /// Waits until the server has [`SERVER_CONNECTIONS`] backends in `db`
    /// (those the pooler makes at start), by asking the server every 50 ms.
    ///
    /// # Errors
    /// The container stopped, a port was taken, or `deadline` passed (with
    /// the pooler's last log lines).
    async fn wait_prefilled(
        &self,
        docker: &Docker,
        pooler: Pooler,
        up: &Upstream<'_>,
        db: &str,
        deadline: Instant,
    ) -> Result<()> {
        let server = locklab_drivers::ConnectSpec {
            host: up.host.to_owned(),
            port: up.port,
            user: up.user.to_owned(),
            password: up.password.map(str::to_owned),
            dbname: up.admin_db.to_owned(),
            application_name: "locklab-ready".into(),
            options: Vec::new(),
        };
        let admin = DirectConn::connect(&server)
            .await
            .with_context(|| format!("cannot connect to the server to watch {} start", pooler.label()))?;
        let mut seen = 0i64;
        let out = loop {
            if let Ok(row) = admin
                .client()
                .query_one(
                    "select count(*) from pg_stat_activity where datname = $1 and backend_type = 'client backend'",
                    &[&db],
                )
                .await
            {
                seen = row.get(0);
                if seen >= i64::from(SERVER_CONNECTIONS) {
                    break Ok(());
                }
            }
            let log = log_lines(docker, &self.id, 15).await;
            if port_taken(&log) {
                break Err(anyhow!(
                    "{} could not listen on port {}: {}",
                    pooler.label(),
                    self.port,
                    PORT_TAKEN[0]
                ));
            }
            if self.exited().await.is_some() || Instant::now() >= deadline {
                break Err(anyhow!(
                    "{} made {seen} of its {SERVER_CONNECTIONS} server connections to {db} before it stopped or the start-up deadline; its last log lines:\n{log}",
                    pooler.label()
                ));
            }
            // Polling interval for a pooler that is still making its connections.
            tokio::time::sleep(Duration::from_millis(50)).await;
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

/// `PgBouncer 1.24.1`, `Pgpool-II 4.6.1`, `pgagroal 1.6.0` or `Odyssey
/// 1.5.2` from the first line the binary prints for `--version`.
fn product_version(line: &str) -> String {
    let line = line.trim();
    let first_word = |rest: &str| rest.split_whitespace().next().unwrap_or(rest).to_owned();
    // `pgpool-II version 4.6.1 (chirikoboshi)`
    if let Some(rest) = line.strip_prefix("pgpool-II version ") {
        return format!("Pgpool-II {}", first_word(rest));
    }
    // `odyssey 1.5.2 release +pam -ldap +systemd -prom`
    if let Some(rest) = line.strip_prefix("odyssey ") {
        return format!("Odyssey {}", first_word(rest));
    }
    line.to_owned()
}

/// The container's start-up script and its environment: the script writes
/// each `LOCKLAB_FILE_<NAME>` variable into `/tmp/locklab/<name>`, prints
/// `locklab-version: …`, and runs the pooler in the foreground. `database`:
/// the one database an instance per database serves.
fn setup(
    pooler: Pooler,
    up: &Upstream<'_>,
    port: u16,
    password: &str,
    database: Option<&str>,
) -> Result<(String, Vec<String>)> {
    if [up.user, up.password.unwrap_or_default()]
        .iter()
        .any(|v| v.contains(['\n', '\r', '"', '\'', ':']))
    {
        bail!(
            "the server's user name or password contains a newline, quote or ':', which the pooler's files cannot hold"
        );
    }
    let dir = "/tmp/locklab";
    let mut files: Vec<(&str, String)> = Vec::new();
    let pgagroal_run;
    let run = match pooler.kind {
        PoolerKind::PgBouncer | PoolerKind::PgBouncerTrixie => {
            let quote = |v: &str| format!("'{}'", v.replace('\'', "''"));
            let mut server = format!("host={} port={} user={}", up.host, up.port, quote(up.user));
            if let Some(p) = up.password {
                server.push_str(&format!(" password={}", quote(p)));
            }
            files.push((
                "pgbouncer.ini",
                // Its log on stderr, for `docker logs`.
                super::pgbouncer::config(&server, port, dir, pooler.mode, up.user)
                    .replace(&format!("logfile = {dir}/pgbouncer.log\n"), ""),
            ));
            files.push(("userlist.txt", format!("\"{}\" \"{password}\"\n", up.user)));
            "echo \"locklab-version: $(pgbouncer --version | head -n 1)\"; exec pgbouncer /tmp/locklab/pgbouncer.ini"
        }
        PoolerKind::Pgpool => {
            let pcp_port = super::local::free_port()?;
            files.push((
                "pgpool.conf",
                format!(
                    "backend_clustering_mode = 'raw'\n\
                     listen_addresses = '127.0.0.1'\n\
                     port = {port}\n\
                     unix_socket_directories = '{dir}'\n\
                     pcp_listen_addresses = ''\n\
                     pcp_port = {pcp_port}\n\
                     pcp_socket_dir = '{dir}'\n\
                     backend_hostname0 = '{host}'\n\
                     backend_port0 = {up_port}\n\
                     backend_weight0 = 1\n\
                     backend_flag0 = 'DISALLOW_TO_FAILOVER'\n\
                     num_init_children = 64\n\
                     max_pool = 4\n\
                     connection_cache = on\n\
                     reset_query_list = 'ABORT; DISCARD ALL'\n\
                     enable_pool_hba = on\n\
                     pool_passwd = '{dir}/pool_passwd'\n\
                     health_check_period = 0\n\
                     sr_check_period = 0\n\
                     load_balance_mode = off\n\
                     failover_on_backend_error = off\n\
                     logdir = '{dir}'\n\
                     pid_file_name = '{dir}/pgpool.pid'\n\
                     log_destination = 'stderr'\n",
                    host = up.host,
                    up_port = up.port,
                ),
            ));
            files.push(("pool_hba.conf", "host all all 127.0.0.1/32 scram-sha-256\n".into()));
            files.push(("pool_passwd", format!("{}:TEXT{password}\n", up.user)));
            files.push(("pcp.conf", String::new()));
            "echo \"locklab-version: $(pgpool --version 2>&1 | head -n 1)\"; \
             exec pgpool -n -f /tmp/locklab/pgpool.conf -a /tmp/locklab/pool_hba.conf -F /tmp/locklab/pcp.conf"
        }
        PoolerKind::Pgagroal => {
            // The server through a four-digit port (`PoolerKind::Pgagroal`);
            // socat's own log lines name it.
            let (forward, server_port) = if up.port < 10000 {
                (String::new(), up.port)
            } else {
                let via = free_four_digit_port()?;
                (
                    format!(
                        "socat -d TCP-LISTEN:{via},bind=127.0.0.1,fork,reuseaddr TCP:{host}:{up_port} & ",
                        host = up.host,
                        up_port = up.port
                    ),
                    via,
                )
            };
            let transaction = pooler.mode == PoolerMode::Transaction;
            files.push((
                "pgagroal.conf",
                format!(
                    "[pgagroal]\n\
                     host = 127.0.0.1\n\
                     port = {port}\n\
                     log_type = console\n\
                     log_level = info\n\
                     max_connections = {SERVER_CONNECTIONS}\n\
                     idle_timeout = 0\n\
                     blocking_timeout = 0\n\
                     validation = off\n\
                     unix_socket_dir = {dir}\n\
                     pipeline = {pipeline}\n\
                     {unknown}\
                     \n\
                     [primary]\n\
                     host = {host}\n\
                     port = {server_port}\n",
                    pipeline = pooler.mode.as_str(),
                    unknown = if transaction { "allow_unknown_users = off\n" } else { "" },
                    host = if forward.is_empty() { up.host } else { "127.0.0.1" },
                ),
            ));
            files.push(("pgagroal_hba.conf", "host all all all scram-sha-256\n".into()));
            let mut args = String::from("-c /tmp/locklab/pgagroal.conf -a /tmp/locklab/pgagroal_hba.conf");
            {
                let Some(db) = database else {
                    bail!("pgagroal is started for one database, and none was named")
                };
                if db.contains(char::is_whitespace) || db.contains(['"', '\'', '#']) {
                    bail!("pgagroal's limits file cannot name the database {db:?}");
                }
                files.push((
                    "pgagroal_databases.conf",
                    format!("{db} {user} {n} {n} {n}\n", user = up.user, n = SERVER_CONNECTIONS),
                ));
                args.push_str(" -l /tmp/locklab/pgagroal_databases.conf");
            }
            // The users file: its password is the client's and the server's,
            // given to pgagroal-admin on its standard input (not on a command
            // line). The master key that encrypts it goes to ~/.pgagroal.
            files.push(("password", password.to_owned()));
            pgagroal_run = format!(
                "{forward}\
                 echo \"locklab-version: $(pgagroal --version 2>&1 | head -n 1)\"; \
                 key=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \\n'); \
                 printf '%s\\n%s\\n' \"$key\" \"$key\" | pgagroal-admin master-key >/dev/null; \
                 pw=$(cat /tmp/locklab/password); rm /tmp/locklab/password; \
                 printf '%s\\n%s\\n' \"$pw\" \"$pw\" | pgagroal-admin -f /tmp/locklab/pgagroal_users.conf -U {user} user add >/dev/null; \
                 unset pw key; \
                 exec pgagroal {args} -u /tmp/locklab/pgagroal_users.conf",
                user = up.user
            );
            &pgagroal_run
        }
        PoolerKind::Odyssey => {
            let storage_password = match up.password {
                Some(p) => format!("\t\tstorage_password \"{p}\"\n"),
                None => String::new(),
            };
            files.push((
                "odyssey.conf",
                format!(
                    "daemonize no\n\
                     log_to_stdout yes\n\
                     log_format \"%p %t %l [%i %s] (%c) %m\\n\"\n\
                     workers 2\n\
                     listen {{\n\thost \"127.0.0.1\"\n\tport {port}\n}}\n\
                     storage \"server\" {{\n\ttype \"remote\"\n\thost \"{host}\"\n\tport {up_port}\n}}\n\
                     database default {{\n\tuser default {{\n\
                     \t\tauthentication \"scram-sha-256\"\n\
                     \t\tpassword \"{password}\"\n\
                     \t\tstorage \"server\"\n\
                     \t\tstorage_user \"{user}\"\n\
                     {storage_password}\
                     \t\tpool \"{mode}\"\n\
                     \t\tpool_size {SERVER_CONNECTIONS}\n\
                     \t}}\n}}\n",
                    host = up.host,
                    up_port = up.port,
                    user = up.user,
                    mode = pooler.mode.as_str(),
                ),
            ));
            "echo \"locklab-version: $(odyssey --version 2>&1 | head -n 1)\"; exec odyssey /tmp/locklab/odyssey.conf"
        }
        PoolerKind::External => bail!("a pooler of your own is not started by locklab"),
    };
    let mut env = Vec::new();
    let mut script = format!("set -e; umask 077; mkdir -p {dir}; ");
    for (i, (name, text)) in files.iter().enumerate() {
        env.push(format!("LOCKLAB_FILE_{i}={text}"));
        script.push_str(&format!(
            "printf '%s' \"$LOCKLAB_FILE_{i}\" > {dir}/{name}; unset LOCKLAB_FILE_{i}; "
        ));
    }
    script.push_str(run);
    Ok((script, env))
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
        if let (PoolerKind::External, Some((host, port))) = (pooler.kind, pooler.address) {
            // The user's pooler authenticates the server's role as the
            // server does (its password, if any, stays).
            spec.host = host.to_owned();
            spec.port = port;
            return Ok(());
        }
        let (port, _, password) = self.pooler_for(pooler, &spec.dbname).await?;
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
        if pooler.kind == PoolerKind::External {
            bail!("a pooler of your own is not started by locklab");
        }
        if pooler.kind == PoolerKind::PgBouncer
            && let Some(attached) = self.attached_poolers.get(&pooler.mode)
        {
            return Ok(attached.clone());
        }
        let key = (
            pooler,
            pooler
                .kind
                .one_instance_per_database()
                .then(|| dbname.to_owned()),
        );
        let mut poolers = self.poolers.lock().await;
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
        let up = super::pgbouncer::Upstream {
            host: &self.host,
            port: self.port,
            user: &self.user,
            password: self.password.as_deref(),
            admin_db: &self.admin_db,
        };
        let started = if pooler.kind.in_container() {
            RunningPooler::Container(
                ContainerPooler::start(pooler, &up, key.1.as_deref(), Duration::from_secs(30))
                    .await
                    .with_context(|| format!("cannot start {}", pooler.label()))?,
            )
        } else {
            RunningPooler::Process(
                super::pgbouncer::PgBouncer::start(&up, pooler.mode, Duration::from_secs(30))
                    .await
                    .with_context(|| format!("cannot start PgBouncer in {} mode", pooler.mode.as_str()))?,
            )
        };
        let out = started.address();
        if let Ok(mut seen) = self.pooler_versions_seen.lock() {
            seen.insert(pooler, out.1.clone());
        }
        poolers.insert(key, started);
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
    /// instance started for `dbname` alone is stopped first.
    ///
    /// # Errors
    /// PgBouncer's admin console or the server refuses the connection or a command.
    pub async fn pooler_close_database(&self, pooler: Pooler, dbname: &str, reuse: bool) -> Result<()> {
        if pooler.kind.one_instance_per_database() {
            // The instance for `dbname` stops (its container removed; the
            // lock is not held meanwhile), then whatever of its server
            // connections is left is ended from the server, as below.
            let stopped = self.poolers.lock().await.remove(&(pooler, Some(dbname.to_owned())));
            drop(stopped);
        }
        // The console is reached without holding the lock that every run's
        // `pooler()` takes.
        let target = match self.attached_poolers.get(&pooler.mode) {
            Some((port, _, password)) if pooler.kind == PoolerKind::PgBouncer => Some((*port, password.clone())),
            // A user's own pooler, or one that was started for this database
            // alone: server connections are ended from the server.
            _ if pooler.kind == PoolerKind::External || pooler.kind.one_instance_per_database() => {
                Some((0, String::new()))
            }
            _ => self.poolers.lock().await.get(&(pooler, None)).map(|b| {
                let (port, _, password) = b.address();
                (port, password)
            }),
        };
        match (target, pooler.kind) {
            (None, _) => Ok(()),
            (Some((port, password)), PoolerKind::PgBouncer | PoolerKind::PgBouncerTrixie) => {
                super::pgbouncer::kill_database(port, &password, &self.user, dbname, reuse).await
            }
            (Some(_), PoolerKind::Pgpool | PoolerKind::Pgagroal | PoolerKind::Odyssey | PoolerKind::External) => {
                let admin = self.admin().await?;
                let ended = tokio::time::timeout(
                    Duration::from_secs(10),
                    admin
                        .client()
                        .execute(crate::observe::TERMINATE_DATABASE_BACKENDS_SQL, &[&dbname]),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_product_and_number() {
        for (line, want) in [
            ("PgBouncer 1.24.1", "PgBouncer 1.24.1"),
            ("pgpool-II version 4.6.1 (chirikoboshi)", "Pgpool-II 4.6.1"),
            ("pgagroal 1.6.0", "pgagroal 1.6.0"),
            ("odyssey 1.5.2 release +pam -ldap +systemd -prom", "Odyssey 1.5.2"),
        ] {
            assert_eq!(product_version(line), want);
        }
    }

    #[test]
    fn a_taken_port_is_recognised_in_each_poolers_words() {
        assert!(port_taken("socat[12] E bind(5, {AF=2 127.0.0.1:4321}, 16): Address already in use"));
        assert!(port_taken("FATAL main.c:924 pgagroal: Could not bind to 127.0.0.1:4321"));
        assert!(!port_taken("pgagroal: 1.6.0 started on 127.0.0.1:4321"));
    }

    #[test]
    fn a_four_digit_port_is_below_10000_and_free() {
        let port = free_four_digit_port().unwrap();
        assert!((2000..10000).contains(&port));
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    }
}
