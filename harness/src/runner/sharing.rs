//! What the cells of one matrix run share to save the server work
//! ([`crate::matrix::run_shard`]): run databases that earlier cells left
//! clean, and their admin connections (to the administration database).
//!
//! The scope is one run on one tokio runtime: a connection's task lives on
//! the runtime that opened it, so nothing here outlives the run
//! ([`Sharing::finish`] drops the databases and closes the connections).

use std::collections::HashMap;
use std::sync::Mutex;

use anyhow::Result;
use locklab_drivers::DirectConn;

use crate::server::Server;

/// The run databases and admin connections that the cells of one run
/// leave for each other, per server (by [`Server::id`]).
#[derive(Default)]
pub struct Sharing {
    /// Clean run databases: server id → names.
    databases: Mutex<HashMap<String, Vec<String>>>,
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
    pub(super) fn take_database(&self, server: &Server) -> Option<String> {
        lock(&self.databases).get_mut(&server.id()).and_then(Vec::pop)
    }

    /// Leaves run database `db` on `server` for a later cell: the caller has
    /// checked that it is clean (the leak guard found nothing in it, and the
    /// scenario created nothing in it).
    pub(super) fn put_database(&self, server: &Server, db: String) {
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

    /// The end of the run: drops the spare databases and closes the idle
    /// admin connections of every server in `servers`. Returns how many
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
            let admin = match server.admin().await {
                Ok(admin) => admin,
                Err(e) => {
                    first_error.get_or_insert(format!("cannot connect to {}: {e:#}", server.id()));
                    continue;
                }
            };
            for db in &spare {
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
        first_error.map_or(Ok(dropped), Err)
    }
}

/// The map behind `m`, also after a panic while it was held (what it holds
/// stays consistent: names and connections are pushed and popped whole).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
