//! A run in progress: the phases inside the run's database (pool, actors,
//! steps, verify, ending leftovers, closing) over the steps' own state
//! (each actor's connection, backend pids, saved values: `StepCx`, which
//! each step kind's file runs against).

use std::time::{Duration, Instant};

use futures::FutureExt;
use locklab_drivers::{Conn, DirectConn, Driver, DriverInfo, DriverKind, PoolOptions};

use super::sharing::Monitor;
use super::{CHECKOUT_TIMEOUT_S, StepError, StepResult, injected_panic_step, panic_text};
use crate::outcome::{Phase, RunResult, StepReport, Value};
use crate::scenario::steps::Connection;
use crate::scenario::steps::context::{Slot, StepCx, ms};
use crate::scenario::{Pos, Scenario, Step, StepKind, Via, When};
use crate::server::Server;

/// One scenario × driver run inside its database: the steps' state
/// ([`StepCx`], which `Run` dereferences to) and what the run's own phases
/// keep.
pub(super) struct Run<'a> {
    /// What the steps read and change.
    pub(super) cx: StepCx<'a>,
    /// Before the run: the monitor an earlier cell kept with the database,
    /// which [`Run::open`] takes; after it: this run's monitor, kept for a
    /// later cell when `keep_monitor`.
    pub(super) kept_monitor: Option<Monitor>,
    /// Whether the monitor stays open after the run, for the next cell in
    /// the database (the cell shares its database).
    keep_monitor: bool,
    /// The monitor's backend pid, when it may be kept.
    monitor_pid: Option<i32>,
}

impl<'a> std::ops::Deref for Run<'a> {
    type Target = StepCx<'a>;

    fn deref(&self) -> &StepCx<'a> {
        &self.cx
    }
}

impl std::ops::DerefMut for Run<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.cx
    }
}

/// How long a failed run waits for what its dropped calls set going in the
/// driver (an adapter's library cancelling its statement: a few ms; a hung
/// adapter never answers).
const SETTLE_AFTER_FAILURE: Duration = Duration::from_secs(2);

