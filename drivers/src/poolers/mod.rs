//! Configurations that reach the server through a pooler ([`Pooler`]): one
//! module per pooler product holding its [`Facts`] and its columns, and
//! [`ViaPooler`], the inner driver (tokio-postgres without a pool, or
//! deadpool-postgres) pointed at it. The harness starts the pooler in front
//! of the server in the mode the column names (`locklab::server`, one
//! module per pooler there too) and hands the inner driver a
//! [`ConnectSpec`](crate::ConnectSpec) pointing at it; the inner driver is
//! unchanged.
//!
//! A client connection that closes does not end its server connection: in
//! session mode the pooler resets it (PgBouncer's `server_reset_query`,
//! default `DISCARD ALL`, which includes `pg_advisory_unlock_all()`) and
//! keeps it; in transaction mode the server connection goes back to the
//! pooler's pool at every transaction end, with no reset (PgBouncer docs,
//! "pool_mode", "server_reset_query").
//!
//! Adding a pooler: a module here with its `FACTS` and `COLUMNS`, a variant
//! of [`PoolerKind`] with its arm in [`PoolerKind::facts`] (the compiler
//! checks the match), a module in the harness that starts it, and its
//! package's line in `harness/scripts/poolers.list`.

mod check_in;
mod odyssey;
mod own;
mod pgagroal;
mod pgbouncer;
mod pgbouncer_trixie;
mod pgpool;
mod via;

pub use check_in::{CheckIn, Modelled};
pub(crate) use via::ViaPooler;

use crate::Driver;

/// A pooler's `pool_mode` (PgBouncer docs, "pool_mode"; the others' own
/// words: pgagroal's `pipeline`, Odyssey's `pool`).
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

/// Which pooler a configuration goes through. What is true of each is in
/// its [`Facts`] ([`PoolerKind::facts`]), kept in the pooler's own module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PoolerKind {
    /// PgBouncer from Debian 12's package (1.18), run as a process of the
    /// harness.
    PgBouncer,
    /// PgBouncer from Debian 13's package (1.24), in a container.
    PgBouncerTrixie,
    /// pgagroal from Debian 13's package (1.6.0), in a container.
    Pgagroal,
    /// Pgpool-II from Debian 13's package (4.6), in a container.
    Pgpool,
    /// Odyssey from Debian sid's package (1.5.2), in a container.
    Odyssey,
    /// A pooler the user runs, at the address of a user's columns file
    /// ([`Pooler::address`]).
    External,
}

/// Whether cancel requests are sent through a pooler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelRequests {
    /// They are sent; what happens is what the cancellation cells record.
    Sent,
    /// They are not (why, as a step's reading says it).
    NotSent(&'static str),
}

