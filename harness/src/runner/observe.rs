//! Steps that ask the server from an observer (a direct actor): `observe`
//! (a `pg_locks` snapshot, optionally after the other backends settle) and
//! `blocked` (`pg_blocking_pids`, and the pooler's queue).

use std::time::{Duration, Instant};

use super::sql::{late, outcome_value};
use super::state::{Run, Slot};
use super::{StepError, StepResult};
use crate::observe::{self, Activity, LockRow, Polled, poll_until};
use crate::outcome::{LockHolder, LockSnapshot, Value, Wait, WaitEvent};
use crate::scenario::{ObserveDetail, ObserveExpect, ObserveStep, Step};
use crate::server::poolers::queue::QueueView;

/// How long the other backends must stay calm for a `settle: true` observe
/// (ms): as long as [`observe::UNSETTLED_SQL`]'s own window for a state change.
pub const SETTLE_CALM_MS: u64 = 100;

impl Run<'_> {
    /// Snapshots the advisory locks (of `key`, when given), checks and records them.
    pub(super) async fn observe(&mut self, step: &Step, o: &ObserveStep) -> StepResult {
        let deadline = Duration::from_millis(step.deadline_ms);
        if o.settle {
            self.settle(o.observer, Instant::now() + deadline).await?;
        }
        if !o.idle.is_empty() {
            self.until_idle(o.observer, &o.idle, Instant::now() + deadline).await?;
        }
        let until = Instant::now() + deadline;
        let mut rows;
        loop {
            let conn = self.conn(o.observer)?;
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
            self.check_observe(e, &holders, &waiters)?;
        }
        if step.record.is_some() {
            let value = Value::Locks(self.snapshot(&holders, &waiters, &o.detail));
            self.record_note(step, value, None);
        }
        Ok(())
    }

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

    /// Waits until every target's background step is blocked on a lock,
    /// seen by the server, or queued in the pooler for a server connection,
    /// seen by the pooler ([`crate::server::poolers::queue`]); fails when one
    /// finishes instead, unless `or_finished` (one target), which reads
    /// that as `finished first` and leaves the outcome for its `await`.
    /// With `record` (one target), records which ([`Wait`]).
    pub(super) async fn blocked(
        &mut self,
        step: &Step,
        observer: usize,
        targets: &[usize],
        or_finished: bool,
    ) -> StepResult {
        let mut pids = Vec::new();
        for t in targets {
            pids.push((*t, self.pid_of(*t)?));
        }
        let mut queue: Option<QueueView> = None;
        let polled = poll_until(Instant::now() + Duration::from_millis(step.deadline_ms), async || {
            let mut read: Vec<(usize, Wait)> = Vec::new();
            let mut pending: Vec<usize> = Vec::new();
            // Backends already counted as one target's: each target's call
            // is on a backend of its own.
            let mut claimed: Vec<i32> = pids.iter().map(|(_, p)| *p).collect();
            for (t, pid) in &pids {
                if let Slot::Busy { handle, .. } = &self.slots[*t]
                    && handle.is_finished()
                {
                    if !or_finished {
                        return Err(StepError::Mismatch(format!(
                            "'{}' finished its background step instead of blocking",
                            self.scenario.actors[*t].name
                        )));
                    }
                    let value = self.finished_value(*t).await?;
                    read.push((*t, Wait::FinishedFirst(Box::new(value))));
                    continue;
                }
                if self.blocked_on_lock(observer, *t, *pid, &mut claimed).await? {
                    read.push((*t, Wait::BlockedOnLock));
                } else {
                    pending.push(*t);
                }
            }
            // The pooler's queue is read where a scenario makes one (it caps
            // the pooler's server connections) or asks what the call did
            // (`record`, `or_finished`): elsewhere a client waits in it only
            // for a moment, while the pooler opens a server connection.
            let asks = self.scenario.pooler_server_connections.is_some() || or_finished || step.record.is_some();
            if !pending.is_empty() && asks && self.info.pooler.is_some() {
                if queue.is_none() {
                    let view = self
                        .server
                        .pooler_queue(self.info.pooler, self.db, self.scenario.pooler_server_connections)
                        .await
                        .map_err(|e| StepError::Harness(format!("{e:#}")))?;
                    queue = Some(view);
                }
                let view = queue
                    .as_mut()
                    .ok_or_else(|| StepError::Harness("no queue view".into()))?;
                if self.queued(observer, view, &pending).await? {
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
                        && let Slot::Busy { started, .. } = &self.slots[*t]
                    {
                        self.faults.saw_blocked(*t, *started);
                    }
                }
                if let [(_, w)] = read.as_slice() {
                    self.record_note(step, Value::Wait(w.clone()), None);
                }
                Ok(())
            }
            Polled::TimedOut => {
                let names: Vec<String> = pids
                    .iter()
                    .map(|(t, pid)| format!("'{}' (backend pid {pid})", self.scenario.actors[*t].name))
                    .collect();
                Err(StepError::Deadline(format!(
                    "{} not all blocked on a lock or queued in the pooler within {} ms",
                    names.join(", "),
                    step.deadline_ms
                )))
            }
        }
    }

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
