//! The file format, as serde reads it. Unknown keys are errors everywhere.
//! The JSON Schema shipped as `scenarios/scenario.schema.json` is generated
//! from these types ([`json_schema`]), so editors and `locklab validate` agree.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::keys::AdvisoryKey;
pub use crate::scenario::scalar::Scalar;
pub(crate) use crate::scenario::scalar::present;
pub use library::{LibraryCallRaw, MigrateRaw};

mod library;
mod trials;
pub(crate) use trials::{RawInvariant, RawOutcome};

/// A locklab scenario file: actors (connections) and the steps they run.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "locklab scenario")]
pub(crate) struct RawScenario {
    /// Unique name; must equal the file name without `.yaml`. Letters, digits, `-` and `_`.
    #[schemars(with = "String")]
    pub(crate) name: Spanned<String>,
    /// One or two sentences: the behaviour this file states. Say so where the truth is not what a reader would assume.
    pub(crate) description: String,
    /// Where the claim comes from: a section of the guide or of the PostgreSQL documentation.
    #[serde(default)]
    pub(crate) source: Option<String>,
    /// Why this scenario's readings vary from run to run by nature (e.g.
    /// several processes racing through a transaction-mode pooler, where
    /// which server connection each statement meets varies). Its cells then
    /// compare with the baseline by status alone, and a cell whose repeats
    /// disagree is shown UNSTABLE without failing the run.
    #[serde(default)]
    pub(crate) readings_vary: Option<String>,
    /// Parameters: the file is run once per combination, with `${name}` replaced by the value
    /// everywhere in the file. Either a map of name → list of values (every combination), or a
    /// list of maps (one run per map). Each run is named `name[param=value,…]` (parameters whose
    /// name starts with `_` are left out of the name).
    #[serde(default)]
    #[schemars(with = "Option<RawParams>")]
    #[allow(dead_code)]
    // read by `ParamsOnly` before expansion; declared here for the schema and deny_unknown_fields
    pub(crate) params: Option<Spanned<RawParams>>,
    /// Server settings for this scenario's database (`ALTER DATABASE … SET name = value`, run by
    /// the harness's superuser before any connection): e.g. `deadlock_timeout: 100ms`.
    #[serde(default)]
    #[schemars(with = "IndexMap<String, Setting>")]
    pub(crate) server_settings: Option<Spanned<IndexMap<String, Setting>>>,
    /// SQL run once, by the harness's own connection to the scenario's database, before the actors connect.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(crate) setup: Vec<Spanned<String>>,
    /// SQL run once, by the harness's own connection, after the last step (also after a failure).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(crate) teardown: Vec<Spanned<String>>,
    /// The pool under test.
    #[serde(default)]
    pub(crate) pool: RawPool,
    /// What the harness asks of a pooler in front of the server for this
    /// scenario's cells (`server_connections`).
    #[serde(default)]
    pub(crate) pooler: RawPooler,
    /// Deadline of every step in ms unless the step sets its own (default 10000, at most 600000).
    #[serde(default)]
    #[schemars(with = "Option<u32>", range(min = 1, max = 600000))]
    pub(crate) step_deadline_ms: Option<Spanned<i64>>,
    /// Run the steps this many times within one cell (2–10000): a race measured as a
    /// distribution of outcomes (each recorded observation's values counted over the trials)
    /// rather than one outcome. The pool and the direct actors stay open across trials; each
    /// trial must end as it began (pool actors returned, background steps awaited).
    #[serde(default)]
    #[schemars(with = "Option<u32>", range(min = 2, max = 10000))]
    pub(crate) trials: Option<Spanned<i64>>,
    /// With `trials`: values drawn anew for every trial, uniformly from `[min, max]`, usable as
    /// `${name}` in SQL (in ms, three decimals), e.g. `release_ms: [10, 30]` for a holder that
    /// releases after `pg_sleep(${release_ms} / 1000.0)`: timing jitter made by the server, not
    /// sleeps used as synchronisation.
    #[serde(default)]
    #[schemars(with = "IndexMap<String, [f64; 2]>")]
    pub(crate) random: Option<Spanned<IndexMap<String, Vec<f64>>>>,
    /// With `trials`: properties checked on every trial from its recorded observations; a
    /// violation is reported as "violated in K of N trials" with the first violating trial's
    /// evidence, and fails the cell unless the invariant says `finding: true`.
    #[serde(default)]
    #[schemars(with = "IndexMap<String, RawInvariant>")]
    pub(crate) invariants: Option<Spanned<IndexMap<String, Spanned<RawInvariant>>>>,
    /// With `trials` (and then required): every reading a trial may record, per `record`
    /// name of the steps, as PostgreSQL's isolation tester lists a permutation's alternative
    /// expected outputs. A trial that reads anything else fails the cell, however rarely; a
    /// reading in the list never fails it (how often each comes up depends on the machine's
    /// load: see "The race rule" in the docs). Each item is one of `{ value: … }`,
    /// `{ error: SQLSTATE | condition name | none }` (`none`: an error the driver reports
    /// without a SQLSTATE), `{ dropped: true }` (the call given up at its `client_timeout_ms`),
    /// `{ held: false }` / `{ held: true }`, `{ held_by: ACTOR }` (every holder is this actor,
    /// or `server connection` behind transaction pooling; optionally with `state`).
    #[serde(default)]
    #[schemars(with = "IndexMap<String, Vec<RawOutcome>>")]
    pub(crate) outcomes: Option<Spanned<IndexMap<String, Spanned<Vec<RawOutcome>>>>>,
    /// Named connections. `via: pool` actors share the pool under test; `via: direct` actors
    /// each own a dedicated connection for the whole run (observers, dedicated lock holders).
    #[schemars(with = "IndexMap<String, RawActor>")]
    pub(crate) actors: Spanned<IndexMap<String, Spanned<RawActor>>>,
    /// Steps, run in order.
    #[schemars(with = "Vec<RawStep>")]
    pub(crate) steps: Spanned<Vec<Spanned<RawStep>>>,
}