/// What is true of one pooler product, as locklab runs it: each field says
/// what the harness and the report do with it; each product's module says
/// where the fact comes from (its docs, its source, what was seen here).
#[derive(Debug)]
pub struct Facts {
    /// Its id in column ids and messages: `pgbouncer`, `pgbouncer-trixie`,
    /// `pgagroal`, `pgpool`, `odyssey`, `external`.
    pub id: &'static str,
    /// The product's name, as reports and messages say it: `PgBouncer`,
    /// `pgagroal`, `Pgpool-II`, `Odyssey`.
    pub product: &'static str,
    /// Whether it runs in a container (and so needs a Docker engine).
    pub in_container: bool,
    /// Whether which of its server connections a client (or a transaction)
    /// gets varies from run to run, so that its cells' readings vary by
    /// nature: they compare with the baseline by status alone.
    pub readings_vary: bool,
    /// Whether it closes a client connection of its own accord, with
    /// nothing wrong on either side: a cell that meets it records the
    /// pooler's behaviour (a deviation), not a cell that could not run.
    pub closes_client_connections: bool,
    /// Whether the harness can have it close its server connections to one
    /// database on request (PgBouncer's `KILL db`, then `RESUME db`), so
    /// that a cell behind it may share a database an earlier cell left
    /// clean. Behind the others a cell keeps a database of its own.
    pub closes_server_connections_on_request: bool,
    /// Whether the harness starts an instance of it for each cell's
    /// database, with every server connection made at start.
    pub one_instance_per_database: bool,
    /// Whether locklab sends cancel requests through it.
    pub cancel: CancelRequests,
    /// Whether it has transaction pooling (a scenario's cap on server
    /// connections applies there: `locklab::server::caps`).
    pub transaction_pooling: bool,
    /// Whether a new client connection, in session mode, may get another
    /// server connection than the last client had (so a scenario's
    /// assumptions about server connections may not hold:
    /// [`Pooler::breaks_session_assumptions`]).
    pub session_backend_varies: bool,
    /// Whether a client's connection settings (the `options` startup
    /// parameter, `-c lock_timeout=150ms`) reach the server through it. A
    /// scenario with `pool.settings` (other than `application_name`) is not
    /// run behind a pooler where they do not: its readings are `n/a
    /// (settings cannot pass PRODUCT)`.
    pub settings_pass: bool,
    /// Its columns, each behind tokio-postgres without a pool and (most)
    /// behind deadpool-postgres (`RecyclingMethod::Fast`) too.
    pub columns: &'static [Column],
}

/// A pooler in one mode and check-in as a column without a pool, and
/// mostly a second one behind deadpool-postgres `RecyclingMethod::Fast`.
#[derive(Debug)]
pub struct Column {
    /// The mode.
    pub mode: PoolerMode,
    /// What the pooler sends a server connection at check-in.
    pub check_in: CheckIn,
    /// The products (and modes) whose check-in this column stands for,
    /// each with its source; the card of the column without a pool says,
    /// per product, whether a session-level lock survives check-in.
    pub models: &'static [Modelled],
    /// The column id without a pool, e.g. `pgbouncer-session`.
    pub id: &'static str,
    /// Its configuration, in the pooler's own terms.
    pub configuration: &'static str,
    /// The column behind deadpool-postgres, if there is one.
    pub pooled: Option<Pooled>,
    /// The column behind a sqlx 0.9 `PgPool` (defaults), if there is one:
    /// sqlx's own advisory-lock guard (`lock_guard` steps) behind the pooler.
    pub sqlx: Option<Pooled>,
}

/// A pooler column behind a client-side pool: deadpool-postgres
/// `RecyclingMethod::Fast` ([`Column::pooled`]) or sqlx ([`Column::sqlx`]).
#[derive(Debug)]
pub struct Pooled {
    /// The column id, e.g. `pgbouncer-session+deadpool`.
    pub id: &'static str,
    /// Its configuration.
    pub configuration: &'static str,
}

/// The products whose check-in the pooler column `id` models
/// ([`Column::models`]); empty for any other column.
pub fn models_of(id: &str) -> &'static [Modelled] {
    PoolerKind::ALL
        .into_iter()
        .flat_map(|k| k.facts().columns)
        .find(|c| c.id == id)
        .map_or(&[], |c| c.models)
}

impl PoolerKind {
    /// Every kind, in column order.
    pub const ALL: [PoolerKind; 6] = [
        PoolerKind::PgBouncer,
        PoolerKind::PgBouncerTrixie,
        PoolerKind::Pgpool,
        PoolerKind::Pgagroal,
        PoolerKind::Odyssey,
        PoolerKind::External,
    ];

