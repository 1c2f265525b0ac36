//! `library`: a lock library's or the sqlx migrator's call on the actor's
//! pool ([`locklab_drivers::libraries`]); where the library does not apply
//! (it takes a sqlx 0.8 `PgPool`), `n/a` with the reason.

use std::time::{Duration, Instant};

use locklab_drivers::{Conn, DirectConn, DriverError, Pool};

use super::StepResult;
use super::sql::late;
use super::state::Run;
use crate::outcome::Value;
use crate::scenario::{LibraryStep, Step};

impl Run<'_> {
    /// Runs the call within the step's deadline and records what the
    /// library reported (`acquired`, `released`, …), the error it returned,
    /// or `n/a (why)`. The backends of the run's database no actor has had
    /// are then the library's: a lock snapshot names them after the step's
    /// actor (as a checkout's `select pg_backend_pid()` names an actor's).
    pub(super) async fn library(
        &mut self,
        step: &Step,
        l: &LibraryStep,
        pool: &dyn Pool,
        monitor: &mut DirectConn,
    ) -> StepResult {
        let deadline = Duration::from_millis(step.deadline_ms);
        let t0 = Instant::now();
        let r = tokio::time::timeout(deadline, pool.library(l.library, &l.call))
            .await
            .map_err(|_| late(step, "the library call did not return"))?;
        let took = t0.elapsed();
        self.name_library_backends(l.actor, monitor).await;
        let value = match r {
            Ok(text) => Value::Text(text),
            Err(DriverError::Unsupported(why)) => {
                self.record_note(step, Value::Unsupported(why), None);
                return Ok(());
            }
            Err(e) => Value::of_driver_error(&e),
        };
        self.record_note(step, value, Some(took));
        Ok(())
    }

    /// Names the backends of the run's database that no actor has had
    /// after `actor` (a library's pooled connections, which no checkout
    /// of the harness's saw). A failed query leaves them unnamed.
    async fn name_library_backends(&mut self, actor: usize, monitor: &mut DirectConn) {
        let sql = "select pid from pg_stat_activity where datname = current_database() \
                   and backend_type = 'client backend' and pid <> pg_backend_pid()";
        let Ok(rows) = monitor.simple_query(sql).await else {
            return;
        };
        let known: std::collections::HashSet<i32> = self.pids.values().copied().collect();
        for pid in rows
            .rows
            .iter()
            .filter_map(|r| r.first()?.as_deref()?.parse::<i32>().ok())
        {
            if !known.contains(&pid) && !self.last_user.contains_key(&pid) {
                self.last_user.insert(pid, actor);
            }
        }
    }
}
