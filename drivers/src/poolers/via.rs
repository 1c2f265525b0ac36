//! [`ViaPooler`]: an inner driver (tokio-postgres without a pool, or a
//! pool) whose connections go through a pooler, and what that changes for
//! a return and a cancel request.

use async_trait::async_trait;

use super::Pooler;
use crate::{
    Canceller, Conn, ConnectSpec, Driver, DriverError, DriverInfo, GuardAcquire, GuardEnd, Pool, PoolOptions, Returned,
    Rows,
};

/// An inner driver behind a pooler in one mode.
pub struct ViaPooler {
    id: &'static str,
    configuration: &'static str,
    pooler: Pooler,
    inner: Box<dyn Driver>,
}

impl ViaPooler {
    /// `inner` through `pooler`; `id` is the report column, `configuration`
    /// says both layers in their own terms.
    pub fn new(
        id: &'static str,
        configuration: &'static str,
        pooler: Pooler,
        inner: impl Driver + 'static,
    ) -> ViaPooler {
        ViaPooler {
            id,
            configuration,
            pooler,
            inner: Box::new(inner),
        }
    }
}

/// The client's pool, the pooler it goes through, and the lock libraries
/// on a sqlx 0.8 pool of their own through that pooler.
struct BouncedPool(Box<dyn Pool>, Pooler, Option<crate::libraries::LibraryPool>);

struct BouncedConn(Box<dyn Conn>, Pooler);

#[async_trait]
impl Conn for BouncedConn {
    async fn simple_query(&mut self, sql: &str) -> Result<Rows, DriverError> {
        self.0.simple_query(sql).await
    }

    async fn extended_query(&mut self, sql: &str, params: &[crate::Param]) -> Result<Rows, DriverError> {
        self.0.extended_query(sql, params).await
    }

    async fn give_back(self: Box<Self>) -> Returned {
        // A closed client connection leaves its server connection in
        // the pooler's pool: for the server, the connection went back to a pool.
        match self.0.give_back().await {
            Returned::Closed => Returned::ToPooler,
            other => other,
        }
    }

    fn canceller(&self) -> Option<Canceller> {
        // The inner driver's cancel request goes to the address it
        // connected to: the pooler's (see `PoolerKind::sends_cancel`).
        if self.1.sends_cancel() {
            self.0.canceller()
        } else {
            None
        }
    }

    fn no_cancel_reason(&self) -> &'static str {
        self.1.no_cancel_reason().unwrap_or_else(|| self.0.no_cancel_reason())
    }

    async fn advisory_lock_guard(
        &mut self,
        key: i64,
        acquire: GuardAcquire,
        end: GuardEnd,
    ) -> Result<bool, DriverError> {
        self.0.advisory_lock_guard(key, acquire, end).await
    }
}

#[async_trait]
impl Pool for BouncedPool {
    async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError> {
        Ok(Box::new(BouncedConn(self.0.checkout().await?, self.1)))
    }

    /// A lock library through the pooler: on a sqlx 0.8 pool of the
    /// scenario's size pointed at the pooler (the libraries take one).
    async fn library(
        &self,
        library: crate::libraries::Library,
        call: &crate::libraries::LibraryCall,
    ) -> Result<String, DriverError> {
        match &self.2 {
            Some(l) => l.call(library, call).await,
            None => Err(DriverError::Unsupported(format!(
                "{} takes a sqlx 0.8 PgPool",
                library.as_str()
            ))),
        }
    }

    async fn close(&self) {
        if let Some(l) = &self.2 {
            l.close(true).await;
        }
        self.0.close().await;
    }
}

#[async_trait]
impl Driver for ViaPooler {
    fn info(&self) -> DriverInfo {
        let inner = self.inner.info();
        DriverInfo {
            id: self.id,
            crate_name: inner.crate_name,
            crate_version: inner.crate_version,
            configuration: self.configuration,
            kind: crate::DriverKind::Pooled,
            pooler: Some(self.pooler),
            // A pooler relays the server's notices; whether they reach the
            // caller is up to the client in front of it.
            notices: inner.notices,
        }
    }

    fn extended_protocol(&self) -> Result<(), &'static str> {
        self.inner.extended_protocol()
    }

    async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
        Ok(Box::new(BouncedPool(
            self.inner.pool(spec, opts).await?,
            self.pooler,
            crate::libraries::LibraryPool::connecting(spec, opts),
        )))
    }
}
