//! Configurations that reach the server through a pooler ([`Pooler`]):
//! PgBouncer (Debian 12's package, unpacked; or Debian 13's in a container),
//! pgagroal or Pgpool-II (Debian 13's, in a container), or Odyssey (Debian
//! sid's, in the same container image). The harness starts the
//! pooler in front of the server in the mode the configuration names and hands
//! the inner driver a [`ConnectSpec`] pointing at it; the inner driver
//! (tokio-postgres without a pool, or a pool) is unchanged.
//!
//! A client connection that closes does not end its server connection: in
//! session mode PgBouncer runs `server_reset_query` (default `DISCARD ALL`,
//! which includes `pg_advisory_unlock_all()`) and keeps the server connection;
//! in transaction mode the server connection goes back to PgBouncer's pool at
//! every transaction end, with no reset (PgBouncer docs, "pool_mode",
//! "server_reset_query").

use async_trait::async_trait;

use crate::{
    Canceller, Conn, ConnectSpec, Driver, DriverError, DriverInfo, GuardEnd, Pool, PoolOptions, Returned, Rows,
};

/// PgBouncer's `pool_mode` (PgBouncer docs, "pool_mode").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolerMode {
    /// A server connection is assigned to a client for the client's whole
    /// connection.
    Session,
    /// A server connection is assigned to a client for one transaction (a
    /// statement outside a transaction block is a transaction).
    Transaction,
}

impl PoolerMode {
    /// `"session"` or `"transaction"`, as in `pool_mode`.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolerMode::Session => "session",
            PoolerMode::Transaction => "transaction",
        }
    }
}

/// Which pooler a configuration goes through, and where it comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PoolerKind {
    /// PgBouncer from Debian 12's package (1.18), unpacked and run as a
    /// process of the harness.
    PgBouncer,
    /// PgBouncer from Debian 13's package (1.24), in a container of the
    /// pooler image (`harness/scripts/build-pooler-image.sh`).
    PgBouncerTrixie,
    /// pgagroal from Debian 13's package (1.6.0), in a container. Debian
    /// builds it with a fortified `sprintf`, and 1.6.0 formats a port number
    /// into a 5-byte buffer: a five-digit port, its own or the server's,
    /// aborts it (`*** buffer overflow detected ***`; upstream issues 491
    /// and 926). So it listens on a four-digit port and reaches the server
    /// through a forwarder on another (socat, in the same container).
    /// Its transaction pipeline serves only the (database, user) pairs of
    /// its limits file, with server connections made at start: a client
    /// whose authentication makes a new server connection hangs (seen with
    /// 1.6.0 here; upstream issue 130 reports the same). In its session
    /// pipeline, clients that make new server connections at the same
    /// moment crash each other's worker processes (libev's "I/O watcher
    /// with invalid fd found in epoll_ctl", seen here: the client reads
    /// "connection closed"). So each cell's database gets an instance of
    /// its own that makes all its server connections at start
    /// ([`PoolerKind::one_instance_per_database`]).
    Pgagroal,
    /// Pgpool-II from Debian 13's package (4.6), in a container: one backend,
    /// `connection_cache = on`, the configuration it is used as a pooler
    /// with (Pgpool-II docs, "Connection Pooling").
    Pgpool,
    /// Odyssey from Debian sid's package (1.5.2; no other Debian release has
    /// it), in the pooler image's container: one route for every database
    /// and user, `pool "session"` or `pool "transaction"`, its reset
    /// defaults (`pool_discard yes`: `DISCARD ALL` when a server connection
    /// goes back to the pool; `pool_rollback yes`) (Odyssey docs, "Rules").
    Odyssey,
    /// A pooler the user runs, at the address of a user's columns file
    /// ([`Pooler::address`]), in front of the server `--backend external`
    /// names; the harness starts nothing and routes the cell's connections
    /// to it.
    External,
}

