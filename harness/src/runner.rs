//! Runs one scenario through one driver against the server, in a database of
//! its own, and returns what happened.
//!
//! Per run: `create database`, a pool from the driver, a dedicated connection
//! per direct actor, the steps in order, then the guide's "Verify" step (which
//! advisory locks are still held once every actor is done), then
//! `drop database … with (force)`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use locklab_drivers::{
    Conn, DirectConn, Driver, DriverError, DriverInfo, DriverKind, PoolOptions, PoolerMode, Returned, Rows,
};
use tokio::task::JoinHandle;

use crate::observe::{self, LockRow, Polled, poll_until};
use crate::outcome::{LockHolder, LockSnapshot, Value};
pub use crate::outcome::{Observation, Outcome, RunResult, Stats, StepReport};
use crate::scenario::{
    Action, Expect, OnTimeout, Pos, RowsExpect, Scalar, Scenario, Settings, Step, StepKind, Via, When,
};
use crate::server::Server;

/// Ends every other backend connected to the run's database.
const TERMINATE_OTHERS_SQL: &str = "select pg_terminate_backend(pid) from pg_stat_activity \
     where datname = current_database() and pid <> pg_backend_pid()";

/// Backends of the run's database still running a statement: pid, what it
/// waits for (`wait_event_type/wait_event`, or `running`), the pids blocking
/// it (`pg_blocking_pids`, comma-separated) and the start of its statement.
const STUCK_SQL: &str = "select pid, coalesce(wait_event_type || '/' || wait_event, 'running'), \
     array_to_string(pg_blocking_pids(pid), ','), left(regexp_replace(query, '\\s+', ' ', 'g'), 80) \
     from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid() \
     and backend_type = 'client backend' and state = 'active' order by pid";

/// How long the leak guard waits for a closed pool's backends to exit.
const LEAK_GUARD_WAIT: Duration = Duration::from_secs(5);

/// Deadline of each clean-up statement after a run (the leak guard's queries
/// on top of [`LEAK_GUARD_WAIT`], the `drop database`).
const CLEANUP_QUERY_TIMEOUT: Duration = Duration::from_secs(30);

/// `LOCKLAB_TEST_PANIC_AT_STEP=N`: panic at the start of step N (1-based) of
/// every run. A test hook: the harness's own tests use it to check that a
/// panic inside a step fails the cell and leaves nothing behind.
fn injected_panic_step() -> Option<usize> {
    static STEP: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *STEP.get_or_init(|| std::env::var("LOCKLAB_TEST_PANIC_AT_STEP").ok()?.trim().parse().ok())
}

/// The text of a panic payload.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// Ends every other backend of the run's database that holds or waits for an
/// advisory lock; returns their pids.
const CLEAN_ADVISORY_SQL: &str = "select pid from (select distinct pid from pg_locks \
     where locktype = 'advisory' and pid <> pg_backend_pid() \
     and database = (select oid from pg_database where datname = current_database())) x \
     where pg_terminate_backend(pid)";

/// How long a step waits for a statement to end after sending a cancel
/// request before recording that the cancel had no effect.
const CANCEL_GRACE: Duration = Duration::from_millis(1000);

/// Checkout wait limit for pools, in s.
const CHECKOUT_TIMEOUT_S: u64 = 10;

/// Runs `scenario` through `driver` on `server`. Never panics on server or
/// driver behaviour: everything that goes wrong ends up in [`RunResult::failure`].
pub async fn run(server: &Server, scenario: &Scenario, driver: &dyn Driver) -> RunResult {
    let info = driver.info();
    let began = Instant::now();
    let mut result = RunResult::new(&server.id(), &scenario.name, info.id);
    if info.pooler.is_some() && scenario.pool_settings.list.iter().any(|(k, _)| k != "application_name") {
        // PgBouncer (1.18) refuses the `options` startup parameter that carries
        // connection settings: the scenario cannot be run as written.
        result.skipped = Some(format!(
            "PgBouncer does not pass connection settings (the `options` startup parameter) to the server; \
             the pool settings at {} cannot apply",
            scenario.at(scenario.pool_settings.pos)
        ));
        for step in &scenario.steps {
            if let Some(name) = &step.record {
                result.observations.push(Observation {
                    name: name.clone(),
                    step: step.index + 1,
                    value: Value::Null,
                    display: "n/a (settings cannot pass PgBouncer)".into(),
                    sqlstate: None,
                    elapsed_ms: None,
                    waited_ms: None,
                    notices: Vec::new(),
                    elapsed_stats: None,
                    waited_stats: None,
                });
            }
        }
        return result;
    }
    let db = database_name(&scenario.name, info.id);
    let server_id = server.id();
    let fail = |what: String| {
        format!(
            "{server_id}: scenario '{}', driver '{}': {what}",
            scenario.name, info.id
        )
    };

    let admin = match server.admin().await {
        Ok(a) => a,
        Err(e) => {
            result.failure = Some(fail(format!("cannot connect to the server: {e:#}")));
            return result;
        }
    };
    if let Err(e) = admin.client().simple_query(&format!("create database \"{db}\"")).await {
        result.failure = Some(fail(format!("cannot create database {db}: {}", DriverError::from(e))));
        admin.close().await;
        return result;
    }
    let mut early = None;
    for (name, value) in &scenario.server_settings.list {
        let sql = format!("alter database \"{db}\" set {name} = '{}'", value.replace('\'', "''"));
        if let Err(e) = admin.client().simple_query(&sql).await {
            early = Some(fail(format!(
                "cannot apply server setting {name} = {value} at {} (some settings need a superuser): {}",
                scenario.at(scenario.server_settings.pos),
                DriverError::from(e)
            )));
            break;
        }
    }

    if let Some(f) = early {
        result.failure = Some(f);
    } else {
        let mut run = Run {
            server,
            scenario,
            info: &info,
            db: &db,
            result: &mut result,
            slots: Vec::new(),
            pids: HashMap::new(),
            last_user: HashMap::new(),
            vars: HashMap::new(),
            finished: HashMap::new(),
            mismatch: false,
        };
        // A panic outside the steps (building the pool, the clean-up) fails
        // the cell too; the database is still checked and dropped below.
        let outcome = match std::panic::AssertUnwindSafe(run.execute(driver)).catch_unwind().await {
            Ok(o) => o,
            Err(payload) => Err(format!("panicked: {}", panic_text(payload.as_ref()))),
        };
        // After a panic, the slots still hold what the run had: background
        // steps stop here (their backends are the leak guard's to end).
        for slot in run.slots.drain(..) {
            if let Slot::Busy { handle, .. } = slot {
                handle.abort();
            }
        }
        let mismatch = run.mismatch;
        drop(run);
        if let Err(msg) = outcome {
            if mismatch && info.pooler == Some(PoolerMode::Transaction) {
                // Behind transaction pooling an actor's statements may run on
                // different server connections (and another client's session
                // locks may sit on the one it gets): session semantics the
                // scenario assumes do not hold. That is the finding, recorded.
                result.deviation = Some(fail(msg));
            } else {
                result.failure = Some(fail(msg));
            }
        }
    }

    if let Some(mode) = info.pooler
        && let Err(e) = server.pooler_close_database(mode, &db).await
    {
        result.failure.get_or_insert_with(|| fail(format!("{e:#}")));
    }
    let guard = tokio::time::timeout(LEAK_GUARD_WAIT + CLEANUP_QUERY_TIMEOUT, leak_guard(admin.client(), &db))
        .await
        .unwrap_or_else(|_| {
            Err(DriverError::Client(format!(
                "no answer within {} s",
                (LEAK_GUARD_WAIT + CLEANUP_QUERY_TIMEOUT).as_secs()
            )))
        });
    match guard {
        Ok(left) => {
            if !left.is_empty() {
                result.failure.get_or_insert_with(|| {
                    fail(format!(
                        "leak guard: still in the run's database 5 s after the run was over (pool closed): {}; \
                         the harness ended them",
                        left.join(", ")
                    ))
                });
            }
            result.backends_left = left;
        }
        Err(e) => {
            result
                .failure
                .get_or_insert_with(|| fail(format!("leak guard: cannot read pg_stat_activity: {e}")));
        }
    }
    let dropped = tokio::time::timeout(
        CLEANUP_QUERY_TIMEOUT,
        admin
            .client()
            .simple_query(&format!("drop database if exists \"{db}\" with (force)")),
    )
    .await
    .map_err(|_| format!("no answer within {} s", CLEANUP_QUERY_TIMEOUT.as_secs()))
    .and_then(|r| r.map_err(|e| DriverError::from(e).to_string()));
    if let Err(e) = dropped {
        let msg = format!("cannot drop database {db}: {e}");
        result.failure.get_or_insert_with(|| fail(msg));
    }
    admin.close().await;
    result.elapsed_ms = ms(began.elapsed());
    result
}

