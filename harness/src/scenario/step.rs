//! The validated steps the runner executes: one variant per step kind, each
//! carrying exactly its own fields (so no combination of fields has to be
//! ruled out at run time).

use super::kind::Kind;
use super::raw::{Action, Bounds, GuardEndRaw, ObserveDetail, OnTimeout, RowsExpect, Scalar, When};
use super::{Actor, Pos};
use crate::keys::AdvisoryKey;

/// One step: what every kind has, and its [`StepKind`].
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// 0-based index in the file's `steps` list.
    pub index: usize,
    /// Where the step starts in the file.
    pub pos: Pos,
    /// Optional id (needed to `await` a background step or name it in `order`).
    pub id: Option<String>,
    /// Deadline in ms, after which the scenario fails (for an `await`: the
    /// background step's).
    pub deadline_ms: u64,
    /// Observation name for the matrix (`record:`).
    pub record: Option<String>,
    /// `time_varies: true`: the recorded time is shown but not compared
    /// with the baseline ([`crate::outcome::Observation::time_varies`]).
    pub time_varies: bool,
    /// What it does.
    pub kind: StepKind,
}

/// What a step does.
#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    /// SQL in the foreground (simple query protocol).
    Sql(SqlStep),
    /// SQL started on the actor's connection, finished by an [`StepKind::Await`].
    Background {
        /// Actor index.
        actor: usize,
        /// The SQL; `${name}` is replaced by saved values when it starts.
        sql: String,
    },
    /// `begin`, `commit` or `rollback`.
    Transaction(TransactionStep),
    /// Check a connection out of the pool under test (direct driver: open one).
    Checkout {
        /// Actor index (a pool actor).
        actor: usize,
        /// Client-side bound in ms whose expiry is recorded, not a failure.
        client_timeout_ms: Option<u64>,
    },
    /// Give the connection back with no cleanup (direct driver: close it).
    Return {
        /// Actor index (a pool actor).
        actor: usize,
        /// Client-side bound in ms whose expiry is recorded, not a failure.
        client_timeout_ms: Option<u64>,
    },
    /// Close a direct actor's dedicated connection; the step ends once the
    /// server has let the backend go.
    Disconnect {
        /// Actor index (a direct actor).
        actor: usize,
    },
    /// Drop the actor's in-flight background step together with its connection.
    Abandon {
        /// Actor index.
        actor: usize,
    },
    /// Snapshot advisory locks (`pg_locks` joined to `pg_stat_activity`).
    Observe(ObserveStep),
    /// How many times the actor's session holds a session-level advisory
    /// lock, probed on its own connection ([`crate::held_count`]).
    HeldCount(HeldCountStep),
    /// Wait until every target (actor indices) is blocked on a lock, seen from
    /// the server (`pg_blocking_pids`), or queued in the pooler for a server
    /// connection, seen by the pooler; fails if one's background step
    /// finishes first, unless `or_finished`.
    Blocked {
        /// The observer (a direct actor) that asks the server.
        observer: usize,
        /// Actors whose background steps must be blocked or queued.
        targets: Vec<usize>,
        /// `or_finished: true` (one target): a call that finishes first is
        /// a reading (`finished first (value …)`), not a failure.
        or_finished: bool,
    },
    /// Wait for a background step to finish and check its expectation.
    Await(AwaitStep),
    /// The listed background steps (indices) completed in this order.
    Order {
        /// Indices of awaited background steps, in the expected order.
        steps: Vec<usize>,
    },
    /// A fault the harness injects into the actor's connection (crash,
    /// terminate, partition, heal); the run remembers when, for [`StepKind::Granted`].
    Fault {
        /// Actor index.
        actor: usize,
        /// Which fault.
        fault: Fault,
    },
    /// Wait until the target's background lock call stops waiting (seen in
    /// `pg_locks`), recording the time since the last fault, or "still held
    /// at N s" at the deadline.
    Granted {
        /// The observer (a direct actor) that asks the server.
        observer: usize,
        /// The actor whose background step waits for the lock.
        target: usize,
    },
    /// Restart the server (a local cluster of the cell's own), then give the
    /// observer a new connection.
    Restart {
        /// The direct actor that gets a new connection afterwards.
        observer: usize,
        /// `immediate` (SIGQUIT) rather than `fast` (SIGINT).
        immediate: bool,
    },
    /// A lock library's or the sqlx migrator's call on the actor's pool.
    Library(LibraryStep),
    /// Take the session-level advisory lock on a bigint key through the
    /// driver's guard API (sqlx `PgAdvisoryLock`) and end the guard.
    Guard {
        /// Actor index (a pool actor).
        actor: usize,
        /// The bigint key.
        key: i64,
        /// How the guard ends.
        end: GuardEndRaw,
        /// `client_timeout_ms`: the client gives up on `acquire` after this
        /// many ms (its future is dropped, as `tokio::time::timeout` does),
        /// the guard never made.
        client_timeout_ms: Option<u64>,
    },
}

