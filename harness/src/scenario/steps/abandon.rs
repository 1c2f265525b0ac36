//! `do: abandon`: drops the actor's in-flight background step together with
//! its connection (the future and the pooled connection object go away
//! mid-call; a pool gets the connection back with the statement still
//! running).

use std::time::Duration;

use locklab_drivers::{DirectConn, Pool};

use super::context::{Slot, StepCx};
use super::declaration::{BASE, Connection, Declaration, Record};
use super::{Checking, Kind, RawStep, Step};
use crate::scenario::steps::error::{StepError, StepResult};
use crate::scenario::Actor;
use crate::scenario::raw::step::Action;

// No keys of its own.
pub(crate) use super::no_raw_fields as raw_fields;

/// Drop the actor's in-flight background step together with its connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AbandonStep {
    /// Actor index.
    pub actor: usize,
}

impl Kind for AbandonStep {
    const KEY: &'static str = "do";
    const FORMS: &'static [Declaration] = &[Declaration {
        word: "abandon",
        record: Record::No,
        connection: Connection::DropsBackground,
        ..BASE
    }];

    fn has_key(raw: &RawStep) -> bool {
        raw.action.is_some()
    }

    fn is(raw: &RawStep) -> bool {
        raw.action == Some(Action::Abandon)
    }

    fn check(_: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        Some(AbandonStep { actor: cx.actor })
    }

    fn actor(&self) -> Option<usize> {
        Some(self.actor)
    }

    fn describe(&self, _: &[Actor], _: &[Step]) -> String {
        "abandon".into()
    }

    /// Drops the task, and with it the statement's future and the
    /// connection object, mid-call.
    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, pool: &dyn Pool, _: &mut DirectConn) -> StepResult {
        let actor = self.actor;
        let Slot::Busy { handle, .. } = std::mem::replace(&mut cx.slots[actor], Slot::Empty) else {
            return Err(StepError::Harness(format!(
                "actor '{}' has no background step to abandon",
                cx.scenario.actors[actor].name
            )));
        };
        handle.abort();
        let _ = handle.await;
        pool.settle(Duration::from_millis(step.deadline_ms)).await;
        cx.pids.remove(&actor);
        Ok(())
    }
}
