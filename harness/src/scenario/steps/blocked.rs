//! `blocked: ACTORS`: waits (on a direct actor, the observer) until these
//! actors' background steps are blocked on a lock, seen by the server
//! (`pg_blocking_pids`), or queued in the pooler for a server connection,
//! seen by the pooler; fails if one finishes instead (unless `or_finished`).
//! With `record` (one actor): records which.

use std::time::{Duration, Instant};

use locklab_drivers::{DirectConn, Pool};
use serde_saphyr::Spanned;

use super::context::{Slot, StepCx};
use super::declaration::{BASE, Declaration, Side};
use super::statement::outcome_value;
use super::{Checking, Kind, RawStep, Step};
use crate::observe::{self, Polled, poll_until};
use crate::outcome::{Value, Wait};
use crate::scenario::steps::error::{StepError, StepResult};
use crate::scenario::raw::step::OneOrMany;
use crate::scenario::validate::validator::Validator;
use crate::scenario::validate::walk::Conn;
use crate::scenario::{Actor, Pos};
use crate::server::poolers::queue::QueueView;

macro_rules! raw_fields {
    ($next:ident [$($f:tt)*] $($rest:tt)*) => {
        $next! { @collect [$($f)*
            /// Wait (on a direct actor) until these actors' background steps are blocked on a lock,
            /// seen by the server (`pg_blocking_pids`), or queued in the pooler for a server
            /// connection, seen by the pooler; fails if one finishes instead (unless `or_finished`).
            /// With `record` (one actor): records `blocked on a lock` or `queued in the pooler`.
            #[serde(default)]
            #[schemars(with = "Option<crate::scenario::raw::step::OneOrMany>")]
            pub(crate) blocked: Option<serde_saphyr::Spanned<$crate::scenario::raw::step::OneOrMany>>,
            /// For `blocked` (one actor): a call that finishes before it is seen blocked or
            /// queued is not a failure; with `record`, the step records `finished first (value …)`
            /// (the call's outcome; its `await` still checks and records it).
            #[serde(default)]
            pub(crate) or_finished: bool,
        ] $($rest)* }
    };
}
pub(crate) use raw_fields;

/// Wait until every target (actor indices) is blocked on a lock, seen from
/// the server (`pg_blocking_pids`), or queued in the pooler for a server
/// connection, seen by the pooler; fails if one's background step
/// finishes first, unless `or_finished`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedStep {
    /// The observer (a direct actor) that asks the server.
    pub observer: usize,
    /// Actors whose background steps must be blocked or queued.
    pub targets: Vec<usize>,
    /// `or_finished: true` (one target): a call that finishes first is
    /// a reading (`finished first (value …)`), not a failure.
    pub or_finished: bool,
}