/// Only the `params` of a file, read before the placeholders are expanded.
#[derive(Deserialize)]
pub(crate) struct ParamsOnly {
    #[serde(default)]
    pub(crate) params: Option<Spanned<RawParams>>,
}

/// `params:` either as a map of lists (every combination) or a list of maps (one run each).
#[derive(Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum RawParams {
    /// `{key: [7, -1], fn: [a, b]}`: every combination (4 runs here).
    Matrix(IndexMap<String, Vec<Scalar>>),
    /// `[{lock_timeout: 200ms, error: lock_not_available}, …]`: one run per map.
    Cases(Vec<IndexMap<String, Scalar>>),
}

/// A setting value: text, number or boolean, sent as PostgreSQL text (`200ms`, `5`, `on`).
pub(crate) type Setting = Scalar;

/// The pool under test.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPool {
    /// Maximum number of connections (1–100, default 4).
    #[serde(default)]
    #[schemars(with = "Option<u32>", range(min = 1, max = 100))]
    pub(crate) max_size: Option<Spanned<i64>>,
    /// Connection settings for every connection the pool opens, sent at connect time
    /// (`application_name`, or any run-time parameter as `-c name=value`: `lock_timeout`,
    /// `idle_in_transaction_session_timeout`, `tcp_keepalives_idle`, …).
    #[serde(default)]
    #[schemars(with = "IndexMap<String, Setting>")]
    pub(crate) settings: Option<Spanned<IndexMap<String, Setting>>>,
    /// Where the pool lives: `harness` (default: in the harness's process) or
    /// `child` (in a process of its own, which `do: crash` on a pool actor
    /// kills with SIGKILL: a Rust pool in `locklab pool-adapter`, an
    /// out-of-process pool in an adapter started for it alone).
    #[serde(default)]
    pub(crate) process: Process,
}

/// `pooler:` (see [`crate::scenario::Scenario::pooler_server_connections`]).
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPooler {
    /// Behind a transaction-mode pooler, the most server connections (1–16)
    /// it may hold for the cell's database: the cell gets an instance of the
    /// pooler of its own started so (PgBouncer `default_pool_size`, pgagroal
    /// `max_connections` and its limits file, Odyssey `pool_size`), so that
    /// more busy clients than that queue in the pooler. Session-mode
    /// poolers, Pgpool-II, pools and direct connections are not capped.
    #[serde(default)]
    #[schemars(with = "Option<u32>", range(min = 1, max = 16))]
    pub(crate) server_connections: Option<Spanned<i64>>,
}

