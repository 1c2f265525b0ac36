//! Scenario files: the YAML format (v1), loading, and validation into a [`Scenario`].
//!
//! A scenario names its actors (connections) and lists steps that run in order.
//! Every error found while loading names `file:line:column`. The format is
//! documented for users in the README ("Scenario format").

use std::collections::HashMap;

use indexmap::IndexMap;
use std::fmt;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use serde_saphyr::Spanned;

use crate::keys::AdvisoryKey;

/// Default deadline of one step, in ms (10 s).
pub const DEFAULT_STEP_DEADLINE_MS: u64 = 10_000;
/// Default maximum pool size, in connections.
pub const DEFAULT_POOL_MAX_SIZE: u32 = 4;
/// Largest deadline a scenario may ask for, in ms (10 min).
pub const MAX_STEP_DEADLINE_MS: u64 = 600_000;

/// A position in a scenario file: 1-based line and column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
}

impl Pos {
    fn of(loc: &serde_saphyr::Location) -> Pos {
        Pos {
            line: loc.line(),
            column: loc.column(),
        }
    }
}

/// An error in a scenario file, with the place it was found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}:{}:{}: {message}", file.display(), pos.line, pos.column)]
pub struct ScenarioError {
    /// The file.
    pub file: PathBuf,
    /// Where in it.
    pub pos: Pos,
    /// What is wrong, in one sentence.
    pub message: String,
}

impl ScenarioError {
    /// An error about the whole file (or directory) `file`, placed at 1:1.
    pub fn at_start(file: &Path, message: impl Into<String>) -> ScenarioError {
        ScenarioError {
            file: file.to_owned(),
            pos: Pos { line: 1, column: 1 },
            message: message.into(),
        }
    }
}

// ---------------------------------------------------------------------------
// The file format (what serde reads). Unknown keys are errors everywhere.
// The JSON Schema shipped as `scenarios/scenario.schema.json` is generated from
// these types ([`json_schema`]), so editors and `locklab validate` agree.
// ---------------------------------------------------------------------------

/// A locklab scenario file: actors (connections) and the steps they run.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "locklab scenario")]
struct RawScenario {
    /// Unique name; must equal the file name without `.yaml`. Letters, digits, `-` and `_`.
    #[schemars(with = "String")]
    name: Spanned<String>,
    /// One or two sentences: the behaviour this file states. Say so where the truth is not what a reader would assume.
    description: String,
    /// Where the claim comes from: a section of the guide or of the PostgreSQL documentation.
    #[serde(default)]
    source: Option<String>,
    /// Parameters: the file is run once per combination, with `${name}` replaced by the value
    /// everywhere in the file. Either a map of name → list of values (every combination), or a
    /// list of maps (one run per map). Each run is named `name[param=value,…]` (parameters whose
    /// name starts with `_` are left out of the name).
    #[serde(default)]
    #[schemars(with = "Option<RawParams>")]
    #[allow(dead_code)]
    // read by `ParamsOnly` before expansion; declared here for the schema and deny_unknown_fields
    params: Option<Spanned<RawParams>>,
    /// Server settings for this scenario's database (`ALTER DATABASE … SET name = value`, run by
    /// the harness's superuser before any connection): e.g. `deadlock_timeout: 100ms`.
    #[serde(default)]
    #[schemars(with = "IndexMap<String, Setting>")]
    server_settings: Option<Spanned<IndexMap<String, Setting>>>,
    /// SQL run once, by the harness's own connection to the scenario's database, before the actors connect.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    setup: Vec<Spanned<String>>,
    /// SQL run once, by the harness's own connection, after the last step (also after a failure).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    teardown: Vec<Spanned<String>>,
    /// The pool under test.
    #[serde(default)]
    pool: RawPool,
    /// Deadline of every step in ms unless the step sets its own (default 10000, at most 600000).
    #[serde(default)]
    #[schemars(with = "Option<u32>", range(min = 1, max = 600000))]
    step_deadline_ms: Option<Spanned<i64>>,
    /// Named connections. `via: pool` actors share the pool under test; `via: direct` actors
    /// each own a dedicated connection for the whole run (observers, dedicated lock holders).
    #[schemars(with = "IndexMap<String, RawActor>")]
    actors: Spanned<IndexMap<String, Spanned<RawActor>>>,
    /// Steps, run in order.
    #[schemars(with = "Vec<RawStep>")]
    steps: Spanned<Vec<Spanned<RawStep>>>,
}

/// Only the `params` of a file, read before the placeholders are expanded.
#[derive(Deserialize)]
struct ParamsOnly {
    #[serde(default)]
    params: Option<Spanned<RawParams>>,
}

/// `params:` either as a map of lists (every combination) or a list of maps (one run each).
#[derive(Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
enum RawParams {
    /// `{key: [7, -1], fn: [a, b]}`: every combination (4 runs here).
    Matrix(IndexMap<String, Vec<Scalar>>),
    /// `[{lock_timeout: 200ms, error: lock_not_available}, …]`: one run per map.
    Cases(Vec<IndexMap<String, Scalar>>),
}

/// A setting value: text, number or boolean, sent as PostgreSQL text (`200ms`, `5`, `on`).
type Setting = Scalar;

/// The pool under test.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawPool {
    /// Maximum number of connections (1–100, default 4).
    #[serde(default)]
    #[schemars(with = "Option<u32>", range(min = 1, max = 100))]
    max_size: Option<Spanned<i64>>,
    /// Connection settings for every connection the pool opens, sent at connect time
    /// (`application_name`, or any run-time parameter as `-c name=value`: `lock_timeout`,
    /// `idle_in_transaction_session_timeout`, `tcp_keepalives_idle`, …).
    #[serde(default)]
    #[schemars(with = "IndexMap<String, Setting>")]
    settings: Option<Spanned<IndexMap<String, Setting>>>,
}

/// An actor: a named connection.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawActor {
    /// `pool`: checked out of the pool under test; `direct`: a dedicated tokio-postgres connection.
    via: Via,
    /// Connection settings of a direct actor, sent at connect time (as `pool.settings`).
    /// Pool actors share the pool's connections: use `pool.settings` for them.
    #[serde(default)]
    #[schemars(with = "IndexMap<String, Setting>")]
    settings: Option<Spanned<IndexMap<String, Setting>>>,
}

/// How an actor gets its connection.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// A checkout from the driver under test (`checkout` / `return` steps).
    Pool,
    /// A dedicated tokio-postgres connection the harness owns for the whole run,
    /// never pooled: observers and dedicated lock holders. Server notices
    /// (`WARNING`, `NOTICE`) are captured on these connections.
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
}