impl<'a> Run<'a> {
    /// A run with no connections yet.
    pub(super) fn new(
        server: &'a Server,
        scenario: &'a Scenario,
        info: &'a DriverInfo,
        db: &'a str,
        result: &'a mut RunResult,
        (kept_monitor, keep_monitor): (Option<Monitor>, bool),
    ) -> Run<'a> {
        Run {
            cx: StepCx::new(server, scenario, info, db, result),
            kept_monitor,
            keep_monitor,
            monitor_pid: None,
        }
    }

    /// Phases 2 to 6, then `teardown` whatever happened.
    pub(super) async fn execute(&mut self, driver: &dyn Driver) -> StepResult {
        let outcome = self.execute_steps(driver).await;
        let t = Instant::now();
        let teardown = self
            .run_sql_list(&self.scenario.teardown, "teardown")
            .await
            .map_err(StepError::Harness);
        self.result.phase(Phase::Teardown, t);
        outcome.and(teardown)
    }

    /// Pool and monitor, actors, steps, verify, leftovers, close.
    async fn execute_steps(&mut self, driver: &dyn Driver) -> StepResult {
        let t = Instant::now();
        let opened = self.open(driver).await;
        let t = self.result.phase(Phase::Open, t);
        let (pool, mut monitor) = opened?;
        let mut outcome = self.connect_actors().await;
        let t = self.result.phase(Phase::Actors, t);
        if outcome.is_ok() {
            outcome = match &self.scenario.trials {
                Some(trials) => self.run_trials(trials, pool.as_ref(), &mut monitor).await,
                None => self.run_steps(pool.as_ref(), &mut monitor).await,
            };
        }
        let t = self.result.phase(Phase::Steps, t);
        let stuck = if outcome.is_err() {
            // What the failed step's dropped calls set going in the driver
            // (an adapter's library cancelling its statement) first.
            pool.settle(SETTLE_AFTER_FAILURE).await;
            self.stuck_backends(&mut monitor).await
        } else {
            Vec::new()
        };
        outcome = self.verify(outcome, &mut monitor).await;
        outcome = self.end_leftovers(outcome, stuck, &mut monitor).await;
        let t = self.result.phase(Phase::Verify, t);
        self.close(pool, monitor, outcome.is_ok()).await;
        self.result.phase(Phase::Close, t);
        outcome
    }

    /// Phase 2: the pool under test (behind PgBouncer when the driver says
    /// so), the scenario's `setup`, and the harness's monitor connection.
    async fn open(&mut self, driver: &dyn Driver) -> Result<(Box<dyn locklab_drivers::Pool>, DirectConn), StepError> {
        let mut spec = self.spec(&format!("locklab-{}", self.info.id), &self.scenario.pool_settings);
        if let Some(pooler) = self.info.pooler {
            self.server
                .route_capped(pooler, &mut spec, self.scenario.pooler_server_connections)
                .await
                .map_err(|e| format!("{e:#}"))?;
        }
        if self
            .scenario
            .steps
            .iter()
            .any(|s| matches!(s.kind, StepKind::HeldCount(_)))
        {
            let probe: Vec<(String, Pos)> = crate::held_count::install_sql()
                .into_iter()
                .map(|sql| (sql, Pos::default()))
                .collect();
            self.run_sql_list(&probe, "held-count-probe").await?;
        }
        self.run_sql_list(&self.scenario.setup, "setup").await?;
        let opts = PoolOptions {
            max_size: self.scenario.pool_max_size,
            checkout_timeout: Duration::from_secs(CHECKOUT_TIMEOUT_S),
        };
        let pool = driver.pool(&spec, opts).await.map_err(|e| {
            format!(
                "cannot build the pool: {e}{}",
                self.settings_hint(&self.scenario.pool_settings)
            )
        })?;
        let monitor = self.monitor().await?;
        Ok((pool, monitor))
    }

    /// The harness's monitor connection to the run's database: the one an
    /// earlier cell kept, when it is still open, else a new one (whose pid
    /// is read when it may be kept: the leak guard leaves it out).
    async fn monitor(&mut self) -> Result<DirectConn, String> {
        if let Some(m) = self.kept_monitor.take() {
            if !m.conn.client().is_closed() {
                self.monitor_pid = Some(m.pid);
                return Ok(m.conn);
            }
            m.conn.close().await;
        }
        let mut conn = DirectConn::connect(&self.server.spec(self.db, "locklab-monitor"))
            .await
            .map_err(|e| format!("cannot open the monitor connection: {e}"))?;
        if self.keep_monitor {
            let rows = conn
                .simple_query(crate::observe::BACKEND_PID_SQL)
                .await
                .map_err(|e| format!("cannot read the monitor connection's pid: {e}"))?;
            self.monitor_pid = rows.first_value().flatten().and_then(|v| v.parse().ok());
        }
        Ok(conn)
    }

    /// Phase 3: a dedicated connection per `via: direct` actor, with its pid.
    async fn connect_actors(&mut self) -> StepResult {
        let mut outcome = Ok(());
        for (i, actor) in self.scenario.actors.iter().enumerate() {
            self.slots.push(Slot::Empty);
            if actor.via == Via::Direct {
                match self.connect_direct(i).await {
                    Ok(c) => self.slots[i] = Slot::Ready(c),
                    Err(e) => {
                        outcome = Err(StepError::Driver(format!(
                            "cannot connect direct actor '{}': {e}{}",
                            actor.name,
                            self.settings_hint(&actor.settings)
                        )))
                    }
                }
                if outcome.is_ok() {
                    self.learn_pid(i, Duration::from_secs(CHECKOUT_TIMEOUT_S)).await;
                }
            }
        }
        outcome
    }

    /// Phase 4: the steps in order, each reported; stops at the first failure,
    /// which names the step and its place in the file.
    pub(super) async fn run_steps(&mut self, pool: &dyn locklab_drivers::Pool, monitor: &mut DirectConn) -> StepResult {
        for step in &self.scenario.steps {
            let began = Instant::now();
            let skipped = match step.when() {
                Some(When::Pooled) => self.info.kind != DriverKind::Pooled,
                Some(When::Direct) => self.info.kind != DriverKind::Direct,
                None => false,
            };
            let r = if skipped {
                self.record_note(step, Value::NotApplicable, None);
                Ok(())
            } else {
                // A panic inside the step (a driver's, or the harness's own)
                // fails it like any error: the failure names the step, and the
                // clean-up runs.
                match std::panic::AssertUnwindSafe(self.step(step, pool, monitor))
                    .catch_unwind()
                    .await
                {
                    Ok(r) => r,
                    Err(payload) => Err(StepError::Harness(format!(
                        "panicked: {}",
                        panic_text(payload.as_ref())
                    ))),
                }
            };
            // A missed deadline says what the driver still waits for (an
            // adapter's unanswered requests and the end of its stderr).
            let r = match r {
                Err(StepError::Deadline(m)) => Err(StepError::Deadline(match pool.stalled() {
                    Some(stalled) => format!("{m}; {stalled}"),
                    None => m,
                })),
                r => r,
            };
            let label = step.label(&self.scenario.actors, &self.scenario.steps);
            let outcome = match (&r, skipped) {
                (Ok(()), true) => format!(
                    "skipped ({} drivers only)",
                    if step.when() == Some(When::Pooled) {
                        "pooled"
                    } else {
                        "direct"
                    }
                ),
                (Ok(()), false) => "ok".to_owned(),
                (Err(e), _) => e.to_string(),
            };
            self.result.steps.push(StepReport {
                step: step.index + 1,
                label: label.clone(),
                elapsed_ms: ms(began.elapsed()),
                outcome,
            });
            if let Err(e) = r {
                let at = self.scenario.at(step.pos);
                return Err(e.map(|e| format!("{label} at {at}: {e}")));
            }
        }
        Ok(())
    }

    /// One step: its kind's module does it.
    async fn step(&mut self, step: &Step, pool: &dyn locklab_drivers::Pool, monitor: &mut DirectConn) -> StepResult {
        if injected_panic_step() == Some(step.index + 1) {
            panic!(
                "LOCKLAB_TEST_PANIC_AT_STEP: a panic injected at step {}",
                step.index + 1
            );
        }
        if self.lost_connection(step)? {
            return Ok(());
        }
        step.kind.run(step, &mut self.cx, pool, monitor).await?;
        // Behind a pooler that resets after every transaction, the reset
        // of a pool actor's statement is part of that step.
        if step
            .actor()
            .is_some_and(|a| self.scenario.actors[a].via == crate::scenario::Via::Pool)
        {
            let until = Instant::now() + std::time::Duration::from_millis(step.deadline_ms);
            self.cx
                .wait_pooler_reset(monitor, until)
                .await
                .map_err(StepError::Harness)?;
        }
        Ok(())
    }

    /// For an actor whose bounded checkout gave up: records that instead of
    /// running the step (`Ok(true)`), or fails a step that needs the
    /// connection. `Ok(false)`: the step runs.
    fn lost_connection(&mut self, step: &Step) -> Result<bool, StepError> {
        // (An `await` or `order` uses no connection of its own, an `abandon`
        // drops a background step's.)
        let uses_own_connection = !matches!(
            step.kind.declaration().connection,
            Connection::Finishes | Connection::Nothing | Connection::DropsBackground
        );
        let Some(actor) = step.actor().filter(|_| uses_own_connection) else {
            return Ok(false);
        };
        let Slot::Lost(why) = &self.slots[actor] else {
            return Ok(false);
        };
        let why = why.clone();
        let needs = match &step.kind {
            StepKind::Sql(s) if s.expect.is_some() => Some("an expectation"),
            StepKind::Transaction(t) if t.expect.is_some() => Some("an expectation"),
            StepKind::Observe(o) if o.expect.is_some() => Some("an expectation"),
            StepKind::Sql(s) if s.save.is_some() => Some("'save'"),
            StepKind::Background(_) => Some("'background'"),
            _ => None,
        };
        if let Some(needs) = needs {
            return Err(StepError::Harness(format!(
                "actor '{}' has no connection ({why}), and this step needs one (it has {needs})",
                self.scenario.actors[actor].name
            )));
        }
        if matches!(step.kind, StepKind::Return(_)) {
            self.slots[actor] = Slot::Empty;
        }
        self.record_note(step, Value::NoConnection(why), None);
        Ok(true)
    }

    /// Phase 6: every connection dropped, background steps stopped, the pool
    /// closed (within 10 s), the monitor closed (or, when the run `passed` in
    /// a database it shares, kept for the next cell: [`Run::kept_monitor`]).
    async fn close(&mut self, pool: Box<dyn locklab_drivers::Pool>, monitor: DirectConn, passed: bool) {
        self.heal_all().await;
        self.abort_background();
        let _ = tokio::time::timeout(Duration::from_secs(10), pool.close()).await;
        match self.monitor_pid.filter(|_| self.keep_monitor && passed) {
            Some(pid) => self.kept_monitor = Some(Monitor { conn: monitor, pid }),
            None => monitor.close().await,
        }
    }

    /// Runs `setup` or `teardown` statements on a connection of the harness's
    /// own role to the run's database, in order, stopping at the first error.
    async fn run_sql_list(&self, list: &[(String, Pos)], what: &str) -> Result<(), String> {
        if list.is_empty() {
            return Ok(());
        }
        let mut conn = DirectConn::connect(&self.server.spec(self.db, &format!("locklab-{what}")))
            .await
            .map_err(|e| format!("cannot connect for {what}: {e}"))?;
        let mut outcome = Ok(());
        for (i, (sql, pos)) in list.iter().enumerate() {
            let r = tokio::time::timeout(Duration::from_secs(60), conn.simple_query(sql)).await;
            let at = self.scenario.at(*pos);
            match r {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    outcome = Err(format!("{what} statement {} at {at} failed: {e}", i + 1));
                    break;
                }
                Err(_) => {
                    outcome = Err(format!("{what} statement {} at {at} did not finish within 60 s", i + 1));
                    break;
                }
            }
        }
        conn.close().await;
        outcome
    }
}
