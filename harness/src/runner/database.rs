//! The run's databases themselves: dropping one (the phases' and the
//! shared databases' clean-up both do).

use locklab_drivers::DirectConn;

use super::{CLEANUP_QUERY_TIMEOUT, driver_text};

/// `drop database … with (force)`, with its deadline.
///
/// # Errors
/// No answer in time, or the server's error.
pub(super) async fn drop_database(admin: &DirectConn, db: &str) -> Result<(), String> {
    tokio::time::timeout(
        CLEANUP_QUERY_TIMEOUT,
        admin
            .client()
            .simple_query(&format!("drop database if exists \"{db}\" with (force)")),
    )
    .await
    .map_err(|_| format!("no answer within {} s", CLEANUP_QUERY_TIMEOUT.as_secs()))
    .and_then(|r| r.map_err(driver_text))
    .map(|_| ())
    .map_err(|e| format!("cannot drop database {db}: {e}"))
}
