//! A run in progress: each actor's connection, backend pids, saved values;
//! and the phases inside the run's database: pool, actors, steps, verify,
//! ending leftovers, closing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::FutureExt;
use locklab_drivers::{Conn, DirectConn, Driver, DriverInfo, DriverKind, PoolOptions, PoolerMode, Rows};
use tokio::task::JoinHandle;

use super::sharing::Monitor;
use super::{CHECKOUT_TIMEOUT_S, StepError, StepResult, injected_panic_step, ms, panic_text};
use crate::outcome::{Observation, Phase, RunResult, StepReport, Value};
use crate::scenario::kind::Connection;
use crate::scenario::{Network, Pos, Process, Scenario, Settings, Step, StepKind, Via, When, template};
use crate::server::Server;

/// What a statement (or background task) produced, and how long it took.
pub(super) type SqlOutcome = (Result<Rows, locklab_drivers::DriverError>, Duration);

/// A background step's task: the connection, the outcome, and when the client
/// had the result.
pub(super) type Background = JoinHandle<(Box<dyn Conn>, SqlOutcome, Instant)>;

/// An actor's connection, as the run goes.
pub(super) enum Slot {
    /// No connection (pool actor before checkout / after return).
    Empty,
    /// A connection, idle on our side.
    Ready(Box<dyn Conn>),
    /// No connection, because a bounded checkout gave up (the reason):
    /// later steps of the actor record that instead of running.
    Lost(String),
    /// A background step is running on the connection.
    Busy {
        /// When it started.
        started: Instant,
        /// Its task.
        handle: Background,
        /// The statement it sent (saved values substituted): what a
        /// backend running it shows as `pg_stat_activity.query`.
        sql: String,
    },
}

