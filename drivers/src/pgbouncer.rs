//! Configurations that reach the server through PgBouncer. The harness starts
//! PgBouncer (Debian's package) in front of the server in the mode the
//! configuration names and hands the inner driver a [`ConnectSpec`] pointing at
//! it; the inner driver (tokio-postgres without a pool, or a pool) is unchanged.
//!
//! A client connection that closes does not end its server connection: in
//! session mode PgBouncer runs `server_reset_query` (default `DISCARD ALL`,
//! which includes `pg_advisory_unlock_all()`) and keeps the server connection;
//! in transaction mode the server connection goes back to PgBouncer's pool at
//! every transaction end, with no reset (PgBouncer docs, "pool_mode",
//! "server_reset_query").

use async_trait::async_trait;

use crate::{
    Canceller, Conn, ConnectSpec, Driver, DriverError, DriverInfo, GuardEnd, Pool, PoolOptions, Returned, Rows,
};

/// PgBouncer's `pool_mode` (PgBouncer docs, "pool_mode").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolerMode {
    /// A server connection is assigned to a client for the client's whole
    /// connection.
    Session,
    /// A server connection is assigned to a client for one transaction (a
    /// statement outside a transaction block is a transaction).
    Transaction,
}

impl PoolerMode {
    /// `"session"` or `"transaction"`, as in `pool_mode`.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolerMode::Session => "session",
            PoolerMode::Transaction => "transaction",
        }
    }
}

/// An inner driver behind PgBouncer in one mode.
pub struct ViaPgBouncer {
    id: &'static str,
    configuration: &'static str,
    mode: PoolerMode,
    inner: Box<dyn Driver>,
}

impl ViaPgBouncer {
    /// `inner` through PgBouncer in `mode`; `id` is the report column,
    /// `configuration` says both layers in their own terms.
    pub fn new(
        id: &'static str,
        configuration: &'static str,
        mode: PoolerMode,
        inner: impl Driver + 'static,
    ) -> ViaPgBouncer {
        ViaPgBouncer {
            id,
            configuration,
            mode,
            inner: Box::new(inner),
        }
    }
}

struct BouncedPool(Box<dyn Pool>);

struct BouncedConn(Box<dyn Conn>);

#[async_trait]
impl Conn for BouncedConn {
    async fn simple_query(&mut self, sql: &str) -> Result<Rows, DriverError> {
        self.0.simple_query(sql).await
    }

    async fn give_back(self: Box<Self>) -> Returned {
        // A closed client connection leaves its server connection in
        // PgBouncer's pool: for the server, the connection went back to a pool.
        match self.0.give_back().await {
            Returned::Closed => Returned::ToPooler,
            other => other,
        }
    }

    fn canceller(&self) -> Option<Canceller> {
        // No cancel requests through PgBouncer: with 1.18 (Debian 12) ours had
        // no effect within 1 s in session mode, and in transaction mode
        // PgBouncer exited ("FATAL … disconnect_client(): bad client state"),
        // taking every later run of the report with it.
        None
    }

    fn no_cancel_reason(&self) -> &'static str {
        "not sent through PgBouncer"
    }

    async fn advisory_lock_guard(&mut self, key: i64, end: GuardEnd) -> Result<(), DriverError> {
        self.0.advisory_lock_guard(key, end).await
    }
}

#[async_trait]
impl Pool for BouncedPool {
    async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError> {
        Ok(Box::new(BouncedConn(self.0.checkout().await?)))
    }

    async fn close(&self) {
        self.0.close().await;
    }
}

#[async_trait]
impl Driver for ViaPgBouncer {
    fn info(&self) -> DriverInfo {
        let inner = self.inner.info();
        DriverInfo {
            id: self.id,
            crate_name: inner.crate_name,
            crate_version: inner.crate_version,
            configuration: self.configuration,
            kind: crate::DriverKind::Pooled,
            pooler: Some(self.mode),
        }
    }

    async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
        Ok(Box::new(BouncedPool(self.inner.pool(spec, opts).await?)))
    }
}