/// An actor: a named connection.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawActor {
    /// `pool`: checked out of the pool under test; `direct`: a dedicated tokio-postgres connection.
    pub(crate) via: Via,
    /// Connection settings of a direct actor, sent at connect time (as `pool.settings`).
    /// Pool actors share the pool's connections: use `pool.settings` for them.
    #[serde(default)]
    #[schemars(with = "IndexMap<String, Setting>")]
    pub(crate) settings: Option<Spanned<IndexMap<String, Setting>>>,
    /// Where a direct actor's connection lives: `harness` (default: in the
    /// harness's process) or `child` (in a child process of its own, which a
    /// `do: crash` step kills with SIGKILL).
    #[serde(default)]
    pub(crate) process: Process,
    /// How a direct actor reaches the server: `loopback` (default) or
    /// `namespace` (from a network namespace of the run's own over a veth
    /// pair, so that `do: partition` can drop its packets). Needs root and
    /// the local backend's server of its own for fault cells.
    #[serde(default)]
    pub(crate) network: Network,
}

/// Where a direct actor's connection lives (`process:`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Process {
    /// In the harness's own process.
    #[default]
    Harness,
    /// In a child process of its own (`locklab child-connection`), so that
    /// `do: crash` can kill it with SIGKILL and the kernel closes its socket
    /// as for a crashed worker.
    Child,
}

/// How a direct actor reaches the server (`network:`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Over loopback.
    #[default]
    Loopback,
    /// From the run's network namespace over its veth pair (`do: partition`
    /// drops the connection's packets there: no FIN, no RST).
    Namespace,
}

/// How an actor gets its connection.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// A checkout from the driver under test (`checkout` / `return` steps).
    Pool,
    /// A dedicated tokio-postgres connection the harness owns for the whole run,
    /// never pooled: observers and dedicated lock holders. Server notices
    /// (`WARNING`, `NOTICE`) are read on these connections on every column.
    Direct,
}

/// Transaction and connection control steps (`do:`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Check a connection out of the pool (direct driver: open one).
    Checkout,
    /// Give the connection back with no cleanup (direct driver: close it).
    Return,
    /// Close a direct actor's dedicated connection (client-side disconnect; the
    /// step ends once the server has let the backend go).
    Disconnect,
    /// `BEGIN`.
    Begin,
    /// `COMMIT`.
    Commit,
    /// `ROLLBACK`.
    Rollback,
    /// Drop the actor's in-flight background step together with its connection
    /// (the future and the pooled connection object go away mid-call; a pool
    /// gets the connection back with the statement still running).
    Abandon,
    /// Kill the process that holds a `process: child` actor's connection with
    /// SIGKILL (its kernel closes the socket; no Terminate message is sent);
    /// for a pool actor, the process the pool under test lives in
    /// (`pool.process: child`), with every connection of the pool.
    Crash,
    /// End the actor's backend from the harness with `pg_terminate_backend`
    /// (a pool actor without a connection: the backend it last had, e.g. an
    /// idle pooled connection holding a leaked lock); the step ends once the
    /// backend has exited.
    Terminate,
    /// Cut a `network: namespace` actor's connection: its packets are dropped
    /// in both directions (nftables DROP rules in the namespace), so neither
    /// kernel sends FIN or RST.
    Partition,
    /// Remove a `partition`'s DROP rules.
    Heal,
}

/// What happens when a step's `client_timeout_ms` elapses (`on_timeout:`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnTimeout {
    /// Drop the future, as `tokio::time::timeout` does: the client stops
    /// waiting, the server is not told.
    #[default]
    Drop,
    /// Send a cancel request (tokio-postgres `CancelToken::cancel_query`) and
    /// keep waiting for the statement's own outcome (57014 query_canceled when
    /// the cancel lands).
    Cancel,
}

/// How a `restart` step stops the server (PostgreSQL docs §19.5 Shutting
/// Down the Server).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RestartMode {
    /// SIGINT to the postmaster: backends are ended with SIGTERM (their
    /// clients get 57P01 admin_shutdown), then a clean shutdown.
    Fast,
    /// SIGQUIT: every process quits at once; crash recovery at the next start.
    Immediate,
}

/// How a `lock_guard` step ends its guard (`end:`); see
/// [`locklab_drivers::GuardEnd`].
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuardEndRaw {
    /// `release_now()`.
    ReleaseNow,
    /// Drop the guard.
    Drop,
    /// `leak()`.
    Leak,
}

