//! PgBouncer from Debian 13's package (1.24), in a container of the pooler
//! image (`harness/scripts/build-pooler-image.sh`), configured as Debian
//! 12's ([`super::pgbouncer`]).
//!
//! - Cancel requests: sent (1.24 forwards them to the server connection the
//!   client is linked to; PgBouncer docs, "Cancel requests").
//! - Settings: 1.24 takes the `options` startup parameter only for the
//!   parameters it tracks (`track_extra_parameters`; PgBouncer docs) and
//!   refuses others: "unsupported startup parameter in options:
//!   lock_timeout" (seen here, `harness/tests/server.rs`).
//! - Its console's `KILL db` / `RESUME db` close its server connections to
//!   one database on request (PgBouncer docs, "Process controlling commands").

use super::{CancelRequests, CheckIn, Column, Facts, Pooled, PoolerMode};

/// What is true of Debian 13's PgBouncer.
pub(super) const FACTS: Facts = Facts {
    id: "pgbouncer-trixie",
    product: "PgBouncer",
    in_container: true,
    readings_vary: false,
    closes_client_connections: false,
    closes_server_connections_on_request: true,
    one_instance_per_database: false,
    cancel: CancelRequests::Sent,
    transaction_pooling: true,
    session_backend_varies: false,
    settings_pass: false,
    columns: &[
        Column {
            mode: PoolerMode::Session,
            check_in: CheckIn::Default,
            models: &[],
            id: "pgbouncer-trixie-session",
            configuration: "PgBouncer (Debian 13, container) pool_mode=session; tokio-postgres, no pool",
            sqlx: None,
            pooled: Some(Pooled {
                id: "pgbouncer-trixie-session+deadpool",
                configuration: "PgBouncer (Debian 13, container) pool_mode=session; deadpool-postgres RecyclingMethod::Fast",
            }),
        },
        Column {
            mode: PoolerMode::Transaction,
            check_in: CheckIn::Default,
            models: &[],
            id: "pgbouncer-trixie-transaction",
            configuration: "PgBouncer (Debian 13, container) pool_mode=transaction; tokio-postgres, no pool",
            sqlx: Some(Pooled {
                id: "pgbouncer-trixie-transaction+sqlx",
                configuration: "PgBouncer (Debian 13, container) pool_mode=transaction (max_prepared_statements 200, its default since 1.22: sqlx's named statements pass); sqlx 0.9 PgPool defaults",
            }),
            pooled: Some(Pooled {
                id: "pgbouncer-trixie-transaction+deadpool",
                configuration: "PgBouncer (Debian 13, container) pool_mode=transaction; deadpool-postgres RecyclingMethod::Fast",
            }),
        },
    ],
};