impl PoolerKind {
    /// `pgbouncer`, `pgbouncer-trixie`, `pgagroal`, `pgpool`, `odyssey` or
    /// `external`.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolerKind::PgBouncer => "pgbouncer",
            PoolerKind::PgBouncerTrixie => "pgbouncer-trixie",
            PoolerKind::Pgagroal => "pgagroal",
            PoolerKind::Pgpool => "pgpool",
            PoolerKind::Odyssey => "odyssey",
            PoolerKind::External => "external",
        }
    }

    /// The kind whose [`PoolerKind::as_str`] is `s`.
    pub fn from_id(s: &str) -> Option<PoolerKind> {
        [
            PoolerKind::PgBouncer,
            PoolerKind::PgBouncerTrixie,
            PoolerKind::Pgagroal,
            PoolerKind::Pgpool,
            PoolerKind::Odyssey,
            PoolerKind::External,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }

    /// Whether which of its server connections a client (or, in transaction
    /// mode, a transaction) gets varies from run to run, so that a cell's
    /// readings behind it vary by nature: pgagroal (one of the 16 made at
    /// start, whichever is free first) and Odyssey (seen here: over three
    /// repeats of the committed report, 25 cells of these columns read
    /// different values, e.g. `next_checkout_same_backend` true once, false
    /// twice). Their cells compare with the baseline by status alone
    /// (`locklab::baseline`).
    pub fn readings_vary(self) -> bool {
        matches!(self, PoolerKind::Pgagroal | PoolerKind::Odyssey)
    }

    /// Whether it closes a client connection of its own accord, with
    /// nothing wrong on the client's or the server's side: pgagroal 1.6.0,
    /// when one of its worker processes crashes (libev's "I/O watcher"
    /// assertion, see [`PoolerKind::Pgagroal`]). A cell that meets it
    /// records it as the pooler's behaviour (a deviation counted over the
    /// repeats), not as a cell that could not run.
    pub fn closes_client_connections(self) -> bool {
        matches!(self, PoolerKind::Pgagroal)
    }

    /// The product's name: `PgBouncer`, `pgagroal`, `Pgpool-II` or `Odyssey`.
    pub fn product(self) -> &'static str {
        match self {
            PoolerKind::PgBouncer | PoolerKind::PgBouncerTrixie => "PgBouncer",
            PoolerKind::Pgagroal => "pgagroal",
            PoolerKind::Pgpool => "Pgpool-II",
            PoolerKind::Odyssey => "Odyssey",
            PoolerKind::External => "your pooler",
        }
    }

    /// Whether it runs in a container (and so needs a Docker engine).
    pub fn in_container(self) -> bool {
        !matches!(self, PoolerKind::PgBouncer | PoolerKind::External)
    }

    /// Whether the harness can have it close its server connections to one
    /// database on request (PgBouncer's `KILL db`, then `RESUME db`), so
    /// that a cell behind it may share a database an earlier cell left
    /// clean. Behind the others, whose server connections can only be ended
    /// from the server, a cell keeps a database of its own.
    pub fn closes_server_connections_on_request(self) -> bool {
        match self {
            PoolerKind::PgBouncer | PoolerKind::PgBouncerTrixie => true,
            PoolerKind::Pgagroal | PoolerKind::Pgpool | PoolerKind::Odyssey | PoolerKind::External => false,
        }
    }

    /// Whether the harness starts an instance of it for each cell's
    /// database, named in its configuration with every server connection
    /// made at start, instead of one for all databases: pgagroal (see
    /// [`PoolerKind::Pgagroal`]).
    pub fn one_instance_per_database(self) -> bool {
        self == PoolerKind::Pgagroal
    }

    /// Whether locklab sends cancel requests through it. Not through
    /// Debian 12's PgBouncer 1.18: there ours had no effect within 1 s in
    /// session mode, and in transaction mode PgBouncer exited ("FATAL …
    /// disconnect_client(): bad client state"), taking every later run of
    /// the report with it. Through every other pooler: what happens is
    /// what the cancellation cells record.
    pub fn sends_cancel(self) -> bool {
        self != PoolerKind::PgBouncer
    }
}

