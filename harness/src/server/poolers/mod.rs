//! The poolers the harness starts in front of a server, one module each:
//! Debian 12's PgBouncer as a process ([`pgbouncer`]); Debian 13's
//! PgBouncer, Pgpool-II and pgagroal, and Debian sid's Odyssey, in a
//! container of the pooler image ([`container`]). What is true of each
//! product (modes, cancel requests, readings that vary) is in
//! `locklab_drivers`' module of the same name; here is how it is started
//! ([`Product`]), found ready, routed to and cleaned up after.
//!
//! Adding a pooler: a module here implementing [`Product`], its arm in
//! [`product`], and its package in `harness/scripts/poolers.list`.

mod container;
mod odyssey;
mod pgagroal;
mod pgbouncer;
mod pgbouncer_trixie;
mod pgpool;
pub mod queue;

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use locklab_drivers::{CheckIn, Pooler, PoolerKind, PoolerMode};

use container::ContainerPooler;

/// How the harness runs one pooler product (its module's unit struct).
pub(super) trait Product: Sync {
    /// Its files (names under `/tmp/locklab`, texts) and the shell command
    /// that runs it in the foreground, in a container of the pooler image,
    /// in `mode`, as `at` says.
    ///
    /// # Errors
    /// A name its files cannot hold; a product that does not run in a
    /// container.
    fn container(&self, mode: PoolerMode, at: &Setup<'_>) -> Result<Started>;

    /// The loopback port it is to listen on: a free one.
    ///
    /// # Errors
    /// No free port.
    fn listen_port(&self) -> Result<u16> {
        crate::server::local::free_port()
    }

    /// Whether it authenticates to the server with the password its clients
    /// give (which must then be the server's).
    fn client_password_is_the_servers(&self) -> bool {
        false
    }

    /// Whether an instance for one database makes all its server
    /// connections at start, so that it is ready only when the server shows
    /// them.
    fn makes_server_connections_at_start(&self) -> bool {
        false
    }

    /// How its queue of clients waiting for a server connection is read
    /// ([`queue`]).
    fn queue(&self) -> Queue {
        Queue::Unread
    }
}

/// The module that runs `kind`: `None` for a user's own pooler, which
/// locklab does not start.
fn product(kind: PoolerKind) -> Option<&'static dyn Product> {
    match kind {
        PoolerKind::PgBouncer => Some(&pgbouncer::Debian12),
        PoolerKind::PgBouncerTrixie => Some(&pgbouncer_trixie::Trixie),
        PoolerKind::Pgpool => Some(&pgpool::Pgpool),
        PoolerKind::Pgagroal => Some(&pgagroal::Pgagroal),
        PoolerKind::Odyssey => Some(&odyssey::Odyssey),
        PoolerKind::External => None,
    }
}

/// What a pooler's container is started with.
pub(super) struct Setup<'a> {
    /// The server it forwards to.
    pub up: &'a Upstream<'a>,
    /// The loopback port it listens on ([`Product::listen_port`]).
    pub port: u16,
    /// The password its clients give (scram-sha-256).
    pub password: &'a str,
    /// The one database an instance per database serves.
    pub database: Option<&'a str>,
    /// A scenario's cap on its server connections (`pooler.server_connections`),
    /// else its default ([`SERVER_CONNECTIONS`]; PgBouncer's
    /// `default_pool_size`, [`pgbouncer::DEFAULT_POOL_SIZE`]).
    pub cap: Option<u32>,
    /// What it sends a server connection at check-in (PgBouncer's settings;
    /// the others run their defaults only).
    pub check_in: CheckIn,
}

/// A pooler's files and the command that runs it ([`Product::container`]).
pub(super) struct Started {
    /// (file name under `/tmp/locklab`, its text).
    pub files: Vec<(&'static str, String)>,
    /// The shell command: prints `locklab-version: …`, then execs the pooler.
    pub run: String,
}

/// How a pooler shows its queue of clients waiting for a server connection.
#[derive(Clone, Copy, Debug)]
pub(super) enum Queue {
    /// On its admin console: `SHOW CLIENTS` in `database`, the rows of the
    /// cell's database whose `state` is `waiting_state`.
    Console {
        /// The console's database name.
        database: &'static str,
        /// What `state` reads for a waiting client.
        waiting_state: &'static str,
    },
    /// It lists no clients: the server is asked instead.
    Server,
    /// Not read.
    Unread,
}

/// The server a pooler forwards to.
pub(super) struct Upstream<'a> {
    pub host: &'a str,
    pub port: u16,
    pub user: &'a str,
    pub password: Option<&'a str>,
    /// A database that exists, for the readiness check.
    pub admin_db: &'a str,
}

