//! The `container` backend: one PostgreSQL container per server version, started
//! with the `testcontainers` crate (a typed `PostgresImage` + `AsyncRunner`).
//!
//! Image: `--image` / `LOCKLAB_PG_IMAGE` when given (`{major}` is replaced by
//! the major version). Otherwise the official `postgres:<major>` when it is
//! present or can be pulled; else `locklab/postgres:<major>` when present; else
//! that image is built once with `harness/scripts/build-image.sh` (Debian
//! packages and the PyPI wheel, for machines with no registry).
//!
//! The container: `POSTGRES_PASSWORD` (random per start), `POSTGRES_USER` and
//! `POSTGRES_DB` = `postgres`, `POSTGRES_INITDB_ARGS=--no-sync`, `PGDATA` on a
//! tmpfs, postgres run with [`super::SERVER_SETTINGS`] (a throw-away test server),
//! port 5432 published on 127.0.0.1 only, on a port Docker picks; clients connect to the
//! container's own bridge address when it answers from this host (skipping Docker's userland
//! proxy), else to that published port. It is ready when a connection with
//! that password succeeds (not when a log line appears: the official image
//! prints "ready to accept connections" once for its set-up server and again for
//! the real one).
//!
//! Cleanup: dropping [`ContainerServer`] removes the container (force, with its
//! volumes) from a keeper thread that owns it. Ryuk is not used (it is itself
//! an image to pull). When our process ends without dropping it, a watchdog
//! (`sh` + the `docker` command, started before the container is created)
//! removes every container labelled `locklab.owner=<token>` of this start.
//! Every container we create carries `locklab.pid=<our pid>`.

mod docker;
mod image;
mod image_source;
mod watchdog;

use std::collections::HashMap;
use std::io::Read;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use futures::StreamExt;
use locklab_drivers::{ConnectSpec, DirectConn};
use testcontainers::bollard::Docker;
use testcontainers::bollard::models::PortBinding;
use testcontainers::bollard::query_parameters::LogsOptionsBuilder;
use testcontainers::core::error::ClientError;
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, ImageExt, TestcontainersError};

pub use docker::{docker_answers, docker_host};
pub use image::{local_image, official_image};
pub use image_source::{image_for, stop_builds};

use super::ServerOptions;
use docker::{docker_runtime, remove_owned};
use image::{PGDATA, PORT, PostgresImage};
use image_source::resolve_image;
pub use watchdog::Watchdog;

/// The superuser the container is initialised with (`POSTGRES_USER`).
pub(super) const SUPERUSER: &str = "postgres";

/// The label every container of one start carries, with that start's token.
pub const OWNER_LABEL: &str = "locklab.owner";
/// The label naming the process that created a container.
pub const PID_LABEL: &str = "locklab.pid";

/// A running PostgreSQL container.
pub(super) struct ContainerServer {
    /// Docker's container id.
    pub(super) id: String,
    /// The image, as given to Docker.
    pub(super) image: String,
    /// Time spent finding, pulling or building the image (not part of start-up).
    pub(super) image_time: Duration,
    /// Host to connect to: the container's bridge address, or loopback
    /// (see [`direct_address`]).
    pub(super) host: String,
    /// 5432 at the bridge address, or the host port mapped to the container's 5432.
    pub(super) port: u16,
    /// `POSTGRES_PASSWORD` of this container.
    pub(super) password: String,
    keeper: Option<Keeper>,
    /// Dropped after the keeper: finds nothing left and exits.
    _watchdog: Option<Watchdog>,
}