    /// What is true of it (its module's `FACTS`).
    pub fn facts(self) -> &'static Facts {
        match self {
            PoolerKind::PgBouncer => &pgbouncer::FACTS,
            PoolerKind::PgBouncerTrixie => &pgbouncer_trixie::FACTS,
            PoolerKind::Pgagroal => &pgagroal::FACTS,
            PoolerKind::Pgpool => &pgpool::FACTS,
            PoolerKind::Odyssey => &odyssey::FACTS,
            PoolerKind::External => &own::FACTS,
        }
    }

    /// Its id ([`Facts::id`]).
    pub fn as_str(self) -> &'static str {
        self.facts().id
    }

    /// The kind whose [`PoolerKind::as_str`] is `s`.
    pub fn from_id(s: &str) -> Option<PoolerKind> {
        PoolerKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// [`Facts::readings_vary`].
    pub fn readings_vary(self) -> bool {
        self.facts().readings_vary
    }

    /// [`Facts::closes_client_connections`].
    pub fn closes_client_connections(self) -> bool {
        self.facts().closes_client_connections
    }

    /// The product's name ([`Facts::product`]).
    pub fn product(self) -> &'static str {
        self.facts().product
    }

    /// [`Facts::in_container`].
    pub fn in_container(self) -> bool {
        self.facts().in_container
    }

    /// [`Facts::closes_server_connections_on_request`].
    pub fn closes_server_connections_on_request(self) -> bool {
        self.facts().closes_server_connections_on_request
    }

    /// [`Facts::one_instance_per_database`].
    pub fn one_instance_per_database(self) -> bool {
        self.facts().one_instance_per_database
    }

    /// Whether locklab sends cancel requests through it ([`Facts::cancel`]).
    pub fn sends_cancel(self) -> bool {
        self.facts().cancel == CancelRequests::Sent
    }

    /// [`Facts::settings_pass`].
    pub fn settings_pass(self) -> bool {
        self.facts().settings_pass
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
    /// What it sends a server connection at check-in (PgBouncer's
    /// `server_reset_query`, `server_reset_query_always`).
    pub check_in: CheckIn,
    /// Where a user's own pooler listens ([`PoolerKind::External`]): host
    /// and port. `None` for the poolers the harness starts.
    pub address: Option<(&'static str, u16)>,
    /// A user's own pooler that must get no cancel requests (`cancel:
    /// false` in the columns file: PgBouncer 1.18 exits on one).
    pub no_cancel: bool,
    /// The password a user's own pooler takes from clients, when it is not
    /// the server's (`password:` in the columns file, `pooler-check
    /// --pooler postgres://ROLE:PASSWORD@…`). Never serialized.
    #[serde(skip)]
    pub password: Option<&'static str>,
}

impl Pooler {
    /// One of the poolers the harness starts (not [`PoolerKind::External`],
    /// which needs an address: [`Pooler::external`]), in `mode`.
    pub const fn new(kind: PoolerKind, mode: PoolerMode) -> Pooler {
        Pooler {
            kind,
            mode,
            check_in: CheckIn::Default,
            address: None,
            no_cancel: false,
            password: None,
        }
    }

    /// This pooler with check-in `check_in`.
    pub const fn checking_in(self, check_in: CheckIn) -> Pooler {
        Pooler { check_in, ..self }
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
            check_in: CheckIn::Default,
            address: Some((host, port)),
            no_cancel: !cancel,
            password: None,
        }
    }

    /// This (user's own) pooler, taking `password` from clients instead of
    /// the server's.
    pub const fn with_password(self, password: Option<&'static str>) -> Pooler {
        Pooler { password, ..self }
    }

    /// Whether locklab sends cancel requests through it
    /// ([`PoolerKind::sends_cancel`], and not for a user's pooler declared
    /// with `cancel: false`).
    pub fn sends_cancel(self) -> bool {
        self.kind.sends_cancel() && !self.no_cancel
    }

    /// Why no cancel request is sent through it, as a step's reading says
    /// it, when none is.
    pub fn no_cancel_reason(self) -> Option<&'static str> {
        match self.kind.facts().cancel {
            CancelRequests::NotSent(why) => Some(why),
            CancelRequests::Sent if self.no_cancel => {
                Some("not sent through this pooler (cancel: false in its columns file)")
            }
            CancelRequests::Sent => None,
        }
    }

    /// Whether a scenario's assumptions about server connections may not
    /// hold behind it, so that a failed expectation is recorded as a
    /// deviation, not a failure: in transaction mode an actor's statements
    /// may run on different server connections; in session mode, behind a
    /// pooler whose [`Facts::session_backend_varies`].
    pub fn breaks_session_assumptions(self) -> bool {
        self.mode == PoolerMode::Transaction || self.kind.facts().session_backend_varies
    }

    /// `pgbouncer-trixie/transaction` (`pgbouncer/session/reset-keeping-locks`
    /// for another check-in than the default), for messages.
    pub fn label(self) -> String {
        match self.check_in.label() {
            None => format!("{}/{}", self.kind.as_str(), self.mode.as_str()),
            Some(c) => format!("{}/{}/{c}", self.kind.as_str(), self.mode.as_str()),
        }
    }
}

