//! `library`: a lock library's or the sqlx migrator's call on the actor's
//! pool ([`locklab_drivers::libraries`]); where the library does not apply
//! (it takes a sqlx 0.8 `PgPool`), `n/a` with the reason.

use std::time::{Duration, Instant};

use locklab_drivers::{DriverError, Pool};

use super::StepResult;
use super::sql::late;
use super::state::Run;
use crate::outcome::{StatementError, Value};
use crate::scenario::{LibraryStep, Step};

impl Run<'_> {
    /// Runs the call within the step's deadline and records what the
    /// library reported (`acquired`, `released`, …), the error it returned,
    /// or `n/a (why)`.
    pub(super) async fn library(&mut self, step: &Step, l: &LibraryStep, pool: &dyn Pool) -> StepResult {
        let deadline = Duration::from_millis(step.deadline_ms);
        let t0 = Instant::now();
        let r = tokio::time::timeout(deadline, pool.library(l.library, &l.call))
            .await
            .map_err(|_| late(step, "the library call did not return"))?;
        let took = t0.elapsed();
        let value = match r {
            Ok(text) => Value::Text(text),
            Err(DriverError::Unsupported(why)) => {
                self.record_note(step, Value::Unsupported(why), None);
                return Ok(());
            }
            Err(e) => Value::Error(StatementError {
                message: e.to_string(),
                sqlstate: e.sqlstate().map(str::to_owned),
                from_server: matches!(e, DriverError::Db(_)),
            }),
        };
        self.record_note(step, value, Some(took));
        Ok(())
    }
}
