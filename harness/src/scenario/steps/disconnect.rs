//! `do: disconnect`: closes a direct actor's dedicated connection (a
//! client-side disconnect); the step ends once the server has let the
//! backend go.

use std::time::Duration;

use locklab_drivers::{DirectConn, Pool};

use super::context::StepCx;
use super::declaration::{BASE, Connection, Declaration, Record, Side};
use super::{Checking, Kind, RawStep, Step};
use crate::scenario::steps::error::StepResult;
use crate::scenario::Actor;
use crate::scenario::raw::step::Action;

// No keys of its own.
pub(crate) use super::no_raw_fields as raw_fields;

/// Close a direct actor's dedicated connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DisconnectStep {
    /// Actor index (a direct actor).
    pub actor: usize,
}

impl Kind for DisconnectStep {
    const KEY: &'static str = "do";
    const FORMS: &'static [Declaration] = &[Declaration {
        word: "disconnect",
        side: Side::Direct(
            "'{actor}' is a pool actor; 'disconnect' is for direct actors ('return' gives a pooled connection back)",
        ),
        record: Record::No,
        connection: Connection::Closes,
        ..BASE
    }];

    fn has_key(raw: &RawStep) -> bool {
        raw.action.is_some()
    }

    fn is(raw: &RawStep) -> bool {
        raw.action == Some(Action::Disconnect)
    }

    fn check(_: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        Some(DisconnectStep { actor: cx.actor })
    }

    fn actor(&self) -> Option<usize> {
        Some(self.actor)
    }

    fn describe(&self, _: &[Actor], _: &[Step]) -> String {
        "disconnect".into()
    }

    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, _: &dyn Pool, monitor: &mut DirectConn) -> StepResult {
        cx.give_back(self.actor, monitor, Duration::from_millis(step.deadline_ms))
            .await
    }
}