/// One scenario × driver run inside its database.
pub(super) struct Run<'a> {
    pub(super) server: &'a Server,
    pub(super) scenario: &'a Scenario,
    pub(super) info: &'a DriverInfo,
    pub(super) db: &'a str,
    pub(super) result: &'a mut RunResult,
    /// Each actor's connection, by actor index.
    pub(super) slots: Vec<Slot>,
    /// Backend pid of each actor's current connection (absent when the actor
    /// has none, or the pid could not be read).
    pub(super) pids: HashMap<usize, i32>,
    /// For each backend pid, the actor that most recently checked it out.
    pub(super) last_user: HashMap<i32, usize>,
    /// Saved values (`save:`), text as the server sent it; `None` for NULL.
    pub(super) vars: HashMap<String, Option<String>>,
    /// When each awaited background step (index) completed, client side.
    pub(super) finished: HashMap<usize, Instant>,
    /// Every backend pid each actor has had, the latest last (a pool actor's
    /// after its return: the backend a `terminate` ends).
    pub(super) had_pid: HashMap<usize, i32>,
    /// What the fault steps and the steps that time them keep from step
    /// to step (child processes, namespace ports, when a fault struck).
    pub(super) faults: super::faults::Faults,
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
            server,
            scenario,
            info,
            db,
            result,
            slots: Vec::new(),
            pids: HashMap::new(),
            last_user: HashMap::new(),
            vars: HashMap::new(),
            finished: HashMap::new(),
            had_pid: HashMap::new(),
            faults: super::faults::Faults::default(),
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

    /// A direct actor's connection: in the harness, in a child process
    /// (`process: child`), or from the run's network namespace (`network:
    /// namespace`).
    pub(super) async fn connect_direct(&mut self, i: usize) -> Result<Box<dyn Conn>, locklab_drivers::DriverError> {
        let actor = &self.scenario.actors[i];
        let spec = self.spec(&format!("locklab-{}", actor.name), &actor.settings);
        match (actor.process, actor.network) {
            (Process::Child, _) => {
                let (conn, process) = crate::faults::child::ChildConn::connect(&spec).await?;
                self.faults.children.insert(i, process);
                Ok(Box::new(conn))
            }
            (_, Network::Namespace) => {
                let client_err = locklab_drivers::DriverError::Client;
                let ns = crate::faults::netns::Namespace::get().map_err(client_err)?;
                let stream = ns
                    .connect(spec.port, locklab_drivers::CONNECT_TIMEOUT)
                    .await
                    .map_err(client_err)?;
                let port = stream
                    .local_addr()
                    .map(|a| a.port())
                    .map_err(|e| client_err(e.to_string()))?;
                self.faults.ns_ports.insert(i, port);
                let mut spec = spec;
                spec.host = ns.host_addr().to_string();
                Ok(Box::new(DirectConn::connect_stream(&spec, stream).await?))
            }
            _ => Ok(Box::new(DirectConn::connect(&spec).await?)),
        }
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
        match &step.kind {
            StepKind::Sql(s) => self.sql(step, s).await,
            StepKind::Transaction(t) => self.transaction(step, t).await,
            StepKind::Background { actor, sql } => self.start_background(*actor, sql),
            StepKind::Await(a) => self.await_background(step, a).await,
            StepKind::Abandon { actor } => self.abandon(step, *actor, pool).await,
            StepKind::Order { steps } => self.order(step, steps),
            StepKind::Checkout {
                actor,
                client_timeout_ms: Some(bound),
            } => self.bounded_checkout(step, *actor, *bound, pool).await,
            StepKind::Checkout { actor, .. } => self.checkout(step, *actor, pool).await,
            StepKind::Return {
                actor,
                client_timeout_ms: Some(bound),
            } => self.bounded_return(step, *actor, *bound).await,
            StepKind::Return { actor, .. } | StepKind::Disconnect { actor } => {
                self.give_back(*actor, monitor, Duration::from_millis(step.deadline_ms))
                    .await
            }
            StepKind::Observe(o) => self.observe(step, o).await,
            StepKind::HeldCount(h) => self.held_count(step, h).await,
            StepKind::Blocked {
                observer,
                targets,
                or_finished,
            } => self.blocked(step, *observer, targets, *or_finished).await,
            StepKind::Guard {
                actor,
                key,
                end,
                client_timeout_ms,
            } => self.guard(step, *actor, *key, *end, *client_timeout_ms).await,
            StepKind::Library(l) => self.library(step, l, pool, monitor).await,
            StepKind::Fault { actor, fault } => self.fault(step, *actor, *fault, pool, monitor).await,
            StepKind::Granted { observer, target } => self.granted(step, *observer, *target).await,
            StepKind::Restart { observer, immediate } => self.restart(step, *observer, *immediate, monitor).await,
        }
    }

    /// For an actor whose bounded checkout gave up: records that instead of
    /// running the step (`Ok(true)`), or fails a step that needs the
    /// connection. `Ok(false)`: the step runs.
    fn lost_connection(&mut self, step: &Step) -> Result<bool, StepError> {
        // (An `await` or `order` uses no connection of its own, an `abandon`
        // drops a background step's.)
        let uses_own_connection = !matches!(
            step.kind.kind().declaration().connection,
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
            StepKind::Background { .. } => Some("'background'"),
            _ => None,
        };
        if let Some(needs) = needs {
            return Err(StepError::Harness(format!(
                "actor '{}' has no connection ({why}), and this step needs one (it has {needs})",
                self.scenario.actors[actor].name
            )));
        }
        if matches!(step.kind, StepKind::Return { .. }) {
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

    /// Stops dropping the packets of every `network: namespace` connection of
    /// the run: a partition left in place would cut a later connection that
    /// gets the same local port in the namespace.
    pub(super) async fn heal_all(&mut self) {
        if self.faults.ns_ports.is_empty() {
            return;
        }
        if let Ok(ns) = crate::faults::netns::Namespace::get() {
            for port in std::mem::take(&mut self.faults.ns_ports).into_values() {
                let _ = ns.heal(port).await;
            }
        }
    }

    /// Drops every connection and aborts every background step still running.
    pub(super) fn abort_background(&mut self) {
        for slot in self.slots.drain(..) {
            match slot {
                Slot::Ready(c) => drop(c),
                Slot::Busy { handle, .. } => handle.abort(),
                Slot::Empty | Slot::Lost(_) => {}
            }
        }
    }

    /// `backend PID (actor 'NAME')` for a backend an actor has or had, else
    /// `backend PID`.
    pub(super) fn backend_name(&self, pid: i32) -> String {
        let actor = self
            .pids
            .iter()
            .find(|&(_, &p)| p == pid)
            .map(|(&a, _)| a)
            .or_else(|| self.last_user.get(&pid).copied());
        match actor {
            Some(a) => format!("backend {pid} (actor '{}')", self.scenario.actors[a].name),
            None => format!("backend {pid}"),
        }
    }

    /// ` (check the settings at FILE:L:C)` when `settings` are not empty: a
    /// connection error may come from an unknown or invalid setting, which only
    /// the server can tell.
    pub(super) fn settings_hint(&self, settings: &Settings) -> String {
        if settings.is_empty() {
            String::new()
        } else {
            format!(" (check the connection settings at {})", self.scenario.at(settings.pos))
        }
    }

    /// A connect spec for the run's database with `settings` (an
    /// `application_name` among them replaces `default_name`).
    fn spec(&self, default_name: &str, settings: &Settings) -> locklab_drivers::ConnectSpec {
        let settings = settings.list.as_slice();
        let app = settings
            .iter()
            .find(|(k, _)| k == "application_name")
            .map(|(_, v)| v.as_str())
            .unwrap_or(default_name);
        let mut spec = self.server.spec(self.db, app);
        spec.options = settings
            .iter()
            .filter(|(k, _)| k != "application_name")
            .cloned()
            .collect();
        spec
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

    /// The actor's idle connection.
    ///
    /// # Errors
    /// The actor has none, or it is running a background step.
    pub(super) fn conn(&mut self, actor: usize) -> Result<&mut Box<dyn Conn>, String> {
        let name = &self.scenario.actors[actor].name;
        match &mut self.slots[actor] {
            Slot::Ready(c) => Ok(c),
            Slot::Empty => Err(format!("actor '{name}' has no connection")),
            Slot::Lost(why) => Err(format!("actor '{name}' has no connection: {why}")),
            Slot::Busy { .. } => Err(format!("actor '{name}' is running a background step")),
        }
    }

    /// Reads the backend pid of `actor`'s new connection with
    /// `select pg_backend_pid()`, the one statement the harness adds to a
    /// checkout. When it fails (e.g. the pool handed out a connection in an
    /// aborted transaction) the pid stays unknown; only steps that need it fail.
    /// Returns false when no answer came `within` (a connection handed out with
    /// a statement still queued on it).
    pub(super) async fn learn_pid(&mut self, actor: usize, within: Duration) -> bool {
        self.pids.remove(&actor);
        let Ok(conn) = self.conn(actor) else { return true };
        let Ok(answer) = tokio::time::timeout(within, conn.simple_query(crate::observe::BACKEND_PID_SQL)).await else {
            return false;
        };
        let Ok(rows) = answer else { return true };
        if let Some(pid) = rows.first_value().flatten().and_then(|v| v.parse().ok()) {
            self.pids.insert(actor, pid);
            self.had_pid.insert(actor, pid);
            self.last_user.insert(pid, actor);
        }
        true
    }

    /// The backend pid of the actor's current connection.
    ///
    /// # Errors
    /// Unknown (its `select pg_backend_pid()` failed).
    pub(super) fn pid_of(&self, actor: usize) -> Result<i32, String> {
        self.pids.get(&actor).copied().ok_or_else(|| {
            format!(
                "the backend pid of '{}' is unknown (`select pg_backend_pid()` failed after its checkout)",
                self.scenario.actors[actor].name
            )
        })
    }

    /// The actor that most recently checked out the connection of backend `pid`.
    /// Behind transaction pooling a backend serves whichever client has a
    /// transaction, so a pooled backend is named `server connection`.
    pub(super) fn actor_of(&self, pid: i32) -> Option<&str> {
        let actor = self.last_user.get(&pid)?;
        if self.info.pooler_mode() == Some(PoolerMode::Transaction) && self.scenario.actors[*actor].via == Via::Pool {
            return Some("server connection");
        }
        Some(self.scenario.actors[*actor].name.as_str())
    }

    /// `text` with each `${name}` replaced by its saved value (`NULL` for SQL
    /// NULL) and each `$${` by `${` ([`template::render`]).
    ///
    /// # Errors
    /// A name with no saved value.
    pub(super) fn substitute(&self, text: &str) -> Result<String, String> {
        template::render(text, |name| {
            self.vars.get(name).map(|v| v.as_deref().unwrap_or("NULL").to_owned())
        })
        .map_err(|name| format!("'${{{name}}}' has no saved value"))
    }

    /// Records an observation that is not a statement result (an `observe`,
    /// an `order`, a dropped call, a bounded checkout or return, a guard, a
    /// step that does not apply), when the step has `record`.
    pub(super) fn record_note(&mut self, step: &Step, value: Value, took: Option<Duration>) {
        if let Some(name) = &step.record {
            let mut observation = Observation::new(name, step.index + 1, value, Vec::new(), took.map(ms), None);
            observation.time_varies = step.time_varies;
            self.result.observations.push(observation);
        }
    }
}
