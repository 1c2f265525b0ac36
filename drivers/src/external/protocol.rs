//! locklab's driver protocol, version 1, as types (docs/src/protocol.md):
//! the client end (`adapter.rs`) writes [`Request`]s and reads [`Answer`]s,
//! the Rust host (`host.rs`) reads the one and writes the other, and
//! [`schema`] is the JSON Schema shipped as `drivers/adapters/protocol.schema.json`
//! for adapters in other languages.
//!
//! JSON lines over the adapter's stdin (requests) and stdout (answers). Every
//! request has an `id` (u64, unique per adapter) and an `op`; every answer
//! repeats the `id` and carries exactly one of `ok` (an object), `error`
//! (`{kind, message, sqlstate?}`) or `dropped: true` (the call was given up
//! on by a `drop` request). Answers come in any order.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ConnectSpec, DbError, DriverError, GuardAcquire, GuardEnd, Returned, Rows};

/// The protocol version this harness speaks (`hello` checks it).
pub const PROTOCOL_VERSION: u64 = 1;

/// One request line: its id and what is asked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Request {
    /// Unique per adapter, from 1; the answer repeats it.
    pub id: u64,
    /// The operation and its fields (`"op": "query", "conn": …`).
    #[serde(flatten)]
    pub op: Op,
}

/// What a request asks, by its `op`; ids of pools (`p1`) and connections
/// (`c1`) are chosen by the harness. `timeout_ms`, where given, is a
/// client-side bound in the library's own way of giving up (the scenario's
/// `client_timeout_ms`, in ms): when it elapses the answer is `gave_up: true`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// The first request: answered with [`HelloOk`].
    Hello {
        /// The protocol version the harness speaks ([`PROTOCOL_VERSION`]).
        protocol: u64,
    },
    /// Open a pool under a new id; `{}` once it is open.
    OpenPool {
        /// The new pool's id.
        pool: String,
        /// Where and as whom its connections connect.
        spec: ConnectSpec,
        /// The pool's maximum size (connections).
        max_size: u32,
        /// How long a checkout may wait for a free connection, in ms.
        checkout_timeout_ms: u64,
    },
    /// Check a connection out under a new id: [`CheckoutOk`].
    Checkout {
        /// The pool's id.
        pool: String,
        /// The new connection's id.
        conn: String,
        /// How long the checkout may wait for a free connection, in ms.
        checkout_timeout_ms: u64,
        /// Client-side bound, in ms.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// Run `sql` (possibly several statements) with the simple query
    /// protocol: [`QueryOk`].
    Query {
        /// The connection's id.
        conn: String,
        /// The statement(s).
        sql: String,
        /// Client-side bound, in ms.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// `begin` through the library's transaction API where it has one: [`QueryOk`].
    Begin {
        /// The connection's id.
        conn: String,
    },
    /// `commit`, as `begin`.
    Commit {
        /// The connection's id.
        conn: String,
    },
    /// `rollback`, as `begin`.
    Rollback {
        /// The connection's id.
        conn: String,
    },
    /// Give the connection back with no clean-up: [`ReturnOk`].
    Return {
        /// The connection's id.
        conn: String,
        /// Client-side bound, in ms.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// Send the library's cancel request for the call in flight; `{}` once sent.
    Cancel {
        /// The connection's id.
        conn: String,
    },
    /// The harness gave up on request `target`: give it up the language's
    /// way (docs/src/protocol.md, "Giving up": a library that cannot
    /// interrupt a call stops waiting); the target answers `dropped`, then
    /// this request `{}`.
    Drop {
        /// The id of the request given up on.
        target: u64,
    },
    /// The connection's owner went away mid-call (sent after a `drop` of
    /// its call in flight): give the connection back as the language does
    /// when a block holding it is left by cancellation; `{}`.
    Abandon {
        /// The connection's id.
        conn: String,
    },
    /// Take the session-level advisory lock on `key` through the library's
    /// guard API (waiting, or trying once: `acquire`) and end the guard as
    /// `end` says; `{}`, `{"acquired": false}` when a try found the lock
    /// taken, or an `unsupported` error where the library has no such API.
    Guard {
        /// The connection's id.
        conn: String,
        /// The advisory lock key (bigint form).
        key: i64,
        /// How the guard takes the lock: `wait` (the default, left out) or `try`.
        #[serde(default, skip_serializing_if = "GuardAcquire::is_wait")]
        acquire: GuardAcquire,
        /// How the guard ends.
        end: GuardEnd,
    },
    /// Run a library's own call that takes its locks itself (a migration
    /// runner: `rails-migrator`), connecting as pool `pool` does:
    /// [`LibraryOk`], or an `unsupported` error where the adapter has no
    /// call of that name (docs/src/protocol.md, "Requests").
    Library {
        /// The pool whose connection settings the call's own connections use.
        pool: String,
        /// The call, e.g. `rails-migrator`.
        name: String,
        /// Its arguments, an object whose shape `name` gives
        /// (`rails-migrator`: `runners`, `migration_ms`, `kill_first`,
        /// `give_up_ms`, as a `migrate:` step has them).
        args: Value,
    },
    /// Are you there? `{}`.
    Ping,
    /// Close every connection of the pool; `{}` once closed.
    ClosePool {
        /// The pool's id.
        pool: String,
    },
}

impl Op {
    /// The `op` name (`"query"`), for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Hello { .. } => "hello",
            Op::OpenPool { .. } => "open_pool",
            Op::Checkout { .. } => "checkout",
            Op::Query { .. } => "query",
            Op::Begin { .. } => "begin",
            Op::Commit { .. } => "commit",
            Op::Rollback { .. } => "rollback",
            Op::Return { .. } => "return",
            Op::Cancel { .. } => "cancel",
            Op::Drop { .. } => "drop",
            Op::Abandon { .. } => "abandon",
            Op::Guard { .. } => "guard",
            Op::Library { .. } => "library",
            Op::Ping => "ping",
            Op::ClosePool { .. } => "close_pool",
        }
    }

    /// The connection a request runs a call on (`query`, `begin`, `commit`,
    /// `rollback`, `guard`): the call an `abandon` of that connection gives up on.
    pub fn call_on(&self) -> Option<&str> {
        match self {
            Op::Query { conn, .. }
            | Op::Begin { conn }
            | Op::Commit { conn }
            | Op::Rollback { conn }
            | Op::Guard { conn, .. } => Some(conn),
            _ => None,
        }
    }
}