/// A pooler in one mode: what a configuration connects through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Pooler {
    /// Which pooler.
    pub kind: PoolerKind,
    /// How it assigns server connections to clients. Pgpool-II has no
    /// transaction pooling: its connection cache gives a client a server
    /// connection for the client's whole connection, as session mode does.
    pub mode: PoolerMode,
    /// Where a user's own pooler listens ([`PoolerKind::External`]): host
    /// and port. `None` for the poolers the harness starts.
    pub address: Option<(&'static str, u16)>,
    /// A user's own pooler that must get no cancel requests (`cancel:
    /// false` in the columns file: PgBouncer 1.18 exits on one).
    pub no_cancel: bool,
}

impl Pooler {
    /// One of the poolers the harness starts (not [`PoolerKind::External`],
    /// which needs an address: [`Pooler::external`]), in `mode`.
    pub const fn new(kind: PoolerKind, mode: PoolerMode) -> Pooler {
        Pooler {
            kind,
            mode,
            address: None,
            no_cancel: false,
        }
    }

    /// Debian 12's PgBouncer in `mode`.
    pub const fn pgbouncer(mode: PoolerMode) -> Pooler {
        Pooler::new(PoolerKind::PgBouncer, mode)
    }

    /// A user's own pooler in `mode`, listening on `host`:`port`; `cancel`:
    /// whether cancel requests are sent through it.
    pub const fn external(mode: PoolerMode, host: &'static str, port: u16, cancel: bool) -> Pooler {
        Pooler {
            kind: PoolerKind::External,
            mode,
            address: Some((host, port)),
            no_cancel: !cancel,
        }
    }

    /// Whether locklab sends cancel requests through it
    /// ([`PoolerKind::sends_cancel`], and not for a user's pooler declared
    /// with `cancel: false`).
    pub fn sends_cancel(self) -> bool {
        self.kind.sends_cancel() && !self.no_cancel
    }

    /// Whether a scenario's assumptions about server connections may not
    /// hold behind it, so that a failed expectation is recorded as a
    /// deviation, not a failure: in transaction mode an actor's statements
    /// may run on different server connections; behind Pgpool-II, whose
    /// child processes each cache their own server connections, a new
    /// client connection may get another one than the last client had
    /// (Pgpool-II docs, "Connection Pooling"); behind pgagroal, a client
    /// gets any of the server connections made at start, which carry
    /// pgagroal's `application_name`, not the client's (seen with 1.6.0).
    pub fn breaks_session_assumptions(self) -> bool {
        self.mode == PoolerMode::Transaction || matches!(self.kind, PoolerKind::Pgpool | PoolerKind::Pgagroal)
    }

    /// `pgbouncer-trixie/transaction`, for messages.
    pub fn label(self) -> String {
        format!("{}/{}", self.kind.as_str(), self.mode.as_str())
    }
}

/// An inner driver behind a pooler in one mode.
pub struct ViaPooler {
    id: &'static str,
    configuration: &'static str,
    pooler: Pooler,
    inner: Box<dyn Driver>,
}

impl ViaPooler {
    /// `inner` through `pooler`; `id` is the report column, `configuration`
    /// says both layers in their own terms.
    pub fn new(
        id: &'static str,
        configuration: &'static str,
        pooler: Pooler,
        inner: impl Driver + 'static,
    ) -> ViaPooler {
        ViaPooler {
            id,
            configuration,
            pooler,
            inner: Box::new(inner),
        }
    }
}

/// The client's pool, the pooler it goes through, and the lock libraries
/// on a sqlx 0.8 pool of their own through that pooler.
struct BouncedPool(Box<dyn Pool>, Pooler, Option<crate::libraries::LibraryPool>);

struct BouncedConn(Box<dyn Conn>, Pooler);

