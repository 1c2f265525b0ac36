//! A pooler in a container of the pooler image ([`ContainerPooler`]): the
//! image, the container, its start-up script, and waiting until it is ready.
//! What goes into each pooler's container is its own module's
//! ([`super::Product::container`]).
//!
//! Image: `LOCKLAB_POOLER_IMAGE` when set (an image of the user's own with
//! `pgbouncer`, `pgpool`, `pgagroal`, `pgagroal-admin`, `odyssey` and
//! `socat` on its `PATH`, `sh`, and a user that may write `/tmp`), else
//! `locklab/poolers:trixie-2`, built once with
//! `harness/scripts/build-pooler-image.sh` when missing (the packages of
//! `harness/scripts/poolers.list`; trixie's binaries need a newer C library
//! than Debian 12's).
//!
//! The container: host networking (so it reaches the server on loopback,
//! whichever backend runs it), the pooler listening on 127.0.0.1 on a free
//! port only, clients authenticated with scram-sha-256 and a password made
//! for this instance, the configuration written at start-up from environment
//! variables (never on a command line, never in a file locklab writes on the
//! host; Docker itself keeps a container's environment in its own state
//! while the container exists). It carries `locklab.pid=<our pid>` and
//! `locklab.owner=<token>`; dropping [`ContainerPooler`] removes it, and the
//! container watchdog removes it when our process ends without dropping it.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use locklab_drivers::{DirectConn, Pooler};
use testcontainers::bollard::Docker;
use testcontainers::bollard::models::{ContainerCreateBody, HostConfig};
use testcontainers::bollard::query_parameters::CreateContainerOptionsBuilder;

use super::{DIR, SERVER_CONNECTIONS, Setup, Started, Upstream};
use crate::server::container::{PID_LABEL, docker_answers, docker_host, log_lines};

/// The pooler image when `LOCKLAB_POOLER_IMAGE` is not set (the suffix goes
/// up whenever what `build-pooler-image.sh` puts in it changes).
pub(super) const DEFAULT_POOLER_IMAGE: &str = "locklab/poolers:trixie-2";

/// Where `build-pooler-image.sh` is.
pub(super) fn build_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-pooler-image.sh")
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
pub(in crate::server) struct ContainerPooler {
    id: String,
    host: String,
    /// The loopback port it listens on.
    pub(super) port: u16,
    /// The password its clients give (scram-sha-256).
    pub(super) password: String,
    /// What the binary says of its version, e.g. `PgBouncer 1.24.1`.
    pub(super) version: String,
    _watchdog: Option<crate::server::container::Watchdog>,
}

/// How a start-up error says that pgagroal made none of its server
/// connections (retried by [`ContainerPooler::start`]).
const NONE_MADE: &str = "had made none of";

