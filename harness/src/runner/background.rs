//! Background steps: `background: true` starts SQL and goes on, `await`
//! finishes it, `abandon` drops it with its connection, `order` compares when
//! awaited steps completed.

use std::time::{Duration, Instant};

use super::state::{Run, Slot};
use super::{StepError, StepResult};
use crate::outcome::Value;
use crate::scenario::{AwaitStep, Step};

impl Run<'_> {
    /// Starts `sql` on the actor's connection in a task of its own.
    pub(super) fn start_background(&mut self, actor: usize, sql: &str) -> StepResult {
        let sql = self.substitute(sql)?;
        let Slot::Ready(mut conn) = std::mem::replace(&mut self.slots[actor], Slot::Empty) else {
            return Err(StepError::Harness(format!(
                "actor '{}' has no idle connection",
                self.scenario.actors[actor].name
            )));
        };
        let started = Instant::now();
        let sent = sql.clone();
        let handle = tokio::spawn(async move {
            let t0 = Instant::now();
            let r = conn.simple_query(&sql).await;
            let done = Instant::now();
            let took = conn.last_elapsed().unwrap_or(done - t0);
            (conn, (r, took), done)
        });
        self.slots[actor] = Slot::Busy {
            started,
            handle,
            sql: sent,
        };
        Ok(())
    }

    /// Waits, within the background step's deadline, for it to finish; checks
    /// and records its outcome here.
    pub(super) async fn await_background(&mut self, step: &Step, a: &AwaitStep) -> StepResult {
        let await_began = Instant::now();
        let Slot::Busy { started, handle, .. } = std::mem::replace(&mut self.slots[a.actor], Slot::Empty) else {
            return Err(StepError::Harness(format!(
                "actor '{}' has no background step to await",
                self.scenario.actors[a.actor].name
            )));
        };
        let bg = &self.scenario.steps[a.target];
        let remaining = Duration::from_millis(bg.deadline_ms).saturating_sub(started.elapsed());
        let mut handle = handle;
        let (conn, outcome, done) = match tokio::time::timeout(remaining, &mut handle).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                return Err(StepError::Harness(format!(
                    "background step {} panicked: {e}",
                    a.target + 1
                )));
            }
            Err(_) => {
                handle.abort();
                return Err(StepError::Deadline(format!(
                    "background step {} ({}) exceeded its deadline of {} ms",
                    a.target + 1,
                    bg.label(&self.scenario.actors, &self.scenario.steps),
                    bg.deadline_ms
                )));
            }
        };
        self.slots[a.actor] = Slot::Ready(conn);
        self.finished.insert(a.target, done);
        let waited = done.saturating_duration_since(await_began);
        let timed_elsewhere = self.faults.timed_by_granted(a.actor, started);
        self.finish_sql(step, a.actor, a.expect.as_ref(), None, outcome, Some(waited))?;
        if timed_elsewhere && step.record.is_some() {
            // A `granted` step timed this call's end (from the fault); its
            // own time, from its start, measures the harness's steps between.
            if let Some(o) = self.result.observations.last_mut() {
                o.elapsed_ms = None;
                o.waited_ms = None;
            }
        }
        Ok(())
    }

    /// Drops the task, and with it the statement's future and the connection
    /// object, mid-call.
    pub(super) async fn abandon(&mut self, step: &Step, actor: usize, pool: &dyn locklab_drivers::Pool) -> StepResult {
        let Slot::Busy { handle, .. } = std::mem::replace(&mut self.slots[actor], Slot::Empty) else {
            return Err(StepError::Harness(format!(
                "actor '{}' has no background step to abandon",
                self.scenario.actors[actor].name
            )));
        };
        handle.abort();
        let _ = handle.await;
        pool.settle(Duration::from_millis(step.deadline_ms)).await;
        self.pids.remove(&actor);
        Ok(())
    }

    /// Whether the awaited `steps` completed in this order (client side).
    pub(super) fn order(&mut self, step: &Step, steps: &[usize]) -> StepResult {
        let id_of = |i: &usize| self.scenario.steps[*i].id.clone().unwrap_or_default();
        let mut seen: Vec<(Instant, usize)> = steps
            .iter()
            .filter_map(|i| self.finished.get(i).map(|t| (*t, *i)))
            .collect();
        seen.sort();
        let actual: Vec<String> = seen.iter().map(|(_, i)| id_of(i)).collect();
        let wanted: Vec<String> = steps.iter().map(id_of).collect();
        self.record_note(step, Value::Order(actual.clone()), None);
        if actual == wanted {
            Ok(())
        } else {
            Err(StepError::Mismatch(format!(
                "expected completion order {}, got {}",
                wanted.join(" → "),
                actual.join(" → ")
            )))
        }
    }
}
