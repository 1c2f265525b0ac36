//! `do: return`: the connection back into the pool under test with no
//! clean-up (the direct driver closes it); the step ends once a closed
//! connection's backend has gone, or a session-mode pooler has reset it.
//! With `client_timeout_ms`, records how the connection went back, or that
//! the give-back had not finished.

use std::time::{Duration, Instant};

use locklab_drivers::{DirectConn, Pool, Returned};

use super::context::{Slot, StepCx};
use super::declaration::{BASE, Connection, Declaration, Record, Side};
use super::{Checking, Kind, RawStep, Step};
use crate::outcome::{Return, Value};
use crate::scenario::steps::error::{StepError, StepResult};
use crate::scenario::Actor;
use crate::scenario::raw::step::Action;

// No keys of its own.
pub(crate) use super::no_raw_fields as raw_fields;

/// Give the connection back with no cleanup (direct driver: close it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReturnStep {
    /// Actor index (a pool actor).
    pub actor: usize,
    /// Client-side bound in ms whose expiry is recorded, not a failure.
    pub client_timeout_ms: Option<u64>,
}

impl Kind for ReturnStep {
    const KEY: &'static str = "do";
    const FORMS: &'static [Declaration] = &[Declaration {
        word: "return",
        side: Side::Pool(
            "'{actor}' is a direct actor; 'return' is for pool actors ('disconnect' closes a direct actor's connection)",
        ),
        record: Record::WhenBounded,
        bounded: true,
        connection: Connection::Closes,
        ..BASE
    }];

    fn has_key(raw: &RawStep) -> bool {
        raw.action.is_some()
    }

    fn is(raw: &RawStep) -> bool {
        raw.action == Some(Action::Return)
    }

    fn check(_: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        Some(ReturnStep {
            actor: cx.actor,
            client_timeout_ms: cx.bound.map(|b| b.ms),
        })
    }

    fn actor(&self) -> Option<usize> {
        Some(self.actor)
    }

    fn describe(&self, _: &[Actor], _: &[Step]) -> String {
        "return".into()
    }

    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, _: &dyn Pool, monitor: &mut DirectConn) -> StepResult {
        match self.client_timeout_ms {
            Some(ms) => bounded_return(cx, step, self.actor, ms).await,
            None => {
                cx.give_back(self.actor, monitor, Duration::from_millis(step.deadline_ms))
                    .await
            }
        }
    }
}

/// A return bounded by `ms`: records how the connection went back, or that
/// the give-back had not finished.
async fn bounded_return(cx: &mut StepCx<'_>, step: &Step, actor: usize, ms: u64) -> StepResult {
    let bound = Duration::from_millis(ms);
    let Slot::Ready(conn) = std::mem::replace(&mut cx.slots[actor], Slot::Empty) else {
        return Err(StepError::Harness(format!(
            "actor '{}' has no connection to return",
            cx.scenario.actors[actor].name
        )));
    };
    cx.pids.remove(&actor);
    let t0 = Instant::now();
    let returned = match conn.give_back_within(bound).await {
        Some(Returned::ToPool) => Return::ToPool,
        Some(Returned::Closed) => Return::Closed,
        Some(Returned::ToPooler) => Return::ToPooler,
        None => Return::Unfinished(ms),
    };
    cx.record_note(step, Value::Return(returned), Some(t0.elapsed()));
    Ok(())
}
