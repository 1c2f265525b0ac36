//! Where `holders` connects, and how securely: a DSN (a libpq connection
//! string or a `postgresql://` URI) with libpq's TLS settings, completed from
//! libpq's environment variables where it leaves something out.
//!
//! tokio-postgres's own parser knows `sslmode` `disable`, `prefer` and
//! `require` only, and no certificate files, so the TLS keys are read here
//! first ([`split_tls`]) and the rest is handed to it
//! ([`locklab_core::parse_config`]). The keys and their meaning are libpq's
//! (PostgreSQL docs, "Connection Strings" §32.1.2 and "SSL Support" §32.19):
//!
//! | key | environment | default |
//! |---|---|---|
//! | `host` | `PGHOST` | `127.0.0.1` (TCP only: no Unix socket) |
//! | `port` | `PGPORT` | 5432 |
//! | `user` | `PGUSER` | `postgres` |
//! | `password` | `PGPASSWORD` | none |
//! | `dbname` | `PGDATABASE` | `postgres` |
//! | `sslmode` | `PGSSLMODE` | `prefer`; `verify-full` with `sslrootcert=system` |
//! | `sslrootcert` | `PGSSLROOTCERT` | `~/.postgresql/root.crt` when it exists |
//! | `sslcert` | `PGSSLCERT` | `~/.postgresql/postgresql.crt` when it exists |
//! | `sslkey` | `PGSSLKEY` | `~/.postgresql/postgresql.key` when it exists |
//!
//! The defaults for host, role and database are locklab's (libpq's are a Unix
//! socket, the operating system's user and the role's name).

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{Result, anyhow, bail};
use locklab_core::ConnectSpec;
use tokio_postgres::config::Host;

/// libpq's `sslmode` (PostgreSQL docs, "SSL Support", table "SSL Mode
/// Descriptions"): how much TLS a connection needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// A plain connection first; TLS only when the server refuses it.
    Allow,
    /// TLS when the server offers it, else a plain connection (libpq's default).
    Prefer,
    /// TLS, or no connection. The certificate is not checked, unless a root
    /// certificate file is there (then as `VerifyCa`, as libpq does).
    Require,
    /// TLS, and the server's certificate is signed by a trusted CA.
    VerifyCa,
    /// As `VerifyCa`, and the certificate names the host connected to.
    VerifyFull,
}

impl SslMode {
    /// libpq's spelling (`verify-full`).
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

impl FromStr for SslMode {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<SslMode> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => bail!("sslmode '{s}' is not one of disable, allow, prefer, require, verify-ca, verify-full"),
        })
    }
}

/// The certificates a server's certificate must chain to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootCert {
    /// A PEM file of one or more CA certificates.
    File(PathBuf),
    /// `sslrootcert=system`: the platform's trusted roots (the
    /// `ca-certificates` store, read by rustls-native-certs).
    System,
}

/// The TLS half of a connection's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tls {
    /// How much TLS.
    pub mode: SslMode,
    /// Where the trusted CAs are: `sslrootcert`, else `~/.postgresql/root.crt`
    /// when that file exists, else none.
    pub root_cert: Option<RootCert>,
    /// A client certificate and its private key (PEM files), for `cert`
    /// authentication or `clientcert=verify-full` in `pg_hba.conf`.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// What a TLS connection checks of the server's certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Nothing (`require`, `prefer` or `allow` without a root certificate):
    /// encrypted, but open to a man in the middle.
    Nothing,
    /// Signed by a trusted CA (`verify-ca`, or a weaker mode with a root
    /// certificate file, as libpq does).
    Ca,
    /// Signed by a trusted CA and naming the host (`verify-full`).
    Full,
}

impl Tls {
    /// No TLS at all (`sslmode=disable`).
    pub fn disabled() -> Tls {
        Tls {
            mode: SslMode::Disable,
            root_cert: None,
            client: None,
        }
    }

    /// What a TLS connection of these settings checks.
    pub fn check(&self) -> Check {
        match (self.mode, &self.root_cert) {
            (SslMode::VerifyFull, _) => Check::Full,
            (SslMode::VerifyCa, _) | (_, Some(RootCert::File(_))) => Check::Ca,
            _ => Check::Nothing,
        }
    }
}