/// A `library` step: a lock library's or the sqlx migrator's call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryStep {
    /// Actor index (a pool actor; the library uses the actor's pool, not a
    /// checked-out connection).
    pub actor: usize,
    /// Which library.
    pub library: locklab_drivers::libraries::Library,
    /// What it is asked to do.
    pub call: locklab_drivers::libraries::LibraryCall,
}

/// A fault injected into an actor's connection (`do: crash | terminate |
/// partition | heal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL to the child process that holds a `process: child` actor's connection.
    Crash,
    /// `pg_terminate_backend` on the actor's (or, for a pool actor without a
    /// connection, its last) backend, waiting until the backend has exited.
    Terminate,
    /// Drop the packets of a `network: namespace` actor's connection.
    Partition,
    /// Stop dropping them.
    Heal,
}

impl Fault {
    /// The `do:` action.
    pub fn action(self) -> Action {
        match self {
            Fault::Crash => Action::Crash,
            Fault::Terminate => Action::Terminate,
            Fault::Partition => Action::Partition,
            Fault::Heal => Action::Heal,
        }
    }

    /// The `do:` word.
    pub fn word(self) -> &'static str {
        self.action().declaration().word
    }
}

/// A foreground `sql` step.
#[derive(Clone, Debug, PartialEq)]
pub struct SqlStep {
    /// Actor index.
    pub actor: usize,
    /// The SQL; `${name}` is replaced by saved values.
    pub sql: String,
    /// What must hold afterwards.
    pub expect: Option<SqlExpect>,
    /// Variable to store the first value of the first row in (`save:`).
    pub save: Option<String>,
    /// Only for some driver kinds.
    pub when: Option<When>,
    /// A client-side bound on the call (`client_timeout_ms`, `on_timeout`).
    pub bound: Option<ClientBound>,
}

/// A client-side bound on a call: when `ms` elapse the call's future is
/// dropped (or a cancel request sent), and the step records that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientBound {
    /// The bound, in ms (below the step's deadline).
    pub ms: u64,
    /// What the client does when it elapses.
    pub on_timeout: OnTimeout,
}

/// Transaction control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transaction {
    /// `begin`.
    Begin,
    /// `commit`.
    Commit,
    /// `rollback`.
    Rollback,
}

impl Transaction {
    /// The `do:` action.
    pub fn action(self) -> Action {
        match self {
            Transaction::Begin => Action::Begin,
            Transaction::Commit => Action::Commit,
            Transaction::Rollback => Action::Rollback,
        }
    }

    /// The driver's transaction control for it.
    pub fn control(self) -> locklab_drivers::TxControl {
        match self {
            Transaction::Begin => locklab_drivers::TxControl::Begin,
            Transaction::Commit => locklab_drivers::TxControl::Commit,
            Transaction::Rollback => locklab_drivers::TxControl::Rollback,
        }
    }

    /// The SQL it sends (`begin`, `commit`, `rollback`: its `do:` word).
    pub fn sql(self) -> &'static str {
        self.action().declaration().word
    }
}

/// A `do: begin | commit | rollback` step.
#[derive(Clone, Debug, PartialEq)]
pub struct TransactionStep {
    /// Actor index.
    pub actor: usize,
    /// Which statement.
    pub action: Transaction,
    /// What must hold afterwards.
    pub expect: Option<SqlExpect>,
    /// A client-side bound on the call (its `on_timeout` is always `drop`).
    pub bound: Option<ClientBound>,
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

/// A `held_count: KEY` step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldCountStep {
    /// Actor index (pool or direct; a pool actor needs a connection).
    pub actor: usize,
    /// The key whose session-level holds are counted.
    pub key: AdvisoryKey,
    /// Count the shared holds (`ShareLock`) rather than the exclusive ones.
    pub shared: bool,
}

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

/// Expectations on a step that runs SQL.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SqlExpect {
    /// First column of the first row.
    pub value: Option<Scalar>,
    /// Number of rows, or the rows.
    pub rows: Option<RowsExpect>,
    /// SQLSTATE the step must fail with (five characters, e.g. `55P03`).
    pub error: Option<String>,
    /// Regular expression the error message must match (validated at load).
    pub message: Option<String>,
    /// Regular expressions the step's notices (`SEVERITY: message`) must match, in order.
    pub notices: Option<Vec<String>>,
    /// Elapsed-time bounds in ms.
    pub elapsed_ms: Option<Bounds>,
}

/// Expectations on an `observe` step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObserveExpect {
    /// Whether any granted advisory lock matched.
    pub held: Option<bool>,
    /// Every granted lock's backend pid equals this saved variable.
    pub holder_pid: Option<String>,
    /// Every granted lock's backend is in this `pg_stat_activity.state`.
    pub holder_state: Option<String>,
    /// There is a waiter, and every waiter's `wait_event_type:wait_event` is this.
    pub waiter_wait_event: Option<String>,
    /// There is a waiter, and whether every waiter's `backend_xmin` is set is this.
    pub waiter_xmin: Option<bool>,
}

