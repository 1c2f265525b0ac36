//! A pooler's queue as the pooler itself shows it: how many clients of one
//! database wait for a server connection, for the `blocked` step's
//! `queued in the pooler` reading ([`crate::outcome::Wait::QueuedInPooler`]).
//!
//! - PgBouncer (1.18 and 1.24): `SHOW CLIENTS` on its admin console, the
//!   rows whose `database` is the cell's and whose `state` is `waiting`
//!   (PgBouncer docs, "SHOW CLIENTS": `active` clients are linked to a
//!   server connection or idle with no queries waiting, `waiting` ones
//!   "have sent queries but have not yet got a server connection").
//! - Odyssey (1.5): `show clients` on its console (database `console`,
//!   configured by [`super::pooler_setup`]), `state` `queue`: Odyssey
//!   puts a client in its route's queue while it tries to attach it to a
//!   server connection and leaves it there while it waits for one
//!   (`od_router_try_attach` in Odyssey's `sources/router.c`; the console's
//!   `od_console_show_clients` in `sources/console.c` writes `active`,
//!   `pending` or `queue`; a client between transactions is `pending`).
//! - pgagroal 1.6 lists no clients (its `pgagroal-cli status details`
//!   lists server connections; its Prometheus gauge `pgagroal_client_wait`
//!   counts clients still authenticating, `src/libpgagroal/worker.c`): its
//!   queue is read from the server instead (the runner's
//!   [`crate::observe::queued_on_no_backend_sql`]).
//! - Pgpool-II and a user's own pooler: not read (a scenario's cap does
//!   not apply to them: [`super::poolers::caps`]).

use anyhow::{Context, Result, anyhow};
use locklab_drivers::{DirectConn, Pooler, PoolerKind};
use tokio_postgres::SimpleQueryMessage;

/// How a cell's pooler shows its queue.
pub enum QueueView {
    /// An open connection to the pooler's admin console (PgBouncer,
    /// Odyssey), asked with `SHOW CLIENTS`.
    Console {
        /// The console connection.
        conn: DirectConn,
        /// Which pooler (what its waiting clients' `state` reads).
        kind: PoolerKind,
    },
    /// pgagroal: no list of clients; the server is asked instead.
    Server,
    /// No pooler, or one whose queue is not read.
    Unread,
}

impl QueueView {
    /// How many clients of database `dbname` the pooler's console lists as
    /// waiting for a server connection; `None` for a pooler read otherwise
    /// ([`QueueView::Server`], [`QueueView::Unread`]).
    ///
    /// # Errors
    /// The console refused `SHOW CLIENTS` or its rows lack `database` or
    /// `state`.
    pub async fn waiting(&mut self, dbname: &str) -> Result<Option<u32>> {
        let QueueView::Console { conn, kind } = self else {
            return Ok(None);
        };
        let waiting_state = match kind {
            PoolerKind::Odyssey => "queue",
            _ => "waiting",
        };
        let messages = conn
            .client()
            .simple_query("SHOW CLIENTS")
            .await
            .with_context(|| format!("{}'s console refused SHOW CLIENTS", kind.product()))?;
        let mut n = 0;
        for m in messages {
            if let SimpleQueryMessage::Row(row) = m {
                let database = row.try_get("database").ok().flatten();
                let state = row.try_get("state").ok().flatten();
                if database.is_none() && state.is_none() {
                    return Err(anyhow!(
                        "{}'s SHOW CLIENTS has no 'database' and 'state' columns",
                        kind.product()
                    ));
                }
                if database == Some(dbname) && state == Some(waiting_state) {
                    n += 1;
                }
            }
        }
        Ok(Some(n))
    }

    /// Closes the console connection, if one is open.
    pub async fn close(self) {
        if let QueueView::Console { conn, .. } = self {
            conn.close().await;
        }
    }
}

impl super::Server {
    /// How the queue of `pooler` (the cell's, started for database
    /// `dbname` with the scenario's `cap`) is read: its console opened, or
    /// [`QueueView::Server`] for pgagroal; [`QueueView::Unread`] without a
    /// pooler, for Pgpool-II and for a user's own.
    ///
    /// # Errors
    /// The pooler cannot be reached, or its console refuses the harness's
    /// user (PgBouncer's `admin_users`; Odyssey's console route).
    pub async fn pooler_queue(&self, pooler: Option<Pooler>, dbname: &str, cap: Option<u32>) -> Result<QueueView> {
        let Some(pooler) = pooler else {
            return Ok(QueueView::Unread);
        };
        let console_db = match pooler.kind {
            PoolerKind::PgBouncer | PoolerKind::PgBouncerTrixie => "pgbouncer",
            PoolerKind::Odyssey => "console",
            PoolerKind::Pgagroal => return Ok(QueueView::Server),
            PoolerKind::Pgpool | PoolerKind::External => return Ok(QueueView::Unread),
        };
        let (port, _, password) = self.pooler_instance(pooler, dbname, cap).await?;
        let spec = super::loopback_spec(port, &self.user, &password, console_db, "locklab-console");
        let conn = tokio::time::timeout(std::time::Duration::from_secs(10), DirectConn::connect(&spec))
            .await
            .map_err(|_| anyhow!("{}'s console did not answer within 10 s", pooler.label()))?
            .map_err(|e| anyhow!("cannot open {}'s console: {e}", pooler.label()))?;
        Ok(QueueView::Console {
            conn,
            kind: pooler.kind,
        })
    }
}
