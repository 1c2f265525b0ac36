//! The file format, as serde reads it. Unknown keys are errors everywhere.
//! The JSON Schema shipped as `scenarios/scenario.schema.json` is generated
//! from these types ([`json_schema`]), so editors and `locklab validate` agree.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_saphyr::Spanned;

pub use crate::scenario::scalar::Scalar;
pub use expect::{Bounds, RowsExpect};
pub(crate) use step::OrParam;
pub use step::{Action, OnTimeout, When};

pub(crate) mod expect;
pub(crate) mod step;
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
    /// For a user's report re-enacted (a `report-*` file, where it is
    /// required): where it was filed, what the user saw, and the readings
    /// that show it (`reproduced_when`), from which the book's table says
    /// which columns reproduce it.
    #[serde(default)]
    #[schemars(with = "Option<crate::scenario::user_report::RawUserReport>")]
    pub(crate) report: Option<Spanned<crate::scenario::user_report::RawUserReport>>,
    /// Sets this scenario belongs to, run together with `--tag NAME`: `pooler`
    /// (the pooler conformance kit, `locklab pooler-check`).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(crate) tags: Vec<Spanned<String>>,
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
    #[schemars(with = "Vec<crate::scenario::steps::RawStep>")]
    pub(crate) steps: Spanned<Vec<Spanned<crate::scenario::steps::RawStep>>>,
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
    /// Maximum number of connections (1–100, default 4), or a parameter
    /// (`"${size}"`) that expands to one.
    #[serde(default)]
    #[schemars(with = "Option<crate::scenario::raw::step::OrParam<u32>>", range(min = 1, max = 100))]
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

/// The JSON Schema of the scenario format, generated from the types the
/// loader deserializes into (shipped as `scenarios/scenario.schema.json`).
pub fn json_schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(RawScenario);
    schema.insert("$id".into(), "https://locklab.invalid/scenario.schema.json".into());
    serde_json::to_value(schema).unwrap_or_default()
}
