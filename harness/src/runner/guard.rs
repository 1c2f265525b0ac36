//! `lock_guard`: the session-level advisory lock through the driver's own
//! guard API (sqlx `PgAdvisoryLock`), ended as the step says.

use std::time::{Duration, Instant};

use locklab_drivers::DriverError;

use super::sql::late;
use super::state::Run;
use super::{StepError, StepResult};
use crate::outcome::{GuardEnded, Value};
use crate::scenario::{GuardEndRaw, Step};

impl Run<'_> {
    /// Takes the lock on bigint `key` through the guard API and ends the
    /// guard; a driver without one records `n/a (no guard API)`. With
    /// `client_timeout_ms`, the client gives up on `acquire` after that many
    /// ms: its future is dropped and `dropped at N ms` recorded (what the
    /// server and the connection then hold is for later steps to observe).
    pub(super) async fn guard(
        &mut self,
        step: &Step,
        actor: usize,
        key: i64,
        end: GuardEndRaw,
        client_timeout_ms: Option<u64>,
    ) -> StepResult {
        let deadline = Duration::from_millis(step.deadline_ms);
        let conn = self.conn(actor)?;
        let t0 = Instant::now();
        let bound = client_timeout_ms.map_or(deadline, Duration::from_millis);
        let r = match tokio::time::timeout(bound, conn.advisory_lock_guard(key, end.to_driver())).await {
            Ok(r) => r,
            Err(_) => match client_timeout_ms {
                Some(ms) => {
                    let value = Value::Dropped {
                        at_ms: ms,
                        cancel: crate::outcome::Cancel::None,
                    };
                    self.record_note(step, value, Some(t0.elapsed()));
                    return Ok(());
                }
                None => return Err(late(step, "the lock guard was not acquired")),
            },
        };
        let took = t0.elapsed();
        match r {
            Ok(()) => {
                let ended = match end {
                    GuardEndRaw::ReleaseNow => GuardEnded::ReleaseNow,
                    GuardEndRaw::Drop => GuardEnded::Dropped,
                    GuardEndRaw::Leak => GuardEnded::Leaked,
                };
                self.record_note(step, Value::Guard(ended), Some(took));
                Ok(())
            }
            Err(DriverError::Unsupported(why)) => {
                self.record_note(step, Value::Unsupported(why), None);
                Ok(())
            }
            Err(e) => Err(StepError::Driver(format!("lock_guard failed: {e}"))),
        }
    }
}