/// Where a pooler's files are, in its container.
pub(super) const DIR: &str = "/tmp/locklab";

/// How many server connections pgagroal and Odyssey may hold (pgagroal's
/// `max_connections`, and in its transaction pipeline the connections made
/// at start for the cell's database; Odyssey's `pool_size`).
pub(super) const SERVER_CONNECTIONS: u32 = 16;

/// 32 hex digits from the kernel's random source: a pooler's client password.
///
/// # Errors
/// `/dev/urandom` cannot be read.
pub(super) fn random_password() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom for a pooler's password")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Why a pooler column cannot run here, if it cannot: `Some("needs Docker
/// …")` for a pooler in a container when no Docker engine answers.
pub fn unavailable(pooler: Pooler) -> Option<String> {
    if !pooler.kind.in_container() {
        return None;
    }
    // Asked once per process: whether the engine answers does not change
    // within a run, and every cell behind such a pooler asks.
    static NO_ENGINE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    NO_ENGINE
        .get_or_init(|| {
            crate::server::container::docker_answers()
                .err()
                .map(|e| format!("{e:#}"))
        })
        .as_ref()
        .map(|e| format!("needs Docker ({} runs in a container): {e}", pooler.kind.product()))
}

/// A pooler the harness started: Debian 12's PgBouncer as a process, the
/// others in a container.
pub(super) enum RunningPooler {
    Process(pgbouncer::PgBouncer),
    Container(ContainerPooler),
}

impl RunningPooler {
    /// Port, version and client password.
    fn address(&self) -> (u16, String, String) {
        match self {
            RunningPooler::Process(b) => (b.port, b.version.clone(), b.password.clone()),
            RunningPooler::Container(c) => (c.port, c.version.clone(), c.password.clone()),
        }
    }

    async fn exited(&mut self) -> Option<String> {
        match self {
            RunningPooler::Process(b) => b.exited(),
            RunningPooler::Container(c) => c.exited().await,
        }
    }
}

impl crate::server::Server {
    /// Points `spec` at `pooler` in front of this server: a pooler the
    /// harness starts (on first use, on a free loopback port, stopped with
    /// the server) with its client password, or a user's own pooler
    /// ([`PoolerKind::External`]) at its address.
    ///
    /// # Errors
    /// The pooler cannot be installed or started (no Docker engine or image
    /// for one in a container), or is not ready within 30 s.
    pub async fn route(&self, pooler: Pooler, spec: &mut locklab_drivers::ConnectSpec) -> Result<()> {
        self.route_capped(pooler, spec, None).await
    }

    /// As [`Server::route`], with a scenario's cap on the pooler's server
    /// connections (`pooler.server_connections`): behind a transaction-mode
    /// pooler ([`caps`]), the cell's database gets an instance of its own
    /// started with that limit, stopped by [`Server::pooler_close_database`].
    ///
    /// # Errors
    /// As [`Server::route`]; a cap on a pooler the harness does not start
    /// (a user's own, or a PgBouncer attached to a shared server).
    pub async fn route_capped(
        &self,
        pooler: Pooler,
        spec: &mut locklab_drivers::ConnectSpec,
        cap: Option<u32>,
    ) -> Result<()> {
        let cap = cap.filter(|_| caps(pooler));
        if cap.is_some()
            && (pooler.kind == PoolerKind::External
                || (attachable(pooler) && self.attached_poolers.contains_key(&pooler.mode)))
        {
            bail!(
                "the scenario caps the pooler's server connections (pooler.server_connections), and locklab does not start {}",
                pooler.label()
            );
        }
        if let (PoolerKind::External, Some((host, port))) = (pooler.kind, pooler.address) {
            // The user's pooler authenticates the server's role as the
            // server does (its password, if any, stays), unless it was
            // given one of its own.
            spec.host = host.to_owned();
            spec.port = port;
            if let Some(p) = pooler.password {
                spec.password = Some(p.to_owned());
            }
            return Ok(());
        }
        let (port, _, password) = self.pooler_instance(pooler, &spec.dbname, cap).await?;
        spec.host = "127.0.0.1".into();
        spec.port = port;
        spec.password = Some(password);
        Ok(())
    }

    /// The pooler `pooler` in front of this server, started on first use:
    /// its port, version and client password. (One started per database
    /// serves the server's admin database: [`Server::pooler_for`].)
    ///
    /// # Errors
    /// It cannot be started; a user's own pooler ([`PoolerKind::External`]),
    /// which is not started here ([`Server::route`]).
    pub async fn pooler(&self, pooler: Pooler) -> Result<(u16, String, String)> {
        let admin_db = self.admin_db.clone();
        self.pooler_for(pooler, &admin_db).await
    }

