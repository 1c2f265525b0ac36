//! The server of their own that fault cells run on.
//!
//! A cell with a `network: namespace` actor must reach the server from the
//! run's network namespace, without a userspace proxy in between (a
//! container's published port goes through docker-proxy, whose kernel would
//! keep the server's side of a cut connection alive). So such cells run on a
//! local cluster of the same major version as the cell's server, started on
//! first use, once per process and major, listening on `127.0.0.1` and on the
//! namespace's host address only, and trusting connections from the
//! namespace's address only (`pg_hba.conf`). Its cleanup is the local
//! backend's (a watchdog removes it when the process ends).

use std::collections::HashMap;
use std::sync::OnceLock;

use super::netns::Namespace;
use crate::server::{BackendChoice, Server, ServerOptions};

/// The fault server for cells of `server`'s major version, started on first
/// call (concurrent callers wait for the one start).
///
/// # Errors
/// The namespace cannot be made ([`Namespace::get`]) or the cluster cannot
/// start (binaries cannot be installed, `initdb` fails…).
pub async fn for_major(major: u32) -> Result<&'static Server, String> {
    static SERVERS: OnceLock<tokio::sync::Mutex<HashMap<u32, Result<&'static Server, String>>>> = OnceLock::new();
    let mut servers = SERVERS.get_or_init(Default::default).lock().await;
    if let Some(s) = servers.get(&major) {
        return s.clone();
    }
    let started = start(major).await;
    servers.insert(major, started.clone());
    started
}

/// The start of a [`for_major`] error when the namespace could not be made
/// (the machine cannot: its cells are not applicable, not failed).
pub const NO_NAMESPACE: &str = "no network namespace: ";

async fn start(major: u32) -> Result<&'static Server, String> {
    let ns = tokio::task::spawn_blocking(Namespace::get)
        .await
        .map_err(|e| format!("{NO_NAMESPACE}its set-up panicked: {e}"))?
        .map_err(|e| format!("{NO_NAMESPACE}{e}"))?;
    let opts = options(ns, major);
    let server = tokio::task::spawn_blocking(move || Server::start(&opts))
        .await
        .map_err(|e| format!("the fault server's start-up panicked: {e}"))?
        .map_err(|e| format!("cannot start the fault cells' local cluster (PostgreSQL {major}): {e:#}"))?;
    let server: &'static Server = Box::leak(Box::new(server));
    Ok(server)
}

/// The fault server's options: the local backend, `major`, listening on
/// loopback and the namespace's host address, trusting the namespace's
/// address.
pub fn options(ns: &Namespace, major: u32) -> ServerOptions {
    let mut opts = ServerOptions::new(BackendChoice::Local, major);
    opts.settings = vec![format!("listen_addresses=127.0.0.1,{}", ns.host_addr())];
    opts.hba_lines = vec![format!("host all all {}/32 trust", ns.peer_addr())];
    opts
}
