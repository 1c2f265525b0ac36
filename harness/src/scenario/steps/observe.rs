//! `observe: advisory_locks`: a snapshot, taken by an observer (a direct
//! actor), of the advisory locks of the run's database (`pg_locks` joined
//! to `pg_stat_activity`), optionally after the other backends settle or
//! named actors go idle; checked against `expect` (`held`, `holders`,
//! `waiters`) and recorded.

use std::time::{Duration, Instant};

use locklab_drivers::{DirectConn, Pool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_saphyr::Spanned;

use super::context::StepCx;
use super::declaration::{BASE, Declaration, Expects, Side};
use super::expect::ObserveExpect;
use super::statement::late;
use super::{Checking, Kind, RawStep, Step};
use crate::keys::AdvisoryKey;
use crate::observe::{self, Activity, LockRow, Polled, poll_until};
use crate::outcome::{LockHolder, LockSnapshot, Value, WaitEvent};
use crate::scenario::steps::error::{StepError, StepResult};
use crate::scenario::raw::step::OneOrMany;
use crate::scenario::validate::expect::Expect;
use crate::scenario::validate::validator::Validator;
use crate::scenario::{Actor, Pos, When};

macro_rules! raw_fields {
    ($next:ident [$($f:tt)*] $($rest:tt)*) => {
        $next! { @collect [$($f)*
            /// A server-side snapshot taken by a direct actor (the observer).
            #[serde(default)]
            pub(crate) observe: Option<$crate::scenario::steps::observe::ObserveKind>,
            /// For `observe`: what to add to each holder and waiter of the recorded
            /// snapshot, from its backend's `pg_stat_activity` row: `wait_event`
            /// (`wait_event_type:wait_event`), `xmin` (whether `backend_xmin` is set).
            #[serde(default)]
            pub(crate) detail: Option<Vec<$crate::scenario::steps::observe::ObserveDetail>>,
            /// For `observe`: first wait (within the deadline) until no other backend
            /// of the run's database is running a statement other than a lock wait
            /// and none changed state in the last 100 ms, seen twice in a row, so
            /// statements queued behind a dropped call have run.
            #[serde(default)]
            pub(crate) settle: bool,
            /// For `observe`: first wait (within the deadline) until these actors'
            /// backends are no longer `active` in `pg_stat_activity`: a call that has
            /// just returned an error to its client may still be aborting its
            /// transaction (PostgreSQL reports the error before it releases the
            /// transaction's locks), so the snapshot shows what outlived the call.
            #[serde(default)]
            #[schemars(with = "Option<crate::scenario::raw::step::OneOrMany>")]
            pub(crate) idle: Option<serde_saphyr::Spanned<$crate::scenario::raw::step::OneOrMany>>,
        ] $($rest)* }
    };
}
pub(crate) use raw_fields;

/// How long the other backends must stay calm for a `settle: true` observe
/// (ms): as long as [`observe::UNSETTLED_SQL`]'s own window for a state change.
pub const SETTLE_CALM_MS: u64 = 100;

/// What an observer can snapshot (`observe:`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ObserveKind {
    /// `pg_locks` (advisory rows of the run's database) joined to `pg_stat_activity`.
    AdvisoryLocks,
}

/// What an `observe` snapshot adds to each holder and waiter (`detail:`),
/// from its backend's `pg_stat_activity` row (PostgreSQL docs §27.2.3,
/// "pg_stat_activity"). Only a step that asks shows them, so the readings
/// of the steps that do not ask stay as they were.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ObserveDetail {
    /// `wait_event_type:wait_event` (`Lock:advisory` for a backend waiting
    /// for an advisory lock, `Client:ClientRead` for an idle one), or that it
    /// waits for nothing (running).
    WaitEvent,
    /// Whether `backend_xmin` is set: the backend holds a snapshot, which
    /// holds back the horizon below which `VACUUM` may remove dead rows
    /// (PostgreSQL docs §24.1 "Routine Vacuuming"). A lock call waits inside its statement,
    /// whose snapshot it keeps while it waits.
    Xmin,
}

