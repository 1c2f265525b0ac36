//! locklab's driver protocol, version 1: the messages (README, "Driver protocol").
//!
//! JSON lines over the adapter's stdin (requests) and stdout (answers). Every
//! request has an `id` (u64, unique per adapter) and an `op`; every answer
//! repeats the `id` and carries exactly one of `ok` (an object), `error`
//! (`{kind, message, sqlstate?}`) or `dropped: true` (the call was given up
//! on by a `drop` request). Answers come in any order.

use serde::Deserialize;
use serde_json::Value;

use crate::{DbError, DriverError, Rows};

/// The protocol version this harness speaks (`hello` checks it).
pub const PROTOCOL_VERSION: u64 = 1;

/// An error the adapter reports.
#[derive(Debug, Deserialize)]
pub(crate) struct AnswerError {
    /// `db` (the server's error: `sqlstate` set), `client` (the library
    /// failed without one), `unsupported` (the library has no such API) or
    /// `protocol` (the adapter cannot do what was asked: unknown request,
    /// unknown connection).
    pub kind: String,
    /// The message as the library gives it.
    pub message: String,
    /// Five-character SQLSTATE for `db` errors.
    #[serde(default)]
    pub sqlstate: Option<String>,
}

/// One answer line.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Answer {
    /// The request's id (`null` only for a request the adapter could not read).
    pub id: Option<u64>,
    /// The result, for a request that succeeded.
    #[serde(default)]
    pub ok: Option<Value>,
    /// Why the request failed.
    #[serde(default)]
    pub error: Option<AnswerError>,
    /// Set when a `drop` request cancelled the call.
    #[serde(default)]
    pub dropped: bool,
    /// For a failed `query`: how long the library call took, in ms.
    #[serde(default)]
    pub elapsed_ms: Option<f64>,
}

impl Answer {
    /// The `ok` object.
    ///
    /// # Errors
    /// The adapter's error as a [`DriverError`].
    pub fn ok_value(self) -> Result<Value, DriverError> {
        if let Some(e) = self.error {
            return Err(match (e.kind.as_str(), e.sqlstate) {
                (_, Some(sqlstate)) => DriverError::Db(DbError {
                    sqlstate,
                    message: e.message,
                }),
                ("unsupported", None) => DriverError::Unsupported(e.message),
                (_, None) => DriverError::Client(e.message),
            });
        }
        if self.dropped {
            return Err(DriverError::Client("the call was dropped".into()));
        }
        Ok(self.ok.unwrap_or(Value::Null))
    }
}

/// `ok` of a `query`: rows in text format, notices, the library call's time.
#[derive(Debug, Deserialize)]
pub(crate) struct QueryOk {
    #[serde(default)]
    pub columns: Vec<String>,
    #[serde(default)]
    pub rows: Vec<Vec<Option<String>>>,
    #[serde(default)]
    pub notices: Vec<String>,
    /// ms, measured inside the adapter around the library call.
    #[serde(default)]
    pub elapsed_ms: Option<f64>,
    /// The client-side bound elapsed and the call was given up on.
    #[serde(default)]
    pub gave_up: bool,
}

impl QueryOk {
    pub fn rows(self) -> Rows {
        Rows {
            columns: self.columns,
            rows: self.rows,
            notices: self.notices,
        }
    }
}