/// The configurations behind the poolers the harness starts: each pooler's
/// columns ([`Facts::columns`]) in [`PoolerKind::ALL`]'s order.
pub(crate) fn columns() -> Vec<Box<dyn Driver>> {
    let mut out: Vec<Box<dyn Driver>> = Vec::new();
    for kind in PoolerKind::ALL {
        for c in kind.facts().columns {
            let pooler = Pooler::new(kind, c.mode).checking_in(c.check_in);
            out.push(Box::new(ViaPooler::new(
                c.id,
                c.configuration,
                pooler,
                crate::direct::TokioPostgresDirect,
            )));
            if let Some(p) = &c.pooled {
                out.push(Box::new(ViaPooler::new(
                    p.id,
                    p.configuration,
                    pooler,
                    crate::deadpool_pg::Deadpool::fast(),
                )));
            }
            #[cfg(feature = "columns")]
            if let Some(p) = &c.sqlx {
                out.push(Box::new(ViaPooler::new(
                    p.id,
                    p.configuration,
                    pooler,
                    crate::SqlxPgPool::configured(p.id, p.configuration, |o| o),
                )));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ALL` names every kind once (the match fails to compile when a
    /// variant is added and not listed here too).
    #[test]
    fn all_lists_every_kind_once() {
        for kind in PoolerKind::ALL {
            let listed = match kind {
                PoolerKind::PgBouncer
                | PoolerKind::PgBouncerTrixie
                | PoolerKind::Pgagroal
                | PoolerKind::Pgpool
                | PoolerKind::Odyssey
                | PoolerKind::External => PoolerKind::ALL.iter().filter(|k| **k == kind).count(),
            };
            assert_eq!(listed, 1, "{kind:?}");
            assert_eq!(PoolerKind::from_id(kind.as_str()), Some(kind));
        }
    }

    #[test]
    fn column_ids_name_their_pooler_and_mode() {
        for kind in PoolerKind::ALL {
            for c in kind.facts().columns {
                assert!(c.id.starts_with(kind.as_str()), "{}", c.id);
                assert!(
                    c.configuration.starts_with(kind.product()),
                    "{}: {}",
                    c.id,
                    c.configuration
                );
                if let Some(p) = &c.sqlx {
                    assert_eq!(p.id, format!("{}+sqlx", c.id));
                    assert!(p.configuration.starts_with(kind.product()), "{}", p.id);
                }
                if let Some(p) = &c.pooled {
                    assert_eq!(p.id, format!("{}+deadpool", c.id));
                    assert!(
                        p.configuration.starts_with(kind.product()),
                        "{}: {}",
                        p.id,
                        p.configuration
                    );
                }
                // Another check-in than the product's default is a PgBouncer
                // setting, and its column names it.
                if c.check_in != CheckIn::Default {
                    assert!(
                        kind == PoolerKind::PgBouncer && (c.id.contains("-reset-") || c.id.contains("-discard-")),
                        "{}",
                        c.id
                    );
                    assert!(!c.models.is_empty(), "{}: which products it models", c.id);
                }
                assert!(
                    kind.facts().transaction_pooling || c.mode == PoolerMode::Session,
                    "{}",
                    c.id
                );
            }
        }
    }
}
