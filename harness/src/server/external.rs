//! The `external` backend: an existing server named by a DSN (`--dsn` /
//! `LOCKLAB_DSN`), which is never shown (it may hold a password).

use std::str::FromStr;

use anyhow::{Result, anyhow, bail};
use locklab_drivers::ConnectSpec;
use tokio_postgres::config::SslMode;

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

/// The host, port, role, password and database a DSN (a libpq connection
/// string or `postgresql://` URL, as tokio-postgres parses it) names; the
/// defaults are `127.0.0.1`, 5432, `postgres` and `postgres`. Other libpq
/// options are ignored (locklab connects without TLS).
///
/// # Errors
/// A DSN that does not parse (the message leaves out the DSN and any piece
/// of it), one naming a Unix socket rather than a TCP host, or one with
/// `sslmode=require` (locklab connects without TLS).
pub fn parse_dsn(dsn: &str) -> Result<ConnectSpec> {
    let cfg = tokio_postgres::Config::from_str(dsn).map_err(|e| {
        // The parser's detail names an option, or a byte position and, after
        // "but got", one character of the string (maybe of the password): that
        // part is left out, and the string itself is never shown.
        let detail = std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default();
        let detail = detail.split(" but got ").next().unwrap_or_default();
        // "unknown option `x`": with an unquoted space or an unescaped `&` in
        // a password, `x` is a piece of it.
        let detail = if detail.starts_with("unknown option") {
            "an unknown option or a value with an unquoted space or `&`"
        } else {
            detail
        };
        anyhow!(
            "--dsn/LOCKLAB_DSN is not a valid connection string ({detail}); it is not shown, as it may hold a password"
        )
    })?;
    // The harness connects without TLS: a DSN that asks for it must not
    // silently get a plain-text connection.
    if !matches!(cfg.get_ssl_mode(), SslMode::Disable | SslMode::Prefer) {
        bail!(
            "--dsn/LOCKLAB_DSN asks for TLS (sslmode=require), which locklab does not support: \
             it connects without TLS; use a server or a local tunnel that accepts plain connections"
        );
    }
    let host = match cfg.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(_) => bail!("--dsn/LOCKLAB_DSN: only TCP hosts are supported"),
        None => "127.0.0.1".into(),
    };
    Ok(ConnectSpec {
        host,
        port: cfg.get_ports().first().copied().unwrap_or(5432),
        user: cfg.get_user().unwrap_or("postgres").to_owned(),
        password: cfg.get_password().map(|p| String::from_utf8_lossy(p).into_owned()),
        dbname: cfg.get_dbname().unwrap_or("postgres").to_owned(),
        application_name: String::new(),
        options: Vec::new(),
    })
}
