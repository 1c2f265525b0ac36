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

use super::check_in::{
    PG_DOORMAN_SESSION, PG_DOORMAN_TRANSACTION, PGBOUNCER_RESET_ALWAYS, PGBOUNCER_SESSION, PGBOUNCER_TRANSACTION,
    PGCAT_SESSION, PGCAT_TRANSACTION, SUPAVISOR_SESSION, SUPAVISOR_TRANSACTION,
};
use super::{CancelRequests, CheckIn, Column, Facts, Pooled, PoolerMode};

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
            check_in: CheckIn::Default,
            models: &[PGBOUNCER_SESSION, SUPAVISOR_SESSION],
            id: "pgbouncer-session",
            configuration: "PgBouncer pool_mode=session; tokio-postgres, no pool",
            sqlx: Some(Pooled {
                id: "pgbouncer-session+sqlx",
                configuration: "PgBouncer pool_mode=session; sqlx 0.9 PgPool defaults",
            }),
            pooled: Some(Pooled {
                id: "pgbouncer-session+deadpool",
                configuration: "PgBouncer pool_mode=session; deadpool-postgres RecyclingMethod::Fast",
            }),
        },
        Column {
            mode: PoolerMode::Transaction,
            check_in: CheckIn::Default,
            models: &[PGBOUNCER_TRANSACTION, SUPAVISOR_TRANSACTION],
            id: "pgbouncer-transaction",
            configuration: "PgBouncer pool_mode=transaction; tokio-postgres, no pool",
            sqlx: Some(Pooled {
                id: "pgbouncer-transaction+sqlx",
                configuration: "PgBouncer pool_mode=transaction; sqlx 0.9 PgPool defaults",
            }),
            pooled: Some(Pooled {
                id: "pgbouncer-transaction+deadpool",
                configuration: "PgBouncer pool_mode=transaction; deadpool-postgres RecyclingMethod::Fast",
            }),
        },
        // The check-in of other poolers, as PgBouncer settings (see
        // `check_in.rs`): one column each, without a client-side pool (a
        // pool would keep its client connections, so no check-in happens).
        Column {
            mode: PoolerMode::Session,
            check_in: CheckIn::ResetKeepingLocks,
            models: &[PGCAT_SESSION, PG_DOORMAN_SESSION],
            id: "pgbouncer-session-reset-all",
            configuration: "PgBouncer pool_mode=session, server_reset_query='RESET ROLE; RESET ALL; DEALLOCATE ALL; CLOSE ALL;' (PgCat's and pg_doorman's check-in); tokio-postgres, no pool",
            sqlx: None,
            pooled: None,
        },
        Column {
            mode: PoolerMode::Transaction,
            check_in: CheckIn::ResetKeepingLocks,
            models: &[PGCAT_TRANSACTION, PG_DOORMAN_TRANSACTION],
            id: "pgbouncer-transaction-reset-all",
            configuration: "PgBouncer pool_mode=transaction, server_reset_query='RESET ROLE; RESET ALL; DEALLOCATE ALL; CLOSE ALL;', server_reset_query_always=1 (PgCat's and pg_doorman's check-in); tokio-postgres, no pool",
            sqlx: None,
            pooled: None,
        },
        Column {
            mode: PoolerMode::Transaction,
            check_in: CheckIn::DiscardAlways,
            models: &[PGBOUNCER_RESET_ALWAYS],
            id: "pgbouncer-transaction-discard-always",
            configuration: "PgBouncer pool_mode=transaction, server_reset_query=DISCARD ALL, server_reset_query_always=1; tokio-postgres, no pool",
            sqlx: None,
            pooled: None,
        },
    ],
};
