//! `sql:` with `background: true`: the statement starts on the actor's
//! connection in a task of its own and the steps go on; an `await` step
//! finishes it.

use std::time::Instant;

use locklab_drivers::{DirectConn, Pool};

use super::context::{Slot, StepCx};
use super::declaration::Declaration;
use super::sql::{SQL, one_line, text};
use super::{Checking, Kind, RawStep, Step};
use crate::scenario::steps::error::{StepError, StepResult};
use crate::scenario::Actor;

// No keys of its own.
pub(crate) use super::no_raw_fields as raw_fields;

/// SQL started on the actor's connection, finished by an [`super::AwaitStep`].
#[derive(Clone, Debug, PartialEq)]
pub struct BackgroundStep {
    /// Actor index.
    pub actor: usize,
    /// The SQL; `${name}` is replaced by saved values when it starts.
    pub sql: String,
}

impl Kind for BackgroundStep {
    const KEY: &'static str = "sql";
    const FORMS: &'static [Declaration] = &[SQL];

    fn has_key(raw: &RawStep) -> bool {
        raw.sql.is_some()
    }

    fn is(raw: &RawStep) -> bool {
        raw.background
    }

    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        Some(BackgroundStep {
            actor: cx.actor,
            sql: text(raw, cx)?,
        })
    }

    fn actor(&self) -> Option<usize> {
        Some(self.actor)
    }

    fn describe(&self, _: &[Actor], _: &[Step]) -> String {
        one_line(&self.sql)
    }

    /// Starts the SQL on the actor's connection in a task of its own.
    async fn run(&self, _: &Step, cx: &mut StepCx<'_>, _: &dyn Pool, _: &mut DirectConn) -> StepResult {
        let sql = cx.substitute(&self.sql)?;
        let actor = self.actor;
        let Slot::Ready(mut conn) = std::mem::replace(&mut cx.slots[actor], Slot::Empty) else {
            return Err(StepError::Harness(format!(
                "actor '{}' has no idle connection",
                cx.scenario.actors[actor].name
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
        cx.slots[actor] = Slot::Busy {
            started,
            handle,
            sql: sent,
        };
        Ok(())
    }
}