/// An error the adapter reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// The message as the library gives it.
    pub message: String,
    /// Five-character SQLSTATE, for `db` errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqlstate: Option<String>,
}

/// The kind of an [`AnswerError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The server's error (`sqlstate` set, unless the library does not
    /// pass it on: diesel-async for most codes).
    Db,
    /// The library failed without a server error.
    Client,
    /// The library has no such API.
    Unsupported,
    /// The adapter cannot do what was asked (unknown request, unknown connection).
    Protocol,
}

/// One answer line: exactly one of `ok`, `error` and `dropped`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{"required": ["ok"]}, {"required": ["error"]}, {"required": ["dropped"]}]))]
pub struct Answer {
    /// The request's id (`null` only for a request the adapter could not read).
    pub id: Option<u64>,
    /// The result, for a request that succeeded: an object whose shape the
    /// request's `op` gives ([`HelloOk`], [`CheckoutOk`], [`QueryOk`],
    /// [`ReturnOk`], [`GuardOk`], [`LibraryOk`], or `{}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<AnyOk>")]
    pub ok: Option<Value>,
    /// Why the request failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<AnswerError>,
    /// Set when a `drop` request cancelled the call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dropped: bool,
    /// For a failed `query`: how long the library call took, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<f64>,
}

/// The shapes an `ok` takes, for the schema.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum AnyOk {
    Hello(HelloOk),
    Checkout(CheckoutOk),
    Query(QueryOk),
    Return(ReturnOk),
    Guard(GuardOk),
    Library(LibraryOk),
}

/// `ok` of `hello`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HelloOk {
    /// The protocol version the adapter speaks.
    pub protocol: u64,
    /// The library's name (`asyncpg`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    /// The library's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Shown after the version in the column header (e.g. the libpq).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<String>,
    /// The adapter's OS pid, for messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Whether `cancel` works.
    #[serde(default)]
    pub cancel: bool,
    /// Why not, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_cancel_reason: Option<String>,
}