impl ContainerPooler {
    /// Starts `pooler` in front of `up`; ready (a `select 1` through it
    /// answers) within `timeout`. `database`: the one database it serves,
    /// for a pooler started per database
    /// ([`locklab_drivers::PoolerKind::one_instance_per_database`]).
    ///
    /// # Errors
    /// No Docker engine or image; Docker refusing the container; the pooler
    /// exiting or not ready in time (with its last log lines). No container
    /// is left behind in these cases.
    /// `cap`: a scenario's limit on its server connections
    /// ([`Setup::cap`]).
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
        let product =
            super::product(pooler.kind).ok_or_else(|| anyhow!("{} is not started by locklab", pooler.label()))?;
        let port = product.listen_port()?;
        // A pooler that authenticates to the server with the password its
        // clients give: it must be the server's, when it has one.
        let password = match (product.client_password_is_the_servers(), up.password) {
            (true, Some(p)) => p.to_owned(),
            _ => super::random_password()?,
        };
        let token = crate::server::unique_token();
        let at = Setup {
            up,
            port,
            password: &password,
            database,
            cap,
            check_in: pooler.check_in,
        };
        let (script, env) = script(up, product.container(pooler.mode, &at)?)?;
        // Its backends in the database before this instance makes its own.
        let before = match database.filter(|_| product.makes_server_connections_at_start()) {
            Some(db) => {
                let admin = server_connection(up).await?;
                let n = super::pgagroal::backends(&admin, db).await;
                admin.close().await;
                Some(n?)
            }
            None => None,
        };
        let watchdog = crate::server::container::Watchdog::start(&host, &token);
        let labels = [
            (crate::server::container::OWNER_LABEL.to_owned(), token.clone()),
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
        let spec = crate::server::loopback_spec(
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
            // itself, and hang or crash (`locklab_drivers`' pgagroal module).
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
            if let Ok(n) = super::pgagroal::backends(&admin, db).await {
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

/// The container's start-up script and its environment, for a pooler's
/// files and command ([`Started`]): the script writes each
/// `LOCKLAB_FILE_<N>` variable into its file under [`DIR`], and the
/// pooler's command prints `locklab-version: …` and runs it in the
/// foreground.
///
/// # Errors
/// The server's user name or password holds a character the poolers' files
/// cannot hold.
fn script(up: &Upstream<'_>, started: Started) -> Result<(String, Vec<String>)> {
    if [up.user, up.password.unwrap_or_default()]
        .iter()
        .any(|v| v.contains(['\n', '\r', '"', '\'', ':']))
    {
        bail!(
            "the server's user name or password contains a newline, quote or ':', which the pooler's files cannot hold"
        );
    }
    let mut env = Vec::new();
    let mut script = format!("set -e; umask 077; mkdir -p {DIR}; ");
    for (i, (name, text)) in started.files.iter().enumerate() {
        env.push(format!("LOCKLAB_FILE_{i}={text}"));
        script.push_str(&format!(
            "printf '%s' \"$LOCKLAB_FILE_{i}\" > {DIR}/{name}; unset LOCKLAB_FILE_{i}; "
        ));
    }
    script.push_str(&started.run);
    Ok((script, env))
}

/// What a pooler's log says when its port was taken: the system's message
/// (PgBouncer, Pgpool-II, Odyssey, socat), or pgagroal's own.
const PORT_TAKEN: [&str; 2] = ["Address already in use", "Could not bind to 127.0.0.1:"];

/// The line of `log` that says a port was taken ([`PORT_TAKEN`]), if one does.
fn port_taken(log: &str) -> Option<&str> {
    log.lines()
        .find(|l| PORT_TAKEN.iter().any(|m| l.contains(m)))
        .map(str::trim)
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

/// A connection to the server behind the pooler (its admin database), for
/// watching a pooler start.
///
/// # Errors
/// It cannot connect within 10 s.
pub(super) async fn server_connection(up: &Upstream<'_>) -> Result<DirectConn> {
    let server = locklab_drivers::ConnectSpec {
        host: up.host.to_owned(),
        port: up.port,
        user: up.user.to_owned(),
        password: up.password.map(str::to_owned),
        dbname: up.admin_db.to_owned(),
        application_name: "locklab-ready".into(),
        options: Vec::new(),
    };
    tokio::time::timeout(Duration::from_secs(10), DirectConn::connect(&server))
        .await
        .map_err(|_| anyhow!("connecting to the server took over 10 s"))?
        .map_err(anyhow::Error::from)
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
        let socat = "socat[12] E bind(5, {AF=2 127.0.0.1:4321}, 16): Address already in use";
        assert_eq!(port_taken(&format!("started\n{socat}\n")), Some(socat));
        let pgagroal = "FATAL main.c:924 pgagroal: Could not bind to 127.0.0.1:4321";
        assert_eq!(port_taken(pgagroal), Some(pgagroal));
        assert_eq!(port_taken("pgagroal: 1.6.0 started on 127.0.0.1:4321"), None);
    }
}
