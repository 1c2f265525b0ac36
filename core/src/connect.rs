//! Where and as whom to connect: [`ConnectSpec`], which every driver, the
//! lab's own connections and `holders` build their client configuration
//! from, and [`parse_dsn`], the one reader of a user's DSN (`holders` reads
//! its TLS settings first: `locklab_holders::conninfo`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use tokio_postgres::config::SslMode;

/// Where and as whom to connect. Every driver builds its own client
/// configuration from this, so all drivers reach the same server the same way.
/// Its serde form is the driver protocol's `spec` object (docs/src/protocol.md)
/// and the first line a `process: child` connection reads: `host`, `port`,
/// `user`, `password` (`null` without one), `dbname`, `application_name`,
/// `options` as `[[name, value], …]`.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectSpec {
    /// Host name or IP address (the harness uses `127.0.0.1`).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Role to connect as.
    pub user: String,
    /// Password, if the server asks for one. Never printed: messages use
    /// [`ConnectSpec::redacted`].
    pub password: Option<String>,
    /// Database name (the harness gives every scenario × driver run its own).
    pub dbname: String,
    /// `application_name` reported in `pg_stat_activity`.
    pub application_name: String,
    /// Run-time parameters (name, value) sent in the startup packet as
    /// `options=-c name=value` (PostgreSQL docs §20.1.4 and libpq `options`), e.g.
    /// `("lock_timeout", "200ms")`. Values contain no spaces or backslashes.
    pub options: Vec<(String, String)>,
}

impl ConnectSpec {
    /// A tokio-postgres configuration for this spec (no TLS; connect timeout 10 s).
    pub fn tokio_postgres_config(&self) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        c.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.dbname)
            .application_name(&self.application_name)
            .connect_timeout(Duration::from_secs(10));
        if let Some(p) = &self.password {
            c.password(p);
        }
        if !self.options.is_empty() {
            c.options(self.options_string());
        }
        c
    }

    /// The libpq `options` string for [`ConnectSpec::options`]: `-c a=1 -c b=2`.
    pub fn options_string(&self) -> String {
        self.options
            .iter()
            .map(|(k, v)| format!("-c {k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// `host:port/dbname as user`, without the password, for messages.
    pub fn redacted(&self) -> String {
        format!("{}@{}:{}/{}", self.user, self.host, self.port, self.dbname)
    }
}

impl fmt::Debug for ConnectSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectSpec")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("dbname", &self.dbname)
            .field("application_name", &self.application_name)
            .field("options", &self.options)
            .finish()
    }
}

/// `error` followed by its chain of sources, `: `-separated (tokio-postgres puts
/// the useful part, e.g. "Connection refused", in the source).
pub fn with_sources(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut next = error.source();
    while let Some(e) = next {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        next = e.source();
    }
    out
}

/// A DSN parsed by tokio-postgres (a libpq connection string or
/// `postgresql://` URL), with an error that never shows the DSN or a piece of it.
///
/// # Errors
/// The DSN does not parse: the parser's reason (an option's name, a byte
/// position), but not the character it found (maybe of a password), and an
/// unknown option is not named (with an unquoted space in a password, it is
/// a piece of it).
pub fn parse_config(dsn: &str) -> Result<tokio_postgres::Config> {
    tokio_postgres::Config::from_str(dsn).map_err(|e| {
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
    })
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
    let cfg = parse_config(dsn)?;
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
