//! The types of the step fields several kinds share (`do:`, `on_timeout:`,
//! `when:`, a list of actors), and the schemas of fields a parameter may
//! give (`"${name}"`). The fields themselves are in `scenario/steps/`.

use schemars::JsonSchema;
use serde::Deserialize;

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

/// The schema of an advisory lock key (see [`crate::keys::AdvisoryKey`]).
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