/// An `observe: advisory_locks` step.
#[derive(Clone, Debug, PartialEq)]
pub struct ObserveStep {
    /// The observer (a direct actor).
    pub observer: usize,
    /// Only this key, when given.
    pub key: Option<AdvisoryKey>,
    /// First wait for the other backends to settle.
    pub settle: bool,
    /// First wait until these actors' backends are not `active` (`idle:`).
    pub idle: Vec<usize>,
    /// What the recorded snapshot adds to each holder and waiter
    /// (`detail:`), sorted, without repeats; empty: nothing.
    pub detail: Vec<ObserveDetail>,
    /// What must hold.
    pub expect: Option<ObserveExpect>,
    /// Only for some driver kinds.
    pub when: Option<When>,
}

impl Kind for ObserveStep {
    const KEY: &'static str = "observe";
    const FORMS: &'static [Declaration] = &[Declaration {
        word: "observe",
        side: Side::Observer,
        when: true,
        key: true,
        expects: Expects::Locks,
        ..BASE
    }];

    fn has_key(raw: &RawStep) -> bool {
        raw.observe.is_some()
    }

    fn stray(raw: &RawStep, v: &mut Validator<'_>, n: usize, pos: Pos) {
        if raw.detail.is_some() {
            v.err(pos, format!("step {n}: 'detail' only applies to 'observe' steps"));
        }
        if raw.settle {
            v.err(pos, format!("step {n}: 'settle' only applies to 'observe' steps"));
        }
        if raw.idle.is_some() {
            v.err(pos, format!("step {n}: 'idle' only applies to 'observe' steps"));
        }
    }

    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        let mut detail = raw.detail.clone().unwrap_or_default();
        detail.sort_unstable();
        detail.dedup();
        Some(ObserveStep {
            observer: cx.actor,
            key: raw.key,
            settle: raw.settle,
            idle: idle_actors(cx, raw.idle.as_ref()),
            detail,
            expect: None,
            when: raw.when,
        })
    }

    fn expect(&mut self, e: Expect) {
        self.expect = Some(e.observe);
    }

    fn actor(&self) -> Option<usize> {
        Some(self.observer)
    }

    fn when(&self) -> Option<When> {
        self.when
    }

    fn describe(&self, _: &[Actor], _: &[Step]) -> String {
        "observe advisory_locks".into()
    }

    /// Snapshots the advisory locks (of `key`, when given), checks and records them.
    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, _: &dyn Pool, _: &mut DirectConn) -> StepResult {
        let o = self;
        let deadline = Duration::from_millis(step.deadline_ms);
        if o.settle {
            cx.settle(o.observer, Instant::now() + deadline).await?;
        }
        if !o.idle.is_empty() {
            cx.until_idle(o.observer, &o.idle, Instant::now() + deadline).await?;
        }
        let until = Instant::now() + deadline;
        let mut rows;
        loop {
            let conn = cx.conn(o.observer)?;
            rows = tokio::time::timeout(deadline, observe::advisory_locks(conn.as_mut(), o.key, true))
                .await
                .map_err(|_| late(step, "the pg_locks query had not answered"))?
                .map_err(|e| StepError::Driver(format!("observe failed: {e}")))?;
            // With `detail: [wait_event]`: a backend that has just sent its
            // result shows `idle` with no wait event for a moment, before it
            // waits for its client's next message (Client:ClientRead); read
            // again until none is caught so, or the deadline.
            let between = |r: &LockRow| {
                r.state.as_deref().is_some_and(|s| s.starts_with("idle"))
                    && r.activity.as_ref().is_some_and(|a| a.wait_event.is_none())
            };
            if !o.detail.contains(&ObserveDetail::WaitEvent) || !rows.iter().any(between) || Instant::now() >= until {
                break;
            }
        }
        let holders: Vec<&LockRow> = rows.iter().filter(|r| r.granted).collect();
        let waiters: Vec<&LockRow> = rows.iter().filter(|r| !r.granted).collect();
        if let Some(e) = &o.expect {
            cx.check_observe(e, &holders, &waiters)?;
        }
        if step.record.is_some() {
            let value = Value::Locks(cx.snapshot(&holders, &waiters, &o.detail));
            cx.record_note(step, value, None);
        }
        Ok(())
    }
}