/// A server to inspect: where and as whom ([`ConnectSpec`]), and with how much TLS.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// Host, port, role, password and database.
    pub spec: ConnectSpec,
    /// The TLS settings.
    pub tls: Tls,
}

/// The TLS keys this module reads (the rest goes to tokio-postgres).
const TLS_KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// libpq's other TLS keys: refused by name rather than ignored.
const UNSUPPORTED: [&str; 10] = [
    "sslpassword",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "sslcompression",
    "sslcertmode",
    "sslnegotiation",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "requiressl",
];

/// The environment as libpq reads it; tests pass a map of their own.
pub trait Env {
    /// The variable's value, if set and not empty.
    fn var(&self, name: &str) -> Option<String>;
}

/// The process's environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl<const N: usize> Env for [(&str, &str); N] {
    fn var(&self, name: &str) -> Option<String> {
        self.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }
}

/// Whether libpq's environment names a server (`PGHOST`, `PGPORT`,
/// `PGDATABASE` or `PGUSER` set): then `holders` needs no DSN.
pub fn env_names_a_server(env: &dyn Env) -> bool {
    ["PGHOST", "PGPORT", "PGDATABASE", "PGUSER"]
        .iter()
        .any(|v| env.var(v).is_some())
}

/// Reads a DSN (empty: everything from the environment and the defaults).
///
/// # Errors
/// One line, never the DSN or a piece of it: the DSN does not parse; an
/// unknown `sslmode`; a TLS key locklab does not support (`sslcrl`, …); a Unix
/// socket host; `PGPORT` not a port; `sslrootcert=system` with a mode weaker
/// than `verify-full` (libpq refuses it too); `verify-ca`/`verify-full`
/// without a root certificate; a certificate or key file that does not exist.
pub fn parse(dsn: &str, env: &dyn Env) -> Result<ConnInfo> {
    let (rest, tls_keys) = split_tls(dsn)?;
    let cfg = locklab_core::parse_config(&rest)?;
    let given = |key: &str, var: &str| {
        tls_keys
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .or_else(|| env.var(var))
    };
    let host = match cfg.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(_) => bail!("--dsn/LOCKLAB_DSN: only TCP hosts are supported, not a Unix socket"),
        None => match env.var("PGHOST") {
            Some(h) if h.starts_with('/') => bail!("PGHOST: only TCP hosts are supported, not a Unix socket"),
            Some(h) => h.split(',').next().unwrap_or_default().to_owned(),
            None => "127.0.0.1".into(),
        },
    };
    let port = match cfg.get_ports().first() {
        Some(p) => *p,
        None => match env.var("PGPORT") {
            Some(p) => p
                .split(',')
                .next()
                .and_then(|p| p.trim().parse().ok())
                .ok_or_else(|| anyhow!("PGPORT='{p}' is not a port number"))?,
            None => 5432,
        },
    };
    let password = match cfg.get_password() {
        Some(p) => Some(String::from_utf8_lossy(p).into_owned()),
        None => env.var("PGPASSWORD"),
    };
    let spec = ConnectSpec {
        host,
        port,
        user: cfg
            .get_user()
            .map(str::to_owned)
            .or_else(|| env.var("PGUSER"))
            .unwrap_or("postgres".into()),
        password,
        dbname: cfg
            .get_dbname()
            .map(str::to_owned)
            .or_else(|| env.var("PGDATABASE"))
            .unwrap_or("postgres".into()),
        application_name: String::new(),
        options: Vec::new(),
    };
    let home = env.var("HOME").map(PathBuf::from);
    let default_file = |name: &str| {
        home.as_ref()
            .map(|h| h.join(".postgresql").join(name))
            .filter(|p| p.is_file())
    };
    let root_cert = match given("sslrootcert", "PGSSLROOTCERT") {
        Some(s) if s == "system" => Some(RootCert::System),
        Some(s) => Some(RootCert::File(existing("sslrootcert", PathBuf::from(s))?)),
        None => default_file("root.crt").map(RootCert::File),
    };
    let mode = match given("sslmode", "PGSSLMODE") {
        Some(m) => {
            let mode: SslMode = m.parse()?;
            if root_cert == Some(RootCert::System) && mode != SslMode::VerifyFull {
                bail!(
                    "sslrootcert=system needs sslmode=verify-full (the default with it), not {}: \
                     any CA of the platform would do, so only the host name check makes it safe (as libpq)",
                    mode.as_str()
                );
            }
            mode
        }
        None if root_cert == Some(RootCert::System) => SslMode::VerifyFull,
        None => SslMode::Prefer,
    };
    if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root_cert.is_none() {
        bail!(
            "sslmode={} needs the CA that signed the server's certificate: set sslrootcert=FILE \
             (or sslrootcert=system for the platform's roots), or put it in ~/.postgresql/root.crt",
            mode.as_str()
        );
    }
    let client = match (given("sslcert", "PGSSLCERT"), given("sslkey", "PGSSLKEY")) {
        (Some(cert), key) => {
            let cert = existing("sslcert", PathBuf::from(cert))?;
            let key = match key {
                Some(k) => existing("sslkey", PathBuf::from(k))?,
                None => default_file("postgresql.key").ok_or_else(|| {
                    anyhow!("sslcert is set but sslkey is not (nor is there a ~/.postgresql/postgresql.key)")
                })?,
            };
            Some((cert, key))
        }
        (None, Some(_)) => bail!("sslkey is set but sslcert is not: a client certificate needs both"),
        (None, None) => default_file("postgresql.crt").zip(default_file("postgresql.key")),
    };
    Ok(ConnInfo {
        spec,
        tls: Tls {
            mode,
            root_cert,
            client,
        },
    })
}

