//! [`ServerOptions`]: which PostgreSQL server a [`crate::lab::Lab`] or
//! [`crate::lab::Suite`] starts or uses.

use crate::server::BackendChoice;

/// Which server the cells run on: a local cluster, a container or an
/// existing server, at a PostgreSQL major version. Its `Debug` does not
/// show the DSN, which may hold a password.
#[derive(Clone, Debug)]
pub struct ServerOptions(pub(crate) crate::server::ServerOptions);

impl ServerOptions {
    /// `backend` at PostgreSQL `major` (for the local and container
    /// backends; a server of another version is then an error). `Auto`
    /// means an existing server when `LOCKLAB_DSN` is set, else a container
    /// when a Docker engine answers, else a local cluster (binaries installed
    /// into locklab's `.cache/` on first use).
    pub fn new(backend: BackendChoice, major: u32) -> ServerOptions {
        ServerOptions(crate::server::ServerOptions::new(backend, major))
    }

    /// An existing server: `dsn` is a libpq connection string or URL whose
    /// role may create and drop databases (each cell gets one).
    pub fn external(dsn: &str) -> ServerOptions {
        ServerOptions(crate::server::ServerOptions {
            backend: BackendChoice::External,
            dsn: Some(dsn.to_owned()),
            ..crate::server::ServerOptions::default()
        })
    }

    /// The container backend's image; `{major}` is replaced by the major
    /// version (default: `postgres:{major}` when present or pullable, else
    /// locklab's own `locklab/postgres:{major}`, built from Debian packages
    /// when missing; also `LOCKLAB_PG_IMAGE`).
    #[must_use]
    pub fn image(mut self, image: &str) -> ServerOptions {
        self.0.image = Some(image.to_owned());
        self
    }

    /// One more server setting as `name=value` for the local and container
    /// backends (`postgres -c name=value`, after locklab's own), e.g.
    /// `max_locks_per_transaction=256`.
    #[must_use]
    pub fn setting(mut self, setting: &str) -> ServerOptions {
        self.0.settings.push(setting.to_owned());
        self
    }
}
