//! Giving an actor's connection back (`return`, `disconnect`, and the
//! runner's check that every pool actor returned its own), waiting on the
//! server until a closed connection's backend (and with it its locks) is
//! gone.

use std::time::{Duration, Instant};

use locklab_drivers::{Conn, DirectConn, PoolerMode, Returned};

use super::context::{Slot, StepCx};
use crate::observe::{self, Polled, poll_from, poll_until};
use crate::scenario::steps::error::{StepError, StepResult};

impl StepCx<'_> {
    /// Gives `actor`'s connection back with no cleanup. When the return closes
    /// it (direct driver), waits until the server has let its backend go, and
    /// with it its locks: the backend exits asynchronously after the socket
    /// closes. Behind PgBouncer in session mode, waits for its reset instead.
    pub(crate) async fn give_back(&mut self, actor: usize, monitor: &mut DirectConn, deadline: Duration) -> StepResult {
        let Slot::Ready(conn) = std::mem::replace(&mut self.slots[actor], Slot::Empty) else {
            return Err(StepError::Harness(format!(
                "actor '{}' has no connection to return",
                self.scenario.actors[actor].name
            )));
        };
        let pid = self.pid_of(actor);
        self.pids.remove(&actor);
        let returned = tokio::time::timeout(deadline, conn.give_back()).await.map_err(|_| {
            StepError::Deadline(format!(
                "deadline of {} ms exceeded: the connection was not given back",
                deadline.as_millis()
            ))
        })?;
        match returned {
            // A connection whose pid could not be read (its first statement
            // failed: a dead connection handed out, by the pool or by the
            // pooler) has no backend to wait for.
            Returned::Closed | Returned::ToPooler if pid.is_err() => {}
            Returned::Closed => self.wait_gone(monitor, pid?, Instant::now() + deadline).await?,
            Returned::ToPooler if self.info.pooler_mode() == Some(PoolerMode::Session) => {
                self.wait_reset(monitor, pid?, Instant::now() + deadline).await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Waits until the pooler (session mode) has run its reset (PgBouncer's
    /// `server_reset_query`, `DISCARD ALL` by default; pgagroal's `DISCARD
    /// ALL;`; Odyssey's `pool_discard`) on backend `pid` after the client closed
    /// (the last statement of that backend, finished), or has closed that
    /// server connection instead (it does so for one left inside a
    /// transaction): the backend is gone.
    async fn wait_reset(&self, monitor: &mut DirectConn, pid: i32, until: Instant) -> Result<(), String> {
        let reset = self.info.pooler.map_or("DISCARD ALL", |p| p.check_in.reset_query());
        let sql = observe::reset_or_gone_sql(pid, reset);
        let polled = poll_until(until, async || {
            let rows = monitor.simple_query(&sql).await.map_err(|e| e.to_string())?;
            let row = rows.rows.first().cloned().unwrap_or_default();
            let reset = row.first().cloned().flatten().as_deref() == Some("1");
            let gone = row.get(1).cloned().flatten().as_deref() == Some("0");
            Ok::<_, String>((reset || gone).then_some(()))
        })
        .await?;
        match polled {
            Polled::Done(()) => Ok(()),
            Polled::TimedOut => Err(format!(
                "{} did not reset backend {pid} ({reset}) after its client closed",
                self.info.pooler.map_or("the pooler", |p| p.kind.product())
            )),
        }
    }

    /// Behind a pooler in transaction mode that resets a server connection
    /// after every transaction (`CheckIn::resets_every_transaction`): waits until no
    /// server connection of the run's database is released and not yet
    /// reset, so that the step after a pool actor's statement sees the
    /// reset done, as the next client would. Elsewhere returns at once.
    pub(crate) async fn wait_pooler_reset(&self, monitor: &mut DirectConn, until: Instant) -> Result<(), String> {
        let Some(pooler) = self
            .info
            .pooler
            .filter(|p| p.mode == PoolerMode::Transaction && p.check_in.resets_every_transaction())
        else {
            return Ok(());
        };
        let direct: Vec<i32> = self
            .pids
            .iter()
            .filter(|(a, _)| self.scenario.actors[**a].via == crate::scenario::Via::Direct)
            .map(|(_, p)| *p)
            .collect();
        let sql = observe::unreset_backends_sql(self.db, &direct, pooler.check_in.reset_query());
        let polled = poll_until(until, async || {
            let rows = monitor.simple_query(&sql).await.map_err(|e| e.to_string())?;
            let pending = rows.rows.first().and_then(|r| r.first().cloned().flatten());
            Ok::<_, String>((pending.as_deref() == Some("0")).then_some(()))
        })
        .await?;
        match polled {
            Polled::Done(()) => Ok(()),
            Polled::TimedOut => Err(format!(
                "{} did not reset a released server connection ({})",
                pooler.kind.product(),
                pooler.check_in.reset_query()
            )),
        }
    }

    /// Waits until backend `pid` has left `pg_stat_activity` (polled from
    /// [`observe::EXIT_FIRST_PAUSE`]: a closed connection's backend usually
    /// exits within a few ms).
    async fn wait_gone(&self, monitor: &mut DirectConn, pid: i32, until: Instant) -> Result<(), String> {
        let polled = poll_from(until, observe::EXIT_FIRST_PAUSE, async || {
            observe::backend_gone(&mut *monitor, pid).await.map(|g| g.then_some(()))
        })
        .await
        .map_err(|e| e.to_string())?;
        match polled {
            Polled::Done(()) => Ok(()),
            Polled::TimedOut => Err(format!(
                "backend {pid} was still in pg_stat_activity after its connection was closed"
            )),
        }
    }
}
