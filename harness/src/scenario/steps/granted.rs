//! `granted: ACTOR`: waits (on a direct actor, the observer) until the
//! actor's background lock call stops waiting, seen by the server, and
//! records the time since the last fault step (`crash`, `terminate`,
//! `partition`, `restart`); at the step's deadline, counted from the fault,
//! records "still held at N s" instead of failing.

use std::time::{Duration, Instant};

use locklab_drivers::{DirectConn, Pool};

use super::context::{Slot, StepCx};
use super::declaration::{BASE, Declaration, Side};
use super::{Checking, Kind, RawStep, Step};
use crate::observe::{Polled, poll_until};
use crate::outcome::Value;
use crate::scenario::steps::error::{StepError, StepResult};
use crate::scenario::validate::walk::Conn;
use crate::scenario::{Actor, Pos};

macro_rules! raw_fields {
    ($next:ident [$($f:tt)*] $($rest:tt)*) => {
        $next! { @collect [$($f)*
            /// Wait (on a direct actor) until this actor's background lock call
            /// stops waiting, seen by the server (`pg_blocking_pids` of its backend empty,
            /// or the call finished), and record the time since the last fault step
            /// (`crash`, `terminate`, `partition`, `restart`); at the step's deadline,
            /// counted from the fault, record "still held at N s" instead of failing.
            /// The `await` says how the call ended.
            #[serde(default)]
            #[schemars(with = "Option<String>")]
            pub(crate) granted: Option<serde_saphyr::Spanned<String>>,
        ] $($rest)* }
    };
}
pub(crate) use raw_fields;

/// Wait until the target's background lock call stops waiting (seen in
/// `pg_locks`), recording the time since the last fault, or "still held
/// at N s" at the deadline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantedStep {
    /// The observer (a direct actor) that asks the server.
    pub observer: usize,
    /// The actor whose background step waits for the lock.
    pub target: usize,
}

impl Kind for GrantedStep {
    const KEY: &'static str = "granted";
    const FORMS: &'static [Declaration] = &[Declaration {
        word: "granted",
        side: Side::Observer,
        ..BASE
    }];

    fn has_key(raw: &RawStep) -> bool {
        raw.granted.is_some()
    }

    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        let g = raw.granted.as_ref()?;
        let (n, gpos, name) = (cx.n, Pos::of(&g.referenced), &g.value);
        if !cx.faulted_before {
            cx.err(
                gpos,
                format!("step {n}: 'granted' times the lock's release from a fault; put a 'do: crash', 'terminate' or 'partition' (or a 'restart') before it"),
            );
        }
        match cx.walk.index_of.get(name.as_str()) {
            Some(&t) if matches!(cx.walk.state[t], Conn::Busy(_)) => Some(GrantedStep {
                observer: cx.actor,
                target: t,
            }),
            Some(_) => {
                cx.err(
                    gpos,
                    format!("step {n}: 'granted: {name}' needs a background step of '{name}' in flight (its lock call)"),
                );
                None
            }
            None => {
                cx.err(gpos, format!("step {n}: unknown actor '{name}' in 'granted'"));
                None
            }
        }
    }

    fn actor(&self) -> Option<usize> {
        Some(self.observer)
    }

    fn describe(&self, actors: &[Actor], _: &[Step]) -> String {
        format!("granted: {}", actors[self.target].name)
    }

    /// Waits until `target`'s background lock call no longer waits, at most
    /// the step's deadline after the last fault; records `released` with the
    /// time since the fault, or `still held at N s`. No longer waiting means
    /// the call has finished, or the server shows it not blocked
    /// (`pg_blocking_pids` empty) once it has been seen blocked (by this
    /// step, or by a `blocked` step before): a call not yet seen blocked may
    /// not have reached the server, so its not being blocked says nothing. (A call
    /// that keeps running once granted, other than the lock call itself, and
    /// was never seen blocked, reads `still held`: the shipped waiters are
    /// single lock calls, which finish once granted.)
    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, _: &dyn Pool, _: &mut DirectConn) -> StepResult {
        let (observer, target) = (self.observer, self.target);
        let pid = cx.pid_of(target)?;
        let since = cx.faults.at.unwrap_or_else(Instant::now);
        let until = since + Duration::from_millis(step.deadline_ms);
        if let Slot::Busy { started, .. } = &cx.slots[target] {
            cx.faults.timed_by_granted.insert(target, *started);
        }
        // Seen blocked by a `blocked` step before the fault, or here.
        let mut seen_blocked = matches!(
            (&cx.slots[target], cx.faults.seen_blocked.get(&target)),
            (Slot::Busy { started, .. }, Some(seen)) if started == seen
        );
        let polled = poll_until(until, async || {
            if let Slot::Busy { handle, .. } = &cx.slots[target]
                && handle.is_finished()
            {
                return Ok(Some(()));
            }
            let conn = cx.conn(observer).map_err(StepError::Harness)?;
            let blocked = crate::observe::is_blocked(conn.as_mut(), pid)
                .await
                .map_err(|e| StepError::Driver(e.to_string()))?;
            seen_blocked |= blocked;
            Ok::<_, StepError>((seen_blocked && !blocked).then_some(()))
        })
        .await?;
        let took = since.elapsed();
        match polled {
            Polled::Done(()) => cx.record_note(step, Value::Released, Some(took)),
            Polled::TimedOut => cx.record_note(step, Value::StillHeld(step.deadline_ms), Some(took)),
        }
        Ok(())
    }
}
