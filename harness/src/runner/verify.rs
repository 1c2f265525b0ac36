//! After the steps: the guide's Verify step (which advisory locks are still
//! held once every actor is done) and ending what a run left behind.

use std::time::Duration;

use locklab_drivers::{Conn, DirectConn};

use super::StepResult;
use super::state::Run;
use crate::observe;
use crate::scenario::Via;
use crate::scenario::steps::context::Slot;

impl Run<'_> {
    /// A failed step may have left backends inside a statement (a step past
    /// its deadline waiting on a lock nobody releases): each one's pid and
    /// what it was waiting for, to end it and say so in the failure.
    pub(super) async fn stuck_backends(&self, monitor: &mut DirectConn) -> Vec<(i32, String)> {
        let rows = match monitor.simple_query(observe::STUCK_SQL).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!("cannot read the stuck backends of a failed run: {e}");
                return Vec::new();
            }
        };
        let mut stuck = Vec::new();
        for r in rows.rows {
            let text = |i: usize| r.get(i).cloned().flatten().unwrap_or_default();
            let Ok(pid) = text(0).parse::<i32>() else { continue };
            let blockers: Vec<String> = text(2)
                .split(',')
                .filter_map(|p| p.parse::<i32>().ok())
                .map(|p| self.backend_name(p))
                .collect();
            let blocked = if blockers.is_empty() {
                String::new()
            } else {
                format!(", blocked by {}", blockers.join(", "))
            };
            stuck.push((
                pid,
                format!(
                    "{} waiting on {}{blocked}: {}",
                    self.backend_name(pid),
                    text(1),
                    text(3)
                ),
            ));
        }
        stuck
    }

    /// Phase 4 (end): when the steps passed, every pool actor's connection
    /// goes back to the pool as application code would (a closed one: until
    /// its backend is gone); then, passed or not, the advisory locks still
    /// held are the cell's "locks left after run" (on failure: what was held
    /// when it failed).
    pub(super) async fn verify(&mut self, mut outcome: StepResult, monitor: &mut DirectConn) -> StepResult {
        if outcome.is_ok() {
            for i in 0..self.slots.len() {
                if self.scenario.actors[i].via == Via::Pool
                    && matches!(self.slots[i], Slot::Ready(_))
                    && let Err(e) = self.give_back(i, monitor, Duration::from_secs(10)).await
                {
                    outcome = Err(e.map(|e| format!("after the last step: {e}")));
                }
            }
        }
        match observe::advisory_locks(monitor, None, false).await {
            Ok(rows) => self.result.locks_left = rows.into_iter().filter(|r| r.granted).collect(),
            Err(e) => outcome = outcome.and(Err(format!("cannot read pg_locks after the run: {e}").into())),
        }
        outcome
    }

    /// Phase 5: ends every backend still holding or waiting for an advisory
    /// lock in the run's database (a ghost lock, a leak: `cleaned_backends`);
    /// after a failure, every other backend too (so that neither the pool's
    /// close nor a return-time check waits on them), naming the `stuck` ones
    /// in the failure.
    pub(super) async fn end_leftovers(
        &mut self,
        mut outcome: StepResult,
        stuck: Vec<(i32, String)>,
        monitor: &mut DirectConn,
    ) -> StepResult {
        match monitor.simple_query(observe::CLEAN_ADVISORY_SQL).await {
            Ok(rows) => {
                self.result.cleaned_backends = rows
                    .rows
                    .iter()
                    .filter_map(|r| r.first().cloned().flatten()?.parse().ok())
                    .collect();
            }
            Err(e) => outcome = outcome.and(Err(format!("cannot end the backends left holding locks: {e}").into())),
        }
        if outcome.is_err() {
            let _ = monitor.simple_query(observe::TERMINATE_OTHERS_SQL).await;
            if !stuck.is_empty() {
                for (pid, _) in &stuck {
                    if !self.result.cleaned_backends.contains(pid) {
                        self.result.cleaned_backends.push(*pid);
                    }
                }
                let what: Vec<&str> = stuck.iter().map(|(_, w)| w.as_str()).collect();
                outcome = outcome.map_err(|e| {
                    e.map(|e| {
                        format!(
                            "{e}; still in a statement when the run failed, ended by the harness: {}",
                            what.join("; ")
                        )
                    })
                });
            }
        }
        outcome
    }
}
