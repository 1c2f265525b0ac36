//! A service's bb8 pool, as its `main` configures it, and the release path
//! its requests take.
//!
//! bb8 runs nothing when a connection goes back (`PooledConnection`'s drop
//! puts it back as it is, bb8 `src/api.rs`; a `connection_customizer`'s
//! `on_acquire` runs only on a new connection): a session-level advisory
//! lock a request forgot to unlock stays held by the idle connection, for
//! the next request that gets it. So the unlock is the service's own,
//! before the connection goes back ([`unlock_before_return`]).

use bb8::Builder;
use bb8_postgres::PostgresConnectionManager;
use tokio_postgres::{Client, NoTls};

/// The service's pool settings: a connection tested on checkout (bb8's
/// default, said so that a reader sees it). The size and timeouts are the
/// caller's.
pub fn configure(builder: Builder<PostgresConnectionManager<NoTls>>) -> Builder<PostgresConnectionManager<NoTls>> {
    builder.test_on_check_out(true)
}

/// What the service runs on a checked-out connection before dropping it
/// back into the pool: ends every session-level advisory lock the request
/// still holds (`pg_advisory_unlock_all()`, PostgreSQL docs §9.28.10).
///
/// # Errors
/// The statement's error (the connection is then broken: bb8's test on
/// the next checkout replaces it).
pub async fn unlock_before_return(client: &Client) -> Result<(), tokio_postgres::Error> {
    client.batch_execute("select pg_advisory_unlock_all()").await
}