impl StepKind {
    /// Whether the step ends or cuts connections itself: a fault (`do:
    /// crash | terminate | partition`) or a server restart.
    pub fn is_fault(&self) -> bool {
        matches!(
            self.kind(),
            Kind::Restart | Kind::Do(Action::Crash | Action::Terminate | Action::Partition)
        )
    }

    /// The kind as the file names it, whose [`Kind::declaration`] says
    /// what the validator and the runner's placement need to know of it.
    pub fn kind(&self) -> Kind {
        match self {
            StepKind::Sql(_) | StepKind::Background { .. } => Kind::Sql,
            StepKind::Transaction(t) => Kind::Do(t.action.action()),
            StepKind::Checkout { .. } => Kind::Do(Action::Checkout),
            StepKind::Return { .. } => Kind::Do(Action::Return),
            StepKind::Disconnect { .. } => Kind::Do(Action::Disconnect),
            StepKind::Abandon { .. } => Kind::Do(Action::Abandon),
            StepKind::Fault { fault, .. } => Kind::Do(fault.action()),
            StepKind::Observe(_) => Kind::Observe,
            StepKind::HeldCount(_) => Kind::HeldCount,
            StepKind::Blocked { .. } => Kind::Blocked,
            StepKind::Await(_) => Kind::Await,
            StepKind::Order { .. } => Kind::Order,
            StepKind::Granted { .. } => Kind::Granted,
            StepKind::Restart { .. } => Kind::Restart,
            StepKind::Guard { .. } => Kind::Guard,
            StepKind::Library(_) => Kind::Library,
        }
    }
}

impl Step {
    /// The actor whose connection the step uses (`None` for `order`).
    pub fn actor(&self) -> Option<usize> {
        Some(match &self.kind {
            StepKind::Sql(s) => s.actor,
            StepKind::Transaction(t) => t.actor,
            StepKind::Observe(o) => o.observer,
            StepKind::Await(a) => a.actor,
            StepKind::Library(l) => l.actor,
            StepKind::HeldCount(h) => h.actor,
            StepKind::Blocked { observer, .. }
            | StepKind::Granted { observer, .. }
            | StepKind::Restart { observer, .. } => *observer,
            StepKind::Background { actor, .. }
            | StepKind::Checkout { actor, .. }
            | StepKind::Return { actor, .. }
            | StepKind::Disconnect { actor }
            | StepKind::Abandon { actor }
            | StepKind::Fault { actor, .. }
            | StepKind::Guard { actor, .. } => *actor,
            StepKind::Order { .. } => return None,
        })
    }

    /// Which driver kinds the step applies to (`None`: all).
    pub fn when(&self) -> Option<When> {
        match &self.kind {
            StepKind::Sql(s) => s.when,
            StepKind::Observe(o) => o.when,
            _ => None,
        }
    }

    /// A short human label, e.g. `step 4 (b: select pg_advisory_xact_lock(7))`.
    pub fn label(&self, actors: &[Actor], steps: &[Step]) -> String {
        let id_of = |i: &usize| steps[*i].id.clone().unwrap_or_else(|| format!("step {}", i + 1));
        let what = match &self.kind {
            StepKind::Sql(SqlStep { sql, .. }) | StepKind::Background { sql, .. } => {
                sql.split_whitespace().collect::<Vec<_>>().join(" ")
            }
            StepKind::Transaction(t) => t.action.sql().to_owned(),
            StepKind::Checkout { .. } => "checkout".into(),
            StepKind::Return { .. } => "return".into(),
            StepKind::Disconnect { .. } => "disconnect".into(),
            StepKind::Abandon { .. } => "abandon".into(),
            StepKind::Observe(_) => "observe advisory_locks".into(),
            StepKind::HeldCount(h) => {
                format!("held_count {}{}", h.key, if h.shared { " (shared)" } else { "" })
            }
            StepKind::Blocked { targets, .. } => {
                let names: Vec<&str> = targets.iter().map(|a| actors[*a].name.as_str()).collect();
                format!("blocked: {}", names.join(", "))
            }
            StepKind::Fault { fault, .. } => fault.word().into(),
            StepKind::Restart { immediate, .. } => {
                format!("restart {}", if *immediate { "immediate" } else { "fast" })
            }
            StepKind::Granted { target, .. } => format!("granted: {}", actors[*target].name),
            StepKind::Await(a) => format!("await {}", id_of(&a.target)),
            StepKind::Guard { key, end, .. } => format!("lock_guard {key}, end {end:?}").to_lowercase(),
            StepKind::Library(l) => format!("library {}: {:?}", l.library.as_str(), l.call).to_lowercase(),
            StepKind::Order { steps } => {
                let names: Vec<String> = steps.iter().map(id_of).collect();
                return format!("step {} (order: {})", self.index + 1, names.join(" → "));
            }
        };
        let actor = self.actor().unwrap_or_default();
        format!("step {} ({}: {})", self.index + 1, actors[actor].name, what)
    }
}
