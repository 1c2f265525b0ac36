//! `bb8` with `bb8-postgres`: defaults (`test_on_check_out = true`, which runs an
//! empty simple query on checkout; bb8 `src/api.rs`), nothing on return.

use async_trait::async_trait;
use bb8::{PooledConnection, RunError};
use bb8_postgres::PostgresConnectionManager;
use tokio_postgres::NoTls;

use crate::direct::{ClientGuard, DropReturns};
use crate::{Conn, ConnectSpec, Driver, DriverError, DriverInfo, DriverKind, Pool, PoolOptions, crate_version};

type Manager = PostgresConnectionManager<NoTls>;

/// bb8 + bb8-postgres with the builder's defaults.
pub struct Bb8Postgres;

struct Bb8Pool(bb8::Pool<Manager>);

impl ClientGuard for PooledConnection<'static, Manager> {
    // PooledConnection::drop calls put_back synchronously (bb8 src/api.rs).
    fn client(&self) -> &tokio_postgres::Client {
        self
    }
}

fn run_error(e: RunError<tokio_postgres::Error>) -> DriverError {
    match e {
        RunError::User(e) => e.into(),
        RunError::TimedOut => DriverError::Client("bb8: timed out waiting for a connection".into()),
    }
}

#[async_trait]
impl Pool for Bb8Pool {
    async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError> {
        Ok(Box::new(DropReturns(self.0.get_owned().await.map_err(run_error)?)))
    }

    async fn close(&self) {}
}

#[async_trait]
impl Driver for Bb8Postgres {
    fn info(&self) -> DriverInfo {
        DriverInfo {
            id: "bb8",
            crate_name: "bb8-postgres",
            crate_version: format!("{} (bb8 {})", crate_version("bb8-postgres"), crate_version("bb8")),
            configuration: "Builder defaults (test_on_check_out = true)",
            kind: DriverKind::Pooled,
            pooler: None,
        }
    }

    async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
        let manager = PostgresConnectionManager::new(spec.tokio_postgres_config(), NoTls);
        let pool = bb8::Pool::builder()
            .max_size(opts.max_size)
            .connection_timeout(opts.checkout_timeout)
            .build(manager)
            .await?;
        Ok(Box::new(Bb8Pool(pool)))
    }
}