/// `ok` of `checkout` (`{}` is one too).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckoutOk {
    /// The client-side bound elapsed and the checkout was given up on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gave_up: bool,
    /// The backend pid, for the adapter's own logs (the harness asks the server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i64>,
    /// Whether `cancel` works on this connection, where it differs from `hello`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<bool>,
    /// Why not, where it differs from `hello`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_cancel_reason: Option<String>,
}

/// `ok` of `query`, `begin`, `commit` and `rollback`: rows in text format,
/// notices, the library call's time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryOk {
    /// Column names.
    #[serde(default)]
    pub columns: Vec<String>,
    /// Values in PostgreSQL's text format (`t`/`f` for booleans), `null` for NULL.
    #[serde(default)]
    pub rows: Vec<Vec<Option<String>>>,
    /// Server notices, `"SEVERITY: message"`.
    #[serde(default)]
    pub notices: Vec<String>,
    /// Measured inside the adapter around the library call, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<f64>,
    /// The client-side bound elapsed and the call was given up on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gave_up: bool,
}

impl QueryOk {
    /// The rows as a driver returns them.
    pub fn rows(self) -> Rows {
        Rows {
            columns: self.columns,
            rows: self.rows,
            notices: self.notices,
        }
    }
}

/// `ok` of `return`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReturnOk {
    /// Where the connection went (absent when `gave_up`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returned: Option<Returned>,
    /// The client-side bound elapsed and the return was given up on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gave_up: bool,
}

/// `ok` of `guard`: `{}` when the guard was made and ended; `{"acquired":
/// false}` when `acquire: try` found the lock taken and made none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuardOk {
    /// `false`: a try found the lock taken (absent: acquired).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired: Option<bool>,
}

/// `ok` of `library`: what the call reported, in words (for
/// `rails-migrator`, one word per migrator, how many times the migration
/// ran and how many advisory locks are left, as a `migrate:` step reads).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LibraryOk {
    /// The reading.
    pub text: String,
}

impl Answer {
    /// The `ok` object.
    ///
    /// # Errors
    /// The adapter's error as a [`DriverError`].
    pub fn ok_value(self) -> Result<Value, DriverError> {
        if let Some(e) = self.error {
            return Err(match (e.kind, e.sqlstate) {
                (_, Some(sqlstate)) => DriverError::Db(DbError {
                    sqlstate,
                    message: e.message,
                }),
                (ErrorKind::Unsupported, None) => DriverError::Unsupported(e.message),
                // A server error whose code the library dropped (diesel-async),
                // as the in-process driver reports it.
                (ErrorKind::Db, None) => DriverError::Db(DbError {
                    sqlstate: String::new(),
                    message: e.message,
                }),
                (_, None) => DriverError::Client(e.message),
            });
        }
        if self.dropped {
            return Err(DriverError::Client("the call was dropped".into()));
        }
        Ok(self.ok.unwrap_or(Value::Null))
    }

    /// The `ok` object as the shape `T` its request's `op` gives.
    ///
    /// # Errors
    /// The adapter's error as a [`DriverError`], or a [`DriverError::Client`]
    /// naming `adapter` and `op` when the object has another shape.
    pub fn ok_as<T: serde::de::DeserializeOwned>(self, adapter: &str, op: &str) -> Result<T, DriverError> {
        let v = match self.ok_value()? {
            Value::Null => Value::Object(serde_json::Map::new()),
            v => v,
        };
        serde_json::from_value(v)
            .map_err(|e| DriverError::Client(format!("adapter '{adapter}': a '{op}' answer of the wrong shape: {e}")))
    }
}

/// A line of the protocol, either way: the root of the shipped schema.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum Line {
    Request(Request),
    Answer(Answer),
}

/// The protocol's JSON Schema (draft 2020-12): a line is a [`Request`] or an
/// [`Answer`] (`$defs/Request`, `$defs/Answer`). Shipped as
/// `drivers/adapters/protocol.schema.json` (`locklab protocol-schema`).
pub fn schema() -> Value {
    let mut s = serde_json::to_value(schemars::schema_for!(Line)).unwrap_or(Value::Null);
    s["title"] = Value::from(format!(
        "locklab driver protocol, version {PROTOCOL_VERSION}: one JSON line"
    ));
    s
}
