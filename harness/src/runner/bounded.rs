//! Steps with `client_timeout_ms`: a client-side bound like
//! `tokio::time::timeout`. When it elapses the call's future is dropped (or,
//! for `sql` with `on_timeout: cancel`, a cancel request is sent) and the
//! step records that instead of failing.

use std::time::{Duration, Instant};

use locklab_drivers::Returned;

use super::state::{Run, Slot};
use super::{CANCEL_GRACE, StepError, StepResult};
use crate::outcome::{Cancel, Checkout, Return, Value};
use crate::scenario::{ClientBound, OnTimeout, SqlExpect, Step};

impl Run<'_> {
    /// Runs `sql` on `actor` bounded by `bound`. When the bound elapses: `drop`
    /// drops the call's future and records that; `cancel` sends a cancel
    /// request and waits (within the deadline) for the statement's own
    /// outcome, which is checked and recorded as usual.
    pub(super) async fn bounded_sql(
        &mut self,
        step: &Step,
        actor: usize,
        sql: &str,
        bound: ClientBound,
        expect: Option<&SqlExpect>,
    ) -> StepResult {
        let limit = Duration::from_millis(bound.ms);
        let deadline = Duration::from_millis(step.deadline_ms);
        let conn = self.conn(actor)?;
        let canceller = match bound.on_timeout {
            OnTimeout::Cancel => conn.canceller(),
            OnTimeout::Drop => None,
        };
        let no_cancel = conn.no_cancel_reason();
        let t0 = Instant::now();
        let outcome = match canceller {
            // Given up the client's own way (Rust: the future dropped), also
            // when a cancel was asked for but the driver has none to send.
            None => match tokio::time::timeout(deadline, conn.simple_query_within(sql, limit)).await {
                Ok(Some(r)) => Ok(r),
                Ok(None) if bound.on_timeout == OnTimeout::Cancel => Err(Cancel::NotSent(no_cancel.to_string())),
                Ok(None) => Err(Cancel::None),
                Err(_) => return Err(super::sql::late(step, "the bounded statement had not finished")),
            },
            Some(cancel) => {
                let mut fut = conn.simple_query(sql);
                match tokio::time::timeout(limit, &mut fut).await {
                    Ok(r) => Ok(r),
                    Err(_) => {
                        let rest = deadline.saturating_sub(t0.elapsed());
                        match tokio::time::timeout(rest, cancel()).await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => return Err(StepError::Driver(format!("the cancel request failed: {e}"))),
                            Err(_) => {
                                return Err(StepError::Deadline(format!(
                                    "the cancel request was not sent within the deadline of {} ms",
                                    step.deadline_ms
                                )));
                            }
                        }
                        // A cancel that lands ends the statement at once; one that
                        // does not is recorded as such and the call dropped.
                        let rest = deadline.saturating_sub(t0.elapsed()).min(CANCEL_GRACE);
                        match tokio::time::timeout(rest, &mut fut).await {
                            Ok(r) => Ok(r),
                            Err(_) => Err(Cancel::NoEffect(u64::try_from(rest.as_millis()).unwrap_or(u64::MAX))),
                        }
                    }
                }
            }
        };
        let took = match &outcome {
            Ok(_) => conn.last_elapsed().unwrap_or_else(|| t0.elapsed()),
            Err(_) => t0.elapsed(),
        };
        match outcome {
            Ok(r) => self.finish_sql(step, actor, expect, None, (r, took), None),
            Err(cancel) => self.dropped(step, bound, expect.is_some(), cancel, took),
        }
    }

    /// Records a call whose future was dropped: the client stopped waiting;
    /// the server was not told.
    fn dropped(
        &mut self,
        step: &Step,
        bound: ClientBound,
        expects: bool,
        cancel: Cancel,
        took: Duration,
    ) -> StepResult {
        let value = Value::Dropped {
            at_ms: bound.ms,
            cancel,
        };
        if expects {
            return Err(StepError::Harness(format!(
                "{value} (client_timeout_ms), so the expectation cannot be checked"
            )));
        }
        self.record_note(step, value, Some(took));
        Ok(())
    }

    /// A checkout bounded by `ms`: a checkout that gives up (or fails) leaves
    /// the actor without a connection, and later steps record that.
    pub(super) async fn bounded_checkout(
        &mut self,
        step: &Step,
        actor: usize,
        ms: u64,
        pool: &dyn locklab_drivers::Pool,
    ) -> StepResult {
        let bound = Duration::from_millis(ms);
        let t0 = Instant::now();
        let checkout = match pool.checkout_within(bound).await {
            None => Checkout::Dropped(ms),
            Some(Err(e)) => Checkout::Failed(e.to_string()),
            Some(Ok(conn)) => {
                self.slots[actor] = Slot::Ready(conn);
                // The harness's one added statement, bounded by the same
                // client timeout on its own (so how long the checkout took
                // does not decide the cell): a connection handed out with a
                // statement still queued on it does not answer.
                if self.learn_pid(actor, bound).await {
                    Checkout::Ok
                } else {
                    Checkout::NoAnswer(ms)
                }
            }
        };
        if matches!(checkout, Checkout::Dropped(_) | Checkout::Failed(_)) {
            // Later steps of the actor record this instead of running.
            self.slots[actor] = Slot::Lost(Value::Checkout(checkout.clone()).to_string());
        }
        self.record_note(step, Value::Checkout(checkout), Some(t0.elapsed()));
        Ok(())
    }

    /// A return bounded by `ms`: records how the connection went back, or
    /// that the give-back had not finished.
    pub(super) async fn bounded_return(&mut self, step: &Step, actor: usize, ms: u64) -> StepResult {
        let bound = Duration::from_millis(ms);
        let Slot::Ready(conn) = std::mem::replace(&mut self.slots[actor], Slot::Empty) else {
            return Err(StepError::Harness(format!(
                "actor '{}' has no connection to return",
                self.scenario.actors[actor].name
            )));
        };
        self.pids.remove(&actor);
        let t0 = Instant::now();
        let returned = match conn.give_back_within(bound).await {
            Some(Returned::ToPool) => Return::ToPool,
            Some(Returned::Closed) => Return::Closed,
            Some(Returned::ToPooler) => Return::ToPooler,
            None => Return::Unfinished(ms),
        };
        self.record_note(step, Value::Return(returned), Some(t0.elapsed()));
        Ok(())
    }
}
