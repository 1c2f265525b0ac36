//! `await: ID`: waits, within the background step's deadline, for the
//! background step with this id to finish; its `expect` and `record` go
//! here. The step's actor is the awaited step's.

use std::time::{Duration, Instant};

use locklab_drivers::{DirectConn, Pool};

use super::context::{Slot, StepCx};
use super::declaration::{BASE, Connection, Declaration, Expects, Side};
use super::expect::SqlExpect;
use super::{Checking, Kind, RawStep, Step};
use crate::scenario::steps::error::{StepError, StepResult};
use crate::scenario::validate::expect::Expect;
use crate::scenario::validate::walk::{ABANDONED, Conn};
use crate::scenario::{Actor, Pos};

macro_rules! raw_fields {
    ($next:ident [$($f:tt)*] $($rest:tt)*) => {
        $next! { @collect [$($f)*
            /// Wait for the background step with this id to finish; its `expect` and `record` go here.
            #[serde(default, rename = "await")]
            #[schemars(with = "Option<String>")]
            pub(crate) await_step: Option<serde_saphyr::Spanned<String>>,
        ] $($rest)* }
    };
}
pub(crate) use raw_fields;

/// An `await` step.
#[derive(Clone, Debug, PartialEq)]
pub struct AwaitStep {
    /// The awaited step's actor.
    pub actor: usize,
    /// Index of the awaited background step.
    pub target: usize,
    /// What must hold for the background step's outcome.
    pub expect: Option<SqlExpect>,
}

impl Kind for AwaitStep {
    const KEY: &'static str = "await";
    const FORMS: &'static [Declaration] = &[Declaration {
        word: "await",
        side: Side::Awaited,
        expects: Expects::Sql,
        own_deadline: false,
        connection: Connection::Finishes,
        ..BASE
    }];

    fn has_key(raw: &RawStep) -> bool {
        raw.await_step.is_some()
    }

    /// The awaited step, which must be a background step in flight: its
    /// actor is this step's.
    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        let aw = raw.await_step.as_ref()?;
        let (n, apos) = (cx.n, Pos::of(&aw.referenced));
        let Some(&target) = cx.walk.ids.get(&aw.value) else {
            cx.err(
                apos,
                format!("step {n} awaits '{}', which is not the id of an earlier step", aw.value),
            );
            return None;
        };
        let Some(actor) = cx.walk.state.iter().position(|c| *c == Conn::Busy(target)) else {
            let why = match cx.walk.background.get(&target) {
                None => "not a background step",
                Some(Some(ABANDONED)) => "abandoned by an earlier step",
                Some(Some(_)) => "already awaited",
                Some(None) => "not in flight",
            };
            cx.err(apos, format!("step {n} awaits '{}', which is {why}", aw.value));
            return None;
        };
        cx.walk.background.insert(target, Some(cx.index));
        Some(AwaitStep {
            actor,
            target,
            expect: None,
        })
    }

    fn expect(&mut self, e: Expect) {
        self.expect = Some(e.sql);
    }

    fn actor(&self) -> Option<usize> {
        Some(self.actor)
    }

    fn describe(&self, _: &[Actor], steps: &[Step]) -> String {
        let target = &steps[self.target];
        format!(
            "await {}",
            target.id.clone().unwrap_or_else(|| format!("step {}", self.target + 1))
        )
    }

    /// Waits, within the background step's deadline, for it to finish;
    /// checks and records its outcome here.
    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, _: &dyn Pool, _: &mut DirectConn) -> StepResult {
        let a = self;
        let await_began = Instant::now();
        let Slot::Busy { started, handle, .. } = std::mem::replace(&mut cx.slots[a.actor], Slot::Empty) else {
            return Err(StepError::Harness(format!(
                "actor '{}' has no background step to await",
                cx.scenario.actors[a.actor].name
            )));
        };
        let bg = &cx.scenario.steps[a.target];
        let remaining = Duration::from_millis(bg.deadline_ms).saturating_sub(started.elapsed());
        let mut handle = handle;
        let (conn, outcome, done) = match tokio::time::timeout(remaining, &mut handle).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                return Err(StepError::Harness(format!(
                    "background step {} panicked: {e}",
                    a.target + 1
                )));
            }
            Err(_) => {
                handle.abort();
                return Err(StepError::Deadline(format!(
                    "background step {} ({}) exceeded its deadline of {} ms",
                    a.target + 1,
                    bg.label(&cx.scenario.actors, &cx.scenario.steps),
                    bg.deadline_ms
                )));
            }
        };
        cx.slots[a.actor] = Slot::Ready(conn);
        cx.finished.insert(a.target, done);
        let waited = done.saturating_duration_since(await_began);
        let timed_elsewhere = cx.faults.timed_by_granted(a.actor, started);
        cx.finish_sql(step, a.actor, a.expect.as_ref(), None, outcome, Some(waited))?;
        if timed_elsewhere && step.record.is_some() {
            // A `granted` step timed this call's end (from the fault); its
            // own time, from its start, measures the harness's steps between.
            if let Some(o) = cx.result.observations.last_mut() {
                o.elapsed_ms = None;
                o.waited_ms = None;
            }
        }
        Ok(())
    }
}