fn existing(key: &str, path: PathBuf) -> Result<PathBuf> {
    if path.is_file() {
        Ok(path)
    } else if Path::new(&path).exists() {
        bail!("{key}: {} is not a file", path.display())
    } else {
        bail!("{key}: {} does not exist", path.display())
    }
}

/// Splits the TLS keys (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`; decoded) out of a DSN, and returns the
/// rest of it, for tokio-postgres, unchanged otherwise. In a URI they are
/// query parameters (percent-encoded); in a `key=value` string, values may be
/// single-quoted with `\'` and `\\` escapes, as libpq has them.
///
/// # Errors
/// A TLS key locklab does not support, a value in quotes that does not end,
/// a key without `=`. The DSN and its pieces are never in the message.
pub fn split_tls(dsn: &str) -> Result<(String, Vec<(String, String)>)> {
    let refuse = |key: &str| -> Result<()> {
        if UNSUPPORTED.contains(&key) {
            bail!(
                "--dsn/LOCKLAB_DSN: {key} is not supported by locklab holders \
                 (its TLS keys: sslmode, sslrootcert, sslcert, sslkey)"
            );
        }
        Ok(())
    };
    let mut tls = Vec::new();
    if dsn.starts_with("postgres://") || dsn.starts_with("postgresql://") {
        let Some((base, query)) = dsn.split_once('?') else {
            return Ok((dsn.to_owned(), tls));
        };
        let mut kept = Vec::new();
        for param in query.split('&') {
            let (key, value) = param.split_once('=').unwrap_or((param, ""));
            let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
            refuse(&key)?;
            if TLS_KEYS.contains(&key.as_ref()) {
                let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
                tls.push((key.into_owned(), value.into_owned()));
            } else {
                kept.push(param);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((rest, tls));
    }
    let mut kept: Vec<&str> = Vec::new();
    let bytes = dsn.as_bytes();
    let mut i = 0;
    let skip_space = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    loop {
        i = skip_space(i);
        if i >= bytes.len() {
            break;
        }
        let start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = &dsn[start..i];
        i = skip_space(i);
        if i >= bytes.len() || bytes[i] != b'=' {
            bail!(
                "--dsn/LOCKLAB_DSN is not a valid connection string (a word without \"=\" after it, \
                 maybe an unquoted space in a value); it is not shown, as it may hold a password"
            );
        }
        i = skip_space(i + 1);
        let mut value = String::new();
        if i < bytes.len() && bytes[i] == b'\'' {
            i += 1;
            loop {
                match bytes.get(i) {
                    None => bail!(
                        "--dsn/LOCKLAB_DSN is not a valid connection string (a quoted value does not end); \
                         it is not shown, as it may hold a password"
                    ),
                    Some(b'\'') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') if i + 1 < bytes.len() => {
                        value.push(char::from(bytes[i + 1]));
                        i += 2;
                    }
                    Some(_) => {
                        let c = dsn[i..].chars().next().unwrap_or_default();
                        value.push(c);
                        i += c.len_utf8();
                    }
                }
            }
        } else {
            while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                if bytes[i] == b'\\' && i + 1 < bytes.len() {
                    value.push(char::from(bytes[i + 1]));
                    i += 2;
                } else {
                    let c = dsn[i..].chars().next().unwrap_or_default();
                    value.push(c);
                    i += c.len_utf8();
                }
            }
        }
        refuse(key)?;
        if TLS_KEYS.contains(&key) {
            tls.push((key.to_owned(), value));
        } else {
            kept.push(&dsn[start..i]);
        }
    }
    Ok((kept.join(" "), tls))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_ENV: [(&str, &str); 0] = [];

    #[test]
    fn tls_keys_come_out_of_both_forms_and_the_rest_stays() {
        let (rest, tls) =
            split_tls("host=db port=6432 sslmode=verify-full password='a b\\'c' sslrootcert = '/etc/ca x.pem'")
                .unwrap();
        assert_eq!(rest, "host=db port=6432 password='a b\\'c'");
        assert_eq!(
            tls,
            [
                ("sslmode".into(), "verify-full".into()),
                ("sslrootcert".into(), "/etc/ca x.pem".into())
            ]
        );
        let (rest, tls) =
            split_tls("postgresql://u:p@db:6432/app?sslmode=verify-ca&application_name=x&sslrootcert=%2Ftmp%2Fca.pem")
                .unwrap();
        assert_eq!(rest, "postgresql://u:p@db:6432/app?application_name=x");
        assert_eq!(
            tls,
            [
                ("sslmode".into(), "verify-ca".into()),
                ("sslrootcert".into(), "/tmp/ca.pem".into())
            ]
        );
    }

    #[test]
    fn the_environment_fills_what_the_dsn_leaves_out() {
        let env = [
            ("PGHOST", "db.internal"),
            ("PGPORT", "6543"),
            ("PGUSER", "monitor"),
            ("PGPASSWORD", "s3cret"),
            ("PGDATABASE", "orders"),
            ("PGSSLMODE", "require"),
        ];
        let info = parse("", &env).unwrap();
        assert_eq!(info.spec.redacted(), "monitor@db.internal:6543/orders");
        assert_eq!(info.spec.password.as_deref(), Some("s3cret"));
        assert_eq!(info.tls.mode, SslMode::Require);
        // The DSN wins over the environment.
        let info = parse("host=other user=u sslmode=disable", &env).unwrap();
        assert_eq!(info.spec.redacted(), "u@other:6543/orders");
        assert_eq!(info.tls.mode, SslMode::Disable);
        // Nothing at all: locklab's defaults, libpq's sslmode.
        let info = parse("", &NO_ENV).unwrap();
        assert_eq!(info.spec.redacted(), "postgres@127.0.0.1:5432/postgres");
        assert_eq!(info.tls.mode, SslMode::Prefer);
        assert_eq!(info.tls.check(), Check::Nothing);
    }

    #[test]
    fn verify_modes_need_a_root_and_system_needs_verify_full() {
        let e = parse("host=db sslmode=verify-full", &NO_ENV).unwrap_err().to_string();
        assert!(e.contains("needs the CA"), "{e}");
        let e = parse("host=db sslrootcert=system sslmode=require", &NO_ENV)
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs sslmode=verify-full"), "{e}");
        let info = parse("host=db sslrootcert=system", &NO_ENV).unwrap();
        assert_eq!((info.tls.mode, info.tls.check()), (SslMode::VerifyFull, Check::Full));
        let e = parse("host=db sslmode=verify-full sslrootcert=/no/such/ca.pem", &NO_ENV)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/no/such/ca.pem does not exist"), "{e}");
        let e = parse("host=db sslmode=verify-everything", &NO_ENV)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not one of"), "{e}");
    }

    #[test]
    fn errors_never_show_the_dsn() {
        for dsn in [
            "host=db password=hunter2 sslcrl=/x",
            "host=db password='hunter2",
            "host=db password=hunter 2",
            "postgresql://u:hunter2@db/app?sslpassword=hunter2",
        ] {
            let e = parse(dsn, &NO_ENV).unwrap_err().to_string();
            assert!(!e.contains("hunter"), "{dsn}: {e}");
        }
    }
}
