//! What the cells of one matrix run share to save the server work
//! ([`crate::matrix::run_shard`]): run databases that earlier cells left
//! clean, each with its monitor connection, and their admin connections (to
//! the administration database). A connection is a backend forked, started
//! and ended: on a short cell the largest part of the server's CPU
//! (`perf`: `locklab bench` in docs/src/speed.md).
//!
//! The scope is one run on one tokio runtime: a connection's task lives on
//! the runtime that opened it, so nothing here outlives the run
//! ([`Sharing::finish`] drops the databases and closes the connections).

use std::collections::HashMap;
use std::sync::Mutex;

use anyhow::Result;
use locklab_drivers::DirectConn;

use crate::server::Server;

/// The harness's monitor connection to a run database, and its backend pid
/// (which the leak guard leaves out of what it counts as left behind).
pub(super) struct Monitor {
    /// The connection, idle.
    pub(super) conn: DirectConn,
    /// Its backend's pid.
    pub(super) pid: i32,
}

/// A clean run database an earlier cell left, with its monitor when that
/// cell kept it open.
pub(super) struct SharedDatabase {
    /// The database's name.
    pub(super) name: String,
    /// Its monitor connection, idle, when kept.
    pub(super) monitor: Option<Monitor>,
}

/// The run databases and admin connections that the cells of one run
/// leave for each other, per server (by [`Server::id`]).
#[derive(Default)]
pub struct Sharing {
    /// Clean run databases: server id → databases.
    databases: Mutex<HashMap<String, Vec<SharedDatabase>>>,
    /// Idle admin connections: server id → connections with no statement in flight.
    admins: Mutex<HashMap<String, Vec<DirectConn>>>,
}

impl Sharing {
    /// Nothing shared yet.
    pub fn new() -> Sharing {
        Sharing::default()
    }

    /// What is shared so far, taken out (this one is left empty): for a
    /// `Sharing` kept in a static, whose [`Sharing::finish`] needs it owned.
    pub fn take(&self) -> Sharing {
        Sharing {
            databases: Mutex::new(std::mem::take(&mut *lock(&self.databases))),
            admins: Mutex::new(std::mem::take(&mut *lock(&self.admins))),
        }
    }

    /// A clean run database an earlier cell left on `server`, if any (taken:
    /// no other cell gets it until it is put back).
    pub(super) fn take_database(&self, server: &Server) -> Option<SharedDatabase> {
        lock(&self.databases).get_mut(&server.id()).and_then(Vec::pop)
    }

    /// Leaves run database `db` (with its idle monitor, if kept) on `server`
    /// for a later cell: the caller has checked that it is clean (the leak
    /// guard found nothing in it but the monitor, and the scenario created
    /// nothing in it).
    pub(super) fn put_database(&self, server: &Server, db: SharedDatabase) {
        lock(&self.databases).entry(server.id()).or_default().push(db);
    }

    /// An admin connection to `server`: an idle one an earlier cell gave back
    /// if one is still open, else a new one ([`Server::admin`]).
    ///
    /// # Errors
    /// As [`Server::admin`].
    pub(super) async fn lease_admin(&self, server: &Server) -> Result<DirectConn> {
        loop {
            let idle = lock(&self.admins).get_mut(&server.id()).and_then(Vec::pop);
            match idle {
                Some(conn) if !conn.client().is_closed() => return Ok(conn),
                Some(conn) => conn.close().await,
                None => return server.admin().await,
            }
        }
    }

    /// Keeps `conn`, an admin connection to `server` with no statement in
    /// flight, for a later cell.
    pub(super) fn give_back_admin(&self, server: &Server, conn: DirectConn) {
        lock(&self.admins).entry(server.id()).or_default().push(conn);
    }

    /// The end of the run: closes the spare databases' monitors, drops the
    /// databases and closes the idle admin connections of every server in `servers`. Returns how many
    /// databases were dropped.
    ///
    /// # Errors
    /// No connection to a server; the first database that could not be
    /// dropped (the others are still tried).
    pub async fn finish<'a>(self, servers: impl IntoIterator<Item = &'a Server>) -> Result<usize, String> {
        let mut databases = self.databases.into_inner().unwrap_or_else(|e| e.into_inner());
        let admins = self.admins.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut dropped = 0;
        let mut first_error = None;
        for server in servers {
            let spare = databases.remove(&server.id()).unwrap_or_default();
            if spare.is_empty() {
                continue;
            }
            let mut names = Vec::with_capacity(spare.len());
            for db in spare {
                if let Some(m) = db.monitor {
                    m.conn.close().await;
                }
                names.push(db.name);
            }
            let admin = match server.admin().await {
                Ok(admin) => admin,
                Err(e) => {
                    first_error.get_or_insert(format!("cannot connect to {}: {e:#}", server.id()));
                    continue;
                }
            };
            for db in &names {
                match super::database::drop_database(&admin, db).await {
                    Ok(()) => dropped += 1,
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            admin.close().await;
        }
        for conn in admins.into_values().flatten() {
            conn.close().await;
        }
        // Those of servers not in `servers` (none in a run that gives them all).
        for db in databases.into_values().flatten() {
            if let Some(m) = db.monitor {
                m.conn.close().await;
            }
        }
        first_error.map_or(Ok(dropped), Err)
    }
}

/// The map behind `m`, also after a panic while it was held (what it holds
/// stays consistent: names and connections are pushed and popped whole).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