#[async_trait]
impl Conn for BouncedConn {
    async fn simple_query(&mut self, sql: &str) -> Result<Rows, DriverError> {
        self.0.simple_query(sql).await
    }

    async fn give_back(self: Box<Self>) -> Returned {
        // A closed client connection leaves its server connection in
        // PgBouncer's pool: for the server, the connection went back to a pool.
        match self.0.give_back().await {
            Returned::Closed => Returned::ToPooler,
            other => other,
        }
    }

    fn canceller(&self) -> Option<Canceller> {
        // The inner driver's cancel request goes to the address it
        // connected to: the pooler's (see `PoolerKind::sends_cancel`).
        if self.1.sends_cancel() {
            self.0.canceller()
        } else {
            None
        }
    }

    fn no_cancel_reason(&self) -> &'static str {
        if self.1.sends_cancel() {
            self.0.no_cancel_reason()
        } else if self.1.kind == PoolerKind::External {
            "not sent through this pooler (cancel: false in its columns file)"
        } else {
            "not sent through PgBouncer 1.18"
        }
    }

    async fn advisory_lock_guard(&mut self, key: i64, end: GuardEnd) -> Result<(), DriverError> {
        self.0.advisory_lock_guard(key, end).await
    }
}

#[async_trait]
impl Pool for BouncedPool {
    async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError> {
        Ok(Box::new(BouncedConn(self.0.checkout().await?, self.1)))
    }

    /// A lock library through the pooler: on a sqlx 0.8 pool of the
    /// scenario's size pointed at the pooler (the libraries take one).
    async fn library(
        &self,
        library: crate::libraries::Library,
        call: &crate::libraries::LibraryCall,
    ) -> Result<String, DriverError> {
        match &self.2 {
            Some(l) => l.call(library, call).await,
            None => Err(DriverError::Unsupported(format!(
                "{} takes a sqlx 0.8 PgPool",
                library.as_str()
            ))),
        }
    }

    async fn close(&self) {
        if let Some(l) = &self.2 {
            l.close(true).await;
        }
        self.0.close().await;
    }
}

#[async_trait]
impl Driver for ViaPooler {
    fn info(&self) -> DriverInfo {
        let inner = self.inner.info();
        DriverInfo {
            id: self.id,
            crate_name: inner.crate_name,
            crate_version: inner.crate_version,
            configuration: self.configuration,
            kind: crate::DriverKind::Pooled,
            pooler: Some(self.pooler),
            // A pooler relays the server's notices; whether they reach the
            // caller is up to the client in front of it.
            notices: inner.notices,
        }
    }

    async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
        Ok(Box::new(BouncedPool(
            self.inner.pool(spec, opts).await?,
            self.pooler,
            crate::libraries::LibraryPool::connecting(spec, opts),
        )))
    }

    fn in_own_process(&self, host: &std::path::Path) -> Option<Box<dyn Driver>> {
        // `locklab pool-adapter ID` knows locklab's own columns only, not
        // those of a user's columns file.
        if self.pooler.kind == PoolerKind::External {
            return None;
        }
        Some(Box::new(crate::external::ExternalDriver::hosting(self.info(), host)))
    }
}

