//! The targets file of `holders serve --config`: many servers, one exporter,
//! each probed at `/probe?target=NAME` (as postgres_exporter's and the
//! blackbox exporter's multi-target mode, but only names from this file:
//! never a DSN from the URL).
//!
//! ```yaml
//! targets:
//!   orders-primary:
//!     dsn: "host=db1.internal user=monitor sslmode=verify-full sslrootcert=/etc/locklab/ca.pem"
//!     password_file: /run/secrets/orders-monitor   # or password_env: ORDERS_PGPASSWORD
//!     databases: [orders]                         # default: every database
//!     keys: /etc/locklab/orders-keys.yaml         # key names and expected long holders
//!     idle_after: 120                             # s; default: --idle-after
//!     wait_after: 10                              # s; default: --wait-after
//!     timeout: 3                                  # s; default: --timeout
//!   billing:
//!     dsn_env: BILLING_DSN                        # or dsn_file: /run/secrets/billing-dsn
//! ```
//!
//! Credentials are read once, at start, from the file or the variable named;
//! a password written into `dsn` works but is discouraged. They are never
//! logged: messages name the target and `user@host:port/db`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, anyhow};
use indexmap::IndexMap;
use serde::Deserialize;
use serde_saphyr::Spanned;

use locklab_core::located::{FileError, Pos, yaml_error};

use crate::conninfo::{self, Env};
use crate::names::KeyNames;
use crate::snapshot::Target;
use crate::tls::Connector;
use crate::verdict::Thresholds;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    targets: IndexMap<String, Spanned<RawTarget>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    dsn: Option<String>,
    dsn_file: Option<PathBuf>,
    dsn_env: Option<String>,
    password_file: Option<PathBuf>,
    password_env: Option<String>,
    #[serde(default)]
    databases: Vec<String>,
    keys: Option<PathBuf>,
    idle_after: Option<f64>,
    wait_after: Option<f64>,
    timeout: Option<f64>,
}

/// One named target, ready to probe.
pub struct NamedTarget {
    /// Its name in the file and in `/probe?target=`.
    pub name: String,
    /// Where and how.
    pub target: Target,
    /// Its thresholds.
    pub thresholds: Thresholds,
    /// Its key names and allow-list.
    pub names: KeyNames,
}

/// What a target leaves out: the command line's values.
#[derive(Clone, Copy)]
pub struct Defaults {
    /// `--idle-after`, `--wait-after`.
    pub thresholds: Thresholds,
    /// `--timeout`.
    pub timeout: Duration,
}

/// Reads a targets file; relative paths in it (files of DSNs, passwords,
/// keys) are relative to the file's directory (certificate paths inside a
/// DSN, as libpq reads them, to the working directory).
///
/// # Errors
/// `FILE:LINE:COLUMN: message` for a file that does not parse, an unknown
/// field, a name that is not `[A-Za-z0-9_.-]+`, no targets, not exactly one
/// of `dsn`, `dsn_file`, `dsn_env`, an unset variable, an unreadable file, a
/// DSN that does not parse (the DSN is not shown), a number of seconds out of
/// range, a broken keys file or certificate file.
pub fn load(path: &Path, defaults: Defaults, env: &dyn Env) -> Result<Vec<NamedTarget>> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow!("{}: cannot read: {e}", path.display()))?;
    let raw: RawFile = serde_saphyr::from_str(&text).map_err(|e| {
        anyhow!(
            "{}",
            yaml_error(path, &e, "targets file", &[])
                .to_string()
                .replace("scenario file", "targets file")
        )
    })?;
    if raw.targets.is_empty() {
        anyhow::bail!("{}: no targets", path.display());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for (name, spanned) in raw.targets {
        let at = |message: String| {
            anyhow!(
                "{}",
                FileError {
                    file: path.to_owned(),
                    pos: Pos::of(&spanned.referenced),
                    message: format!("target '{name}': {message}"),
                }
            )
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
            return Err(at("a name is letters, digits, '_', '.' and '-'".into()));
        }
        let t = &spanned.value;
        let read = |p: &PathBuf| {
            let p = dir.join(p);
            std::fs::read_to_string(&p)
                .map(|s| s.trim_end_matches(['\n', '\r']).to_owned())
                .map_err(|e| at(format!("cannot read {}: {e}", p.display())))
        };
        let var = |v: &String| env.var(v).ok_or_else(|| at(format!("the variable {v} is not set")));
        let dsn = match (&t.dsn, &t.dsn_file, &t.dsn_env) {
            (Some(d), None, None) => d.clone(),
            (None, Some(f), None) => read(f)?,
            (None, None, Some(v)) => var(v)?,
            _ => return Err(at("give exactly one of dsn, dsn_file, dsn_env".into())),
        };
        let mut info = conninfo::parse(&dsn, env).map_err(|e| at(format!("{e:#}")))?;
        match (&t.password_file, &t.password_env) {
            (Some(f), None) => info.spec.password = Some(read(f)?),
            (None, Some(v)) => info.spec.password = Some(var(v)?),
            (None, None) => {}
            _ => return Err(at("give at most one of password_file, password_env".into())),
        }
        let seconds = |v: Option<f64>, default: Duration, what: &str, min: f64| match v {
            None => Ok(default),
            Some(s) if s.is_finite() && (min..=86_400.0).contains(&s) => Ok(Duration::from_secs_f64(s)),
            Some(_) => Err(at(format!("{what} is a number of seconds from {min} to 86400"))),
        };
        let thresholds = Thresholds {
            idle_after: seconds(t.idle_after, defaults.thresholds.idle_after, "idle_after", 0.0)?,
            wait_after: seconds(t.wait_after, defaults.thresholds.wait_after, "wait_after", 0.0)?,
        };
        let timeout = seconds(t.timeout, defaults.timeout, "timeout", 0.05)?;
        let names = match &t.keys {
            Some(k) => KeyNames::load(&dir.join(k))?,
            None => KeyNames::default(),
        };
        let connector = Connector::new(info.tls).map_err(|e| at(format!("{e:#}")))?;
        out.push(NamedTarget {
            name: name.clone(),
            target: Target {
                spec: info.spec,
                connector,
                databases: t.databases.clone(),
                timeout,
            },
            thresholds,
            names,
        });
    }
    Ok(out)
}