    /// The pooler `pooler` in front of this server for clients of database
    /// `dbname`, started on first use (one for all databases, or one for
    /// `dbname` when [`PoolerKind::one_instance_per_database`]): its port,
    /// version and client password.
    ///
    /// # Errors
    /// As [`Server::pooler`].
    pub async fn pooler_for(&self, pooler: Pooler, dbname: &str) -> Result<(u16, String, String)> {
        self.pooler_instance(pooler, dbname, None).await
    }

    /// As [`Server::pooler_for`], for a cell whose scenario caps the
    /// pooler's server connections at `cap` ([`caps`] says where): an
    /// instance for `dbname` alone, started with that limit.
    ///
    /// # Errors
    /// As [`Server::pooler`].
    pub async fn pooler_instance(
        &self,
        pooler: Pooler,
        dbname: &str,
        cap: Option<u32>,
    ) -> Result<(u16, String, String)> {
        if pooler.kind == PoolerKind::External {
            bail!("a pooler of your own is not started by locklab");
        }
        let cap = cap.filter(|_| caps(pooler));
        if attachable(pooler)
            && cap.is_none()
            && let Some(attached) = self.attached_poolers.get(&pooler.mode)
        {
            return Ok(attached.clone());
        }
        let key = (
            pooler,
            (pooler.kind.one_instance_per_database() || cap.is_some()).then(|| dbname.to_owned()),
        );
        let mut poolers = self.poolers.lock().await;
        let own_database = key.1.is_some();
        if let Some(b) = poolers.get_mut(&key) {
            match b.exited().await {
                None => return Ok(b.address()),
                Some(why) => {
                    tracing::warn!("{} exited: {why}; starting a new one", pooler.label());
                    eprintln!("locklab: {} exited: {why}; starting a new one", pooler.label());
                    poolers.remove(&key);
                }
            }
        }
        // An instance for one cell's database: no other cell asks for it,
        // and the others need not wait for its start.
        let held = (!own_database).then_some(poolers);
        let up = Upstream {
            host: &self.host,
            port: self.port,
            user: &self.user,
            password: self.password.as_deref(),
            admin_db: &self.admin_db,
        };
        let started = if pooler.kind.in_container() {
            RunningPooler::Container(
                ContainerPooler::start(pooler, &up, key.1.as_deref(), cap, Duration::from_secs(30))
                    .await
                    .with_context(|| format!("cannot start {}", pooler.label()))?,
            )
        } else {
            RunningPooler::Process(
                pgbouncer::PgBouncer::start(
                    &up,
                    pooler.mode,
                    pooler.check_in,
                    cap.unwrap_or(pgbouncer::DEFAULT_POOL_SIZE),
                    Duration::from_secs(30),
                )
                .await
                .with_context(|| format!("cannot start {}", pooler.label()))?,
            )
        };
        let out = started.address();
        if let Ok(mut seen) = self.pooler_versions_seen.lock() {
            seen.insert(pooler, out.1.clone());
        }
        match held {
            Some(mut poolers) => poolers.insert(key, started),
            None => self.poolers.lock().await.insert(key, started),
        };
        Ok(out)
    }

    /// The version of each pooler started in front of this server (or
    /// attached to it), e.g. `pgbouncer-trixie/session` → `PgBouncer 1.24.1`,
    /// including those started for one database and stopped since.
    /// (A pooler being started at that moment is left out.)
    pub fn pooler_versions(&self) -> std::collections::HashMap<Pooler, String> {
        let mut out: std::collections::HashMap<Pooler, String> = self
            .attached_poolers
            .iter()
            .map(|(mode, (_, version, _))| (Pooler::pgbouncer(*mode), version.clone()))
            .collect();
        if let Ok(seen) = self.pooler_versions_seen.lock() {
            out.extend(seen.iter().map(|(p, v)| (*p, v.clone())));
        }
        out
    }

