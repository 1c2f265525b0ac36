//! `held_count`: how many times the actor's session holds a session-level
//! advisory lock, probed on its own connection ([`crate::held_count`]).

use std::time::{Duration, Instant};

use super::StepResult;
use super::sql::late;
use super::state::Run;
use crate::held_count;
use crate::outcome::Value;
use crate::scenario::{HeldCountStep, Step};

impl Run<'_> {
    /// Runs the probe on the actor's connection and records `held N×`, or
    /// the statement's error (a failed transaction, a probe missing behind a
    /// pooler that routes to another database) as any recorded statement's.
    pub(super) async fn held_count(&mut self, step: &Step, h: &HeldCountStep) -> StepResult {
        let deadline = Duration::from_millis(step.deadline_ms);
        let sql = held_count::probe_sql(h.key, h.shared);
        let conn = self.conn(h.actor)?;
        let t0 = Instant::now();
        let r = tokio::time::timeout(deadline, conn.simple_query(&sql))
            .await
            .map_err(|_| late(step, "the held_count probe had not finished"))?;
        let took = conn.last_elapsed().unwrap_or_else(|| t0.elapsed());
        let value = match r {
            Ok(rows) => {
                let text = rows.first_value().flatten().unwrap_or_default();
                let count = text
                    .parse::<i64>()
                    .map_err(|_| format!("the held_count probe answered {text:?}, not a count"))?;
                Value::HeldCount {
                    count,
                    shared: h.shared,
                }
            }
            Err(e) => Value::of_driver_error(&e),
        };
        self.record_note(step, value, Some(took));
        Ok(())
    }
}
