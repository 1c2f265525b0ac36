//! A pooler's queue as the pooler itself shows it: how many clients of one
//! database wait for a server connection, for the `blocked` step's
//! `queued in the pooler` reading ([`crate::outcome::Wait::QueuedInPooler`]).
//!
//! Each pooler's module says how its queue is read ([`super::Product::queue`]):
//! PgBouncer's and Odyssey's consoles, pgagroal's from the server, not
//! Pgpool-II's or a user's own (a scenario's cap does not apply to them:
//! [`super::caps`]).

use anyhow::{Context, Result, anyhow};
use locklab_drivers::{DirectConn, Pooler, PoolerKind};

use super::Queue;
use tokio_postgres::SimpleQueryMessage;

/// How a cell's pooler shows its queue.
pub enum QueueView {
    /// An open connection to the pooler's admin console (PgBouncer,
    /// Odyssey), asked with `SHOW CLIENTS`.
    Console {
        /// The console connection.
        conn: DirectConn,
        /// Which pooler.
        kind: PoolerKind,
        /// What its waiting clients' `state` reads.
        waiting_state: &'static str,
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
        let QueueView::Console {
            conn,
            kind,
            waiting_state,
        } = self
        else {
            return Ok(None);
        };
        let waiting_state = *waiting_state;
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

impl crate::server::Server {
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
        let (console_db, waiting_state) = match super::product(pooler.kind).map_or(Queue::Unread, |p| p.queue()) {
            Queue::Console {
                database,
                waiting_state,
            } => (database, waiting_state),
            Queue::Server => return Ok(QueueView::Server),
            Queue::Unread => return Ok(QueueView::Unread),
        };
        let (port, _, password) = self.pooler_instance(pooler, dbname, cap).await?;
        let spec = crate::server::loopback_spec(port, &self.user, &password, console_db, "locklab-console");
        let conn = tokio::time::timeout(std::time::Duration::from_secs(10), DirectConn::connect(&spec))
            .await
            .map_err(|_| anyhow!("{}'s console did not answer within 10 s", pooler.label()))?
            .map_err(|e| anyhow!("cannot open {}'s console: {e}", pooler.label()))?;
        Ok(QueueView::Console {
            conn,
            kind: pooler.kind,
            waiting_state,
        })
    }
}
