//! A service's deadpool-postgres pool, as its `main` builds it, and the
//! release path its requests take.
//!
//! deadpool runs its hooks (`post_recycle`, and the recycling method's
//! statements) when a connection is next checked out, never when it goes
//! back (deadpool `src/managed/mod.rs`, `Pool::get`): a session-level
//! advisory lock a request forgot to unlock stays held by the idle
//! connection until then. So the unlock must be the service's own, before
//! the connection goes back ([`unlock_before_return`]).

use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Pool, PoolBuilder, RecyclingMethod};
use tokio_postgres::{Client, NoTls};

/// The service's pool builder: the default recycling method and a
/// `post_recycle` hook that ends every session-level advisory lock left on
/// a connection (`pg_advisory_unlock_all()`, PostgreSQL docs §9.28.10), at
/// its next checkout. The size and timeouts are the caller's.
pub fn pool_builder(config: tokio_postgres::Config) -> PoolBuilder {
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager).post_recycle(Hook::async_fn(|client, _metrics| {
        Box::pin(async move {
            client
                .batch_execute("select pg_advisory_unlock_all()")
                .await
                .map_err(|e| HookError::message(e.to_string()))
        })
    }))
}

/// What the service runs on a checked-out connection before dropping it
/// back into the pool: ends every session-level advisory lock the request
/// still holds, so none outlives the request on the idle connection.
///
/// # Errors
/// The statement's error (the connection is then broken: deadpool's
/// next checkout of it fails its recycle check and replaces it).
pub async fn unlock_before_return(client: &Client) -> Result<(), tokio_postgres::Error> {
    client.batch_execute("select pg_advisory_unlock_all()").await
}