/// The leak guard, run after every scenario × driver run: waits up to
/// [`LEAK_GUARD_WAIT`] (5 s) until database `db` has no backend
/// (`pg_stat_activity`) and no advisory lock (`pg_locks`), polling from
/// `admin`, a connection to another database; then ends whatever backend is
/// still there. Returns what was left, `pid N (application_name, state)` and
/// `lock KEY (pid N)` (KEY an i64, or (i32, i32) for two-key locks), sorted;
/// empty when nothing was.
///
/// # Errors
/// A failed query.
pub async fn leak_guard(admin: &tokio_postgres::Client, db: &str) -> Result<Vec<String>, DriverError> {
    let lit = db.replace('\'', "''");
    let sql = format!(
        "select 'pid ' || pid || ' (' || coalesce(nullif(application_name, ''), backend_type) || ', ' \
         || coalesce(state, 'no state') || ')' from pg_stat_activity where datname = '{lit}' \
         union all \
         select 'lock ' || case when objsubid = 1 then ((classid::bigint << 32) | objid::bigint)::text \
         else '(' || classid::int || ', ' || objid::int || ')' end \
         || coalesce(' (pid ' || pid || ')', ' (a prepared transaction)') \
         from pg_locks where locktype = 'advisory' \
         and database = (select oid from pg_database where datname = '{lit}')"
    );
    let until = Instant::now() + LEAK_GUARD_WAIT;
    let mut left = Vec::new();
    let polled = poll_until(until, async || {
        let rows = locklab_drivers::simple_query_rows(admin, &sql).await?;
        left = rows
            .rows
            .into_iter()
            .filter_map(|r| r.into_iter().next().flatten())
            .collect();
        Ok::<_, DriverError>(left.is_empty().then_some(()))
    })
    .await?;
    if let Polled::TimedOut = polled {
        left.sort();
        admin
            .simple_query(&format!(
                "select pg_terminate_backend(pid) from pg_stat_activity where datname = '{lit}'"
            ))
            .await
            .map_err(DriverError::from)?;
        return Ok(left);
    }
    Ok(Vec::new())
}

fn database_name(scenario: &str, driver: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let clean = |s: &str| {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect::<String>()
    };
    let mut name = format!("ll_{}_{}", clean(scenario), clean(driver));
    name.truncate(40);
    // The pid lets an interrupted process find its own databases (drop_own_databases).
    format!("{name}_{}_{n}", std::process::id())
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// What the step's SQL (or background task) produced.
type SqlOutcome = (Result<Rows, DriverError>, Duration);

/// A background step's task: the connection, the outcome, and when the client
/// had the result.
type Background = JoinHandle<(Box<dyn Conn>, SqlOutcome, Instant)>;

enum Slot {
    /// No connection (pool actor before checkout / after return).
    Empty,
    /// A connection, idle on our side.
    Ready(Box<dyn Conn>),
    /// No connection, because a bounded checkout gave up (the reason):
    /// later steps of the actor record that instead of running.
    Lost(String),
    /// A background step is running on the connection.
    Busy {
        step: usize,
        started: Instant,
        handle: Background,
    },
}

struct Run<'a> {
    server: &'a Server,
    scenario: &'a Scenario,
    info: &'a DriverInfo,
    db: &'a str,
    result: &'a mut RunResult,
    slots: Vec<Slot>,
    /// Backend pid of each actor's current connection (absent when the actor
    /// has none, or the pid could not be read).
    pids: HashMap<usize, i32>,
    /// For each backend pid, the actor that most recently checked it out.
    last_user: HashMap<i32, usize>,
    /// Saved values (`save:`), text as the server sent it; `None` for NULL.
    vars: HashMap<String, Option<String>>,
    /// When each awaited background step (index) completed, client side.
    finished: HashMap<usize, Instant>,
    /// The step that failed failed an expectation (rather than the harness
    /// failing to run it).
    mismatch: bool,
}

