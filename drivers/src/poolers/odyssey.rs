//! Odyssey from Debian sid's package (1.5.2; no other Debian release has
//! it), in the pooler image's container: one route for every database and
//! user, `pool "session"` or `pool "transaction"`, its reset defaults
//! (`pool_discard yes`: `DISCARD ALL` when a server connection goes back to
//! the pool; `pool_rollback yes`) (Odyssey docs, "Rules").
//!
//! - Readings vary by nature: over three repeats of the committed report,
//!   25 cells of its columns read different values, e.g.
//!   `next_checkout_same_backend` true once, false twice (seen here).
//! - Settings pass, in both modes: a client's `options` reach the server
//!   connection it is attached to, one made for another client too (seen
//!   here: `-c lock_timeout=1234ms` read back on server connections other
//!   clients had used, `harness/tests/server.rs`).
//! - No command closes its server connections to one database: the harness
//!   ends them from the server.

use super::{CancelRequests, CheckIn, Column, Facts, Pooled, PoolerMode};

/// What is true of Odyssey.
pub(super) const FACTS: Facts = Facts {
    id: "odyssey",
    product: "Odyssey",
    in_container: true,
    readings_vary: true,
    closes_client_connections: false,
    closes_server_connections_on_request: false,
    one_instance_per_database: false,
    cancel: CancelRequests::Sent,
    transaction_pooling: true,
    session_backend_varies: false,
    settings_pass: true,
    columns: &[
        Column {
            mode: PoolerMode::Session,
            check_in: CheckIn::Default,
            models: &[],
            id: "odyssey-session",
            configuration: "Odyssey pool \"session\" (pool_discard, pool_rollback: its defaults); tokio-postgres, no pool",
            sqlx: None,
            pooled: Some(Pooled {
                id: "odyssey-session+deadpool",
                configuration: "Odyssey pool \"session\" (pool_discard, pool_rollback: its defaults); deadpool-postgres RecyclingMethod::Fast",
            }),
        },
        Column {
            mode: PoolerMode::Transaction,
            check_in: CheckIn::Default,
            models: &[],
            id: "odyssey-transaction",
            configuration: "Odyssey pool \"transaction\" (pool_discard, pool_rollback: its defaults); tokio-postgres, no pool",
            sqlx: Some(Pooled {
                id: "odyssey-transaction+sqlx",
                configuration: "Odyssey pool \"transaction\" (pool_discard, pool_rollback: its defaults); sqlx 0.9 PgPool defaults",
            }),
            pooled: Some(Pooled {
                id: "odyssey-transaction+deadpool",
                configuration: "Odyssey pool \"transaction\" (pool_discard, pool_rollback: its defaults); deadpool-postgres RecyclingMethod::Fast",
            }),
        },
    ],
};