impl Action {
    /// The SQL a transaction-control action sends, `None` for checkout/return/disconnect.
    pub fn transaction_sql(self) -> Option<&'static str> {
        match self {
            Action::Begin => Some("begin"),
            Action::Commit => Some("commit"),
            Action::Rollback => Some("rollback"),
            Action::Checkout | Action::Return | Action::Disconnect | Action::Abandon => None,
        }
    }
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
enum OneOrMany {
    /// One actor.
    One(String),
    /// Several actors.
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// One step: exactly one of `sql`, `do`, `observe`, `blocked`, `await`, `order`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawStep {
    /// The actor that runs the step (not for `await` and `order`).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    actor: Option<Spanned<String>>,
    /// A name for the step, needed to `await` a background step or to list it in `order`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    id: Option<Spanned<String>>,
    /// SQL run with the simple query protocol; `${name}` is replaced by a saved value or a parameter.
    #[serde(default)]
    sql: Option<String>,
    /// Transaction or connection control.
    #[serde(default, rename = "do")]
    action: Option<Action>,
    /// A server-side snapshot taken by a direct actor (the observer).
    #[serde(default)]
    observe: Option<ObserveKind>,
    /// For `observe`: only this advisory lock key, a bigint (`7`) or two integers (`[1, 2]`).
    #[serde(default)]
    #[schemars(with = "Option<KeySchema>")]
    key: Option<AdvisoryKey>,
    /// Wait (on a direct actor) until these actors' background steps are blocked on a lock,
    /// seen by the server (`pg_blocking_pids`); fails if one finishes instead.
    #[serde(default)]
    #[schemars(with = "Option<OneOrMany>")]
    blocked: Option<Spanned<OneOrMany>>,
    /// Wait for the background step with this id to finish; its `expect` and `record` go here.
    #[serde(default, rename = "await")]
    #[schemars(with = "Option<String>")]
    await_step: Option<Spanned<String>>,
    /// Assert that these awaited background steps completed in this order (by the time the
    /// client got each result). With `record`, records the order.
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    order: Option<Spanned<Vec<String>>>,
    /// Take the session-level advisory lock on this bigint key through the
    /// driver's own guard API (sqlx `PgAdvisoryLock`) and end the guard as `end`
    /// says; other drivers record "not supported".
    #[serde(default)]
    #[schemars(with = "Option<i64>")]
    lock_guard: Option<Spanned<i64>>,
    /// For `lock_guard`: `release_now`, `drop` or `leak`.
    #[serde(default)]
    #[schemars(with = "Option<GuardEndOrParam>")]
    end: Option<GuardEndRaw>,
    /// Start the `sql` step and go on; finish it with an `await` step.
    #[serde(default)]
    background: bool,
    /// Client-side bound in ms (1–600000, below the deadline) on a foreground
    /// `sql`, transaction, `checkout` or `return` step, like
    /// `tokio::time::timeout`: when it elapses the call's future is dropped
    /// (or, with `on_timeout: cancel`, a cancel request is sent) and the step
    /// records that instead of failing.
    #[serde(default)]
    #[schemars(with = "Option<MsOrParam>")]
    client_timeout_ms: Option<Spanned<i64>>,
    /// What `client_timeout_ms` does when it elapses: `drop` (default) or `cancel`.
    #[serde(default)]
    #[schemars(with = "Option<OnTimeoutOrParam>")]
    on_timeout: Option<OnTimeout>,
    /// For `observe`: first wait (within the deadline) until no other backend
    /// of the run's database is running a statement other than a lock wait
    /// and none changed state in the last 100 ms, seen twice in a row, so
    /// statements queued behind a dropped call have run.
    #[serde(default)]
    settle: bool,
    /// Deadline of this step in ms (1–600000).
    #[serde(default)]
    #[schemars(with = "Option<u32>", range(min = 1, max = 600000))]
    deadline_ms: Option<Spanned<i64>>,
    /// What must hold after the step.
    #[serde(default)]
    #[schemars(with = "Option<RawExpect>")]
    expect: Option<Spanned<RawExpect>>,
    /// Record the outcome as a row of the matrix report under this name.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    record: Option<Spanned<String>>,
    /// Save the first value of the first row as `${name}` for later steps.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    save: Option<Spanned<String>>,
    /// Run only for pooled drivers or only for the direct driver.
    #[serde(default)]
    when: Option<When>,
}

/// Marks a background step in the validator's `background` map as dropped by
/// `do: abandon` (it is never awaited and never completes).
const ABANDONED: usize = usize::MAX;

/// The schema of a duration in ms that a parameter may give.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum MsOrParam {
    /// 1–600000 ms.
    Ms(#[schemars(range(min = 1, max = 600000))] u32),
    /// A parameter (`"${ms}"`) that expands to one.
    Param(#[schemars(regex(pattern = r"^\s*\$\{[A-Za-z_][A-Za-z0-9_]*\}\s*$"))] String),
}

/// The schema of `on_timeout`, which a parameter may give.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum OnTimeoutOrParam {
    /// `drop` or `cancel`.
    Value(OnTimeout),
    /// A parameter (`"${on_timeout}"`) that expands to one.
    Param(#[schemars(regex(pattern = r"^\s*\$\{[A-Za-z_][A-Za-z0-9_]*\}\s*$"))] String),
}

/// The schema of `end`, which a parameter may give.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum GuardEndOrParam {
    /// `release_now`, `drop` or `leak`.
    Value(GuardEndRaw),
    /// A parameter (`"${end}"`) that expands to one.
    Param(#[schemars(regex(pattern = r"^\s*\$\{[A-Za-z_][A-Za-z0-9_]*\}\s*$"))] String),
}

/// The schema of an advisory lock key (see [`AdvisoryKey`]).
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum KeySchema {
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
struct RawExpect {
    /// First column of the first row (`null` for SQL NULL; `true` matches `t`).
    #[serde(default, deserialize_with = "present")]
    value: Option<Scalar>,
    /// The number of rows, or the rows themselves (lists of values, compared like `value`).
    #[serde(default)]
    rows: Option<RowsExpect>,
    /// The step fails with this SQLSTATE: five characters (`55P03`) or a condition name
    /// (`lock_not_available`, `deadlock_detected`, `query_canceled`, …).
    #[serde(default)]
    error: Option<String>,
    /// With `error`: a regular expression the error message must match.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    message: Option<Spanned<String>>,
    /// Server notices the step must produce, each a regular expression matched against
    /// `SEVERITY: message` (e.g. `^WARNING: you don't own a lock`), in order; `[]` means none.
    /// Captured on direct actors only.
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    notices: Option<Vec<Spanned<String>>>,
    /// Bounds on the step's wall time in ms.
    #[serde(default)]
    elapsed_ms: Option<Bounds>,
    /// `observe`: whether any granted advisory lock matched.
    #[serde(default)]
    held: Option<bool>,
    /// `observe`: every holder is this backend (a saved pid) and/or in this state.
    #[serde(default)]
    holders: Option<RawHolders>,
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
struct RawHolders {
    /// Name of a saved variable holding a backend pid.
    #[serde(default)]
    pid: Option<String>,
    /// A `pg_stat_activity.state`, e.g. `idle`.
    #[serde(default)]
    state: Option<String>,
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

/// An expected scalar: the first column of the first row, compared with
/// PostgreSQL's text output (`true` ↔ `t`, numbers as decimal, `null` ↔ SQL NULL).
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    /// SQL NULL.
    Null,
    /// A boolean (`t`/`f` on the wire).
    Bool(bool),
    /// An integer.
    Int(i128),
    /// A floating-point number, compared numerically.
    Float(f64),
    /// Text, compared exactly.
    Text(String),
}

impl Scalar {
    /// Whether the server's text value `actual` (`None` for NULL) equals this.
    pub fn matches(&self, actual: Option<&str>) -> bool {
        match (self, actual) {
            (Scalar::Null, None) => true,
            (_, None) | (Scalar::Null, Some(_)) => false,
            (Scalar::Bool(b), Some(a)) => a == if *b { "t" } else { "f" },
            (Scalar::Int(i), Some(a)) => a.parse::<i128>() == Ok(*i),
            (Scalar::Float(f), Some(a)) => a.parse::<f64>().is_ok_and(|x| x == *f),
            (Scalar::Text(t), Some(a)) => a == t,
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Null => f.write_str("NULL"),
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x}"),
            Scalar::Text(t) => write!(f, "{t:?}"),
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a scalar (null, boolean, number or string)")
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_none<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v.into()))
            }
            fn visit_i128<E>(self, v: i128) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for Scalar {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Scalar".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A value: null, boolean, number or string (compared with PostgreSQL's text output)",
            "type": ["null", "boolean", "number", "string"]
        })
    }
}

impl Scalar {
    /// The value as PostgreSQL text: what `${name}` expands to and what a setting sends
    /// (`true` → `true`, numbers in decimal, `null` → `NULL`).
    pub fn text(&self) -> String {
        match self {
            Scalar::Null => "NULL".into(),
            Scalar::Bool(b) => b.to_string(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(x) => x.to_string(),
            Scalar::Text(t) => t.clone(),
        }
    }
}

/// `value:` present (even as `null`) → `Some`, absent → `None` (via `#[serde(default)]`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Scalar>, D::Error> {
    Scalar::deserialize(d).map(Some)
}

// ---------------------------------------------------------------------------
// The validated model the runner executes.
// ---------------------------------------------------------------------------

/// A validated scenario (one instance of a file: a file with `params` gives one
/// instance per combination).
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Unique name: the file stem, plus `[param=value,…]` for a parameterised
    /// instance, e.g. `extreme-keys[key=-1]`.
    pub name: String,
    /// The file's `name:` (equal to the file stem), shared by all its instances.
    pub family: String,
    /// This instance's parameters in file order, as text (empty without `params`).
    pub params: Vec<(String, String)>,
    /// One or two sentences: the behaviour this file states.
    pub description: String,
    /// Where the claim comes from (guide section, PostgreSQL docs section).
    pub source: Option<String>,
    /// The file it was loaded from.
    pub file: PathBuf,
    /// Where `name:` is in the file.
    pub name_pos: Pos,
    /// Maximum pool size for pooled actors (connections).
    pub pool_max_size: u32,
    /// Connection settings of every pooled connection.
    pub pool_settings: Settings,
    /// `ALTER DATABASE … SET` settings of the run's database.
    pub server_settings: Settings,
    /// SQL run before the actors connect, each with its place in the file.
    pub setup: Vec<(String, Pos)>,
    /// SQL run after the last step, each with its place in the file.
    pub teardown: Vec<(String, Pos)>,
    /// Actors in file order.
    pub actors: Vec<Actor>,
    /// Steps in execution order.
    pub steps: Vec<Step>,
}

