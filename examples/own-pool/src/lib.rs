//! The pool configuration of a service: what its `main` uses, and what its
//! tests (`tests/scenarios.rs`) put through locklab's scenarios.

use sqlx::postgres::PgPoolOptions;

/// The service's pool options: whatever it sets, plus an `after_release`
/// hook that ends every session-level advisory lock a request forgot to
/// unlock before its connection goes back to the pool
/// (`pg_advisory_unlock_all()`, PostgreSQL docs §9.28.10; sqlx
/// `PgPoolOptions::after_release`). The connection is kept when the hook
/// succeeds.
pub fn with_unlock_on_return(options: PgPoolOptions) -> PgPoolOptions {
    options.after_release(|conn, _meta| {
        Box::pin(async move {
            sqlx::raw_sql("select pg_advisory_unlock_all()")
                .execute(&mut *conn)
                .await?;
            Ok(true)
        })
    })
}
