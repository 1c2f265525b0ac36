//! `sql` and transaction steps in the foreground, and how a statement's
//! outcome is checked and recorded (also for `await`).

use std::time::{Duration, Instant};

use locklab_drivers::DriverError;

use super::state::{Run, SqlOutcome};
use super::{StepError, StepResult, expect, ms};
use crate::outcome::{NoticesRead, Observation, Value};
use crate::scenario::{RowsExpect, Scalar, SqlExpect, SqlStep, Step, TransactionStep, Via};

/// What a missed deadline says: the deadline, and what was still awaited.
pub(super) fn late(step: &Step, what: &str) -> StepError {
    StepError::Deadline(format!("deadline of {} ms exceeded: {what}", step.deadline_ms))
}

impl Run<'_> {
    /// A foreground `sql` step (bounded by `client_timeout_ms` if it has one).
    pub(super) async fn sql(&mut self, step: &Step, s: &SqlStep) -> StepResult {
        let sql = self.substitute(&s.sql)?;
        if let Some(bound) = s.bound {
            return self.bounded_sql(step, s.actor, &sql, bound, s.expect.as_ref()).await;
        }
        let outcome = self.statement(step, s.actor, &sql).await?;
        self.finish_sql(step, s.actor, s.expect.as_ref(), s.save.as_deref(), outcome, None)
    }

    /// `begin`, `commit` or `rollback`.
    pub(super) async fn transaction(&mut self, step: &Step, t: &TransactionStep) -> StepResult {
        if let Some(bound) = t.bound {
            return self
                .bounded_sql(step, t.actor, t.action.sql(), bound, t.expect.as_ref())
                .await;
        }
        let deadline = Duration::from_millis(step.deadline_ms);
        let conn = self.conn(t.actor)?;
        let t0 = Instant::now();
        let r = tokio::time::timeout(deadline, conn.transaction(t.action.control()))
            .await
            .map_err(|_| late(step, "the statement had not finished"))?;
        let took = conn.last_elapsed().unwrap_or_else(|| t0.elapsed());
        self.finish_sql(step, t.actor, t.expect.as_ref(), None, (r, took), None)
    }

    /// Runs `sql` on the actor's connection within the step's deadline.
    async fn statement(&mut self, step: &Step, actor: usize, sql: &str) -> Result<SqlOutcome, StepError> {
        let deadline = Duration::from_millis(step.deadline_ms);
        let conn = self.conn(actor)?;
        let t0 = Instant::now();
        let r = tokio::time::timeout(deadline, conn.simple_query(sql))
            .await
            .map_err(|_| late(step, "the statement had not finished"))?;
        Ok((r, conn.last_elapsed().unwrap_or_else(|| t0.elapsed())))
    }

    /// Checks and records an SQL step's outcome, and saves its value.
    /// `waited`: for an `await` step, how long the await itself waited (zero
    /// when the result was already in).
    pub(super) fn finish_sql(
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
            expect::check_sql(&e, &result, elapsed).map_err(StepError::Mismatch)?;
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
}

/// A statement's outcome as a recorded value: its first value, or its error.
pub(super) fn outcome_value(result: &Result<locklab_drivers::Rows, DriverError>) -> Value {
    match result {
        Ok(rows) => match rows.first_value() {
            None => Value::NoRows,
            Some(None) => Value::Null,
            Some(Some(t)) => Value::of_text(t),
        },
        Err(e) => Value::of_driver_error(e),
    }
}