/// The configurations behind a pooler, each pooler in each of its modes
/// behind tokio-postgres without a pool and behind deadpool-postgres
/// (`RecyclingMethod::Fast`): Debian 12's PgBouncer, then the pooler
/// image's PgBouncer, Pgpool-II, pgagroal and Odyssey.
pub(crate) fn columns() -> Vec<Box<dyn Driver>> {
    use PoolerKind::{Odyssey, PgBouncer, PgBouncerTrixie, Pgagroal, Pgpool};
    use PoolerMode::*;
    type Column = (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        PoolerKind,
        PoolerMode,
    );
    // (id without pool, its configuration, id with deadpool, its configuration, pooler, mode)
    const COLUMNS: [Column; 9] = [
        (
            "pgbouncer-session",
            "PgBouncer pool_mode=session; tokio-postgres, no pool",
            "pgbouncer-session+deadpool",
            "PgBouncer pool_mode=session; deadpool-postgres RecyclingMethod::Fast",
            PgBouncer,
            Session,
        ),
        (
            "pgbouncer-transaction",
            "PgBouncer pool_mode=transaction; tokio-postgres, no pool",
            "pgbouncer-transaction+deadpool",
            "PgBouncer pool_mode=transaction; deadpool-postgres RecyclingMethod::Fast",
            PgBouncer,
            Transaction,
        ),
        (
            "pgbouncer-trixie-session",
            "PgBouncer (Debian 13, container) pool_mode=session; tokio-postgres, no pool",
            "pgbouncer-trixie-session+deadpool",
            "PgBouncer (Debian 13, container) pool_mode=session; deadpool-postgres RecyclingMethod::Fast",
            PgBouncerTrixie,
            Session,
        ),
        (
            "pgbouncer-trixie-transaction",
            "PgBouncer (Debian 13, container) pool_mode=transaction; tokio-postgres, no pool",
            "pgbouncer-trixie-transaction+deadpool",
            "PgBouncer (Debian 13, container) pool_mode=transaction; deadpool-postgres RecyclingMethod::Fast",
            PgBouncerTrixie,
            Transaction,
        ),
        (
            "pgpool",
            "Pgpool-II connection_cache=on, one backend; tokio-postgres, no pool",
            "pgpool+deadpool",
            "Pgpool-II connection_cache=on, one backend; deadpool-postgres RecyclingMethod::Fast",
            Pgpool,
            Session,
        ),
        (
            "pgagroal-session",
            "pgagroal pipeline=session (DISCARD ALL when a client disconnects), 16 server connections made at start for the cell's database; tokio-postgres, no pool",
            "pgagroal-session+deadpool",
            "pgagroal pipeline=session (DISCARD ALL when a client disconnects), 16 server connections made at start for the cell's database; deadpool-postgres RecyclingMethod::Fast",
            Pgagroal,
            Session,
        ),
        (
            "pgagroal-transaction",
            "pgagroal pipeline=transaction, 16 server connections made at start for the cell's database; tokio-postgres, no pool",
            "pgagroal-transaction+deadpool",
            "pgagroal pipeline=transaction, 16 server connections made at start for the cell's database; deadpool-postgres RecyclingMethod::Fast",
            Pgagroal,
            Transaction,
        ),
        (
            "odyssey-session",
            "Odyssey pool \"session\" (pool_discard, pool_rollback: its defaults); tokio-postgres, no pool",
            "odyssey-session+deadpool",
            "Odyssey pool \"session\" (pool_discard, pool_rollback: its defaults); deadpool-postgres RecyclingMethod::Fast",
            Odyssey,
            Session,
        ),
        (
            "odyssey-transaction",
            "Odyssey pool \"transaction\" (pool_discard, pool_rollback: its defaults); tokio-postgres, no pool",
            "odyssey-transaction+deadpool",
            "Odyssey pool \"transaction\" (pool_discard, pool_rollback: its defaults); deadpool-postgres RecyclingMethod::Fast",
            Odyssey,
            Transaction,
        ),
    ];
    let mut out: Vec<Box<dyn Driver>> = Vec::new();
    for (id, configuration, pooled_id, pooled_configuration, kind, mode) in COLUMNS {
        let pooler = Pooler {
            kind,
            mode,
            address: None,
            no_cancel: false,
        };
        out.push(Box::new(ViaPooler::new(
            id,
            configuration,
            pooler,
            crate::direct::TokioPostgresDirect,
        )));
        out.push(Box::new(ViaPooler::new(
            pooled_id,
            pooled_configuration,
            pooler,
            crate::deadpool_pg::Deadpool::fast(),
        )));
    }
    out
}