impl GuardEndRaw {
    /// The driver-side value.
    pub fn to_driver(self) -> locklab_drivers::GuardEnd {
        match self {
            GuardEndRaw::ReleaseNow => locklab_drivers::GuardEnd::ReleaseNow,
            GuardEndRaw::Drop => locklab_drivers::GuardEnd::Drop,
            GuardEndRaw::Leak => locklab_drivers::GuardEnd::Leak,
        }
    }
}

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

/// Which driver kinds a step applies to (`when:`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum When {
    /// Only drivers that pool connections.
    Pooled,
    /// Only the direct (unpooled) driver.
    Direct,
}

/// One actor name or a list of them.
#[derive(Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    /// One actor.
    One(String),
    /// Several actors.
    Many(Vec<String>),
}

impl OneOrMany {
    pub(crate) fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// One step: exactly one of `sql`, `do`, `observe`, `held_count`, `blocked`, `granted`, `await`, `order`, `lock_guard`, `library`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStep {
    /// The actor that runs the step (not for `await` and `order`).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) actor: Option<Spanned<String>>,
    /// A name for the step, needed to `await` a background step or to list it in `order`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) id: Option<Spanned<String>>,
    /// SQL run with the simple query protocol; `${name}` is replaced by a saved value or a parameter.
    #[serde(default)]
    pub(crate) sql: Option<String>,
    /// Transaction or connection control.
    #[serde(default, rename = "do")]
    pub(crate) action: Option<Action>,
    /// A server-side snapshot taken by a direct actor (the observer).
    #[serde(default)]
    pub(crate) observe: Option<ObserveKind>,
    /// For `observe`: only this advisory lock key, a bigint (`7`) or two integers (`[1, 2]`).
    #[serde(default)]
    #[schemars(with = "Option<KeySchema>")]
    pub(crate) key: Option<AdvisoryKey>,
    /// For `observe`: what to add to each holder and waiter of the recorded
    /// snapshot, from its backend's `pg_stat_activity` row: `wait_event`
    /// (`wait_event_type:wait_event`), `xmin` (whether `backend_xmin` is set).
    #[serde(default)]
    pub(crate) detail: Option<Vec<ObserveDetail>>,
    /// How many times the actor's own session holds the session-level
    /// advisory lock on this key (a bigint, or two integers): how many
    /// `pg_advisory_unlock` calls it takes to release it. Probed on the
    /// actor's connection in one statement that never lets the lock go
    /// (see the docs); recorded as `held N×`.
    #[serde(default)]
    #[schemars(with = "Option<KeySchema>")]
    pub(crate) held_count: Option<AdvisoryKey>,
    /// For `held_count`: count the shared (`pg_advisory_lock_shared`) holds
    /// instead of the exclusive ones.
    #[serde(default)]
    pub(crate) shared: bool,
    /// Wait (on a direct actor) until these actors' background steps are blocked on a lock,
    /// seen by the server (`pg_blocking_pids`), or queued in the pooler for a server
    /// connection, seen by the pooler; fails if one finishes instead (unless `or_finished`).
    /// With `record` (one actor): records `blocked on a lock` or `queued in the pooler`.
    #[serde(default)]
    #[schemars(with = "Option<OneOrMany>")]
    pub(crate) blocked: Option<Spanned<OneOrMany>>,
    /// Wait (on a direct actor) until this actor's background lock call stops
    /// waiting, seen by the server (`pg_blocking_pids` of its backend empty,
    /// or the call finished), and record the time since the last fault step
    /// (`crash`, `terminate`, `partition`, `restart`); at the step's deadline,
    /// counted from the fault, record "still held at N s" instead of failing.
    /// The `await` says how the call ended.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) granted: Option<Spanned<String>>,
    /// Restart the server (`fast` or `immediate`) while connections are open and
    /// locks held; the step's actor (a direct actor, the observer) gets a new
    /// connection once the server accepts connections again. Such a scenario
    /// runs on a local cluster of its own per cell.
    #[serde(default)]
    #[schemars(with = "Option<OrParam<RestartMode>>")]
    pub(crate) restart: Option<RestartMode>,
    /// Wait for the background step with this id to finish; its `expect` and `record` go here.
    #[serde(default, rename = "await")]
    #[schemars(with = "Option<String>")]
    pub(crate) await_step: Option<Spanned<String>>,
    /// Assert that these awaited background steps completed in this order (by the time the
    /// client got each result). With `record`, records the order.
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    pub(crate) order: Option<Spanned<Vec<String>>>,
    /// Take the session-level advisory lock on this bigint key through the
    /// driver's own guard API (sqlx `PgAdvisoryLock`) and end the guard as `end`
    /// says; other drivers record "not supported".
    #[serde(default)]
    #[schemars(with = "Option<i64>")]
    pub(crate) lock_guard: Option<Spanned<i64>>,
    /// Call a lock library or the sqlx migrator on the pool under test (sqlx
    /// 0.8 columns) or on a sqlx 0.8 pool through the column's pooler;
    /// elsewhere the step records `n/a`. With `call` and `key`, or (for
    /// `sqlx-migrator`) `migrate`.
    #[serde(default)]
    #[schemars(with = "Option<OrParam<locklab_drivers::libraries::Library>>")]
    pub(crate) library: Option<locklab_drivers::libraries::Library>,
    /// For `library`: `acquire`, `try_acquire`, `release` or `drop_handle` on `key`.
    #[serde(default)]
    #[schemars(with = "Option<OrParam<LibraryCallRaw>>")]
    pub(crate) call: Option<LibraryCallRaw>,
    /// For `library: sqlx-migrator`: the migrators to run.
    #[serde(default)]
    pub(crate) migrate: Option<MigrateRaw>,
    /// For `lock_guard`: `release_now`, `drop` or `leak`.
    #[serde(default)]
    #[schemars(with = "Option<OrParam<GuardEndRaw>>")]
    pub(crate) end: Option<GuardEndRaw>,
    /// Start the `sql` step and go on; finish it with an `await` step.
    #[serde(default)]
    pub(crate) background: bool,
    /// Client-side bound in ms (1–600000, below the deadline) on a foreground
    /// `sql`, transaction, `checkout`, `return` or `lock_guard` step, like
    /// `tokio::time::timeout`: when it elapses the call's future is dropped
    /// (or, with `on_timeout: cancel`, a cancel request is sent) and the step
    /// records that instead of failing.
    #[serde(default)]
    #[schemars(with = "Option<MsOrParam>")]
    pub(crate) client_timeout_ms: Option<Spanned<i64>>,
    /// What `client_timeout_ms` does when it elapses: `drop` (default) or `cancel`.
    #[serde(default)]
    #[schemars(with = "Option<OrParam<OnTimeout>>")]
    pub(crate) on_timeout: Option<OnTimeout>,
    /// For `blocked` (one actor): a call that finishes before it is seen blocked or
    /// queued is not a failure; with `record`, the step records `finished first (value …)`
    /// (the call's outcome; its `await` still checks and records it).
    #[serde(default)]
    pub(crate) or_finished: bool,
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
    #[schemars(with = "Option<OneOrMany>")]
    pub(crate) idle: Option<Spanned<OneOrMany>>,
    /// Deadline of this step in ms (1–600000).
    #[serde(default)]
    #[schemars(with = "Option<u32>", range(min = 1, max = 600000))]
    pub(crate) deadline_ms: Option<Spanned<i64>>,
    /// What must hold after the step.
    #[serde(default)]
    #[schemars(with = "Option<RawExpect>")]
    pub(crate) expect: Option<Spanned<RawExpect>>,
    /// Record the outcome as a row of the matrix report under this name.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) record: Option<Spanned<String>>,
    /// With `record`: the step's time varies by nature (a pool's or a
    /// pooler's own retry timer, e.g. Pgpool-II reconnecting after a restart
    /// in 0 or about 1000 ms), so `check` and the baseline do not compare it;
    /// the report still shows it.
    #[serde(default)]
    pub(crate) time_varies: bool,
    /// Save the first value of the first row as `${name}` for later steps.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) save: Option<Spanned<String>>,
    /// Run only for pooled drivers or only for the direct driver.
    #[serde(default)]
    pub(crate) when: Option<When>,
}