impl Scenario {
    /// `file:line:column` of `pos` in this scenario's file.
    pub fn at(&self, pos: Pos) -> String {
        format!("{}:{}:{}", self.file.display(), pos.line, pos.column)
    }
}

/// An actor: a named connection.
#[derive(Clone, Debug)]
pub struct Actor {
    /// Name used in steps.
    pub name: String,
    /// Pooled or direct.
    pub via: Via,
    /// Connection settings of a direct actor; empty for pool actors.
    pub settings: Settings,
}

/// Settings (`pool.settings`, an actor's `settings`, `server_settings`): name
/// and value as PostgreSQL text, in file order, and where the map is in the
/// file (for run-time errors such as an unknown parameter name).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    /// (name, value) pairs, e.g. `("lock_timeout", "200ms")`.
    pub list: Vec<(String, String)>,
    /// Where the map starts in the file.
    pub pos: Pos,
}

impl Settings {
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// What a step does.
#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    /// Run SQL (simple query protocol). `${name}` is replaced by a saved value.
    Sql(String),
    /// Pool, connection or transaction control.
    Do(Action),
    /// Snapshot advisory locks, optionally only those on `key`.
    Observe(ObserveKind, Option<AdvisoryKey>),
    /// Wait until every listed actor (indices) is blocked on a lock, seen from the
    /// server (`pg_blocking_pids`); fails if one's background step finishes first.
    Blocked(Vec<usize>),
    /// Wait for background step index `.0` to finish and check its expectation.
    Await(usize),
    /// Take the advisory lock on a bigint key through the driver's guard API
    /// and end the guard.
    Guard(i64, GuardEndRaw),
    /// The listed background steps (indices) completed in this order.
    Order(Vec<usize>),
}

/// One step.
#[derive(Clone, Debug)]
pub struct Step {
    /// 0-based index in the file's `steps` list.
    pub index: usize,
    /// Where the step starts in the file.
    pub pos: Pos,
    /// Actor index (for `Await`, the awaited step's actor; for `Order`, 0 and unused).
    pub actor: usize,
    /// Optional id (needed to `await` a background step).
    pub id: Option<String>,
    /// What it does.
    pub kind: StepKind,
    /// Start it and go on; finish it with an `await` step.
    pub background: bool,
    /// Deadline in ms, after which the scenario fails.
    pub deadline_ms: u64,
    /// Client-side bound in ms whose expiry is recorded, not a failure.
    pub client_timeout_ms: Option<u64>,
    /// What the client does when `client_timeout_ms` elapses.
    pub on_timeout: OnTimeout,
    /// For `observe`: wait for other backends to settle first.
    pub settle: bool,
    /// What must hold afterwards.
    pub expect: Option<Expect>,
    /// Observation name for the matrix.
    pub record: Option<String>,
    /// Variable name to store the first value of the first row in.
    pub save: Option<String>,
    /// Only for some driver kinds.
    pub when: Option<When>,
}

impl Step {
    /// A short human label, e.g. `step 4 (b: select pg_advisory_xact_lock(7))`.
    pub fn label(&self, actors: &[Actor], steps: &[Step]) -> String {
        let id_of = |i: &usize| steps[*i].id.clone().unwrap_or_else(|| format!("step {}", i + 1));
        let what = match &self.kind {
            StepKind::Sql(s) => s.split_whitespace().collect::<Vec<_>>().join(" "),
            StepKind::Do(a) => format!("{a:?}").to_lowercase(),
            StepKind::Observe(..) => "observe advisory_locks".into(),
            StepKind::Blocked(t) => {
                let names: Vec<&str> = t.iter().map(|a| actors[*a].name.as_str()).collect();
                format!("blocked: {}", names.join(", "))
            }
            StepKind::Await(s) => format!("await {}", id_of(s)),
            StepKind::Guard(k, e) => format!("lock_guard {k}, end {e:?}").to_lowercase(),
            StepKind::Order(ids) => {
                let names: Vec<String> = ids.iter().map(id_of).collect();
                return format!("step {} (order: {})", self.index + 1, names.join(" → "));
            }
        };
        format!("step {} ({}: {})", self.index + 1, actors[self.actor].name, what)
    }
}

/// Validated expectations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expect {
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
    /// Observe: whether any granted advisory lock matched.
    pub held: Option<bool>,
    /// Observe: every granted lock's backend pid equals this saved variable.
    pub holder_pid: Option<String>,
    /// Observe: every granted lock's backend is in this `pg_stat_activity.state`.
    pub holder_state: Option<String>,
}

/// Values of `pg_stat_activity.state` (PostgreSQL docs, "pg_stat_activity").
const STATES: &[&str] = &[
    "active",
    "idle",
    "idle in transaction",
    "idle in transaction (aborted)",
    "fastpath function call",
    "disabled",
];

/// SQLSTATE condition names accepted in `expect.error` (PostgreSQL docs, Appendix A).
const CONDITIONS: &[(&str, &str)] = &[
    ("lock_not_available", "55P03"),
    ("deadlock_detected", "40P01"),
    ("query_canceled", "57014"),
    ("admin_shutdown", "57P01"),
    ("idle_in_transaction_session_timeout", "25P03"),
    ("in_failed_sql_transaction", "25P02"),
    ("undefined_function", "42883"),
    ("syntax_error", "42601"),
    ("numeric_value_out_of_range", "22003"),
    ("idle_session_timeout", "57P05"),
    ("serialization_failure", "40001"),
    ("object_in_use", "55006"),
    ("insufficient_privilege", "42501"),
    ("undefined_table", "42P01"),
    ("invalid_parameter_value", "22023"),
    ("active_sql_transaction", "25001"),
    ("no_active_sql_transaction", "25P01"),
    ("connection_failure", "08006"),
];

fn sqlstate_of(s: &str) -> Option<String> {
    if s.len() == 5 && s.chars().all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()) {
        return Some(s.to_owned());
    }
    CONDITIONS.iter().find(|(n, _)| *n == s).map(|(_, c)| (*c).to_owned())
}

// ---------------------------------------------------------------------------
// Loading and validation.
// ---------------------------------------------------------------------------

/// Loads and validates every `*.yaml` file in `dir`, sorted by file name.
/// Other files are ignored.
///
/// # Errors
/// Every problem found, across all files (an unreadable directory is one error
/// at 1:1 of the directory).
pub fn load_dir(dir: &Path) -> Result<Vec<Scenario>, Vec<ScenarioError>> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        vec![ScenarioError::at_start(
            dir,
            format!("cannot read scenario directory: {e}"),
        )]
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        // Nothing to run is a mistake (a wrong directory, `.yml` files), not a pass.
        return Err(vec![ScenarioError::at_start(
            dir,
            "no scenario files (*.yaml) in this directory",
        )]);
    }
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        match load_file(&f) {
            Ok(mut s) => out.append(&mut s),
            Err(mut e) => errors.append(&mut e),
        }
    }
    let mut seen: HashMap<&str, &Path> = HashMap::new();
    for s in &out {
        if let Some(first) = seen.insert(&s.name, &s.file)
            && first != s.file
        {
            errors.push(ScenarioError::at_start(
                &s.file,
                format!("scenario name '{}' is also used by {}", s.name, first.display()),
            ));
        }
    }
    if errors.is_empty() { Ok(out) } else { Err(errors) }
}

