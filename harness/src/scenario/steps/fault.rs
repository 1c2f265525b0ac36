//! Fault steps (`do: crash | terminate | partition | heal`): the harness
//! kills the process that holds an actor's connection, ends its backend, or
//! drops (and restores) its packets; the run remembers when, for a later
//! `granted` step.

use std::time::{Duration, Instant};

use locklab_drivers::{DirectConn, Pool};

use super::context::{Slot, StepCx};
use super::declaration::{BASE, Connection, Declaration, Needs, Placement, Record};
use super::{Checking, Kind, RawStep, Step};
use crate::faults::netns::Namespace;
use crate::observe::{Polled, poll_until};
use crate::scenario::steps::error::{StepError, StepResult};
use crate::scenario::raw::step::Action;
use crate::scenario::{Actor, Via};

// No keys of its own.
pub(crate) use super::no_raw_fields as raw_fields;

/// A fault injected into an actor's connection (`do: crash | terminate |
/// partition | heal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL to the child process that holds a `process: child` actor's connection.
    Crash,
    /// `pg_terminate_backend` on the actor's (or, for a pool actor without a
    /// connection, its last) backend, waiting until the backend has exited.
    Terminate,
    /// Drop the packets of a `network: namespace` actor's connection.
    Partition,
    /// Stop dropping them.
    Heal,
}

impl Fault {
    /// The `do:` word.
    pub fn word(self) -> &'static str {
        FaultStep::FORMS[self as usize].word
    }
}

/// A fault the harness injects into the actor's connection; the run
/// remembers when, for [`super::GrantedStep`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultStep {
    /// Actor index.
    pub actor: usize,
    /// Which fault.
    pub fault: Fault,
}

/// A fault step: no outcome of its own, timed by a later `granted`.
const fn fault(word: &'static str, connection: Connection, needs: Needs, placement: Placement) -> Declaration {
    Declaration {
        word,
        record: Record::No,
        connection,
        needs,
        fault: true,
        placement,
        ..BASE
    }
}

impl Kind for FaultStep {
    const KEY: &'static str = "do";
    /// In [`Fault`]'s order.
    const FORMS: &'static [Declaration] = &[
        fault("crash", Connection::Kills, Needs::ChildProcess, Placement::ColumnServer),
        fault("terminate", Connection::Ends, Needs::Nothing, Placement::ColumnServer),
        fault("partition", Connection::Cuts, Needs::Namespace, Placement::FaultServer),
        Declaration {
            fault: false,
            ..fault("heal", Connection::Cuts, Needs::Namespace, Placement::FaultServer)
        },
    ];

    fn has_key(raw: &RawStep) -> bool {
        raw.action.is_some()
    }

    fn is(raw: &RawStep) -> bool {
        Self::of(raw.action).is_some()
    }

    fn form_of_raw(raw: &RawStep) -> usize {
        Self::of(raw.action).map_or(0, |f| f as usize)
    }

    fn form(&self) -> usize {
        self.fault as usize
    }

    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        let fault = Self::of(raw.action)?;
        match fault {
            Fault::Partition => cx.walk.partitioned.push(cx.index),
            Fault::Heal => cx.walk.partitioned.clear(),
            Fault::Crash | Fault::Terminate => {}
        }
        Some(FaultStep { actor: cx.actor, fault })
    }

    fn actor(&self) -> Option<usize> {
        Some(self.actor)
    }

    fn describe(&self, _: &[Actor], _: &[Step]) -> String {
        self.fault.word().into()
    }

    /// Injects the fault into the actor's connection and notes when, for a
    /// later `granted` step.
    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, pool: &dyn Pool, monitor: &mut DirectConn) -> StepResult {
        let actor = self.actor;
        match self.fault {
            Fault::Crash if cx.scenario.actors[actor].via == Via::Pool => cx.crash_pool(pool, monitor).await,
            Fault::Crash => cx.crash_child(actor, monitor).await,
            Fault::Terminate => cx.terminate(step, actor, monitor).await,
            Fault::Partition | Fault::Heal => cx.cut(actor, self.fault == Fault::Partition, monitor).await,
        }
    }
}

impl FaultStep {
    /// The fault a `do:` action is, if it is one.
    fn of(action: Option<Action>) -> Option<Fault> {
        Some(match action? {
            Action::Crash => Fault::Crash,
            Action::Terminate => Fault::Terminate,
            Action::Partition => Fault::Partition,
            Action::Heal => Fault::Heal,
            _ => return None,
        })
    }
}

impl StepCx<'_> {
    /// `crash` on a pool actor: kills the process the pool under test lives
    /// in, with every connection of the pool.
    async fn crash_pool(&mut self, pool: &dyn Pool, monitor: &mut DirectConn) -> StepResult {
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
    pub(crate) async fn wait_statement_arrived(&self, actor: usize, monitor: &mut DirectConn) -> StepResult {
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
    pub(crate) fn lose_connection(&mut self, actor: usize) {
        match std::mem::replace(&mut self.slots[actor], Slot::Empty) {
            Slot::Busy { handle, .. } => handle.abort(),
            Slot::Ready(c) => drop(c),
            Slot::Empty | Slot::Lost(_) => {}
        }
        self.pids.remove(&actor);
    }
}
