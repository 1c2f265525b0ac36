//! `do: checkout`: a connection out of the pool under test (the direct
//! driver opens one), then its backend pid (`select pg_backend_pid()`, the
//! one statement the harness adds). With `client_timeout_ms`, a checkout
//! that gives up is recorded, and the actor's later steps record that it
//! has no connection.

use std::time::{Duration, Instant};

use locklab_drivers::{DirectConn, Pool};

use super::context::{Slot, StepCx};
use super::declaration::{BASE, Connection, Declaration, Record, Side};
use super::statement::late;
use super::{Checking, Kind, RawStep, Step};
use crate::outcome::{Checkout, Value};
use crate::scenario::steps::error::{StepError, StepResult};
use crate::scenario::Actor;
use crate::scenario::raw::step::Action;

// No keys of its own.
pub(crate) use super::no_raw_fields as raw_fields;

/// Check a connection out of the pool under test (direct driver: open one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckoutStep {
    /// Actor index (a pool actor).
    pub actor: usize,
    /// Client-side bound in ms whose expiry is recorded, not a failure.
    pub client_timeout_ms: Option<u64>,
}

impl Kind for CheckoutStep {
    const KEY: &'static str = "do";
    const FORMS: &'static [Declaration] = &[Declaration {
        word: "checkout",
        side: Side::Pool("'{actor}' is a direct actor, connected for the whole run; 'checkout' is for pool actors"),
        record: Record::WhenBounded,
        bounded: true,
        connection: Connection::Opens,
        ..BASE
    }];

    fn has_key(raw: &RawStep) -> bool {
        raw.action.is_some()
    }

    fn is(raw: &RawStep) -> bool {
        raw.action == Some(Action::Checkout)
    }

    fn check(_: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        Some(CheckoutStep {
            actor: cx.actor,
            client_timeout_ms: cx.bound.map(|b| b.ms),
        })
    }

    fn actor(&self) -> Option<usize> {
        Some(self.actor)
    }

    fn describe(&self, _: &[Actor], _: &[Step]) -> String {
        "checkout".into()
    }

    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, pool: &dyn Pool, _: &mut DirectConn) -> StepResult {
        match self.client_timeout_ms {
            Some(ms) => bounded_checkout(cx, step, self.actor, ms, pool).await,
            None => checkout(cx, step, self.actor, pool).await,
        }
    }
}

/// A checkout within the step's deadline, then the connection's backend pid.
async fn checkout(cx: &mut StepCx<'_>, step: &Step, actor: usize, pool: &dyn Pool) -> StepResult {
    let deadline = Duration::from_millis(step.deadline_ms);
    let conn = tokio::time::timeout(deadline, pool.checkout())
        .await
        .map_err(|_| {
            late(
                step,
                &format!(
                    "the pool had handed out no connection (max_size {})",
                    cx.scenario.pool_max_size
                ),
            )
        })?
        .map_err(|e| {
            StepError::Driver(format!(
                "checkout failed: {e}{}",
                cx.settings_hint(&cx.scenario.pool_settings)
            ))
        })?;
    cx.slots[actor] = Slot::Ready(conn);
    if !cx.learn_pid(actor, deadline).await {
        return Err(StepError::Deadline(format!(
            "the connection handed out did not answer `select pg_backend_pid()` within the deadline of {} ms \
             (a statement still queued on it?); a 'client_timeout_ms' on the checkout records this instead",
            step.deadline_ms
        )));
    }
    Ok(())
}

/// A checkout bounded by `ms`: a checkout that gives up (or fails) leaves
/// the actor without a connection, and later steps record that.
async fn bounded_checkout(cx: &mut StepCx<'_>, step: &Step, actor: usize, ms: u64, pool: &dyn Pool) -> StepResult {
    let bound = Duration::from_millis(ms);
    let t0 = Instant::now();
    let checkout = match pool.checkout_within(bound).await {
        None => Checkout::Dropped(ms),
        Some(Err(e)) => Checkout::Failed(e.to_string()),
        Some(Ok(conn)) => {
            cx.slots[actor] = Slot::Ready(conn);
            // The harness's one added statement, bounded by the same
            // client timeout on its own (so how long the checkout took
            // does not decide the cell): a connection handed out with a
            // statement still queued on it does not answer.
            if cx.learn_pid(actor, bound).await {
                Checkout::Ok
            } else {
                Checkout::NoAnswer(ms)
            }
        }
    };
    if matches!(checkout, Checkout::Dropped(_) | Checkout::Failed(_)) {
        // Later steps of the actor record this instead of running.
        cx.slots[actor] = Slot::Lost(Value::Checkout(checkout.clone()).to_string());
    }
    cx.record_note(step, Value::Checkout(checkout), Some(t0.elapsed()));
    Ok(())
}