/// Loads and validates one scenario file: one [`Scenario`], or one per
/// combination of its `params`.
///
/// # Errors
/// Syntax errors, type errors and unknown keys (first one found), or every
/// semantic error found by validation, each with `file:line:column`.
pub fn load_file(path: &Path) -> Result<Vec<Scenario>, Vec<ScenarioError>> {
    let fail = |message: String| vec![ScenarioError::at_start(path, message)];
    // Not read into memory when it is far too large to be a scenario.
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_FILE_BYTES as u64 + 1), &mut bytes))
        .map_err(|e| fail(format!("cannot read file: {e}")))?;
    if bytes.len() > MAX_FILE_BYTES {
        return Err(fail(format!(
            "the file has more than {MAX_FILE_BYTES} bytes, the most a scenario file may have"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        // Where the first byte that is not UTF-8 is.
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        // YAML's line breaks: \n, \r\n, or a lone \r.
        let line = good
            .iter()
            .enumerate()
            .filter(|&(i, &b)| b == b'\n' || (b == b'\r' && good.get(i + 1) != Some(&b'\n')))
            .count()
            + 1;
        let line_start = good
            .iter()
            .rposition(|&b| b == b'\n' || b == b'\r')
            .map_or(0, |i| i + 1);
        let column = String::from_utf8_lossy(&good[line_start..]).chars().count() + 1;
        vec![ScenarioError {
            file: path.to_owned(),
            pos: Pos {
                line: line as u64,
                column: column as u64,
            },
            message: "the file is not UTF-8 text (this byte starts an invalid sequence)".to_owned(),
        }]
    })?;
    let scenarios = parse(path, &text)?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    if let Some(s) = scenarios.first()
        && s.family != stem
    {
        return Err(vec![ScenarioError {
            file: path.to_owned(),
            pos: s.name_pos,
            message: format!(
                "scenario name '{}' differs from the file name; rename one of them to match ('{stem}')",
                s.family
            ),
        }]);
    }
    Ok(scenarios)
}

/// Largest scenario file, in bytes (1 MiB; the shipped ones have a few KiB).
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// Most instances one file may expand to through `params`.
pub const MAX_INSTANCES: usize = 64;

/// Parses and validates scenario text; `path` is used in error messages only
/// (so, unlike [`load_file`], the name is not compared with the file name).
/// A file with `params` yields one scenario per combination, in order.
///
/// # Errors
/// As [`load_file`]. An error that only some parameter combinations have is
/// prefixed with the combination, e.g. `with key=-1: …`.
pub fn parse(path: &Path, text: &str) -> Result<Vec<Scenario>, Vec<ScenarioError>> {
    if text.len() > MAX_FILE_BYTES {
        return Err(vec![ScenarioError::at_start(
            path,
            format!(
                "the file has {} bytes; a scenario file may have at most {MAX_FILE_BYTES}",
                text.len()
            ),
        )]);
    }
    if text.split(['\n', '\r']).all(|l| {
        let l = l.trim();
        l.is_empty() || l.starts_with('#') || l == "---" || l == "..."
    }) {
        return Err(vec![ScenarioError::at_start(
            path,
            "the file is empty; a scenario needs name, description, actors and steps",
        )]);
    }
    // Placeholders are not YAML everywhere (`{ value: ${key} }`): read `params`
    // from a copy where each `${name}` is letters of the same width.
    let head: ParamsOnly =
        serde_saphyr::from_str(&neutralize_placeholders(text)).map_err(|e| vec![yaml_error(path, &e)])?;
    let instances = match head.params {
        None => vec![Vec::new()],
        Some(p) => {
            let pos = Pos::of(&p.referenced);
            let combos = expand_params(path, p)?;
            let body = without_params_and_comments(text);
            for (name, _) in combos.first().into_iter().flatten() {
                if !body.contains(&format!("${{{name}}}")) {
                    return Err(vec![ScenarioError {
                        file: path.to_owned(),
                        pos,
                        message: format!("parameter '{name}' is never used as '${{{name}}}'"),
                    }]);
                }
            }
            combos
        }
    };
    let mut out = Vec::new();
    // Each parameter set's errors, positions mapped back to the file as written.
    let mut per_instance: Vec<Vec<ScenarioError>> = Vec::new();
    for params in &instances {
        let (expanded, shifts) = substitute_params(text, params);
        let result = serde_saphyr::from_str::<RawScenario>(&expanded)
            .map_err(|e| vec![yaml_error(path, &e)])
            .and_then(|raw| {
                Validator {
                    file: path,
                    errors: Vec::new(),
                    params,
                }
                .run(raw)
            });
        match result {
            Ok(s) => out.push(s),
            Err(mut errs) => {
                for e in &mut errs {
                    e.pos = shifts.original(e.pos);
                }
                per_instance.push(errs);
                continue;
            }
        }
        per_instance.push(Vec::new());
    }
    // An error every set has is reported once; one only some have names the set.
    let mut errors: Vec<ScenarioError> = Vec::new();
    let mut seen: Vec<(Pos, String)> = Vec::new();
    for (params, errs) in instances.iter().zip(&per_instance) {
        for e in errs {
            let key = (e.pos, e.message.clone());
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let every = per_instance
                .iter()
                .all(|other| other.iter().any(|x| x.pos == e.pos && x.message == e.message));
            let mut e = e.clone();
            if !every {
                e.message = format!("with {}: {}", instance_suffix(params), e.message);
            }
            errors.push(e);
        }
    }
    if errors.is_empty() { Ok(out) } else { Err(errors) }
}

/// `key=7,fn=pg_advisory_lock`; parameters whose name starts with `_` are left out.
fn instance_suffix(params: &[(String, String)]) -> String {
    params
        .iter()
        .filter(|(k, _)| !k.starts_with('_'))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The parameter combinations of `params:`, each as (name, text value) in file order.
fn expand_params(path: &Path, p: Spanned<RawParams>) -> Result<Vec<Vec<(String, String)>>, Vec<ScenarioError>> {
    let pos = Pos::of(&p.referenced);
    let err = |message: String| {
        vec![ScenarioError {
            file: path.to_owned(),
            pos,
            message,
        }]
    };
    // A number too large for a float to hold exactly has already been rounded
    // by the YAML reader: ask for text instead of expanding a different value.
    let inexact = |v: &Scalar| matches!(v, Scalar::Float(f) if f.fract() == 0.0 && f.abs() >= 9_007_199_254_740_992.0);
    let values: Vec<(&String, &Scalar)> = match &p.value {
        RawParams::Matrix(m) => m.iter().flat_map(|(k, vs)| vs.iter().map(move |v| (k, v))).collect(),
        RawParams::Cases(cs) => cs.iter().flat_map(|c| c.iter()).collect(),
    };
    if let Some((name, v)) = values.into_iter().find(|(_, v)| inexact(v)) {
        return Err(err(format!(
            "parameter '{name}': a number this large ({v} after rounding) cannot be read exactly; quote it as text"
        )));
    }
    let mut combos: Vec<Vec<(String, String)>> = match p.value {
        RawParams::Matrix(m) => {
            if m.is_empty() {
                return Err(err(
                    "'params' is empty; remove it or give each parameter a list of values".into(),
                ));
            }
            let mut combos = vec![Vec::new()];
            for (name, values) in &m {
                if values.is_empty() {
                    return Err(err(format!("parameter '{name}' has no values")));
                }
                if combos.len().saturating_mul(values.len()) > MAX_INSTANCES {
                    return Err(err(format!(
                        "'params' gives more than {MAX_INSTANCES} combinations; split the file"
                    )));
                }
                combos = combos
                    .into_iter()
                    .flat_map(|c| {
                        values.iter().map(move |v| {
                            let mut c = c.clone();
                            c.push((name.clone(), v.text()));
                            c
                        })
                    })
                    .collect();
            }
            combos
        }
        RawParams::Cases(cases) => {
            if cases.is_empty() {
                return Err(err("'params' is an empty list; give at least one case".into()));
            }
            if cases.len() > MAX_INSTANCES {
                return Err(err(format!(
                    "'params' has more than {MAX_INSTANCES} cases; split the file"
                )));
            }
            let names: Vec<&String> = cases[0].keys().collect();
            for (i, c) in cases.iter().enumerate() {
                let these: Vec<&String> = c.keys().collect();
                if these != names {
                    return Err(err(format!(
                        "params case {} has parameters [{}], but case 1 has [{}]; every case needs the same names in the same order",
                        i + 1,
                        these.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                        names.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                    )));
                }
            }
            cases
                .into_iter()
                .map(|c| c.into_iter().map(|(k, v)| (k, v.text())).collect())
                .collect()
        }
    };
    for (name, _) in combos.first().into_iter().flatten() {
        if !is_identifier(name) {
            return Err(err(format!(
                "parameter name '{name}' must be a letter or '_' followed by letters, digits or '_'"
            )));
        }
    }
    for (name, value) in combos.iter().flatten() {
        if value.contains("${") {
            return Err(err(format!("parameter '{name}': a value cannot contain '${{'")));
        }
    }
    for c in &mut combos {
        for (_, v) in c.iter_mut() {
            if v.contains('\n') {
                *v = v.replace('\n', " ");
            }
        }
    }
    let mut unique: Vec<String> = combos.iter().map(|c| instance_suffix(c)).collect();
    unique.sort();
    unique.dedup();
    if unique.len() != combos.len() {
        return Err(err(
            "'params' gives two runs the same name (the same values, apart from parameters named '_…')".into(),
        ));
    }
    Ok(combos)
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `text` with every `${name}` replaced by as many `x` (positions are kept).
fn neutralize_placeholders(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        match rest[i + 2..].find('}') {
            Some(j) if is_identifier(&rest[i + 2..i + 2 + j]) => {
                out.push_str(&"x".repeat(j + 3));
                rest = &rest[i + 3 + j..];
            }
            _ => {
                out.push_str("${");
                rest = &rest[i + 2..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Where substitutions changed a line's length: (line, column in the expanded
/// text, placeholder width, value width), in order.
#[derive(Default)]
struct Shifts(Vec<(u64, u64, u64, u64)>);

impl Shifts {
    /// The position in the file as written of `pos` in the expanded text; a
    /// position inside a substituted value maps to its placeholder.
    fn original(&self, pos: Pos) -> Pos {
        let mut delta: i64 = 0;
        for &(_, col, width, value) in self.0.iter().filter(|s| s.0 == pos.line) {
            if pos.column < col {
                break;
            }
            if pos.column < col + value {
                return Pos {
                    line: pos.line,
                    column: (col as i64 - delta).max(1) as u64,
                };
            }
            delta += value as i64 - width as i64;
        }
        Pos {
            line: pos.line,
            column: (pos.column as i64 - delta).max(1) as u64,
        }
    }
}

/// Replaces `${name}` for every parameter `name` in the file's text (other
/// placeholders, the saved values, are left for the runner), in one pass, so a
/// value is never expanded again. Values contain no line breaks.
fn substitute_params(text: &str, params: &[(String, String)]) -> (String, Shifts) {
    let mut out = String::with_capacity(text.len());
    let mut shifts = Shifts::default();
    let (mut line, mut col) = (1u64, 1u64);
    let mut rest = text;
    while !rest.is_empty() {
        if rest.starts_with("${")
            && let Some(j) = rest[2..].find('}')
            && let Some((_, value)) = params.iter().find(|(k, _)| *k == rest[2..2 + j])
        {
            let width = j as u64 + 3;
            let len = value.chars().count() as u64;
            shifts.0.push((line, col, width, len));
            out.push_str(value);
            col += len;
            rest = &rest[j + 3..];
            continue;
        }
        let c = rest.chars().next().unwrap_or_default();
        out.push(c);
        if c == '\n' {
            line += 1;
            col = 1;
        } else {
            col += 1;
        }
        rest = &rest[c.len_utf8()..];
    }
    (out, shifts)
}

/// The text without the top-level `params:` block and without comment lines
/// (to tell used parameters from their declaration).
fn without_params_and_comments(text: &str) -> String {
    let mut out = String::new();
    let mut in_params = false;
    for l in text.lines() {
        if l.trim_start().starts_with('#') {
            continue;
        }
        let top = !l.starts_with([' ', '\t', '-', '#']) && !l.trim().is_empty();
        if top {
            in_params = l.starts_with("params:");
        }
        if !in_params {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

fn yaml_error(path: &Path, e: &serde_saphyr::Error) -> ScenarioError {
    let pos = e
        .location()
        .map(|l| Pos::of(&l))
        .filter(|p| p.line > 0)
        .unwrap_or(Pos { line: 1, column: 1 });
    let opts = serde_saphyr::render_options! { snippets: serde_saphyr::SnippetMode::Off };
    let mut message = e.render_with_options(opts);
    // The parser's resource budget (an alias bomb, absurd nesting): say what
    // was too much, once, without the parser's internals.
    if let Some(rest) = message.strip_prefix("budget breached: ") {
        // e.g. "Nodes { nodes: 250001 }", "Depth { depth: 2001 }".
        let kind = rest.split([' ', '{']).next().unwrap_or("size").to_lowercase();
        message = match kind.as_str() {
            "nodes" | "aliases" | "anchors" => format!(
                "the YAML is too large: more {kind} than a scenario file may have (aliases count as what they expand to)"
            ),
            "depth" => "the YAML is nested too deeply for a scenario file".to_owned(),
            _ => format!("the YAML exceeds the parser's limit on {kind} for a scenario file"),
        };
    }
    // The plain rendering ends with " at line L, column C"; we print that in front.
    if let Some(i) = message.rfind(" at line ") {
        message.truncate(i);
    }
    // Advice meant for programs embedding the parser, not for scenario authors.
    if let Some(i) = message.find(", set DuplicateKeyPolicy") {
        message.truncate(i);
    }
    // serde's wording for the either-or fields, in the file's terms.
    for (ty, says) in [
        (
            "RawParams",
            "'params' must be a map of lists ({key: [1, 2]}) or a list of maps ([{key: 1}, {key: 2}])",
        ),
        ("OneOrMany", "'blocked' must be an actor name or a list of actor names"),
        (
            "RowsExpect",
            "'rows' must be a row count or a list of rows (lists of values)",
        ),
    ] {
        if message.contains(&format!("untagged enum {ty}")) {
            message = says.to_owned();
        }
    }
    if message == "recursion limit exceeded" {
        message = "the YAML is nested too deeply for a scenario file".to_owned();
    }
    if message == "invalid floating point" {
        message = "expected a number".to_owned();
    }
    if message == "invalid boolean" {
        message = "expected true or false".to_owned();
    }
    // "invalid i64" and the like: say it in words.
    if let Some(ty) = message.strip_prefix("invalid ")
        && matches!(
            ty,
            "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "i128" | "u128"
        )
    {
        message = if ty == "i64" {
            // Also what a whole number beyond i64 gets.
            "expected a whole number (i64), from -9223372036854775808 to 9223372036854775807".to_owned()
        } else {
            format!("expected a whole number ({ty})")
        };
    }
    if message.starts_with("multiple YAML documents detected") {
        message = "the file holds several YAML documents (`---`); a scenario file holds one".to_owned();
    }
    ScenarioError {
        file: path.to_owned(),
        pos,
        message: message.trim().to_owned(),
    }
}

struct Validator<'a> {
    file: &'a Path,
    errors: Vec<ScenarioError>,
    /// This instance's parameters.
    params: &'a [(String, String)],
}

/// What the validator tracks per actor while walking the steps.
#[derive(Clone, Copy, PartialEq)]
enum Conn {
    None,
    Ready,
    /// A background step (index) is in flight.
    Busy(usize),
}

impl Validator<'_> {
    fn err(&mut self, pos: Pos, message: impl Into<String>) {
        self.errors.push(ScenarioError {
            file: self.file.to_owned(),
            pos,
            message: message.into(),
        });
    }

    fn run(mut self, raw: RawScenario) -> Result<Scenario, Vec<ScenarioError>> {
        let name_pos = Pos::of(&raw.name.referenced);
        let name = raw.name.value.trim().to_owned();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            self.err(
                name_pos,
                format!("scenario name '{name}' must be non-empty and use only letters, digits, '-' and '_'"),
            );
        }
        let step_deadline = match &raw.step_deadline_ms {
            Some(d) => self.deadline(d),
            None => DEFAULT_STEP_DEADLINE_MS,
        };
        let pool_max_size = match &raw.pool.max_size {
            Some(s) if !(1..=100).contains(&s.value) => {
                self.err(
                    Pos::of(&s.referenced),
                    format!("pool.max_size must be between 1 and 100, got {}", s.value),
                );
                DEFAULT_POOL_MAX_SIZE
            }
            Some(s) => s.value as u32,
            None => DEFAULT_POOL_MAX_SIZE,
        };

        let pool_settings = self.settings(raw.pool.settings, "pool.settings");
        let server_settings = self.settings(raw.server_settings, "server_settings");
        let mut actors: Vec<Actor> = Vec::new();
        for (n, a) in raw.actors.value {
            let apos = Pos::of(&a.referenced);
            let a = a.value;
            if a.via == Via::Pool
                && let Some(st) = &a.settings
                && !st.value.is_empty()
            {
                self.err(
                    Pos::of(&st.referenced),
                    format!("actor '{n}': pool actors share the pool's connections; put their settings under 'pool.settings'"),
                );
            }
            if !is_identifier(&n) && !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                self.err(
                    apos,
                    format!("actor name '{n}' must use only letters, digits, '-' and '_'"),
                );
            }
            let settings = self.settings(a.settings, &format!("actors.{n}.settings"));
            actors.push(Actor {
                name: n,
                via: a.via,
                settings,
            });
        }
        let setup = self.sql_list(raw.setup, "setup");
        let teardown = self.sql_list(raw.teardown, "teardown");
        if actors.is_empty() {
            self.err(Pos::of(&raw.actors.referenced), "a scenario needs at least one actor");
        }
        if actors.len() > 64 {
            self.err(
                Pos::of(&raw.actors.referenced),
                format!("{} actors; at most 64 are allowed", actors.len()),
            );
        }
        let actor_index: HashMap<&str, usize> = actors.iter().enumerate().map(|(i, a)| (a.name.as_str(), i)).collect();
        if raw.steps.value.is_empty() {
            self.err(Pos::of(&raw.steps.referenced), "a scenario needs at least one step");
        }

        let mut steps = Vec::new();
        let mut state = vec![Conn::None; actors.len()];
        for (i, a) in actors.iter().enumerate() {
            if a.via == Via::Direct {
                state[i] = Conn::Ready;
            }
        }
        let mut ids: HashMap<String, usize> = HashMap::new();
        let mut saved: Vec<String> = Vec::new();
        let mut records: HashMap<String, Pos> = HashMap::new();
        // Background step index → the index of the step that awaited it (None: in flight).
        let mut background: HashMap<usize, Option<usize>> = HashMap::new();

        for (index, spanned) in raw.steps.value.into_iter().enumerate() {
            let pos = Pos::of(&spanned.referenced);
            let s = spanned.value;
            let Some(step) = self.step(
                index,
                pos,
                s,
                step_deadline,
                &actors,
                &actor_index,
                &mut state,
                &mut ids,
                &mut background,
                &mut saved,
                &mut records,
            ) else {
                continue;
            };
            steps.push(step);
        }
        for (i, st) in state.iter().enumerate() {
            if let Conn::Busy(b) = st {
                let pos = steps.iter().find(|s| s.index == *b).map(|s| s.pos).unwrap_or_default();
                self.err(
                    pos,
                    format!("background step of actor '{}' is never awaited", actors[i].name),
                );
            }
        }
        let instance = if self.params.is_empty() {
            name.clone()
        } else {
            format!("{name}[{}]", instance_suffix(self.params))
        };
        if self.errors.is_empty() {
            Ok(Scenario {
                name: instance,
                family: name,
                params: self.params.to_vec(),
                pool_settings,
                server_settings,
                setup,
                teardown,
                name_pos,
                description: raw.description.trim().to_owned(),
                source: raw.source,
                file: self.file.to_owned(),
                pool_max_size,
                actors,
                steps,
            })
        } else {
            Err(self.errors)
        }
    }

    /// Validates a settings map: names are PostgreSQL parameter names; values
    /// are sent in a connection's startup packet (`-c name=value`), so only
    /// `application_name` may contain spaces.
    fn settings(&mut self, m: Option<Spanned<IndexMap<String, Setting>>>, what: &str) -> Settings {
        let Some(m) = m else { return Settings::default() };
        let pos = Pos::of(&m.referenced);
        let mut out = Vec::new();
        for (name, value) in m.value {
            let valid_name = name
                .split('.')
                .all(|part| is_identifier(part) && part.chars().all(|c| !c.is_ascii_uppercase()));
            if !valid_name {
                self.err(
                    pos,
                    format!("{what}: '{name}' is not a PostgreSQL parameter name (lower case, e.g. lock_timeout)"),
                );
                continue;
            }
            if value == Scalar::Null {
                self.err(pos, format!("{what}: '{name}' needs a value"));
                continue;
            }
            let text = value.text();
            if name != "application_name" && text.chars().any(|c| c.is_whitespace() || c == '\\' || c == '\'') {
                self.err(
                    pos,
                    format!("{what}: the value of '{name}' cannot contain spaces, quotes or backslashes"),
                );
                continue;
            }
            out.push((name, text));
        }
        Settings { list: out, pos }
    }

    fn sql_list(&mut self, list: Vec<Spanned<String>>, what: &str) -> Vec<(String, Pos)> {
        let mut out = Vec::new();
        for (i, sql) in list.into_iter().enumerate() {
            if sql.value.trim().is_empty() {
                self.err(Pos::of(&sql.referenced), format!("{what} statement {} is empty", i + 1));
            }
            if !placeholders(&sql.value).is_empty() {
                self.err(
                    Pos::of(&sql.referenced),
                    format!(
                        "{what} statement {}: only parameters can be used here, not saved values",
                        i + 1
                    ),
                );
            }
            out.push((sql.value, Pos::of(&sql.referenced)));
        }
        out
    }

    fn deadline(&mut self, d: &Spanned<i64>) -> u64 {
        match u64::try_from(d.value) {
            Ok(v) if (1..=MAX_STEP_DEADLINE_MS).contains(&v) => v,
            _ => {
                self.err(
                    Pos::of(&d.referenced),
                    format!(
                        "deadline must be between 1 and {MAX_STEP_DEADLINE_MS} ms, got {}",
                        d.value
                    ),
                );
                DEFAULT_STEP_DEADLINE_MS
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn step(
        &mut self,
        index: usize,
        pos: Pos,
        s: RawStep,
        step_deadline: u64,
        actors: &[Actor],
        actor_index: &HashMap<&str, usize>,
        state: &mut [Conn],
        ids: &mut HashMap<String, usize>,
        background: &mut HashMap<usize, Option<usize>>,
        saved: &mut Vec<String>,
        records: &mut HashMap<String, Pos>,
    ) -> Option<Step> {
        let n = index + 1;
        if actors.is_empty() {
            // Already reported ("a scenario needs at least one actor").
            return None;
        }
        let kinds = [
            s.sql.is_some(),
            s.action.is_some(),
            s.observe.is_some(),
            s.blocked.is_some(),
            s.await_step.is_some(),
            s.order.is_some(),
            s.lock_guard.is_some(),
        ];
        let count = kinds.iter().filter(|k| **k).count();
        if count != 1 {
            self.err(
                pos,
                format!(
                    "step {n} must have exactly one of 'sql', 'do', 'observe', 'blocked', 'await', 'order', 'lock_guard' (found {count})"
                ),
            );
            return None;
        }
        let deadline_ms = match &s.deadline_ms {
            Some(d) if s.await_step.is_some() || s.order.is_some() => {
                self.err(
                    Pos::of(&d.referenced),
                    format!(
                        "step {n}: an '{}' step runs within the background step's deadline; set 'deadline_ms' there",
                        if s.order.is_some() { "order" } else { "await" }
                    ),
                );
                step_deadline
            }
            Some(d) => self.deadline(d),
            None => step_deadline,
        };
        if s.key.is_some() && s.observe.is_none() {
            self.err(pos, format!("step {n}: 'key' only applies to 'observe' steps"));
        }
        if s.settle && s.observe.is_none() {
            self.err(pos, format!("step {n}: 'settle' only applies to 'observe' steps"));
        }
        if s.end.is_some() != s.lock_guard.is_some() {
            self.err(pos, format!("step {n}: 'lock_guard' and 'end' go together"));
        }
        let client_timeout_ms = match &s.client_timeout_ms {
            Some(c) => {
                let cpos = Pos::of(&c.referenced);
                let takes = !s.background
                    && (s.sql.is_some()
                        || matches!(
                            s.action,
                            Some(Action::Checkout | Action::Return | Action::Begin | Action::Commit | Action::Rollback)
                        ));
                if !takes {
                    self.err(
                        cpos,
                        format!("step {n}: 'client_timeout_ms' applies to foreground 'sql', transaction, 'checkout' and 'return' steps"),
                    );
                }
                match u64::try_from(c.value) {
                    Ok(v) if (1..deadline_ms).contains(&v) => Some(v),
                    _ => {
                        self.err(
                            cpos,
                            format!(
                                "step {n}: 'client_timeout_ms' must be between 1 and the step's deadline ({deadline_ms} ms) minus 1, got {}",
                                c.value
                            ),
                        );
                        None
                    }
                }
            }
            None => None,
        };
        if s.on_timeout.is_some() && (s.client_timeout_ms.is_none() || s.sql.is_none()) {
            self.err(
                pos,
                format!("step {n}: 'on_timeout' goes with 'client_timeout_ms' on an 'sql' step"),
            );
        }

        // Resolve the actor.
        let actor = if let Some(aw) = &s.await_step {
            if s.actor.is_some() {
                self.err(
                    pos,
                    format!("step {n}: an 'await' step takes the actor of the awaited step; remove 'actor'"),
                );
            }
            let Some(&target) = ids.get(&aw.value) else {
                self.err(
                    Pos::of(&aw.referenced),
                    format!("step {n} awaits '{}', which is not the id of an earlier step", aw.value),
                );
                return None;
            };
            let Some(a) = state.iter().position(|c| *c == Conn::Busy(target)) else {
                let why = match background.get(&target) {
                    None => "not a background step",
                    Some(Some(ABANDONED)) => "abandoned by an earlier step",
                    Some(Some(_)) => "already awaited",
                    Some(None) => "not in flight",
                };
                self.err(
                    Pos::of(&aw.referenced),
                    format!("step {n} awaits '{}', which is {why}", aw.value),
                );
                return None;
            };
            a
        } else if s.order.is_some() {
            if s.actor.is_some() {
                self.err(pos, format!("step {n}: an 'order' step has no actor; remove 'actor'"));
            }
            0
        } else {
            let Some(a) = &s.actor else {
                self.err(pos, format!("step {n} has no 'actor'"));
                return None;
            };
            match actor_index.get(a.value.as_str()) {
                Some(&i) => i,
                None => {
                    let known: Vec<&str> = actors.iter().map(|a| a.name.as_str()).collect();
                    self.err(
                        Pos::of(&a.referenced),
                        format!(
                            "step {n}: unknown actor '{}'; actors are: {}",
                            a.value,
                            known.join(", ")
                        ),
                    );
                    return None;
                }
            }
        };
        let an = actors[actor].name.clone();

        let kind = if let Some(sql) = s.sql {
            if sql.trim().is_empty() {
                self.err(pos, format!("step {n}: 'sql' is empty"));
            }
            for var in placeholders(&sql) {
                if !saved.contains(&var) {
                    self.err(
                        pos,
                        format!("step {n}: '${{{var}}}' is neither a parameter nor saved by an earlier step"),
                    );
                }
            }
            StepKind::Sql(sql)
        } else if let Some(a) = s.action {
            StepKind::Do(a)
        } else if let Some(k) = &s.lock_guard {
            StepKind::Guard(k.value, s.end.unwrap_or(GuardEndRaw::ReleaseNow))
        } else if let Some(o) = s.observe {
            StepKind::Observe(o, s.key)
        } else if let Some(b) = s.blocked {
            let bpos = Pos::of(&b.referenced);
            let names = b.value.into_vec();
            if names.is_empty() {
                self.err(bpos, format!("step {n}: 'blocked' lists no actor"));
                return None;
            }
            let mut targets = Vec::new();
            for name in names {
                match actor_index.get(name.as_str()) {
                    Some(&t) if matches!(state[t], Conn::Busy(_)) => {
                        if targets.contains(&t) {
                            self.err(bpos, format!("step {n}: 'blocked' lists '{name}' twice"));
                        }
                        targets.push(t);
                    }
                    Some(_) => self.err(
                        bpos,
                        format!("step {n}: 'blocked: {name}' needs a background step of '{name}' in flight"),
                    ),
                    None => self.err(bpos, format!("step {n}: unknown actor '{name}' in 'blocked'")),
                }
            }
            StepKind::Blocked(targets)
        } else if let Some(o) = &s.order {
            let opos = Pos::of(&o.referenced);
            if o.value.len() < 2 {
                self.err(opos, format!("step {n}: 'order' needs at least two step ids"));
            }
            let mut steps = Vec::new();
            for id in &o.value {
                match ids.get(id).map(|i| (*i, background.get(i))) {
                    None => self.err(
                        opos,
                        format!("step {n}: 'order' names '{id}', which is not the id of an earlier step"),
                    ),
                    Some((_, None)) => self.err(
                        opos,
                        format!("step {n}: 'order' names '{id}', which is not a background step"),
                    ),
                    Some((_, Some(None))) => self.err(
                        opos,
                        format!("step {n}: 'order' names '{id}', which is still in flight (await it first)"),
                    ),
                    Some((_, Some(Some(ABANDONED)))) => self.err(
                        opos,
                        format!("step {n}: 'order' names '{id}', which was abandoned (it never completes)"),
                    ),
                    Some((i, Some(Some(_)))) => {
                        if steps.contains(&i) {
                            self.err(opos, format!("step {n}: 'order' names '{id}' twice"));
                        }
                        steps.push(i);
                    }
                }
            }
            StepKind::Order(steps)
        } else {
            let aw = s.await_step.as_ref()?;
            let target = ids[&aw.value];
            background.insert(target, Some(index));
            StepKind::Await(target)
        };

        // Connection-state rules.
        match (&kind, state[actor]) {
            (StepKind::Await(_), _) => state[actor] = Conn::Ready,
            (StepKind::Order(_), _) => {}
            (StepKind::Do(Action::Abandon), Conn::Busy(b)) => {
                background.insert(b, Some(ABANDONED));
                state[actor] = Conn::None;
            }
            (StepKind::Do(Action::Abandon), _) => {
                self.err(
                    pos,
                    format!("step {n}: 'abandon' drops a background step in flight, but '{an}' runs none"),
                );
            }
            (_, Conn::Busy(b)) => {
                self.err(
                    pos,
                    format!(
                        "step {n}: actor '{an}' is still running background step {} (await it first)",
                        b + 1
                    ),
                );
            }
            (StepKind::Do(Action::Checkout), _) if actors[actor].via == Via::Direct => {
                self.err(
                    pos,
                    format!(
                        "step {n}: '{an}' is a direct actor, connected for the whole run; 'checkout' is for pool actors"
                    ),
                );
            }
            (StepKind::Do(Action::Checkout), Conn::Ready) => {
                self.err(pos, format!("step {n}: '{an}' already has a connection checked out"));
            }
            (StepKind::Do(Action::Checkout), Conn::None) => state[actor] = Conn::Ready,
            (StepKind::Do(Action::Return), _) if actors[actor].via == Via::Direct => {
                self.err(
                    pos,
                    format!("step {n}: '{an}' is a direct actor; 'return' is for pool actors ('disconnect' closes a direct actor's connection)"),
                );
            }
            (StepKind::Do(Action::Disconnect), _) if actors[actor].via == Via::Pool => {
                self.err(
                    pos,
                    format!("step {n}: '{an}' is a pool actor; 'disconnect' is for direct actors ('return' gives a pooled connection back)"),
                );
            }
            (StepKind::Do(Action::Return | Action::Disconnect), Conn::Ready) => state[actor] = Conn::None,
            (_, Conn::None) => {
                let msg = if actors[actor].via == Via::Direct {
                    format!("step {n}: actor '{an}' was disconnected by an earlier step")
                } else {
                    format!("step {n}: actor '{an}' has no connection (add a 'do: checkout' step before it)")
                };
                self.err(pos, msg);
            }
            (_, Conn::Ready) => {}
        }
        if s.background {
            match kind {
                StepKind::Sql(_) => {
                    state[actor] = Conn::Busy(index);
                    background.insert(index, None);
                }
                _ => self.err(pos, format!("step {n}: only 'sql' steps can run in the background")),
            }
            if s.id.is_none() {
                self.err(pos, format!("step {n}: a background step needs an 'id' to await it by"));
            }
        }
        if matches!(kind, StepKind::Guard(..)) && actors[actor].via != Via::Pool {
            self.err(
                pos,
                format!("step {n}: 'lock_guard' uses the driver under test, so it runs on a pool actor, not on direct actor '{an}'"),
            );
        }
        if client_timeout_ms.is_some() {
            if s.save.is_some() {
                self.err(
                    pos,
                    format!(
                        "step {n}: 'save' cannot be combined with 'client_timeout_ms' (a dropped call saves nothing)"
                    ),
                );
            }
            if s.record.is_none() {
                self.err(pos, format!("step {n}: a step with 'client_timeout_ms' needs 'record', so that a timeout shows in the report"));
            }
        }
        if matches!(kind, StepKind::Observe(..) | StepKind::Blocked(_)) && actors[actor].via != Via::Direct {
            self.err(
                pos,
                format!("step {n}: observations run on a direct actor (the observer), not on pool actor '{an}'"),
            );
        }
        if let Some(id) = &s.id
            && ids.insert(id.value.clone(), index).is_some()
        {
            self.err(
                Pos::of(&id.referenced),
                format!("step {n}: id '{}' is used twice", id.value),
            );
        }
        if let Some(v) = &s.save {
            if !matches!(kind, StepKind::Sql(_)) || s.background {
                self.err(
                    Pos::of(&v.referenced),
                    format!("step {n}: 'save' works on foreground 'sql' steps only"),
                );
            }
            // Later steps rely on the value: the step must run everywhere and succeed.
            if s.when.is_some() {
                self.err(
                    Pos::of(&v.referenced),
                    format!("step {n}: 'save' cannot be combined with 'when'"),
                );
            }
            if s.expect.as_ref().is_some_and(|e| e.value.error.is_some()) {
                self.err(
                    Pos::of(&v.referenced),
                    format!("step {n}: 'save' on a step expected to fail saves nothing"),
                );
            }
            if !is_identifier(&v.value) {
                self.err(
                    Pos::of(&v.referenced),
                    format!(
                        "step {n}: 'save: {}' must be a letter or '_' followed by letters, digits or '_' (it is used as ${{name}})",
                        v.value
                    ),
                );
            }
            if self.params.iter().any(|(p, _)| *p == v.value) {
                self.err(
                    Pos::of(&v.referenced),
                    format!("step {n}: 'save: {}' has the name of a parameter", v.value),
                );
            }
            saved.push(v.value.clone());
        }
        if let Some(r) = &s.record {
            let timed = client_timeout_ms.is_some();
            if matches!(
                kind,
                StepKind::Do(Action::Disconnect | Action::Abandon) | StepKind::Blocked(_)
            ) || (matches!(kind, StepKind::Do(Action::Checkout | Action::Return)) && !timed)
                || s.background
            {
                self.err(
                    Pos::of(&r.referenced),
                    if s.background {
                        format!("step {n}: a background step's outcome is recorded on its 'await' step; move 'record' there")
                    } else {
                        format!("step {n}: 'record' works on 'sql', 'observe', 'await', 'order', 'lock_guard' and transaction steps, and on 'checkout' and 'return' with 'client_timeout_ms'")
                    },
                );
            }
            if let Some(first) = records.insert(r.value.clone(), Pos::of(&r.referenced)) {
                self.err(
                    Pos::of(&r.referenced),
                    format!(
                        "step {n}: record name '{}' is already used at line {}",
                        r.value, first.line
                    ),
                );
            }
        }
        let foreground_sql_or_observe = matches!(kind, StepKind::Sql(_) | StepKind::Observe(..)) && !s.background;
        if s.when.is_some() && !foreground_sql_or_observe {
            self.err(
                pos,
                format!("step {n}: 'when' applies to foreground 'sql' and 'observe' steps only"),
            );
        }
        let direct = actors[actor].via == Via::Direct;
        let expect = match s.expect {
            Some(e) => self.expect(n, e, &kind, s.background, direct, saved),
            None => None,
        };

        Some(Step {
            index,
            pos,
            actor,
            id: s.id.map(|i| i.value),
            kind,
            background: s.background,
            deadline_ms,
            client_timeout_ms,
            on_timeout: s.on_timeout.unwrap_or_default(),
            settle: s.settle,
            expect,
            record: s.record.map(|r| r.value),
            save: s.save.map(|v| v.value),
            when: s.when,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn expect(
        &mut self,
        n: usize,
        e: Spanned<RawExpect>,
        kind: &StepKind,
        background: bool,
        direct: bool,
        saved: &[String],
    ) -> Option<Expect> {
        let pos = Pos::of(&e.referenced);
        let e = e.value;
        let is_observe = matches!(kind, StepKind::Observe(..));
        let runs_sql = matches!(
            kind,
            StepKind::Sql(_) | StepKind::Await(_) | StepKind::Do(Action::Begin | Action::Commit | Action::Rollback)
        );
        if background {
            self.err(
                pos,
                format!("step {n}: put 'expect' on the 'await' step of a background step"),
            );
            return None;
        }
        let observe_keys = e.held.is_some() || e.holders.is_some();
        let sql_keys =
            e.value.is_some() || e.rows.is_some() || e.error.is_some() || e.message.is_some() || e.notices.is_some();
        if !observe_keys && !sql_keys && e.elapsed_ms.is_none() {
            self.err(
                pos,
                format!(
                    "step {n}: 'expect' is empty; give one of value, rows, error, message, notices, elapsed_ms, held, holders"
                ),
            );
            return None;
        }
        if observe_keys && !is_observe {
            self.err(
                pos,
                format!("step {n}: 'held' and 'holders' apply to 'observe' steps only"),
            );
        }
        if sql_keys && !runs_sql {
            self.err(
                pos,
                format!("step {n}: 'value', 'rows', 'error', 'message' and 'notices' apply to steps that run SQL"),
            );
        }
        if e.elapsed_ms.is_some() && !runs_sql {
            self.err(pos, format!("step {n}: 'elapsed_ms' applies to steps that run SQL"));
        }
        if e.error.is_some() && (e.value.is_some() || e.rows.is_some()) {
            self.err(
                pos,
                format!("step {n}: 'error' cannot be combined with 'value' or 'rows'"),
            );
        }
        if e.message.is_some() && e.error.is_none() {
            self.err(
                pos,
                format!("step {n}: 'message' matches the error's message; add 'error' with its SQLSTATE"),
            );
        }
        for pattern in e.message.iter().chain(e.notices.iter().flatten()) {
            if let Err(err) = regex::Regex::new(&pattern.value) {
                let why = err.to_string().lines().last().unwrap_or_default().trim().to_owned();
                let why = why.strip_prefix("error: ").unwrap_or(&why).to_owned();
                self.err(
                    Pos::of(&pattern.referenced),
                    format!("step {n}: '{}' is not a valid regular expression: {why}", pattern.value),
                );
            }
        }
        if e.notices.is_some() && e.error.is_some() {
            self.err(
                pos,
                format!("step {n}: 'notices' are checked on steps that succeed; a failed step's notices are not kept"),
            );
        }
        if e.notices.is_some() && !direct {
            self.err(
                pos,
                format!(
                    "step {n}: 'notices' are captured on direct actors only (the pools' client libraries do not hand notices to their callers)"
                ),
            );
        }
        if let Some(b) = e.elapsed_ms {
            let (min, max) = (b.min.unwrap_or(0.0), b.max.unwrap_or(f64::INFINITY));
            let finite = !min.is_nan() && !max.is_nan() && min.is_finite() && (b.max.is_none() || max.is_finite());
            if !finite || min < 0.0 || max < min || (b.min.is_none() && b.max.is_none()) {
                self.err(pos, format!("step {n}: elapsed_ms needs 0 ≤ min ≤ max (ms)"));
            }
        }
        let texts = e
            .value
            .iter()
            .chain(match &e.rows {
                Some(RowsExpect::Exact(rows)) => rows.iter().flatten().collect::<Vec<_>>(),
                _ => Vec::new(),
            })
            .filter_map(|v| match v {
                Scalar::Text(t) => Some(t.clone()),
                _ => None,
            })
            .collect::<Vec<_>>();
        for t in texts {
            for var in placeholders(&t) {
                if !saved.contains(&var) {
                    self.err(
                        pos,
                        format!(
                            "step {n}: '${{{var}}}' in 'expect' is neither a parameter nor saved by an earlier step"
                        ),
                    );
                }
            }
        }
        if let Some(RowsExpect::Exact(rows)) = &e.rows
            && let Some(first) = rows.first()
            && rows.iter().any(|r| r.len() != first.len())
        {
            self.err(
                pos,
                format!("step {n}: the rows in 'expect.rows' have different lengths"),
            );
        }
        let error = match &e.error {
            Some(code) => match sqlstate_of(code) {
                Some(c) => Some(c),
                None => {
                    let names: Vec<&str> = CONDITIONS.iter().map(|(n, _)| *n).collect();
                    self.err(pos, format!("step {n}: '{code}' is neither a SQLSTATE (five characters such as 55P03) nor a known condition name ({})", names.join(", ")));
                    None
                }
            },
            None => None,
        };
        let (holder_pid, holder_state) = match e.holders {
            Some(h) => {
                if let Some(p) = &h.pid
                    && !saved.contains(p)
                {
                    self.err(
                        pos,
                        format!("step {n}: holders.pid names '{p}', which no earlier step saves"),
                    );
                }
                if let Some(st) = &h.state
                    && !STATES.contains(&st.as_str())
                {
                    self.err(
                        pos,
                        format!(
                            "step {n}: holders.state '{st}' is not a pg_stat_activity state ({})",
                            STATES.join(", ")
                        ),
                    );
                }
                if h.pid.is_none() && h.state.is_none() {
                    self.err(pos, format!("step {n}: 'holders' needs 'pid' or 'state'"));
                }
                (h.pid, h.state)
            }
            None => (None, None),
        };
        Some(Expect {
            value: e.value,
            rows: e.rows,
            error,
            message: e.message.map(|m| m.value),
            notices: e.notices.map(|v| v.into_iter().map(|p| p.value).collect()),
            elapsed_ms: e.elapsed_ms,
            held: e.held,
            holder_pid,
            holder_state,
        })
    }
}

/// Names of `${name}` placeholders in `sql`.
pub fn placeholders(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = sql;
    while let Some(i) = rest.find("${") {
        let after = &rest[i + 2..];
        match after.find('}') {
            Some(j) => {
                out.push(after[..j].to_owned());
                rest = &after[j + 1..];
            }
            None => break,
        }
    }
    out
}

/// The JSON Schema of the scenario format, generated from the types the
/// loader deserializes into (shipped as `scenarios/scenario.schema.json`).
pub fn json_schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(RawScenario);
    schema.insert("$id".into(), "https://locklab.invalid/scenario.schema.json".into());
    serde_json::to_value(schema).unwrap_or_default()
}