impl Kind for BlockedStep {
    const KEY: &'static str = "blocked";
    const FORMS: &'static [Declaration] = &[Declaration {
        word: "blocked",
        side: Side::Observer,
        ..BASE
    }];

    fn has_key(raw: &RawStep) -> bool {
        raw.blocked.is_some()
    }

    fn stray(raw: &RawStep, v: &mut Validator<'_>, n: usize, pos: Pos) {
        if raw.or_finished {
            v.err(pos, format!("step {n}: 'or_finished' only applies to 'blocked' steps"));
        }
    }

    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        let b = raw.blocked.as_ref()?;
        let targets = targets(cx, b)?;
        if targets.len() > 1 && (raw.or_finished || raw.record.is_some()) {
            let n = cx.n;
            cx.err(
                Pos::of(&b.referenced),
                format!("step {n}: a 'blocked' step with 'record' or 'or_finished' reads one actor's call; list one actor"),
            );
        }
        Some(BlockedStep {
            observer: cx.actor,
            targets,
            or_finished: raw.or_finished,
        })
    }

    fn actor(&self) -> Option<usize> {
        Some(self.observer)
    }

    fn describe(&self, actors: &[Actor], _: &[Step]) -> String {
        let names: Vec<&str> = self.targets.iter().map(|a| actors[*a].name.as_str()).collect();
        format!("blocked: {}", names.join(", "))
    }

    /// Waits until every target's background step is blocked on a lock,
    /// seen by the server, or queued in the pooler for a server connection,
    /// seen by the pooler ([`crate::server::poolers::queue`]); fails when one
    /// finishes instead, unless `or_finished` (one target), which reads
    /// that as `finished first` and leaves the outcome for its `await`.
    /// With `record` (one target), records which ([`Wait`]).
    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, _: &dyn Pool, _: &mut DirectConn) -> StepResult {
        let (observer, targets, or_finished) = (self.observer, &self.targets, self.or_finished);
        let mut pids = Vec::new();
        for t in targets {
            pids.push((*t, cx.pid_of(*t)?));
        }
        let mut queue: Option<QueueView> = None;
        let polled = poll_until(Instant::now() + Duration::from_millis(step.deadline_ms), async || {
            let mut read: Vec<(usize, Wait)> = Vec::new();
            let mut pending: Vec<usize> = Vec::new();
            // Backends already counted as one target's: each target's call
            // is on a backend of its own.
            let mut claimed: Vec<i32> = pids.iter().map(|(_, p)| *p).collect();
            for (t, pid) in &pids {
                if let Slot::Busy { handle, .. } = &cx.slots[*t]
                    && handle.is_finished()
                {
                    if !or_finished {
                        return Err(StepError::Mismatch(format!(
                            "'{}' finished its background step instead of blocking",
                            cx.scenario.actors[*t].name
                        )));
                    }
                    let value = cx.finished_value(*t).await?;
                    read.push((*t, Wait::FinishedFirst(Box::new(value))));
                    continue;
                }
                if cx.blocked_on_lock(observer, *t, *pid, &mut claimed).await? {
                    read.push((*t, Wait::BlockedOnLock));
                } else {
                    pending.push(*t);
                }
            }
            // The pooler's queue is read where a scenario makes one (it caps
            // the pooler's server connections) or asks what the call did
            // (`record`, `or_finished`): elsewhere a client waits in it only
            // for a moment, while the pooler opens a server connection.
            let asks = cx.scenario.pooler_server_connections.is_some() || or_finished || step.record.is_some();
            if !pending.is_empty() && asks && cx.info.pooler.is_some() {
                if queue.is_none() {
                    let view = cx
                        .server
                        .pooler_queue(cx.info.pooler, cx.db, cx.scenario.pooler_server_connections)
                        .await
                        .map_err(|e| StepError::Harness(format!("{e:#}")))?;
                    queue = Some(view);
                }
                let view = queue
                    .as_mut()
                    .ok_or_else(|| StepError::Harness("no queue view".into()))?;
                if cx.queued(observer, view, &pending).await? {
                    read.extend(pending.drain(..).map(|t| (t, Wait::QueuedInPooler)));
                }
            }
            Ok::<_, StepError>(pending.is_empty().then_some(read))
        })
        .await;
        if let Some(view) = queue {
            view.close().await;
        }
        match polled? {
            Polled::Done(read) => {
                for (t, w) in &read {
                    if *w == Wait::BlockedOnLock
                        && let Slot::Busy { started, .. } = &cx.slots[*t]
                    {
                        cx.faults.saw_blocked(*t, *started);
                    }
                }
                if let [(_, w)] = read.as_slice() {
                    cx.record_note(step, Value::Wait(w.clone()), None);
                }
                Ok(())
            }
            Polled::TimedOut => {
                let names: Vec<String> = pids
                    .iter()
                    .map(|(t, pid)| format!("'{}' (backend pid {pid})", cx.scenario.actors[*t].name))
                    .collect();
                Err(StepError::Deadline(format!(
                    "{} not all blocked on a lock or queued in the pooler within {} ms",
                    names.join(", "),
                    step.deadline_ms
                )))
            }
        }
    }
}

/// The actors a `blocked` step waits for: each with a background step in flight.
fn targets(cx: &mut Checking<'_, '_, '_>, b: &Spanned<OneOrMany>) -> Option<Vec<usize>> {
    let (n, bpos) = (cx.n, Pos::of(&b.referenced));
    let names = b.value.clone().into_vec();
    if names.is_empty() {
        cx.err(bpos, format!("step {n}: 'blocked' lists no actor"));
        return None;
    }
    let mut targets = Vec::new();
    for name in names {
        match cx.walk.index_of.get(name.as_str()) {
            Some(&t) if matches!(cx.walk.state[t], Conn::Busy(_)) => {
                if targets.contains(&t) {
                    cx.err(bpos, format!("step {n}: 'blocked' lists '{name}' twice"));
                }
                targets.push(t);
            }
            Some(_) => cx.err(
                bpos,
                format!("step {n}: 'blocked: {name}' needs a background step of '{name}' in flight"),
            ),
            None => cx.err(bpos, format!("step {n}: unknown actor '{name}' in 'blocked'")),
        }
    }
    Some(targets)
}

