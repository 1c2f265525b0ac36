//! The Docker engine: where it is, whether it answers, the one runtime all
//! Docker work of the process runs on, and removing a start's containers.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use testcontainers::bollard::Docker;
use testcontainers::bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};

use super::OWNER_LABEL;

/// The one runtime all Docker work runs on, for the life of the process.
/// testcontainers shares one Docker client (one HTTP connection pool) between
/// all containers alive at a time, and a pooled connection belongs to the
/// runtime that opened it; with one runtime per container, a container's
/// removal could fail once another container's runtime had ended.
pub(super) fn docker_runtime() -> Result<&'static tokio::runtime::Runtime> {
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

/// Removes every container labelled with this start's token (best effort).
pub(super) async fn remove_owned(token: &str) {
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
