//! How to get a server, as asked for: the backend choice and the options
//! (`--backend`, `--dsn`, `--pg`, `--pg-bin`, `--image`, `--start-timeout`),
//! and which [`Backend`] they resolve to.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};

use super::{DEFAULT_PG_MAJOR, DEFAULT_START_TIMEOUT, container};

/// Which backend to use, as asked for (`--backend`, `LOCKLAB_BACKEND`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// `external` when a DSN is given, else `container` when a Docker engine
    /// answers, else `local`.
    #[default]
    Auto,
    /// A PostgreSQL container started with testcontainers.
    Container,
    /// A throw-away cluster from PostgreSQL binaries.
    Local,
    /// An existing server (`--dsn` / `LOCKLAB_DSN`).
    External,
}

impl BackendChoice {
    /// `"auto"`, `"container"`, `"local"` or `"external"`.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Container => "container",
            BackendChoice::Local => "local",
            BackendChoice::External => "external",
        }
    }
}

/// How to get a server. Its `Debug` does not show the DSN, which may hold a password.
#[derive(Clone)]
pub struct ServerOptions {
    /// The backend asked for.
    pub backend: BackendChoice,
    /// Use this existing server (a libpq connection string or URL; its database
    /// is used for administration, and the role must be allowed to create and
    /// drop databases).
    pub dsn: Option<String>,
    /// Directory holding `postgres` and `initdb` for the local backend
    /// (overrides the cache and the automatic install; also `LOCKLAB_PG_BIN`).
    pub pg_bin: Option<PathBuf>,
    /// PostgreSQL major version for the local and container backends. When
    /// given, a server of another version (binaries from `pg_bin`, an image
    /// without `{major}`) is an error; when not, 17 picks the binaries and the
    /// default image, and other sources are taken at whatever version they are.
    pub pg_major: Option<u32>,
    /// Image for the container backend; `{major}` is replaced by the major
    /// version (also `LOCKLAB_PG_IMAGE`; default: see [`container`]).
    pub image: Option<String>,
    /// Limit for the server to start and accept connections.
    pub start_timeout: Duration,
    /// More server settings for the local and container backends, as
    /// `name=value` (passed as `postgres -c name=value` after the harness's own
    /// [`crate::server::SERVER_SETTINGS`], so they win), e.g.
    /// `max_locks_per_transaction=256` for a server that must hold many locks.
    pub settings: Vec<String>,
    /// More `pg_hba.conf` lines for the local backend, put before
    /// `initdb`'s own, which admit every role from 127.0.0.1 without a
    /// password (e.g. `host all all 10.213.0.0/30 trust` for the run's network
    /// namespace, or `hostnossl all monitor all reject` for a role that must
    /// use TLS); the other backends refuse them.
    pub hba_lines: Vec<String>,
    /// For the local backend: copy the data directory from one that
    /// `initdb` made once in this process for these binaries (see
    /// [`crate::server::local`]), instead of running `initdb` for this
    /// cluster: for clusters made many times over, as the restart cells'
    /// (one per cell). A copy costs about a seventh of an `initdb`'s CPU.
    pub from_template: bool,
}

impl Default for ServerOptions {
    fn default() -> ServerOptions {
        ServerOptions {
            backend: BackendChoice::Auto,
            dsn: None,
            pg_bin: None,
            pg_major: None,
            image: None,
            start_timeout: DEFAULT_START_TIMEOUT,
            settings: Vec::new(),
            hba_lines: Vec::new(),
            from_template: false,
        }
    }
}

impl ServerOptions {
    /// Options for `backend` and PostgreSQL `major`, the rest default.
    pub fn new(backend: BackendChoice, major: u32) -> ServerOptions {
        ServerOptions {
            backend,
            pg_major: Some(major),
            ..ServerOptions::default()
        }
    }

    /// The existing server to use, if any: [`ServerOptions::dsn`], else a
    /// non-empty `LOCKLAB_DSN`.
    pub fn external_dsn(&self) -> Option<String> {
        self.dsn
            .clone()
            .filter(|d| !d.is_empty())
            .or_else(|| std::env::var("LOCKLAB_DSN").ok().filter(|s| !s.is_empty()))
    }

    /// The major version for the local and container backends.
    pub fn major(&self) -> u32 {
        self.pg_major.unwrap_or(DEFAULT_PG_MAJOR)
    }

    /// The backend `start` will use: `auto` resolved (which may ask Docker
    /// whether it answers, within 3 s). `LOCKLAB_DSN` matters to `auto` and
    /// `external` only: an explicit `local` or `container` ignores it.
    ///
    /// # Errors
    /// `external` without a DSN; [`ServerOptions::dsn`] with `local` or `container`.
    pub fn resolve_backend(&self) -> Result<Backend> {
        Ok(self.resolve_backend_with_reason()?.0)
    }

    /// [`ServerOptions::resolve_backend`], plus why `auto` chose `local` when it did
    /// (e.g. "no Docker engine answered (cannot connect to /var/run/docker.sock …)").
    ///
    /// # Errors
    /// As [`ServerOptions::resolve_backend`].
    pub fn resolve_backend_with_reason(&self) -> Result<(Backend, Option<String>)> {
        let dsn = match self.backend {
            BackendChoice::Local | BackendChoice::Container => self.dsn.clone().filter(|d| !d.is_empty()),
            BackendChoice::Auto | BackendChoice::External => self.external_dsn(),
        };
        Ok(match (self.backend, dsn.is_some()) {
            (BackendChoice::Auto, false) => match container::docker_answers() {
                Ok(()) => (Backend::Container, None),
                Err(why) => (
                    Backend::Local,
                    Some(format!("no Docker engine answered ({why:#}); using the local backend")),
                ),
            },
            (BackendChoice::Auto | BackendChoice::External, true) => (Backend::External, None),
            (BackendChoice::External, false) => {
                bail!("--backend external needs a server: give --dsn or set LOCKLAB_DSN")
            }
            (BackendChoice::Local | BackendChoice::Container, true) => bail!(
                "--backend {} starts its own server, but --dsn names one; drop one of them",
                self.backend.as_str()
            ),
            (BackendChoice::Local, false) => (Backend::Local, None),
            (BackendChoice::Container, false) => (Backend::Container, None),
        })
    }
}

/// Which kind of server is in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// A PostgreSQL container started by the harness.
    Container,
    /// A throw-away cluster started by the harness.
    Local,
    /// An existing server given by DSN.
    External,
}

impl Backend {
    /// `"container"`, `"local"` or `"external"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Container => "container",
            Backend::Local => "local",
            Backend::External => "external",
        }
    }
}

impl std::fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerOptions")
            .field("backend", &self.backend)
            .field("dsn", &self.dsn.as_ref().map(|_| "(not shown)"))
            .field("pg_bin", &self.pg_bin)
            .field("pg_major", &self.pg_major)
            .field("image", &self.image)
            .field("start_timeout", &self.start_timeout)
            .finish()
    }
}