impl StepCx<'_> {
    /// Whether `actor`'s background call (its backend `pid`) waits for a
    /// lock another backend holds. Behind a transaction-mode pooler a pool
    /// actor's statement may run on another backend than `pid` (the one its
    /// checkout met): there, its statement is also looked for by its text
    /// ([`observe::statement_blocked_sql`]), on a backend no other target
    /// has (`claimed`, to which the one found is added).
    async fn blocked_on_lock(
        &mut self,
        observer: usize,
        actor: usize,
        pid: i32,
        claimed: &mut Vec<i32>,
    ) -> Result<bool, StepError> {
        let conn = self.conn(observer)?;
        if observe::is_blocked(conn.as_mut(), pid)
            .await
            .map_err(|e| StepError::Driver(e.to_string()))?
        {
            return Ok(true);
        }
        let pooled_by_transaction = self.info.pooler_mode() == Some(locklab_drivers::PoolerMode::Transaction)
            && self.scenario.actors[actor].via == crate::scenario::Via::Pool;
        let Slot::Busy { sql, .. } = &self.slots[actor] else {
            return Ok(false);
        };
        if !pooled_by_transaction {
            return Ok(false);
        }
        let query = observe::statement_blocked_sql(sql);
        let conn = self.conn(observer)?;
        let rows = conn
            .simple_query(&query)
            .await
            .map_err(|e| StepError::Driver(e.to_string()))?;
        let found = rows
            .rows
            .iter()
            .filter_map(|r| r.first().cloned().flatten())
            .filter_map(|t| t.parse::<i32>().ok())
            .find(|p| !claimed.contains(p));
        Ok(found.inspect(|p| claimed.push(*p)).is_some())
    }

    /// Whether the `pending` targets' calls (neither finished nor blocked on
    /// a lock) wait in the pooler's queue: its console lists at least as
    /// many of the run's database's clients as waiting (the console names
    /// clients by address, which the harness does not learn of a pooled
    /// connection, so the count stands for them), or, behind pgagroal, each
    /// one's statement runs on no backend while none of the pooler's server
    /// connections is idle ([`observe::queued_on_no_backend_sql`]).
    async fn queued(&mut self, observer: usize, view: &mut QueueView, pending: &[usize]) -> Result<bool, StepError> {
        if let Some(waiting) = view
            .waiting(self.db)
            .await
            .map_err(|e| StepError::Driver(format!("{e:#}")))?
        {
            return Ok(waiting as usize >= pending.len());
        }
        if !matches!(view, QueueView::Server) {
            return Ok(false);
        }
        for t in pending {
            let Slot::Busy { sql, .. } = &self.slots[*t] else {
                return Ok(false);
            };
            let query = observe::queued_on_no_backend_sql(sql);
            let conn = self.conn(observer)?;
            let rows = conn
                .simple_query(&query)
                .await
                .map_err(|e| StepError::Driver(e.to_string()))?;
            if rows.first_value().flatten() != Some("t") {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The outcome of `actor`'s finished background step, as its recorded
    /// value; the step stays in flight for its `await`, which checks and
    /// records it as it would have.
    async fn finished_value(&mut self, actor: usize) -> Result<Value, StepError> {
        let Slot::Busy { started, handle, sql } = std::mem::replace(&mut self.slots[actor], Slot::Empty) else {
            return Err(StepError::Harness("no background step".into()));
        };
        let (conn, (result, took), done) = handle
            .await
            .map_err(|e| StepError::Harness(format!("background step panicked: {e}")))?;
        let value = outcome_value(&result);
        // The same outcome, handed to the `await` as if it had just come in.
        let handle = tokio::spawn(async move { (conn, (result, took), done) });
        self.slots[actor] = Slot::Busy { started, handle, sql };
        Ok(value)
    }
}
