//! pgagroal from Debian 13's package (1.6.0), in a container.
//!
//! - Debian builds it with a fortified `sprintf`, and 1.6.0 formats a port
//!   number into a 5-byte buffer: a five-digit port, its own or the
//!   server's, aborts it (`*** buffer overflow detected ***`; upstream
//!   issues 491 and 926). So it listens on a four-digit port and reaches the
//!   server through a forwarder on another (socat, in the same container).
//! - Its transaction pipeline serves only the (database, user) pairs of its
//!   limits file, with server connections made at start: a client whose
//!   authentication makes a new server connection hangs (seen with 1.6.0
//!   here; upstream issue 130 reports the same). In its session pipeline,
//!   clients that make new server connections at the same moment crash each
//!   other's worker processes (libev's "I/O watcher with invalid fd found in
//!   epoll_ctl", seen here: the client reads "connection closed"). So each
//!   cell's database gets an instance of its own that makes all its server
//!   connections at start, and it closes client connections of its own
//!   accord.
//! - Settings do not pass: the server connections are made at start,
//!   without a client's `options` (seen here: a client's `-c
//!   lock_timeout=1234ms` read `0`, `harness/tests/server.rs`).
//! - A client gets any of the server connections made at start, whichever
//!   is free first, and they carry pgagroal's `application_name`, not the
//!   client's (seen with 1.6.0): readings vary by nature.

use super::{CancelRequests, CheckIn, Column, Facts, Pooled, PoolerMode};

/// What is true of pgagroal.
pub(super) const FACTS: Facts = Facts {
    id: "pgagroal",
    product: "pgagroal",
    in_container: true,
    readings_vary: true,
    closes_client_connections: true,
    closes_server_connections_on_request: false,
    one_instance_per_database: true,
    cancel: CancelRequests::Sent,
    transaction_pooling: true,
    session_backend_varies: true,
    settings_pass: false,
    columns: &[
        Column {
            mode: PoolerMode::Session,
            check_in: CheckIn::Default,
            models: &[],
            id: "pgagroal-session",
            configuration: "pgagroal pipeline=session (DISCARD ALL when a client disconnects), 16 server connections made at start for the cell's database; tokio-postgres, no pool",
            sqlx: None,
            pooled: Some(Pooled {
                id: "pgagroal-session+deadpool",
                configuration: "pgagroal pipeline=session (DISCARD ALL when a client disconnects), 16 server connections made at start for the cell's database; deadpool-postgres RecyclingMethod::Fast",
            }),
        },
        Column {
            mode: PoolerMode::Transaction,
            check_in: CheckIn::Default,
            models: &[],
            id: "pgagroal-transaction",
            configuration: "pgagroal pipeline=transaction, 16 server connections made at start for the cell's database; tokio-postgres, no pool",
            sqlx: None,
            pooled: Some(Pooled {
                id: "pgagroal-transaction+deadpool",
                configuration: "pgagroal pipeline=transaction, 16 server connections made at start for the cell's database; deadpool-postgres RecyclingMethod::Fast",
            }),
        },
    ],
};
