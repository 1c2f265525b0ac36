//! The `external` backend: an existing server named by a DSN (`--dsn` /
//! `LOCKLAB_DSN`), which is never shown (it may hold a password).

use anyhow::Result;
use locklab_core::parse_dsn;

use super::{Backend, Server};

/// The server `dsn` names (not yet connected to).
///
/// # Errors
/// A DSN that does not parse (the message leaves out the DSN and any piece
/// of it), or one naming a Unix socket rather than a TCP host.
pub(super) fn external(dsn: &str) -> Result<Server> {
    let spec = parse_dsn(dsn)?;
    Ok(Server::at(
        Backend::External,
        &spec.host,
        spec.port,
        &spec.user,
        spec.password,
        &spec.dbname,
    ))
}
