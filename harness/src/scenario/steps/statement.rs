//! Running a statement on an actor's connection and checking and recording
//! its outcome: for `sql`, transaction and `await` steps, and with a
//! client-side bound (`client_timeout_ms`: when it elapses the call's future
//! is dropped, or a cancel request is sent, and the step records that).

use std::time::{Duration, Instant};

use locklab_drivers::DriverError;

use super::context::{SqlOutcome, StepCx, ms};
use super::{Step, check};
use crate::outcome::{Cancel, NoticesRead, Observation, Value};
use crate::scenario::steps::error::{StepError, StepResult};
use crate::scenario::{ClientBound, OnTimeout, RowsExpect, Scalar, SqlExpect, Via};

/// How long a step waits for a statement to end after sending a cancel
/// request before recording that the cancel had no effect.
const CANCEL_GRACE: Duration = Duration::from_millis(1000);

/// What a missed deadline says: the deadline, and what was still awaited.
pub(crate) fn late(step: &Step, what: &str) -> StepError {
    StepError::Deadline(format!("deadline of {} ms exceeded: {what}", step.deadline_ms))
}

impl StepCx<'_> {
    /// Runs `sql` on the actor's connection within the step's deadline.
    pub(crate) async fn statement(&mut self, step: &Step, actor: usize, sql: &str) -> Result<SqlOutcome, StepError> {
        let deadline = Duration::from_millis(step.deadline_ms);
        let conn = self.conn(actor)?;
        let t0 = Instant::now();
        let r = tokio::time::timeout(deadline, conn.simple_query(sql))
            .await
            .map_err(|_| late(step, "the statement had not finished"))?;
        Ok((r, conn.last_elapsed().unwrap_or_else(|| t0.elapsed())))
    }

    /// Runs `sql` with the extended query protocol and `params` on the
    /// actor's connection within the step's deadline.
    pub(crate) async fn extended_statement(
        &mut self,
        step: &Step,
        actor: usize,
        sql: &str,
        params: &[locklab_drivers::Param],
    ) -> Result<SqlOutcome, StepError> {
        let deadline = Duration::from_millis(step.deadline_ms);
        let conn = self.conn(actor)?;
        let t0 = Instant::now();
        let r = tokio::time::timeout(deadline, conn.extended_query(sql, params))
            .await
            .map_err(|_| late(step, "the statement had not finished"))?;
        Ok((r, conn.last_elapsed().unwrap_or_else(|| t0.elapsed())))
    }

    /// Checks and records an SQL step's outcome, and saves its value.
    /// `waited`: for an `await` step, how long the await itself waited (zero
    /// when the result was already in).
    pub(crate) fn finish_sql(
        &mut self,
        step: &Step,
        actor: usize,
        expect: Option<&SqlExpect>,
        save: Option<&str>,
        (result, took): SqlOutcome,
        waited: Option<Duration>,
    ) -> StepResult {
        let elapsed = ms(took);
        if let Some(e) = expect {
            let e = self.expanded(e)?;
            check::check_sql(&e, &result, elapsed).map_err(StepError::Mismatch)?;
        } else if let Err(e) = &result
            && step.record.is_none()
        {
            // A recorded step without `expect` records whatever happens, errors
            // included: that is how a behaviour that differs by driver is measured.
            return Err(StepError::Driver(format!("unexpected error: {e}")));
        }
        if let (Some(var), Ok(rows)) = (save, &result) {
            let v = rows
                .first_value()
                .ok_or_else(|| format!("'save: {var}' but the statement returned no row"))?;
            self.vars.insert(var.to_owned(), v.map(str::to_owned));
        }
        if let Some(name) = &step.record {
            let mut observation = self.observation(name, step, actor, &result, elapsed, waited);
            observation.time_varies = step.time_varies;
            self.result.observations.push(observation);
        }
        Ok(())
    }

    /// `e` with saved values substituted into its expected texts.
    fn expanded(&self, e: &SqlExpect) -> Result<SqlExpect, String> {
        let mut e = e.clone();
        if let Some(Scalar::Text(t)) = &e.value {
            e.value = Some(Scalar::Text(self.substitute(t)?));
        }
        if let Some(RowsExpect::Exact(rows)) = &mut e.rows {
            for v in rows.iter_mut().flatten() {
                if let Scalar::Text(t) = v {
                    *t = self.substitute(t)?;
                }
            }
        }
        Ok(e)
    }

    /// The observation a recorded statement makes: its first value (or its
    /// error), timing and its notices: a direct actor's, in its reading; a
    /// pool actor's (where the column's library passes them on), shown but
    /// not compared ([`NoticesRead`]).
    fn observation(
        &self,
        name: &str,
        step: &Step,
        actor: usize,
        result: &Result<locklab_drivers::Rows, DriverError>,
        elapsed: f64,
        waited: Option<Duration>,
    ) -> Observation {
        let notices = result.as_ref().map(|r| r.notices.clone()).unwrap_or_default();
        let mut o = Observation::new(
            name,
            step.index + 1,
            outcome_value(result),
            notices,
            Some(elapsed),
            waited.map(ms),
        );
        if self.scenario.actors[actor].via == Via::Pool && !o.notices.is_empty() {
            o.notices_read = NoticesRead::Shown;
        }
        o
    }

    /// Runs `sql` on `actor` bounded by `bound`. When the bound elapses: `drop`
    /// drops the call's future and records that; `cancel` sends a cancel
    /// request and waits (within the deadline) for the statement's own
    /// outcome, which is checked and recorded as usual.
    pub(crate) async fn bounded_sql(
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
                Err(_) => return Err(late(step, "the bounded statement had not finished")),
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
}

/// A statement's outcome as a recorded value: its first value, or its error.
pub(crate) fn outcome_value(result: &Result<locklab_drivers::Rows, DriverError>) -> Value {
    match result {
        Ok(rows) => match rows.first_value() {
            None => Value::NoRows,
            Some(None) => Value::Null,
            Some(Some(t)) => Value::of_text(t),
        },
        Err(e) => Value::of_driver_error(e),
    }
}