/// The keeper task's handles: `stop` asks it to remove the container, `done`
/// says it has.
struct Keeper {
    stop: tokio::sync::oneshot::Sender<()>,
    done: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Drop for ContainerServer {
    fn drop(&mut self) {
        if let Some(k) = self.keeper.take() {
            let _ = k.stop.send(());
            // Removal takes well under a second; the watchdog covers a stuck engine.
            let done = k.done.lock().unwrap_or_else(|e| e.into_inner());
            let _ = done.recv_timeout(Duration::from_secs(60));
        }
    }
}

/// What the keeper task reports once the container accepts connections.
struct Started {
    id: String,
    /// Where clients connect: the container's own address when it answers
    /// from this host, else loopback ([`direct_address`]).
    host: String,
    /// 5432 at the container's own address, else the published port.
    port: u16,
}

impl ContainerServer {
    /// Starts a container for `opts.major()` and waits until it accepts
    /// connections (within `opts.start_timeout`, not counting the time to pull
    /// or build the image).
    ///
    /// # Errors
    /// No Docker engine; no image (missing, cannot be pulled or built); Docker
    /// refusing to create or start the container; the container exiting or not
    /// accepting connections in time (with its last log lines). No container is
    /// left behind in any of these cases.
    pub(super) async fn start(opts: &ServerOptions) -> Result<ContainerServer> {
        let host = docker_host()?;
        docker_answers().context("the container backend needs a Docker engine (or use --backend local)")?;
        let rt = docker_runtime()?;
        let major = opts.major();
        let given = opts.image.clone();
        let began = Instant::now();
        let image = rt
            .spawn(async move {
                let docker = Docker::connect_with_defaults().context("cannot reach the Docker engine")?;
                resolve_image(&docker, given, major).await
            })
            .await
            .map_err(|e| anyhow!("image resolution failed: {e}"))??;
        let image_time = began.elapsed();
        let token = super::unique_token();
        let password = random_password()?;
        let watchdog = Watchdog::start(&host, &token);
        let mut last = None;
        for _attempt in 0..3 {
            let request = Request {
                image: image.clone(),
                major,
                token: token.clone(),
                password: password.clone(),
                timeout: opts.start_timeout,
                settings: opts.settings.clone(),
            };
            let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            rt.spawn(async move {
                keeper(request, ready_tx, stop_rx).await;
                let _ = done_tx.send(());
            });
            let keeper = Keeper {
                stop: stop_tx,
                done: std::sync::Mutex::new(done_rx),
            };
            match ready_rx.await {
                Ok(Ok(started)) => {
                    return Ok(ContainerServer {
                        id: started.id,
                        image,
                        image_time,
                        host: started.host,
                        port: started.port,
                        password,
                        keeper: Some(keeper),
                        _watchdog: watchdog,
                    });
                }
                Ok(Err(e)) => {
                    // Docker picks the host port; two engines' users racing for
                    // one is rare but worth another try.
                    if !format!("{e:#}").contains("port is already allocated") {
                        return Err(e);
                    }
                    last = Some(e);
                }
                Err(_) => bail!("the container keeper task ended without a result"),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("container start failed")))
    }
}

/// 128 random bits from the kernel, hex: `POSTGRES_PASSWORD` of one container.
fn random_password() -> Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom for the container's password")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

struct Request {
    image: String,
    major: u32,
    token: String,
    password: String,
    timeout: Duration,
    settings: Vec<String>,
}

/// Owns the container for its whole life (a task on [`docker_runtime`]):
/// starts it, reports, waits for `stop` (or for the [`ContainerServer`] to be
/// dropped), removes it.
async fn keeper(
    req: Request,
    ready: tokio::sync::oneshot::Sender<Result<Started>>,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    match launch(&req).await {
        Ok((container, started)) => {
            if ready.send(Ok(started)).is_err() {
                let _ = container.rm().await;
                return;
            }
            let _ = stop.await;
            if let Err(e) = container.rm().await {
                tracing::warn!("could not remove the PostgreSQL container: {e}");
                remove_owned(&req.token).await;
            }
        }
        Err(e) => {
            // A container created but never handed over (start failure,
            // timeout) is not removed by testcontainers: remove it here.
            remove_owned(&req.token).await;
            let _ = ready.send(Err(e));
        }
    }
}

/// Creates and starts the container for `req` and waits until it accepts a
/// connection with its password (within `req.timeout`).
///
/// # Errors
/// Docker cannot start it (see [`start_error`]), its port is not published,
/// it exits or does not accept connections in time (with its last log lines).
async fn launch(req: &Request) -> Result<(ContainerAsync<PostgresImage>, Started)> {
    let began = Instant::now();
    let container = PostgresImage::new(&req.image, &req.password, &req.settings)
        .with_label(OWNER_LABEL, &req.token)
        .with_label(PID_LABEL, std::process::id().to_string())
        .with_container_name(format!("locklab-pg{}-{}", req.major, req.token))
        .with_host_config_modifier(|hc| {
            // The data directory on a tmpfs: CREATE DATABASE copies ~300 files,
            // which is ~10x slower on an overlay file system (measured 365 ms
            // vs 28 ms), and every run creates one. Owned by the image's
            // postgres user (uid 999 in the official Debian images and ours).
            hc.tmpfs = Some(HashMap::from([(
                PGDATA.to_owned(),
                "rw,uid=999,gid=999,mode=0700".to_owned(),
            )]));
            // Loopback only, on a port Docker picks.
            hc.publish_all_ports = Some(false);
            hc.port_bindings = Some(HashMap::from([(
                "5432/tcp".to_owned(),
                Some(vec![PortBinding {
                    host_ip: Some("127.0.0.1".into()),
                    host_port: Some(String::new()),
                }]),
            )]));
        })
        .with_startup_timeout(req.timeout)
        .start()
        .await
        .map_err(|e| start_error(e, &req.image))?;
    let id = container.id().to_owned();
    let port = match container.get_host_port_ipv4(PORT).await {
        Ok(p) => p,
        Err(e) => {
            let _ = container.rm().await;
            return Err(anyhow!("the container's port 5432 is not published: {e}"));
        }
    };
    let spec = ConnectSpec {
        host: "127.0.0.1".into(),
        port,
        user: SUPERUSER.into(),
        password: Some(req.password.clone()),
        dbname: "postgres".into(),
        application_name: "locklab-ready".into(),
        options: Vec::new(),
    };
    let deadline = began + req.timeout;
    let mut last_error: String;
    loop {
        if !container.is_running().await.unwrap_or(false) {
            let code = container.exit_code().await.ok().flatten();
            let logs = last_log_lines(&container, 15).await;
            let _ = container.rm().await;
            bail!(
                "the PostgreSQL container (image {}) exited during start-up (exit code {}); its last log lines:\n{logs}",
                req.image,
                code.map_or("unknown".into(), |c| c.to_string())
            );
        }
        match tokio::time::timeout(Duration::from_secs(5), DirectConn::connect(&spec)).await {
            Ok(Ok(c)) => {
                c.close().await;
                let (host, port) = match direct_address(&container, &spec).await {
                    Some(ip) => (ip, PORT.as_u16()),
                    None => ("127.0.0.1".to_owned(), port),
                };
                return Ok((container, Started { id, host, port }));
            }
            Ok(Err(e)) => last_error = e.to_string(),
            Err(_) => last_error = "connect attempt timed out after 5 s".into(),
        }
        if Instant::now() >= deadline {
            let logs = last_log_lines(&container, 15).await;
            let _ = container.rm().await;
            bail!(
                "the PostgreSQL container (image {}) did not accept connections within {} s \
                 (last connection error: {last_error}); its last log lines:\n{logs}",
                req.image,
                req.timeout.as_secs()
            );
        }
        // Polling interval for a server that is still starting.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The container's own address on Docker's bridge network when a
/// connection to it from this host succeeds within a second, else `None`
/// (Docker Desktop, rootless Docker, a remote engine: then the published
/// port on loopback is used). On a Linux engine that address skips Docker's
/// userland proxy (`docker-proxy`), which copies every byte of every
/// connection through a process of its own: measured with `locklab bench`
/// (docs/src/speed.md), the proxy was most of the "rest" CPU of a cell.
async fn direct_address(container: &ContainerAsync<PostgresImage>, spec: &ConnectSpec) -> Option<String> {
    // testcontainers' `get_bridge_ip_address` looks the network up by the
    // container's network mode, which is `default`, not a network's name.
    let docker = Docker::connect_with_defaults().ok()?;
    let networks = docker
        .inspect_container(container.id(), None)
        .await
        .ok()?
        .network_settings?
        .networks?;
    let ip = networks
        .into_values()
        .filter_map(|n| n.ip_address)
        .find(|ip| !ip.is_empty())?;
    let mut probe = spec.clone();
    probe.host = ip;
    probe.port = PORT.as_u16();
    match tokio::time::timeout(Duration::from_secs(1), DirectConn::connect(&probe)).await {
        Ok(Ok(c)) => {
            c.close().await;
            Some(probe.host)
        }
        _ => None,
    }
}

fn start_error(e: TestcontainersError, image: &str) -> anyhow::Error {
    match e {
        TestcontainersError::Client(ClientError::PullImage { err, .. }) => anyhow!(
            "image {image} is not present and cannot be pulled ({err}); build a local image with \
             `just image` (harness/scripts/build-image.sh) or choose another with --image / LOCKLAB_PG_IMAGE"
        ),
        TestcontainersError::WaitContainer(_) => {
            anyhow!("Docker did not start the container from image {image} in time: {e}")
        }
        other => anyhow!("Docker could not start a container from image {image}: {other}"),
    }
}

/// The container's last `n` log lines, stdout and stderr interleaved as
/// Docker recorded them.
async fn last_log_lines(container: &ContainerAsync<PostgresImage>, n: usize) -> String {
    match Docker::connect_with_defaults() {
        Ok(docker) => log_lines(&docker, container.id(), n).await,
        Err(_) => "(logs unavailable: cannot reach the Docker engine)".into(),
    }
}

/// The last `n` non-empty log lines of container `id`, stdout and stderr
/// interleaved as Docker recorded them; `(no output)` when there are none.
pub(super) async fn log_lines(docker: &Docker, id: &str, n: usize) -> String {
    let opts = LogsOptionsBuilder::default()
        .stdout(true)
        .stderr(true)
        .tail(&n.to_string())
        .build();
    let mut text = String::new();
    let mut stream = docker.logs(id, Some(opts));
    while let Some(Ok(chunk)) = stream.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
    }
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return "(no output)".into();
    }
    lines[lines.len().saturating_sub(n)..].join("\n")
}
