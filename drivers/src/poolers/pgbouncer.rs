//! PgBouncer from Debian 12's package (1.18), unpacked and run as a process
//! of the harness (`locklab::server`'s `pgbouncer` module).
//!
//! - Cancel requests: not sent. Through 1.18, ours had no effect within 1 s
//!   in session mode, and in transaction mode PgBouncer exited ("FATAL …
//!   disconnect_client(): bad client state"), taking every later run of the
//!   report with it (seen here).
//! - Settings: 1.18 refuses the `options` startup parameter that carries
//!   connection settings ("unsupported startup parameter: options"; PgBouncer
//!   docs, "ignore_startup_parameters"; seen here, `harness/tests/server.rs`).
//! - Its console's `KILL db` / `RESUME db` close its server connections to
//!   one database on request (PgBouncer docs, "Process controlling commands").

use super::{CancelRequests, Column, Facts, PoolerMode};

/// What is true of Debian 12's PgBouncer.
pub(super) const FACTS: Facts = Facts {
    id: "pgbouncer",
    product: "PgBouncer",
    in_container: false,
    readings_vary: false,
    closes_client_connections: false,
    closes_server_connections_on_request: true,
    one_instance_per_database: false,
    cancel: CancelRequests::NotSent("not sent through PgBouncer 1.18"),
    transaction_pooling: true,
    session_backend_varies: false,
    settings_pass: false,
    columns: &[
        Column {
            mode: PoolerMode::Session,
            id: "pgbouncer-session",
            configuration: "PgBouncer pool_mode=session; tokio-postgres, no pool",
            pooled_id: "pgbouncer-session+deadpool",
            pooled_configuration: "PgBouncer pool_mode=session; deadpool-postgres RecyclingMethod::Fast",
        },
        Column {
            mode: PoolerMode::Transaction,
            id: "pgbouncer-transaction",
            configuration: "PgBouncer pool_mode=transaction; tokio-postgres, no pool",
            pooled_id: "pgbouncer-transaction+deadpool",
            pooled_configuration: "PgBouncer pool_mode=transaction; deadpool-postgres RecyclingMethod::Fast",
        },
    ],
};
