//! What a step kind's execution sees ([`StepCx`]): the server, the
//! scenario and the column, each actor's connection ([`Slot`]), their
//! backend pids, saved values, when background steps finished, what fault
//! steps keep, and the recorder. The runner owns one per run and keeps the
//! rest of a run (building the pool, verifying, closing) to itself.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use locklab_drivers::{Conn, DirectConn, DriverInfo, PoolerMode, Rows};
use tokio::task::JoinHandle;

use super::Step;
use super::faults::Faults;
use crate::outcome::{Observation, RunResult, Value};
use crate::scenario::{Network, Process, Scenario, Settings, Via, template};
use crate::server::Server;

/// A duration in ms, rounded to µs.
pub(crate) fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// What a statement (or background task) produced, and how long it took.
pub(crate) type SqlOutcome = (Result<Rows, locklab_drivers::DriverError>, Duration);

/// A background step's task: the connection, the outcome, and when the client
/// had the result.
pub(crate) type Background = JoinHandle<(Box<dyn Conn>, SqlOutcome, Instant)>;

/// An actor's connection, as the run goes.
pub(crate) enum Slot {
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

/// The state of one run that its steps read and change.
pub(crate) struct StepCx<'a> {
    /// The server the run's database is on.
    pub(crate) server: &'a Server,
    /// The scenario (its actors, steps and file, for messages).
    pub(crate) scenario: &'a Scenario,
    /// The column.
    pub(crate) info: &'a DriverInfo,
    /// The run's database.
    pub(crate) db: &'a str,
    /// The recorder: the run's observations (and its phases and steps,
    /// which the runner writes).
    pub(crate) result: &'a mut RunResult,
    /// Each actor's connection, by actor index.
    pub(crate) slots: Vec<Slot>,
    /// Backend pid of each actor's current connection (absent when the actor
    /// has none, or the pid could not be read).
    pub(crate) pids: HashMap<usize, i32>,
    /// For each backend pid, the actor that most recently checked it out.
    pub(crate) last_user: HashMap<i32, usize>,
    /// Saved values (`save:`), text as the server sent it; `None` for NULL.
    pub(crate) vars: HashMap<String, Option<String>>,
    /// When each awaited background step (index) completed, client side.
    pub(crate) finished: HashMap<usize, Instant>,
    /// Every backend pid each actor has had, the latest last (a pool actor's
    /// after its return: the backend a `terminate` ends).
    pub(crate) had_pid: HashMap<usize, i32>,
    /// What the fault steps and the steps that time them keep from step
    /// to step (child processes, namespace ports, when a fault struck).
    pub(crate) faults: Faults,
}

impl<'a> StepCx<'a> {
    /// A run's step state with no connections yet.
    pub(crate) fn new(
        server: &'a Server,
        scenario: &'a Scenario,
        info: &'a DriverInfo,
        db: &'a str,
        result: &'a mut RunResult,
    ) -> StepCx<'a> {
        StepCx {
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
            faults: Faults::default(),
        }
    }

    /// A direct actor's connection: in the harness, in a child process
    /// (`process: child`), or from the run's network namespace (`network:
    /// namespace`).
    pub(crate) async fn connect_direct(&mut self, i: usize) -> Result<Box<dyn Conn>, locklab_drivers::DriverError> {
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

    /// Stops dropping the packets of every `network: namespace` connection of
    /// the run: a partition left in place would cut a later connection that
    /// gets the same local port in the namespace.
    pub(crate) async fn heal_all(&mut self) {
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
    pub(crate) fn abort_background(&mut self) {
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
    pub(crate) fn backend_name(&self, pid: i32) -> String {
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
    pub(crate) fn settings_hint(&self, settings: &Settings) -> String {
        if settings.is_empty() {
            String::new()
        } else {
            format!(" (check the connection settings at {})", self.scenario.at(settings.pos))
        }
    }

    /// A connect spec for the run's database with `settings` (an
    /// `application_name` among them replaces `default_name`).
    pub(crate) fn spec(&self, default_name: &str, settings: &Settings) -> locklab_drivers::ConnectSpec {
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

    /// The actor's idle connection.
    ///
    /// # Errors
    /// The actor has none, or it is running a background step.
    pub(crate) fn conn(&mut self, actor: usize) -> Result<&mut Box<dyn Conn>, String> {
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
    pub(crate) async fn learn_pid(&mut self, actor: usize, within: Duration) -> bool {
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
    pub(crate) fn pid_of(&self, actor: usize) -> Result<i32, String> {
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
    pub(crate) fn actor_of(&self, pid: i32) -> Option<&str> {
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
    pub(crate) fn substitute(&self, text: &str) -> Result<String, String> {
        template::render(text, |name| {
            self.vars.get(name).map(|v| v.as_deref().unwrap_or("NULL").to_owned())
        })
        .map_err(|name| format!("'${{{name}}}' has no saved value"))
    }

    /// Records an observation that is not a statement result (an `observe`,
    /// an `order`, a dropped call, a bounded checkout or return, a guard, a
    /// step that does not apply), when the step has `record`.
    pub(crate) fn record_note(&mut self, step: &Step, value: Value, took: Option<Duration>) {
        if let Some(name) = &step.record {
            let mut observation = Observation::new(name, step.index + 1, value, Vec::new(), took.map(ms), None);
            observation.time_varies = step.time_varies;
            self.result.observations.push(observation);
        }
    }
}