/// The schema of a duration in ms that a parameter may give.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(crate) enum MsOrParam {
    /// 1–600000 ms.
    Ms(#[schemars(range(min = 1, max = 600000))] u32),
    /// A parameter (`"${ms}"`) that expands to one.
    Param(#[schemars(regex(pattern = r"^\s*\$\{[A-Za-z_][A-Za-z0-9_]*\}\s*$"))] String),
}

/// The schema of a field that a parameter may give: a `T` (a flag such as
/// an invariant's `finding`, a `restart` mode, an `on_timeout`, an `end`), or
/// `"${name}"`.
#[derive(JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "{T}OrParam")]
#[allow(dead_code)]
pub(crate) enum OrParam<T> {
    /// The value itself.
    Value(T),
    /// A parameter (`"${name}"`) that expands to one.
    Param(#[schemars(regex(pattern = r"^\s*\$\{[A-Za-z_][A-Za-z0-9_]*\}\s*$"))] String),
}

/// The schema of an advisory lock key (see [`AdvisoryKey`]).
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(crate) enum KeySchema {
    /// A bigint key.
    Big(i64),
    /// Two integer keys.
    Pair([i32; 2]),
    /// A bigint as text, or a parameter (`"${key}"`) that expands to one.
    Text(#[schemars(regex(pattern = r"^\s*(-?[0-9]+|\$\{[A-Za-z_][A-Za-z0-9_]*\})\s*$"))] String),
}

/// Expectations on a step.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawExpect {
    /// First column of the first row (`null` for SQL NULL; `true` matches `t`).
    #[serde(default, deserialize_with = "present")]
    pub(crate) value: Option<Scalar>,
    /// The number of rows, or the rows themselves (lists of values, compared like `value`).
    #[serde(default)]
    pub(crate) rows: Option<RowsExpect>,
    /// The step fails with this SQLSTATE: five characters (`55P03`) or a condition name
    /// (`lock_not_available`, `deadlock_detected`, `query_canceled`, …).
    #[serde(default)]
    pub(crate) error: Option<String>,
    /// With `error`: a regular expression the error message must match.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) message: Option<Spanned<String>>,
    /// Server notices the step must produce, each a regular expression matched against
    /// `SEVERITY: message` (e.g. `^WARNING: you don't own a lock`), in order; `[]` means none.
    /// Read on direct actors, and on pool actors where the column's client library passes
    /// notices on; on a column whose library does not, a scenario expecting a pool actor's
    /// notices is `n/a`.
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    pub(crate) notices: Option<Vec<Spanned<String>>>,
    /// Bounds on the step's wall time in ms.
    #[serde(default)]
    pub(crate) elapsed_ms: Option<Bounds>,
    /// `observe`: whether any granted advisory lock matched.
    #[serde(default)]
    pub(crate) held: Option<bool>,
    /// `observe`: every holder is this backend (a saved pid) and/or in this state.
    #[serde(default)]
    pub(crate) holders: Option<RawHolders>,
    /// `observe`: there is a waiter, and every waiter is so (its
    /// `pg_stat_activity` row).
    #[serde(default)]
    pub(crate) waiters: Option<RawWaiters>,
}

/// `waiters:` expectation of an observe step: what `pg_stat_activity`
/// says of every waiting backend.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWaiters {
    /// `wait_event_type:wait_event`, e.g. `Lock:advisory`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) wait_event: Option<Spanned<String>>,
    /// Whether its `backend_xmin` is set (it holds a snapshot).
    #[serde(default)]
    pub(crate) xmin: Option<bool>,
}

/// `rows:` as a count or as the expected rows.
#[derive(Clone, Debug, Deserialize, PartialEq, JsonSchema)]
#[serde(untagged)]
pub enum RowsExpect {
    /// The number of rows.
    Count(u64),
    /// The rows, each a list of values compared like `value`.
    Exact(Vec<Vec<Scalar>>),
}

/// `holders:` expectation of an observe step.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHolders {
    /// Name of a saved variable holding a backend pid.
    #[serde(default)]
    pub(crate) pid: Option<String>,
    /// A `pg_stat_activity.state`, e.g. `idle`.
    #[serde(default)]
    pub(crate) state: Option<String>,
}

/// Inclusive bounds on a step's elapsed time, in ms.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Bounds {
    /// Lower bound in ms (default 0).
    #[serde(default)]
    pub min: Option<f64>,
    /// Upper bound in ms (default: none).
    #[serde(default)]
    pub max: Option<f64>,
}

/// The JSON Schema of the scenario format, generated from the types the
/// loader deserializes into (shipped as `scenarios/scenario.schema.json`).
pub fn json_schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(RawScenario);
    schema.insert("$id".into(), "https://locklab.invalid/scenario.schema.json".into());
    serde_json::to_value(schema).unwrap_or_default()
}
