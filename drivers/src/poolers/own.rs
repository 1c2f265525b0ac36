//! A pooler the user runs ([`super::PoolerKind::External`]), at the address
//! of a user's columns file, in front of the server `--backend external`
//! names; the harness starts nothing and routes the cell's connections to
//! it. Its columns come from the user's file, not from here; whether cancel
//! requests are sent is the file's `cancel:`.

use super::{CancelRequests, Facts};

/// What locklab assumes of a user's own pooler.
pub(super) const FACTS: Facts = Facts {
    id: "external",
    product: "your pooler",
    in_container: false,
    readings_vary: false,
    closes_client_connections: false,
    closes_server_connections_on_request: false,
    one_instance_per_database: false,
    cancel: CancelRequests::Sent,
    transaction_pooling: true,
    session_backend_varies: false,
    // Not known: its cells with `pool.settings` are not run.
    settings_pass: false,
    columns: &[],
};
