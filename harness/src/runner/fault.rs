//! Fault steps (`do: crash | terminate | partition | heal`) and the
//! `granted` step that times how long a lost holder kept its lock.

use std::time::{Duration, Instant};

use locklab_drivers::DirectConn;

use super::state::{Run, Slot};
use super::{StepError, StepResult};
use crate::faults::netns::Namespace;
use crate::observe::{Polled, poll_until};
use crate::outcome::Value;
use crate::scenario::step::Fault;
use crate::scenario::{Step, Via};

impl Run<'_> {
    /// Injects `fault` into `actor`'s connection and notes when, for a later
    /// `granted` step.
    pub(super) async fn fault(
        &mut self,
        step: &Step,
        actor: usize,
        fault: Fault,
        pool: &dyn locklab_drivers::Pool,
        monitor: &mut DirectConn,
    ) -> StepResult {
        match fault {
            Fault::Crash if self.scenario.actors[actor].via == Via::Pool => self.crash_pool(pool, monitor).await,
            Fault::Crash => self.crash_child(actor, monitor).await,
            Fault::Terminate => self.terminate(step, actor, monitor).await,
            Fault::Partition | Fault::Heal => self.cut(actor, fault == Fault::Partition, monitor).await,
        }
    }

    /// `crash` on a pool actor: kills the process the pool under test lives
    /// in, with every connection of the pool.
    async fn crash_pool(&mut self, pool: &dyn locklab_drivers::Pool, monitor: &mut DirectConn) -> StepResult {
        for i in 0..self.scenario.actors.len() {
            if self.scenario.actors[i].via == Via::Pool {
                self.wait_statement_arrived(i, monitor).await?;
            }
        }
        self.faults.struck();
        pool.crash()
            .await
            .map_err(|e| StepError::Harness(format!("cannot crash the pool under test: {e}")))?;
        // Every connection of the pool died with its process: the
        // connection objects (idle, or in a background step's task)
        // only hold the adapter's ids.
        for i in 0..self.scenario.actors.len() {
            if self.scenario.actors[i].via == Via::Pool {
                self.lose_connection(i);
            }
        }
        Ok(())
    }

    /// `crash` on a direct actor: kills its child process.
    async fn crash_child(&mut self, actor: usize, monitor: &mut DirectConn) -> StepResult {
        let scenario = self.scenario;
        let name = &scenario.actors[actor].name;
        let child = self
            .faults
            .children
            .get(&actor)
            .cloned()
            .ok_or_else(|| StepError::Harness(format!("actor '{name}' has no child process to crash")))?;
        self.wait_statement_arrived(actor, monitor).await?;
        self.faults.struck();
        child.crash().await.map_err(StepError::Harness)?;
        // The connection object (idle, or inside the background
        // step's task) goes with it: its pipes are closed.
        self.lose_connection(actor);
        Ok(())
    }

    /// `terminate`: ends the actor's backend (or the one it last had) and
    /// waits until it has exited.
    async fn terminate(&mut self, step: &Step, actor: usize, monitor: &mut DirectConn) -> StepResult {
        let scenario = self.scenario;
        let name = &scenario.actors[actor].name;
        let pid = self
            .pids
            .get(&actor)
            .or_else(|| self.had_pid.get(&actor))
            .copied()
            .ok_or_else(|| StepError::Harness(format!("the backend pid of '{name}' is unknown")))?;
        self.faults.struck();
        // PostgreSQL 14+: with a timeout, pg_terminate_backend waits
        // until the backend has exited (docs §9.28.2).
        let sql = crate::observe::terminate_backend_sql(pid, step.deadline_ms.saturating_sub(100).max(1));
        let rows = tokio::time::timeout(
            Duration::from_millis(step.deadline_ms),
            monitor.client().simple_query(&sql),
        )
        .await
        .map_err(|_| {
            StepError::Deadline(format!(
                "backend {pid} of '{name}' had not exited within {} ms",
                step.deadline_ms
            ))
        })?
        .map_err(|e| {
            StepError::Driver(format!(
                "cannot terminate backend {pid} of '{name}': {}",
                locklab_drivers::DriverError::from(e)
            ))
        })?;
        let terminated = rows.iter().any(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0) == Some("t"),
            _ => false,
        });
        // A backend already gone (its client crashed, or the pool
        // closed the connection) counts: the step ensures it is gone.
        if !terminated
            && !crate::observe::backend_gone(monitor, pid)
                .await
                .map_err(|e| StepError::Driver(e.to_string()))?
        {
            return Err(StepError::Deadline(format!(
                "backend {pid} of '{name}' had not exited {} ms after pg_terminate_backend",
                step.deadline_ms
            )));
        }
        Ok(())
    }

    /// `partition` (`cut`) or `heal` a `network: namespace` actor's connection.
    async fn cut(&mut self, actor: usize, cut: bool, monitor: &mut DirectConn) -> StepResult {
        let name = self.scenario.actors[actor].name.clone();
        let port = *self.faults.ns_ports.get(&actor).ok_or_else(|| {
            StepError::Harness(format!(
                "actor '{name}' has no connection in the run's network namespace"
            ))
        })?;
        let ns = Namespace::get().map_err(StepError::Harness)?;
        if !cut {
            return ns.heal(port).await.map_err(StepError::Harness);
        }
        // An idle connection: what the server sent is acknowledged
        // (see Namespace::wait_acknowledged), unless the actor is
        // running a statement.
        if matches!(self.slots[actor], Slot::Ready(_)) {
            let server_port = self.server.spec(self.db, "").port;
            let acked = ns
                .wait_acknowledged(port, server_port, Duration::from_secs(1))
                .await
                .map_err(StepError::Harness)?;
            if !acked {
                return Err(StepError::Harness(format!(
                    "the server's last data to '{name}' was not acknowledged within 1 s"
                )));
            }
        }
        self.wait_statement_arrived(actor, monitor).await?;
        self.faults.struck();
        ns.cut(port).await.map_err(StepError::Harness)
    }

    /// With a background step in flight on `actor`, waits (up to 1 s) until
    /// its backend runs the statement (`state = 'active'`): a statement still
    /// in a pipe or a socket buffer when the fault strikes would leave an idle
    /// backend, which sees the closed connection at once, and the cell would
    /// measure the harness's timing instead of the fault.
    ///
    /// # Errors
    /// The statement had not reached the server within 1 s, or a failed query.
    async fn wait_statement_arrived(&self, actor: usize, monitor: &mut DirectConn) -> StepResult {
        if !matches!(self.slots[actor], Slot::Busy { .. }) {
            return Ok(());
        }
        let Some(&pid) = self.pids.get(&actor) else {
            return Ok(());
        };
        let deadline = Instant::now() + Duration::from_secs(1);
        let polled = poll_until(deadline, async || {
            crate::observe::is_active(monitor, pid).await.map(|a| a.then_some(()))
        })
        .await
        .map_err(|e| StepError::Driver(e.to_string()))?;
        match polled {
            Polled::Done(()) => Ok(()),
            Polled::TimedOut => Err(StepError::Harness(format!(
                "the background statement of '{}' had not reached its backend {pid} within 1 s",
                self.scenario.actors[actor].name
            ))),
        }
    }

    /// Drops `actor`'s connection object, whose process was killed (idle,
    /// or inside a background step's task, which is aborted).
    fn lose_connection(&mut self, actor: usize) {
        match std::mem::replace(&mut self.slots[actor], Slot::Empty) {
            Slot::Busy { handle, .. } => handle.abort(),
            Slot::Ready(c) => drop(c),
            Slot::Empty | Slot::Lost(_) => {}
        }
        self.pids.remove(&actor);
    }

    /// Restarts the cell's own server, then opens a new connection for the
    /// observer and for the harness's monitor (the old ones died with the
    /// server); the other actors keep what they had, to find out.
    pub(super) async fn restart(
        &mut self,
        step: &Step,
        observer: usize,
        immediate: bool,
        monitor: &mut DirectConn,
    ) -> StepResult {
        self.faults.struck();
        // Bounded inside (30 s to stop, 60 s to start): cutting it short here
        // would drop the postmaster's handle halfway.
        self.server
            .restart(immediate)
            .await
            .map_err(|e| StepError::Harness(format!("{e:#}")))?;
        // 57P03 (cannot_connect_now: starting up, shutting down) means "not
        // yet": asked again until the step's deadline.
        let until = Instant::now() + Duration::from_millis(step.deadline_ms);
        let name = self.scenario.actors[observer].name.clone();
        let conn = while_starting(until, async || self.connect_direct(observer).await)
            .await
            .map_err(|e| StepError::Driver(format!("cannot reconnect '{name}' after the restart: {e}")))?;
        self.slots[observer] = Slot::Ready(conn);
        self.learn_pid(observer, Duration::from_millis(step.deadline_ms)).await;
        let spec = self.server.spec(self.db, "locklab-monitor");
        *monitor = while_starting(until, async || DirectConn::connect(&spec).await)
            .await
            .map_err(|e| StepError::Driver(format!("cannot reopen the monitor connection after the restart: {e}")))?;
        Ok(())
    }

    /// Waits until `target`'s background lock call no longer waits, at most
    /// the step's deadline after the last fault; records `released` with the
    /// time since the fault, or `still held at N s`. No longer waiting means
    /// the call has finished, or the server shows it not blocked
    /// (`pg_blocking_pids` empty) once it has been seen blocked (by this
    /// step, or by a `blocked` step before): a call not yet seen blocked may
    /// not have reached the server, so its not being blocked says nothing. (A call
    /// that keeps running once granted, other than the lock call itself, and
    /// was never seen blocked, reads `still held`: the shipped waiters are
    /// single lock calls, which finish once granted.)
    pub(super) async fn granted(&mut self, step: &Step, observer: usize, target: usize) -> StepResult {
        let pid = self.pid_of(target)?;
        let since = self.faults.at.unwrap_or_else(Instant::now);
        let until = since + Duration::from_millis(step.deadline_ms);
        if let Slot::Busy { started, .. } = &self.slots[target] {
            self.faults.timed_by_granted.insert(target, *started);
        }
        // Seen blocked by a `blocked` step before the fault, or here.
        let mut seen_blocked = matches!(
            (&self.slots[target], self.faults.seen_blocked.get(&target)),
            (Slot::Busy { started, .. }, Some(seen)) if started == seen
        );
        let polled = poll_until(until, async || {
            if let Slot::Busy { handle, .. } = &self.slots[target]
                && handle.is_finished()
            {
                return Ok(Some(()));
            }
            let conn = self.conn(observer).map_err(StepError::Harness)?;
            let blocked = crate::observe::is_blocked(conn.as_mut(), pid)
                .await
                .map_err(|e| StepError::Driver(e.to_string()))?;
            seen_blocked |= blocked;
            Ok::<_, StepError>((seen_blocked && !blocked).then_some(()))
        })
        .await?;
        let took = since.elapsed();
        match polled {
            Polled::Done(()) => self.record_note(step, Value::Released, Some(took)),
            Polled::TimedOut => self.record_note(step, Value::StillHeld(step.deadline_ms), Some(took)),
        }
        Ok(())
    }
}

/// `connect`, asked again every 20 ms while the server answers 57P03
/// (cannot_connect_now: starting up, shutting down), until `until`.
///
/// # Errors
/// The last attempt's error.
async fn while_starting<T>(
    until: Instant,
    mut connect: impl AsyncFnMut() -> Result<T, locklab_drivers::DriverError>,
) -> Result<T, locklab_drivers::DriverError> {
    loop {
        match connect().await {
            Err(e) if e.sqlstate() == Some("57P03") && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}