    /// After a run through `pooler` in database `dbname`: closes the
    /// pooler's client and server connections to it. PgBouncer: `KILL db`
    /// on its admin console (see `PgBouncer::kill_database`), then, with
    /// `reuse`, `RESUME db` for a later cell. Pgpool-II, pgagroal and
    /// Odyssey are given no such command for one database: the server
    /// connections they keep for `dbname` are ended from the server
    /// (`pg_terminate_backend`), as the database is never used again (these
    /// cells do not share databases); so are a user's own pooler's
    /// ([`PoolerKind::External`]), whose console locklab does not use. An
    /// instance started for `dbname` alone is stopped first. `spare`: a
    /// backend of the harness's own in `dbname` that is not the pooler's and
    /// stays (the monitor connection a cell keeps for the next one in a
    /// shared database, e.g. after a scenario that capped PgBouncer's server
    /// connections had an instance of its own).
    ///
    /// # Errors
    /// PgBouncer's admin console or the server refuses the connection or a command.
    pub async fn pooler_close_database(
        &self,
        pooler: Pooler,
        dbname: &str,
        reuse: bool,
        spare: Option<i32>,
    ) -> Result<()> {
        // An instance for `dbname` alone (pgagroal's, or one a scenario's
        // cap started) stops (its container removed, or its process ended;
        // the lock is not held meanwhile), then whatever of its server
        // connections is left is ended from the server, as below.
        let stopped = self.poolers.lock().await.remove(&(pooler, Some(dbname.to_owned())));
        let own_instance = stopped.is_some() || pooler.kind.one_instance_per_database();
        if stopped.is_some() {
            // Its removal (`docker rm -f`, or waiting for the process) blocks.
            let _ = tokio::task::spawn_blocking(move || drop(stopped)).await;
        }
        // The console is reached without holding the lock that every run's
        // `pooler()` takes.
        let from_server = pooler.kind == PoolerKind::External || own_instance;
        let target = match self.attached_poolers.get(&pooler.mode) {
            Some((port, _, password)) if attachable(pooler) && !from_server => Some((*port, password.clone())),
            // A user's own pooler, or one that was started for this database
            // alone: server connections are ended from the server.
            _ if from_server => Some((0, String::new())),
            _ => self.poolers.lock().await.get(&(pooler, None)).map(|b| {
                let (port, _, password) = b.address();
                (port, password)
            }),
        };
        match (target, pooler.kind) {
            (None, _) => Ok(()),
            (Some((port, password)), kind) if kind.closes_server_connections_on_request() && !from_server => {
                pgbouncer::kill_database(port, &password, &self.user, dbname, reuse).await
            }
            (Some(_), _) => {
                let admin = self.admin().await?;
                let ended = tokio::time::timeout(
                    Duration::from_secs(10),
                    admin.client().execute(
                        crate::observe::TERMINATE_DATABASE_BACKENDS_SQL,
                        &[&dbname, &spare.unwrap_or(0)],
                    ),
                )
                .await;
                admin.close().await;
                match ended {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(anyhow!(
                        "cannot end {}'s server connections: {e}",
                        pooler.kind.product()
                    )),
                    Err(_) => Err(anyhow!(
                        "ending {}'s server connections took over 10 s",
                        pooler.kind.product()
                    )),
                }
            }
        }
    }
}

/// Whether a cell behind `pooler` uses the PgBouncer attached to a shared
/// server in its mode (`locklab::server::shared`), which runs with
/// PgBouncer's default check-in: Debian 12's PgBouncer with that check-in.
fn attachable(pooler: Pooler) -> bool {
    pooler.kind == PoolerKind::PgBouncer && pooler.check_in == CheckIn::Default
}

/// Whether a scenario's cap on server connections (`pooler.server_connections`)
/// applies behind `pooler`: in transaction mode, where a server connection
/// serves one client's transaction at a time and others queue for it. In
/// session mode a client keeps its server connection while connected, so a
/// cap would hold up connecting rather than a statement; Pgpool-II has no
/// transaction mode.
pub fn caps(pooler: Pooler) -> bool {
    pooler.mode == PoolerMode::Transaction && pooler.kind.facts().transaction_pooling
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pooler the harness starts has its module ([`product`]), and
    /// every one that runs in a container its line in
    /// `harness/scripts/poolers.list` (the packages the image holds).
    #[test]
    fn every_pooler_has_its_module_and_its_image_line() {
        let list =
            std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/poolers.list"))
                .unwrap();
        let ids: Vec<&str> = list
            .lines()
            .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| l.split('|').next().map(str::trim))
            .collect();
        for kind in PoolerKind::ALL {
            if kind == PoolerKind::External {
                assert!(product(kind).is_none());
                continue;
            }
            assert!(product(kind).is_some(), "{}: no module starts it", kind.as_str());
            assert_eq!(
                ids.contains(&kind.as_str()),
                kind.in_container(),
                "{}: its line in poolers.list (it runs in a container: {})",
                kind.as_str(),
                kind.in_container()
            );
        }
    }
}
