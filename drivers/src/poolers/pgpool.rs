//! Pgpool-II from Debian 13's package (4.6), in a container: one backend,
//! `connection_cache = on`, the configuration it is used as a pooler with
//! (Pgpool-II docs, "Connection Pooling").
//!
//! - No transaction pooling: its connection cache gives a client a server
//!   connection for the client's whole connection.
//! - Each of its child processes caches its own server connections, so a
//!   new client connection may get another one than the last client had
//!   (Pgpool-II docs, "Connection Pooling").
//! - Settings pass: the client's startup packet, `options` included, goes
//!   to the server connection made for it (seen here: a client's `-c
//!   lock_timeout=1234ms` read back, `harness/tests/server.rs`).
//! - No command closes its server connections to one database: the harness
//!   ends them from the server.

use super::{CancelRequests, CheckIn, Column, Facts, Pooled, PoolerMode};

/// What is true of Pgpool-II.
pub(super) const FACTS: Facts = Facts {
    id: "pgpool",
    product: "Pgpool-II",
    in_container: true,
    readings_vary: false,
    closes_client_connections: false,
    closes_server_connections_on_request: false,
    one_instance_per_database: false,
    cancel: CancelRequests::Sent,
    transaction_pooling: false,
    session_backend_varies: true,
    settings_pass: true,
    columns: &[Column {
        mode: PoolerMode::Session,
        check_in: CheckIn::Default,
        models: &[],
        id: "pgpool",
        configuration: "Pgpool-II connection_cache=on, one backend; tokio-postgres, no pool",
        sqlx: Some(Pooled {
            id: "pgpool+sqlx",
            configuration: "Pgpool-II connection_cache=on, one backend; sqlx 0.9 PgPool defaults",
        }),
        pooled: Some(Pooled {
            id: "pgpool+deadpool",
            configuration: "Pgpool-II connection_cache=on, one backend; deadpool-postgres RecyclingMethod::Fast",
        }),
    }],
};