/// The actors an observe step's `idle` names (each once, each known).
fn idle_actors(cx: &mut Checking<'_, '_, '_>, idle: Option<&Spanned<OneOrMany>>) -> Vec<usize> {
    let Some(idle) = idle else { return Vec::new() };
    let (n, ipos) = (cx.n, Pos::of(&idle.referenced));
    let mut out = Vec::new();
    for name in idle.value.clone().into_vec() {
        match cx.walk.index_of.get(name.as_str()) {
            Some(&a) if !out.contains(&a) => out.push(a),
            Some(_) => cx.err(ipos, format!("step {n}: 'idle' lists '{name}' twice")),
            None => cx.err(ipos, format!("step {n}: unknown actor '{name}' in 'idle'")),
        }
    }
    out
}

impl StepCx<'_> {
    /// Waits until none of `actors`' backends (those whose pid is known) is
    /// `active` in `pg_stat_activity`.
    async fn until_idle(&mut self, observer: usize, actors: &[usize], until: Instant) -> Result<(), String> {
        let pids: Vec<i32> = actors.iter().filter_map(|a| self.pids.get(a)).copied().collect();
        if pids.is_empty() {
            return Ok(());
        }
        let sql = crate::observe::none_active_sql(&pids);
        let polled = poll_until(until, async || {
            let conn = self.conn(observer)?;
            let rows = conn.simple_query(&sql).await.map_err(|e| e.to_string())?;
            Ok::<_, String>((rows.first_value().flatten() == Some("t")).then_some(()))
        })
        .await?;
        match polled {
            Polled::Done(()) => Ok(()),
            Polled::TimedOut => Err(format!(
                "backends {} were still active at the deadline (idle)",
                pids.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            )),
        }
    }

    /// `held`, `holders.pid` and `holders.state` against the snapshot.
    fn check_observe(&self, e: &ObserveExpect, holders: &[&LockRow], waiters: &[&LockRow]) -> StepResult {
        if let Some(h) = e.held
            && h == holders.is_empty()
        {
            return Err(StepError::Mismatch(format!(
                "expected the lock {}, but {}",
                if h { "held" } else { "not held" },
                self.describe(holders, waiters)
            )));
        }
        if let Some(var) = &e.holder_pid {
            let want = self.substitute(&format!("${{{var}}}"))?;
            if let Some(r) = holders.iter().find(|r| r.pid.to_string() != want) {
                return Err(StepError::Mismatch(format!(
                    "expected every holder to be backend {want} (${{{var}}}), but backend {} holds {}",
                    r.pid, r.key
                )));
            }
        }
        if let Some(state) = &e.holder_state
            && let Some(r) = holders.iter().find(|r| r.state.as_deref() != Some(state))
        {
            return Err(StepError::Mismatch(format!(
                "expected every holder in state '{state}', but backend {} is '{}'",
                r.pid,
                r.state.as_deref().unwrap_or("?")
            )));
        }
        self.check_waiters(e, holders, waiters)
    }

    /// `waiters.wait_event` and `waiters.xmin`: there is a waiter, and
    /// every waiter's `pg_stat_activity` row says so.
    fn check_waiters(&self, e: &ObserveExpect, holders: &[&LockRow], waiters: &[&LockRow]) -> StepResult {
        if e.waiter_wait_event.is_none() && e.waiter_xmin.is_none() {
            return Ok(());
        }
        if waiters.is_empty() {
            return Err(StepError::Mismatch(format!(
                "expected waiters, but {}",
                self.describe(holders, waiters)
            )));
        }
        for r in waiters {
            let Some(a) = &r.activity else { continue };
            if let Some(want) = &e.waiter_wait_event
                && a.wait_event.as_deref() != Some(want.as_str())
            {
                return Err(StepError::Mismatch(format!(
                    "expected every waiter to wait on {want}, but {} waits on {}",
                    self.backend_name(r.pid),
                    a.wait_event.as_deref().unwrap_or("nothing (running)")
                )));
            }
            if let Some(want) = e.waiter_xmin
                && a.holds_xmin != want
            {
                return Err(StepError::Mismatch(format!(
                    "expected every waiter {}, but {} {}",
                    if want { "to hold an xmin" } else { "to hold no xmin" },
                    self.backend_name(r.pid),
                    if a.holds_xmin { "holds one" } else { "holds none" }
                )));
            }
        }
        Ok(())
    }

    /// The snapshot of the matching rows, each backend named after the actor
    /// that last used it, holders and waiters each ordered by actor, key, mode
    /// and pid: a set, not a queue. `pg_locks` does not show the wait queue's
    /// order, and `waitstart` is not it either: a backend joins the queue and
    /// only then, without the lock table's partition lock, stores the start of
    /// its deadlock timer as `waitstart` (`ProcSleep` in PostgreSQL's
    /// `src/backend/storage/lmgr/proc.c`), so a backend preempted in between
    /// shows a later `waitstart` than one that queued after it (seen once in
    /// `waiters-queue-fifo` on a loaded machine). A scenario reads the turn
    /// order on the server instead (a sequence drawn under the lock).
    ///
    /// `detail` (the step's `detail:`) says what of each backend's
    /// `pg_stat_activity` row the snapshot keeps besides its state.
    fn snapshot(&self, holders: &[&LockRow], waiters: &[&LockRow], detail: &[ObserveDetail]) -> LockSnapshot {
        fn activity<'r>(r: &'r LockRow, detail: &[ObserveDetail], d: ObserveDetail) -> Option<&'r Activity> {
            r.activity.as_ref().filter(|_| detail.contains(&d))
        }
        let who = |r: &&LockRow| LockHolder {
            actor: self.actor_of(r.pid).map(str::to_owned),
            pid: r.pid,
            state: r.state.clone(),
            key: r.key,
            mode: r.mode.clone(),
            wait: activity(r, detail, ObserveDetail::WaitEvent).map(|a| match &a.wait_event {
                Some(w) => WaitEvent::On(w.clone()),
                None => WaitEvent::Nothing,
            }),
            xmin: activity(r, detail, ObserveDetail::Xmin).map(|a| a.holds_xmin),
        };
        let ordered = |rows: &[&LockRow]| {
            let mut out: Vec<LockHolder> = rows.iter().map(who).collect();
            out.sort_by(|a, b| (&a.actor, a.key, &a.mode, a.pid).cmp(&(&b.actor, b.key, &b.mode, b.pid)));
            out
        };
        LockSnapshot {
            held: !holders.is_empty(),
            holders: ordered(holders),
            waiters: ordered(waiters),
        }
    }

    /// `held by worker (idle)`, `not held`, `held by a (idle in transaction); waiting: b`.
    fn describe(&self, holders: &[&LockRow], waiters: &[&LockRow]) -> String {
        self.snapshot(holders, waiters, &[]).to_string()
    }

    /// Waits until no other backend of the run's database runs a statement
    /// that is not a lock wait, and none changed state in the last 100 ms
    /// ([`observe::UNSETTLED_SQL`]), on every poll for [`SETTLE_CALM_MS`]:
    /// statements queued behind a dropped call have then run, and a client
    /// that closes its connection after them has done so. A backend whose
    /// lock was granted but which has not run since (it still shows
    /// `wait_event_type = Lock` until it is scheduled) counts as running.
    /// A cancel request that has reached the server but not yet been acted
    /// on is invisible (its target still looks like a calm lock wait until it
    /// is scheduled): the calm span covers that delay, which two polls a few
    /// ms apart did not under `stress-ng --cpu 2` (asyncpg's cancel of a
    /// dropped lock call, once in three `cargo test` runs).
    async fn settle(&mut self, observer: usize, until: Instant) -> Result<(), String> {
        let mut calm_since: Option<Instant> = None;
        let polled = poll_until(until, async || {
            let conn = self.conn(observer)?;
            let rows = conn
                .simple_query(observe::UNSETTLED_SQL)
                .await
                .map_err(|e| e.to_string())?;
            if rows.first_value().flatten() == Some("0") {
                calm_since.get_or_insert_with(Instant::now);
            } else {
                calm_since = None;
            }
            Ok::<_, String>(
                calm_since
                    .is_some_and(|t| t.elapsed() >= Duration::from_millis(SETTLE_CALM_MS))
                    .then_some(()),
            )
        })
        .await?;
        match polled {
            Polled::Done(()) => Ok(()),
            Polled::TimedOut => Err("other backends were still running statements at the deadline (settle)".into()),
        }
    }
}