impl Run<'_> {
    /// The run proper, then `teardown` whatever happened.
    async fn execute(&mut self, driver: &dyn Driver) -> Result<(), String> {
        let outcome = self.execute_steps(driver).await;
        let teardown = self.run_sql_list(&self.scenario.teardown, "teardown").await;
        outcome.and(teardown)
    }

    async fn execute_steps(&mut self, driver: &dyn Driver) -> Result<(), String> {
        let mut spec = self.spec(&format!("locklab-{}", self.info.id), &self.scenario.pool_settings);
        if let Some(mode) = self.info.pooler {
            let (port, _, password) = self.server.pooler(mode).await.map_err(|e| format!("{e:#}"))?;
            spec.host = "127.0.0.1".into();
            spec.port = port;
            spec.password = Some(password);
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
        let mut monitor = DirectConn::connect(&self.server.spec(self.db, "locklab-monitor"))
            .await
            .map_err(|e| format!("cannot open the monitor connection: {e}"))?;

        let mut outcome = Ok(());
        for (i, actor) in self.scenario.actors.iter().enumerate() {
            self.slots.push(Slot::Empty);
            if actor.via == Via::Direct {
                match DirectConn::connect(&self.spec(&format!("locklab-{}", actor.name), &actor.settings)).await {
                    Ok(c) => self.slots[i] = Slot::Ready(Box::new(c)),
                    Err(e) => {
                        outcome = Err(format!(
                            "cannot connect direct actor '{}': {e}{}",
                            actor.name,
                            self.settings_hint(&actor.settings)
                        ))
                    }
                }
                if outcome.is_ok() {
                    self.learn_pid(i, Duration::from_secs(CHECKOUT_TIMEOUT_S)).await;
                }
            }
        }
        if outcome.is_ok() {
            for step in &self.scenario.steps {
                let began = Instant::now();
                let skipped = match step.when {
                    Some(When::Pooled) => self.info.kind != DriverKind::Pooled,
                    Some(When::Direct) => self.info.kind != DriverKind::Direct,
                    None => false,
                };
                let r = if skipped {
                    self.skip(step)
                } else {
                    // A panic inside the step (a driver's, or the harness's
                    // own) fails it like any error: the failure names the step,
                    // and the clean-up below runs.
                    match std::panic::AssertUnwindSafe(self.step(step, pool.as_ref(), &mut monitor))
                        .catch_unwind()
                        .await
                    {
                        Ok(r) => r,
                        Err(payload) => Err(format!("panicked: {}", panic_text(payload.as_ref()))),
                    }
                };
                let label = step.label(&self.scenario.actors, &self.scenario.steps);
                let outcome_text = match (&r, skipped) {
                    (Ok(()), true) => format!(
                        "skipped ({} drivers only)",
                        if step.when == Some(When::Pooled) {
                            "pooled"
                        } else {
                            "direct"
                        }
                    ),
                    (Ok(()), false) => "ok".to_owned(),
                    (Err(e), _) => e.clone(),
                };
                self.result.steps.push(StepReport {
                    step: step.index + 1,
                    label: label.clone(),
                    elapsed_ms: ms(began.elapsed()),
                    outcome: outcome_text,
                });
                if let Err(e) = r {
                    let pos = step.pos;
                    outcome = Err(format!(
                        "{label} at {}:{}:{}: {e}",
                        self.scenario.file.display(),
                        pos.line,
                        pos.column
                    ));
                    break;
                }
            }
        }

        // A failed step may have left backends inside a statement (a step past
        // its deadline waiting on a lock nobody releases): name what each was
        // waiting for, end them below, and say so in the failure.
        let mut stuck = Vec::new();
        if outcome.is_err() {
            match monitor.simple_query(STUCK_SQL).await {
                Ok(rows) => {
                    for r in rows.rows {
                        let text = |i: usize| r.get(i).cloned().flatten().unwrap_or_default();
                        let Ok(pid) = text(0).parse::<i32>() else { continue };
                        let blockers: Vec<String> = text(2)
                            .split(',')
                            .filter_map(|p| p.parse::<i32>().ok())
                            .map(|p| self.backend_name(p))
                            .collect();
                        let blocked = if blockers.is_empty() {
                            String::new()
                        } else {
                            format!(", blocked by {}", blockers.join(", "))
                        };
                        stuck.push((
                            pid,
                            format!(
                                "{} waiting on {}{blocked}: {}",
                                self.backend_name(pid),
                                text(1),
                                text(3)
                            ),
                        ));
                    }
                }
                Err(e) => tracing::warn!("cannot read the stuck backends of a failed run: {e}"),
            }
        }
        if outcome.is_ok() {
            // Every pool actor is done: its connection goes back to the pool, as
            // application code would (a closed one: until its backend is gone).
            // Then the guide's Verify step.
            for i in 0..self.slots.len() {
                if self.scenario.actors[i].via == Via::Pool
                    && matches!(self.slots[i], Slot::Ready(_))
                    && let Err(e) = self.give_back(i, &mut monitor, Duration::from_secs(10)).await
                {
                    outcome = Err(format!("after the last step: {e}"));
                }
            }
        }
        // On failure this is what was held when the run failed.
        match observe::advisory_locks(&mut monitor, None).await {
            Ok(rows) => self.result.locks_left = rows.into_iter().filter(|r| r.granted).collect(),
            Err(e) => {
                outcome = outcome.and(Err(format!("cannot read pg_locks after the run: {e}")));
            }
        }
        // Clean what the verification found: end every backend still holding or
        // waiting for an advisory lock in this database (a ghost lock, a leak).
        match monitor.simple_query(CLEAN_ADVISORY_SQL).await {
            Ok(rows) => {
                self.result.cleaned_backends = rows
                    .rows
                    .iter()
                    .filter_map(|r| r.first().cloned().flatten()?.parse().ok())
                    .collect();
            }
            Err(e) => outcome = outcome.and(Err(format!("cannot end the backends left holding locks: {e}"))),
        }
        if outcome.is_err() {
            // A failed run may have left backends waiting on locks or mid-query
            // (a missed deadline): end them, so that neither the pool's close
            // nor a pool's return-time check waits on them.
            let _ = monitor.simple_query(TERMINATE_OTHERS_SQL).await;
            if !stuck.is_empty() {
                for (pid, _) in &stuck {
                    if !self.result.cleaned_backends.contains(pid) {
                        self.result.cleaned_backends.push(*pid);
                    }
                }
                let what: Vec<&str> = stuck.iter().map(|(_, w)| w.as_str()).collect();
                outcome = outcome.map_err(|e| {
                    format!(
                        "{e}; still in a statement when the run failed, ended by the harness: {}",
                        what.join("; ")
                    )
                });
            }
        }
        for slot in self.slots.drain(..) {
            match slot {
                Slot::Ready(c) => drop(c),
                Slot::Busy { handle, .. } => handle.abort(),
                Slot::Empty | Slot::Lost(_) => {}
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), pool.close()).await;
        monitor.close().await;
        outcome
    }

    /// `backend PID (actor 'NAME')` for a backend an actor has or had, else
    /// `backend PID`.
    fn backend_name(&self, pid: i32) -> String {
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
    fn settings_hint(&self, settings: &Settings) -> String {
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

    fn skip(&mut self, step: &Step) -> Result<(), String> {
        self.record_note(step, Value::Null, "n/a".into(), None);
        Ok(())
    }

    fn conn(&mut self, actor: usize) -> Result<&mut Box<dyn Conn>, String> {
        match &mut self.slots[actor] {
            Slot::Ready(c) => Ok(c),
            Slot::Empty => Err(format!(
                "actor '{}' has no connection",
                self.scenario.actors[actor].name
            )),
            Slot::Lost(why) => Err(format!(
                "actor '{}' has no connection: {why}",
                self.scenario.actors[actor].name
            )),
            Slot::Busy { .. } => Err(format!(
                "actor '{}' is running a background step",
                self.scenario.actors[actor].name
            )),
        }
    }

    /// Reads the backend pid of `actor`'s new connection with
    /// `select pg_backend_pid()`, the one statement the harness adds to a
    /// checkout. When it fails (e.g. the pool handed out a connection in an
    /// aborted transaction) the pid stays unknown; only steps that need it fail.
    /// Returns false when no answer came `within` (a connection handed out with
    /// a statement still queued on it).
    async fn learn_pid(&mut self, actor: usize, within: Duration) -> bool {
        self.pids.remove(&actor);
        let Ok(conn) = self.conn(actor) else { return true };
        let Ok(answer) = tokio::time::timeout(within, conn.simple_query("select pg_backend_pid()")).await else {
            return false;
        };
        let Ok(rows) = answer else { return true };
        if let Some(pid) = rows.first_value().flatten().and_then(|v| v.parse().ok()) {
            self.pids.insert(actor, pid);
            self.last_user.insert(pid, actor);
        }
        true
    }

    fn pid_of(&self, actor: usize) -> Result<i32, String> {
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
    fn actor_of(&self, pid: i32) -> Option<&str> {
        let actor = self.last_user.get(&pid)?;
        if self.info.pooler == Some(PoolerMode::Transaction) && self.scenario.actors[*actor].via == Via::Pool {
            return Some("server connection");
        }
        Some(self.scenario.actors[*actor].name.as_str())
    }

    /// Replaces each `${name}` with its saved value (`NULL` for SQL NULL), in
    /// one left-to-right pass.
    fn substitute(&self, text: &str) -> Result<String, String> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(i) = rest.find("${") {
            let Some(j) = rest[i + 2..].find('}') else { break };
            let name = &rest[i + 2..i + 2 + j];
            let value = self
                .vars
                .get(name)
                .ok_or_else(|| format!("'${{{name}}}' has no saved value"))?;
            out.push_str(&rest[..i]);
            out.push_str(value.as_deref().unwrap_or("NULL"));
            rest = &rest[i + 3 + j..];
        }
        out.push_str(rest);
        Ok(out)
    }

    async fn step(
        &mut self,
        step: &Step,
        pool: &dyn locklab_drivers::Pool,
        monitor: &mut DirectConn,
    ) -> Result<(), String> {
        if injected_panic_step() == Some(step.index + 1) {
            panic!(
                "LOCKLAB_TEST_PANIC_AT_STEP: a panic injected at step {}",
                step.index + 1
            );
        }
        let deadline = Duration::from_millis(step.deadline_ms);
        let actor = step.actor;
        let name = self.scenario.actors[actor].name.clone();
        // What a missed deadline says: the deadline, and what was still awaited.
        let late = |what: &str| format!("deadline of {} ms exceeded: {what}", step.deadline_ms);
        let own_connection = !matches!(
            step.kind,
            StepKind::Await(_) | StepKind::Order(_) | StepKind::Do(Action::Abandon)
        );
        if own_connection && let Slot::Lost(why) = &self.slots[actor] {
            // A bounded checkout of this actor gave up: record that, run nothing.
            let why = why.clone();
            if step.expect.is_some() || step.save.is_some() || step.background {
                let needs = if step.expect.is_some() {
                    "an expectation"
                } else if step.save.is_some() {
                    "'save'"
                } else {
                    "'background'"
                };
                return Err(format!(
                    "actor '{name}' has no connection ({why}), and this step needs one (it has {needs})"
                ));
            }
            if matches!(step.kind, StepKind::Do(Action::Return)) {
                self.slots[actor] = Slot::Empty;
            }
            self.record_note(
                step,
                Value::NoConnection {
                    no_connection: why.clone(),
                },
                format!("no connection ({why})"),
                None,
            );
            return Ok(());
        }
        match &step.kind {
            StepKind::Sql(sql) if !step.background && step.client_timeout_ms.is_some() => {
                let sql = self.substitute(sql)?;
                self.bounded_sql(step, &sql).await
            }
            StepKind::Do(action @ (Action::Begin | Action::Commit | Action::Rollback))
                if step.client_timeout_ms.is_some() =>
            {
                self.bounded_sql(step, action.transaction_sql().unwrap_or("select 1"))
                    .await
            }
            StepKind::Do(Action::Checkout) if step.client_timeout_ms.is_some() => {
                let bound = Duration::from_millis(step.client_timeout_ms.unwrap_or(step.deadline_ms));
                let t0 = Instant::now();
                match tokio::time::timeout(bound, pool.checkout()).await {
                    Err(_) => {
                        let why = format!("checkout dropped at {} ms", bound.as_millis());
                        self.slots[actor] = Slot::Lost(why.clone());
                        self.record_note(
                            step,
                            Value::Checkout {
                                checkout: "dropped",
                                error: None,
                                first_statement: None,
                            },
                            why,
                            Some(t0.elapsed()),
                        );
                        Ok(())
                    }
                    Ok(Err(e)) => {
                        let why = format!("checkout failed: {e}");
                        self.slots[actor] = Slot::Lost(why.clone());
                        self.record_note(
                            step,
                            Value::Checkout {
                                checkout: "failed",
                                error: Some(e.to_string()),
                                first_statement: None,
                            },
                            why,
                            Some(t0.elapsed()),
                        );
                        Ok(())
                    }
                    Ok(Ok(conn)) => {
                        self.slots[actor] = Slot::Ready(conn);
                        // The harness's one added statement, bounded by the
                        // same client timeout on its own (so how long the
                        // checkout took does not decide the cell): a connection
                        // handed out with a statement still queued on it does
                        // not answer.
                        let answered = self.learn_pid(actor, bound).await;
                        let (value, display) = if answered {
                            (
                                Value::Checkout {
                                    checkout: "ok",
                                    error: None,
                                    first_statement: None,
                                },
                                "ok".to_owned(),
                            )
                        } else {
                            (
                                Value::Checkout {
                                    checkout: "ok",
                                    error: None,
                                    first_statement: Some("no answer"),
                                },
                                format!("handed out, no answer within {} ms", bound.as_millis()),
                            )
                        };
                        self.record_note(step, value, display, Some(t0.elapsed()));
                        Ok(())
                    }
                }
            }
            StepKind::Do(Action::Return) if step.client_timeout_ms.is_some() => {
                let bound = Duration::from_millis(step.client_timeout_ms.unwrap_or(step.deadline_ms));
                let Slot::Ready(conn) = std::mem::replace(&mut self.slots[actor], Slot::Empty) else {
                    return Err(format!("actor '{name}' has no connection to return"));
                };
                self.pids.remove(&actor);
                let t0 = Instant::now();
                let (value, display) = match tokio::time::timeout(bound, conn.give_back()).await {
                    Ok(Returned::ToPool) => (Value::Return { returned: "to pool" }, "to pool".to_owned()),
                    Ok(Returned::Closed) => (Value::Return { returned: "closed" }, "closed".to_owned()),
                    Ok(Returned::ToPooler) => (
                        Value::Return {
                            returned: "closed, server connection to the pooler",
                        },
                        "closed, server connection to the pooler".to_owned(),
                    ),
                    Err(_) => (
                        Value::Return { returned: "unfinished" },
                        format!("unfinished at {} ms", bound.as_millis()),
                    ),
                };
                self.record_note(step, value, display, Some(t0.elapsed()));
                Ok(())
            }
            StepKind::Do(Action::Abandon) => {
                let Slot::Busy { handle, .. } = std::mem::replace(&mut self.slots[actor], Slot::Empty) else {
                    return Err(format!("actor '{name}' has no background step to abandon"));
                };
                // Dropping the task drops the statement's future and the
                // connection object with it, mid-call.
                handle.abort();
                let _ = handle.await;
                self.pids.remove(&actor);
                Ok(())
            }
            StepKind::Guard(key, end) => {
                let conn = self.conn(actor)?;
                let t0 = Instant::now();
                let r = tokio::time::timeout(deadline, conn.advisory_lock_guard(*key, end.to_driver()))
                    .await
                    .map_err(|_| late("the lock guard was not acquired"))?;
                let took = t0.elapsed();
                match r {
                    Ok(()) => {
                        let how = match end {
                            crate::scenario::GuardEndRaw::ReleaseNow => "acquired, release_now()",
                            crate::scenario::GuardEndRaw::Drop => "acquired, guard dropped",
                            crate::scenario::GuardEndRaw::Leak => "acquired, leak()",
                        };
                        self.record_note(step, Value::Guard { guard: how }, how.to_owned(), Some(took));
                        Ok(())
                    }
                    Err(DriverError::Unsupported(why)) => {
                        self.record_note(
                            step,
                            Value::Unsupported { unsupported: why },
                            "n/a (no guard API)".to_owned(),
                            None,
                        );
                        Ok(())
                    }
                    Err(e) => Err(format!("lock_guard failed: {e}")),
                }
            }
            StepKind::Sql(sql) => {
                let sql = self.substitute(sql)?;
                if step.background {
                    let Slot::Ready(mut conn) = std::mem::replace(&mut self.slots[actor], Slot::Empty) else {
                        return Err(format!("actor '{name}' has no idle connection"));
                    };
                    let started = Instant::now();
                    let handle = tokio::spawn(async move {
                        let t0 = Instant::now();
                        let r = conn.simple_query(&sql).await;
                        let done = Instant::now();
                        (conn, (r, done - t0), done)
                    });
                    self.slots[actor] = Slot::Busy {
                        step: step.index,
                        started,
                        handle,
                    };
                    return Ok(());
                }
                let conn = self.conn(actor)?;
                let t0 = Instant::now();
                let r = tokio::time::timeout(deadline, conn.simple_query(&sql))
                    .await
                    .map_err(|_| late("the statement had not finished"))?;
                self.finish_sql(step, (r, t0.elapsed()), None)
            }
            StepKind::Do(Action::Checkout) => {
                let conn = tokio::time::timeout(deadline, pool.checkout())
                    .await
                    .map_err(|_| {
                        late(&format!(
                            "the pool had handed out no connection (max_size {})",
                            self.scenario.pool_max_size
                        ))
                    })?
                    .map_err(|e| {
                        format!(
                            "checkout failed: {e}{}",
                            self.settings_hint(&self.scenario.pool_settings)
                        )
                    })?;
                self.slots[actor] = Slot::Ready(conn);
                if !self.learn_pid(actor, deadline).await {
                    return Err(format!(
                        "the connection handed out did not answer `select pg_backend_pid()` within the deadline of {} ms \
                         (a statement still queued on it?); a 'client_timeout_ms' on the checkout records this instead",
                        step.deadline_ms
                    ));
                }
                Ok(())
            }
            StepKind::Do(Action::Return | Action::Disconnect) => self.give_back(actor, monitor, deadline).await,
            StepKind::Do(action) => {
                let sql = action.transaction_sql().unwrap_or("select 1");
                let conn = self.conn(actor)?;
                let t0 = Instant::now();
                let r = tokio::time::timeout(deadline, conn.simple_query(sql))
                    .await
                    .map_err(|_| late("the statement had not finished"))?;
                self.finish_sql(step, (r, t0.elapsed()), None)
            }
            StepKind::Observe(_, key) => {
                if step.settle {
                    self.settle(actor, Instant::now() + deadline).await?;
                }
                let conn = self.conn(actor)?;
                let rows = tokio::time::timeout(deadline, observe::advisory_locks(conn.as_mut(), *key))
                    .await
                    .map_err(|_| late("the pg_locks query had not answered"))?
                    .map_err(|e| format!("observe failed: {e}"))?;
                self.finish_observe(step, rows)
            }
            StepKind::Blocked(targets) => {
                let mut pids = Vec::new();
                for t in targets {
                    pids.push((*t, self.pid_of(*t)?));
                }
                let polled = poll_until(Instant::now() + deadline, async || {
                    for (t, pid) in &pids {
                        if let Slot::Busy { handle, .. } = &self.slots[*t]
                            && handle.is_finished()
                        {
                            self.mismatch = true;
                            return Err(format!(
                                "'{}' finished its background step instead of blocking",
                                self.scenario.actors[*t].name
                            ));
                        }
                        let conn = self.conn(actor)?;
                        if !observe::is_blocked(conn.as_mut(), *pid)
                            .await
                            .map_err(|e| e.to_string())?
                        {
                            return Ok(None);
                        }
                    }
                    Ok(Some(()))
                })
                .await?;
                match polled {
                    Polled::Done(()) => Ok(()),
                    Polled::TimedOut => {
                        let names: Vec<String> = pids
                            .iter()
                            .map(|(t, pid)| format!("'{}' (backend pid {pid})", self.scenario.actors[*t].name))
                            .collect();
                        Err(format!(
                            "{} not all blocked on a lock within {} ms",
                            names.join(", "),
                            step.deadline_ms
                        ))
                    }
                }
            }
            StepKind::Order(ids) => {
                let id_of = |i: &usize| self.scenario.steps[*i].id.clone().unwrap_or_default();
                let mut seen: Vec<(Instant, usize)> = ids
                    .iter()
                    .filter_map(|i| self.finished.get(i).map(|t| (*t, *i)))
                    .collect();
                seen.sort();
                let actual: Vec<String> = seen.iter().map(|(_, i)| id_of(i)).collect();
                let wanted: Vec<String> = ids.iter().map(id_of).collect();
                self.record_note(step, Value::Order(actual.clone()), actual.join(" → "), None);
                if actual == wanted {
                    Ok(())
                } else {
                    self.mismatch = true;
                    Err(format!(
                        "expected completion order {}, got {}",
                        wanted.join(" → "),
                        actual.join(" → ")
                    ))
                }
            }
            StepKind::Await(bg) => {
                let await_began = Instant::now();
                let Slot::Busy {
                    step: s,
                    started,
                    handle,
                } = std::mem::replace(&mut self.slots[actor], Slot::Empty)
                else {
                    return Err(format!("actor '{name}' has no background step to await"));
                };
                debug_assert_eq!(s, *bg);
                let bg_step = &self.scenario.steps[*bg];
                let remaining = Duration::from_millis(bg_step.deadline_ms).saturating_sub(started.elapsed());
                let mut handle = handle;
                let (conn, outcome, done) = match tokio::time::timeout(remaining, &mut handle).await {
                    Ok(Ok(v)) => v,
                    Ok(Err(e)) => return Err(format!("background step {} panicked: {e}", bg + 1)),
                    Err(_) => {
                        handle.abort();
                        return Err(format!(
                            "background step {} ({}) exceeded its deadline of {} ms",
                            bg + 1,
                            bg_step.label(&self.scenario.actors, &self.scenario.steps),
                            bg_step.deadline_ms
                        ));
                    }
                };
                self.slots[actor] = Slot::Ready(conn);
                self.finished.insert(*bg, done);
                self.finish_sql(step, outcome, Some(done.saturating_duration_since(await_began)))
            }
        }
    }

    /// Runs `sql` on the step's actor bounded by its `client_timeout_ms`. When
    /// the bound elapses: `drop` drops the call's future and records that;
    /// `cancel` sends a cancel request and waits (within the deadline) for the
    /// statement's own outcome, which is checked and recorded as usual.
    async fn bounded_sql(&mut self, step: &Step, sql: &str) -> Result<(), String> {
        let bound = Duration::from_millis(step.client_timeout_ms.unwrap_or(step.deadline_ms));
        let deadline = Duration::from_millis(step.deadline_ms);
        let conn = self.conn(step.actor)?;
        let canceller = match step.on_timeout {
            OnTimeout::Cancel => conn.canceller(),
            OnTimeout::Drop => None,
        };
        let no_cancel = conn.no_cancel_reason();
        let t0 = Instant::now();
        let outcome = {
            let mut fut = conn.simple_query(sql);
            match tokio::time::timeout(bound, &mut fut).await {
                Ok(r) => Ok(r),
                Err(_) => match (step.on_timeout, canceller) {
                    (OnTimeout::Cancel, Some(cancel)) => {
                        let rest = deadline.saturating_sub(t0.elapsed());
                        match tokio::time::timeout(rest, cancel()).await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => return Err(format!("the cancel request failed: {e}")),
                            Err(_) => {
                                return Err(format!(
                                    "the cancel request was not sent within the deadline of {} ms",
                                    step.deadline_ms
                                ));
                            }
                        }
                        // A cancel that lands ends the statement at once; one that
                        // does not is recorded as such and the call dropped.
                        let rest = deadline.saturating_sub(t0.elapsed()).min(CANCEL_GRACE);
                        match tokio::time::timeout(rest, &mut fut).await {
                            Ok(r) => Ok(r),
                            Err(_) => Err(format!("cancel sent, no effect within {} ms", rest.as_millis())),
                        }
                    }
                    (OnTimeout::Cancel, None) => Err(format!("no cancel request sent ({no_cancel})")),
                    (OnTimeout::Drop, _) => Err(String::new()),
                },
            }
        };
        let took = t0.elapsed();
        match outcome {
            Ok(r) => self.finish_sql(step, (r, took), None),
            Err(why) => {
                // The future was dropped: the client stopped waiting; the server
                // was not told.
                let prefix = if why.is_empty() {
                    String::new()
                } else {
                    format!("{why}; ")
                };
                let display = format!("{prefix}dropped at {} ms", bound.as_millis());
                if step.expect.is_some() {
                    return Err(format!(
                        "{display} (client_timeout_ms), so the expectation cannot be checked"
                    ));
                }
                self.record_note(
                    step,
                    Value::Dropped {
                        dropped_at_ms: bound.as_millis() as u64,
                        cancel: match step.on_timeout {
                            OnTimeout::Drop => "none",
                            OnTimeout::Cancel if why.starts_with("cancel sent") => "sent, no effect",
                            OnTimeout::Cancel => "not sent",
                        },
                    },
                    display,
                    Some(took),
                );
                Ok(())
            }
        }
    }

    /// Records an observation that is not a statement result (an `observe`,
    /// an `order`, a dropped call, a bounded checkout or return, a guard, a
    /// step that does not apply), when the step has `record`.
    fn record_note(&mut self, step: &Step, value: Value, display: String, took: Option<Duration>) {
        if let Some(name) = &step.record {
            self.result.observations.push(Observation {
                name: name.clone(),
                step: step.index + 1,
                value,
                display,
                sqlstate: None,
                elapsed_ms: took.map(ms),
                waited_ms: None,
                notices: Vec::new(),
                elapsed_stats: None,
                waited_stats: None,
            });
        }
    }

    /// Waits until no other backend of the run's database runs a statement
    /// that is not a lock wait, and none changed state in the last 100 ms
    /// (`pg_stat_activity.state_change`), seen on two polls in a row:
    /// statements queued behind a dropped call have then run, and a client
    /// that closes its connection after them has done so. A lock wait is a
    /// backend with an ungranted `pg_locks` row: one whose lock was granted
    /// but which has not run since (it still shows `wait_event_type = Lock`
    /// until it is scheduled) counts as running.
    async fn settle(&mut self, observer: usize, until: Instant) -> Result<(), String> {
        let mut calm = 0;
        let polled = poll_until(until, async || {
            let conn = self.conn(observer)?;
            let rows = conn
                .simple_query(
                    "select count(*) from pg_stat_activity a where datname = current_database() \
                     and pid <> pg_backend_pid() and application_name <> 'locklab-monitor' \
                     and ((state = 'active' and not exists \
                            (select 1 from pg_locks l where l.pid = a.pid and not l.granted)) \
                          or state_change > clock_timestamp() - interval '100 ms')",
                )
                .await
                .map_err(|e| e.to_string())?;
            if rows.first_value().flatten() == Some("0") {
                calm += 1;
            } else {
                calm = 0;
            }
            Ok::<_, String>((calm >= 2).then_some(()))
        })
        .await?;
        match polled {
            Polled::Done(()) => Ok(()),
            Polled::TimedOut => Err("other backends were still running statements at the deadline (settle)".into()),
        }
    }

    /// Gives `actor`'s connection back with no cleanup. When the return closes
    /// it (direct driver), waits until the server has let its backend go, and
    /// with it its locks: the backend exits asynchronously after the socket closes.
    async fn give_back(&mut self, actor: usize, monitor: &mut DirectConn, deadline: Duration) -> Result<(), String> {
        let Slot::Ready(conn) = std::mem::replace(&mut self.slots[actor], Slot::Empty) else {
            return Err(format!(
                "actor '{}' has no connection to return",
                self.scenario.actors[actor].name
            ));
        };
        let pid = self.pid_of(actor);
        self.pids.remove(&actor);
        let returned = tokio::time::timeout(deadline, conn.give_back()).await.map_err(|_| {
            format!(
                "deadline of {} ms exceeded: the connection was not given back",
                deadline.as_millis()
            )
        })?;
        match returned {
            Returned::Closed => self.wait_gone(monitor, pid?, Instant::now() + deadline).await?,
            Returned::ToPooler if self.info.pooler == Some(PoolerMode::Session) => {
                self.wait_reset(monitor, pid?, Instant::now() + deadline).await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Waits until PgBouncer (session mode) has run its `server_reset_query`
    /// (`DISCARD ALL`, the default) on backend `pid` after the client closed
    /// (the last statement of that backend, finished), or has closed that
    /// server connection instead (it does so for one left inside a
    /// transaction): the backend is gone.
    async fn wait_reset(&self, monitor: &mut DirectConn, pid: i32, until: Instant) -> Result<(), String> {
        let sql = format!(
            "select count(*) filter (where state = 'idle' and query = 'DISCARD ALL'), count(*) \
             from pg_stat_activity where pid = {pid}"
        );
        let polled = poll_until(until, async || {
            let rows = monitor.simple_query(&sql).await.map_err(|e| e.to_string())?;
            let row = rows.rows.first().cloned().unwrap_or_default();
            let reset = row.first().cloned().flatten().as_deref() == Some("1");
            let gone = row.get(1).cloned().flatten().as_deref() == Some("0");
            Ok::<_, String>((reset || gone).then_some(()))
        })
        .await?;
        match polled {
            Polled::Done(()) => Ok(()),
            Polled::TimedOut => Err(format!(
                "PgBouncer did not reset backend {pid} (DISCARD ALL) after its client closed"
            )),
        }
    }

    async fn wait_gone(&self, monitor: &mut DirectConn, pid: i32, until: Instant) -> Result<(), String> {
        let polled = poll_until(until, async || {
            observe::backend_gone(&mut *monitor, pid).await.map(|g| g.then_some(()))
        })
        .await
        .map_err(|e| e.to_string())?;
        match polled {
            Polled::Done(()) => Ok(()),
            Polled::TimedOut => Err(format!(
                "backend {pid} was still in pg_stat_activity after its connection was closed"
            )),
        }
    }

    /// Checks and records an SQL step's outcome. `waited`: for an `await` step,
    /// how long the await itself waited (zero when the result was already in).
    fn finish_sql(&mut self, step: &Step, (result, took): SqlOutcome, waited: Option<Duration>) -> Result<(), String> {
        let elapsed = ms(took);
        if let Some(e) = &step.expect {
            let mut e = e.clone();
            if let Some(Scalar::Text(t)) = &e.value {
                e.value = Some(Scalar::Text(self.substitute(t)?));
            }
            if let Some(RowsExpect::Exact(rows)) = &mut e.rows {
                for v in rows.iter_mut().flatten() {
                    if let Scalar::Text(t) = v {
                        *t = self.substitute(t)?;
                    }
                }
            }
            if let Err(mismatch) = check_sql(&e, &result, elapsed) {
                self.mismatch = true;
                return Err(mismatch);
            }
        } else if let Err(e) = &result
            && step.record.is_none()
        {
            // A recorded step without `expect` records whatever happens, errors
            // included: that is how a behaviour that differs by driver is measured.
            return Err(format!("unexpected error: {e}"));
        }
        if let (Some(var), Ok(rows)) = (&step.save, &result) {
            let v = rows
                .first_value()
                .ok_or_else(|| format!("'save: {var}' but the statement returned no row"))?;
            self.vars.insert(var.clone(), v.map(str::to_owned));
        }
        if let Some(name) = &step.record {
            // Only direct actors capture notices for every driver; a pool actor's
            // would show for the tokio-postgres driver alone (its "pool" opens
            // direct connections), a difference that is not the pools'.
            let notices = match (&result, self.scenario.actors[step.actor].via) {
                (Ok(r), Via::Direct) => r.notices.clone(),
                _ => Vec::new(),
            };
            let (value, mut display, sqlstate) = match &result {
                Ok(rows) => match rows.first_value() {
                    None => (Value::Null, "(no rows)".to_owned(), None),
                    Some(None) => (Value::Null, "NULL".to_owned(), None),
                    Some(Some(t)) => typed(t),
                },
                Err(e) => {
                    let code = e.sqlstate().map(str::to_owned);
                    let display = match (e, &code) {
                        (_, Some(c)) => c.clone(),
                        (DriverError::Db(_), None) => "error, no SQLSTATE from the driver".into(),
                        _ => "client error".into(),
                    };
                    (Value::Error { error: e.to_string() }, display, code)
                }
            };
            if let Some(first) = notices.first() {
                let severity = first.split(':').next().unwrap_or_default();
                display.push_str(&format!(" + {severity}"));
            }
            self.result.observations.push(Observation {
                name: name.clone(),
                step: step.index + 1,
                value,
                display,
                sqlstate,
                elapsed_ms: Some(elapsed),
                waited_ms: waited.map(ms),
                notices,
                elapsed_stats: None,
                waited_stats: None,
            });
        }
        Ok(())
    }

    fn finish_observe(&mut self, step: &Step, rows: Vec<LockRow>) -> Result<(), String> {
        let holders: Vec<&LockRow> = rows.iter().filter(|r| r.granted).collect();
        let waiters: Vec<&LockRow> = rows.iter().filter(|r| !r.granted).collect();
        if let Some(e) = &step.expect {
            if let Some(h) = e.held
                && h == holders.is_empty()
            {
                self.mismatch = true;
                return Err(format!(
                    "expected the lock {}, but {}",
                    if h { "held" } else { "not held" },
                    self.describe(&holders, &waiters)
                ));
            }
            if let Some(var) = &e.holder_pid {
                let want = self.substitute(&format!("${{{var}}}"))?;
                if let Some(r) = holders.iter().find(|r| r.pid.to_string() != want) {
                    self.mismatch = true;
                    return Err(format!(
                        "expected every holder to be backend {want} (${{{var}}}), but backend {} holds {}",
                        r.pid, r.key
                    ));
                }
            }
            if let Some(state) = &e.holder_state
                && let Some(r) = holders.iter().find(|r| r.state.as_deref() != Some(state))
            {
                self.mismatch = true;
                return Err(format!(
                    "expected every holder in state '{state}', but backend {} is '{}'",
                    r.pid,
                    r.state.as_deref().unwrap_or("?")
                ));
            }
        }
        if step.record.is_some() {
            let who = |r: &LockRow| LockHolder {
                actor: self.actor_of(r.pid).map(str::to_owned),
                pid: r.pid,
                state: r.state.clone(),
                key: r.key.to_string(),
                mode: r.mode.clone(),
            };
            let value = Value::Locks(LockSnapshot {
                held: !holders.is_empty(),
                holders: holders.iter().map(|r| who(r)).collect(),
                waiters: waiters.iter().map(|r| who(r)).collect(),
            });
            let display = self.describe(&holders, &waiters);
            self.record_note(step, value, display, None);
        }
        Ok(())
    }

    /// `held by worker (idle)`, `not held`, `held by a (idle in transaction); b waits`.
    fn describe(&self, holders: &[&LockRow], waiters: &[&LockRow]) -> String {
        let name = |r: &LockRow| {
            self.actor_of(r.pid)
                .map(str::to_owned)
                .unwrap_or_else(|| format!("backend {}", r.pid))
        };
        let mut s = if holders.is_empty() {
            "not held".to_owned()
        } else {
            let hs: Vec<String> = holders
                .iter()
                .map(|r| format!("{} ({})", name(r), r.state.as_deref().unwrap_or("?")))
                .collect();
            format!("held by {}", hs.join(", "))
        };
        if !waiters.is_empty() {
            let ws: Vec<String> = waiters.iter().map(|r| name(r)).collect();
            s.push_str(&format!("; waiting: {}", ws.join(", ")));
        }
        s
    }
}

/// `t`/`f` become booleans, integers become numbers, anything else stays text
/// (an empty string shows as `(empty)`).
fn typed(t: &str) -> (Value, String, Option<String>) {
    let display = match t {
        "t" => "true".to_owned(),
        "f" => "false".to_owned(),
        // e.g. the result of a function returning void
        "" => "(empty)".to_owned(),
        _ => t.to_owned(),
    };
    (Value::of_text(t), display, None)
}

/// Checks an SQL step's outcome against its expectation.
///
/// # Errors
/// A sentence saying what was expected and what happened.
pub fn check_sql(e: &Expect, result: &Result<Rows, DriverError>, elapsed_ms: f64) -> Result<(), String> {
    match (&e.error, result) {
        (Some(code), Err(err)) if err.sqlstate() == Some(code.as_str()) => {
            if let Some(pattern) = &e.message {
                let message = match err {
                    DriverError::Db(db) => db.message.clone(),
                    other => other.to_string(),
                };
                let re = regex::Regex::new(pattern).map_err(|x| x.to_string())?;
                if !re.is_match(&message) {
                    return Err(format!(
                        "SQLSTATE {code} as expected, but its message {message:?} does not match /{pattern}/"
                    ));
                }
            }
        }
        // A driver that hides the SQLSTATE (diesel-async maps all but a few to
        // DatabaseErrorKind::Unknown, diesel-async src/pg/error_helper.rs):
        // the code cannot be checked, the error and its message can.
        (Some(code), Err(DriverError::Db(db))) if db.sqlstate.is_empty() => {
            if let Some(pattern) = &e.message {
                let re = regex::Regex::new(pattern).map_err(|x| x.to_string())?;
                if !re.is_match(&db.message) {
                    return Err(format!(
                        "expected SQLSTATE {code}; the driver gives none, and the message {:?} does not match /{pattern}/",
                        db.message
                    ));
                }
            }
        }
        (Some(code), Err(err)) => return Err(format!("expected SQLSTATE {code}, got {err}")),
        (Some(code), Ok(rows)) => {
            return Err(format!(
                "expected SQLSTATE {code}, but the statement succeeded ({})",
                show_first(rows)
            ));
        }
        (None, Err(err)) => return Err(format!("unexpected error: {err}")),
        (None, Ok(rows)) => {
            if let Some(want) = &e.value {
                match rows.first_value() {
                    None => {
                        return Err(format!("expected {want}, but the statement returned no row"));
                    }
                    Some(got) if !want.matches(got) => {
                        return Err(format!("expected {want}, got {}", show_first(rows)));
                    }
                    Some(_) => {}
                }
            }
            match &e.rows {
                Some(RowsExpect::Count(n)) if rows.rows.len() as u64 != *n => {
                    return Err(format!("expected {n} row(s), got {}", rows.rows.len()));
                }
                Some(RowsExpect::Exact(want)) => {
                    let same = want.len() == rows.rows.len()
                        && want
                            .iter()
                            .zip(&rows.rows)
                            .all(|(w, g)| w.len() == g.len() && w.iter().zip(g).all(|(w, g)| w.matches(g.as_deref())));
                    if !same {
                        let show = |r: &Vec<Option<String>>| {
                            let cells: Vec<String> =
                                r.iter().map(|v| v.as_deref().unwrap_or("NULL").to_owned()).collect();
                            format!("[{}]", cells.join(", "))
                        };
                        let wanted: Vec<String> = want
                            .iter()
                            .map(|r| format!("[{}]", r.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")))
                            .collect();
                        let got: Vec<String> = rows.rows.iter().map(show).collect();
                        return Err(format!("expected rows {}, got {}", wanted.join(" "), got.join(" ")));
                    }
                }
                _ => {}
            }
        }
    }
    if let Some(patterns) = &e.notices {
        let got: &[String] = result.as_ref().map(|r| r.notices.as_slice()).unwrap_or(&[]);
        let mut ok = got.len() == patterns.len();
        for (p, n) in patterns.iter().zip(got) {
            ok &= regex::Regex::new(p).map_err(|x| x.to_string())?.is_match(n);
        }
        if !ok {
            return Err(format!(
                "expected notices [{}], got [{}]",
                patterns.iter().map(|p| format!("/{p}/")).collect::<Vec<_>>().join(", "),
                got.join(" | ")
            ));
        }
    }
    if let Some(b) = e.elapsed_ms {
        let (min, max) = (b.min.unwrap_or(0.0), b.max.unwrap_or(f64::INFINITY));
        if elapsed_ms < min || elapsed_ms > max {
            return Err(format!("took {elapsed_ms:.1} ms, expected between {min} and {max} ms"));
        }
    }
    Ok(())
}

fn show_first(rows: &Rows) -> String {
    match rows.first_value() {
        None => "no rows".into(),
        Some(None) => "NULL".into(),
        Some(Some(v)) => typed(v).1,
    }
}

/// Drops every database this process created for its runs (`ll_…_<pid>_<n>`),
/// with `(force)`; used when a run is interrupted before its own cleanup.
/// Returns how many were dropped.
///
/// # Errors
/// Connecting to the server or listing databases failed.
pub async fn drop_own_databases(server: &Server) -> Result<usize, DriverError> {
    let admin = server
        .admin()
        .await
        .map_err(|e| DriverError::Client(format!("{e:#}")))?;
    let pattern = format!("ll\\_%\\_{}\\_%", std::process::id());
    // A `create database` of a run that was cancelled mid-way still completes
    // on the server: wait (up to 15 s) until none of ours is running, or its
    // database would appear after the listing below.
    let creating = format!(
        "select count(*) from pg_stat_activity where state = 'active' \
         and pid <> pg_backend_pid() and query like 'create database \"{pattern}'"
    );
    let _ = poll_until(Instant::now() + Duration::from_secs(15), async || {
        let rows = locklab_drivers::simple_query_rows(admin.client(), &creating).await?;
        Ok::<_, DriverError>((rows.first_value().flatten() == Some("0")).then_some(()))
    })
    .await?;
    let rows = locklab_drivers::simple_query_rows(
        admin.client(),
        &format!("select datname from pg_database where datname like '{pattern}'"),
    )
    .await?;
    let mut dropped = 0;
    for name in rows.rows.iter().filter_map(|r| r.first().cloned().flatten()) {
        if admin
            .client()
            .simple_query(&format!("drop database if exists \"{name}\" with (force)"))
            .await
            .is_ok()
        {
            dropped += 1;
        }
    }
    admin.close().await;
    Ok(dropped)
}
