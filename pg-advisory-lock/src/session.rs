//! What the crate needs from a PostgreSQL client: run a string of SQL
//! statements, and tell a server error from a lost connection.

use std::future::Future;

/// A connection (or a transaction on one) that the crate runs its
/// statements on. Implemented for each supported client behind its feature
/// (see the crate's docs); implement it for another client in a few lines.
///
/// The crate never reads rows: every outcome it needs is decided on the
/// server and comes back as success or as an error whose message the crate
/// wrote itself (a PL/pgSQL `RAISE`), so a client that hides SQLSTATEs
/// (diesel-async passes none on for most codes) works the same.
pub trait Session: Send {
    /// Runs `sql`, one or more statements separated by `;`, with the simple
    /// query protocol (one round trip; PostgreSQL docs §55.2.2, "Simple
    /// Query"), ignoring any rows.
    ///
    /// # Errors
    /// A [`ClientError`] saying whether the server rejected a statement or
    /// the connection is gone.
    fn execute(&mut self, sql: &str) -> impl Future<Output = Result<(), ClientError>> + Send;
}

/// Why a statement failed, as a [`Session`] reports it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ClientError {
    /// The server's message, or the client's when there was no server error.
    pub message: String,
    /// The SQLSTATE, when the client passes it on (e.g. `57014` for a
    /// statement cancelled by `statement_timeout` or a cancel request).
    pub sqlstate: Option<String>,
    /// Whether the connection is gone (closed, reset, never answered): the
    /// server ends a lost session's locks once it notices.
    pub connection_lost: bool,
}

impl ClientError {
    /// A server error on a live connection.
    pub fn server(message: impl Into<String>, sqlstate: Option<String>) -> ClientError {
        ClientError {
            message: message.into(),
            sqlstate,
            connection_lost: false,
        }
    }

    /// A lost connection.
    pub fn lost(message: impl Into<String>) -> ClientError {
        ClientError {
            message: message.into(),
            sqlstate: None,
            connection_lost: true,
        }
    }

    /// Whether this is the crate's own "busy" error (the lock was not free,
    /// or not granted within the wait's bound), raised by its statements.
    pub(crate) fn is_busy(&self) -> bool {
        !self.connection_lost && self.message == crate::sql::BUSY
    }
}

impl<S: Session + ?Sized> Session for &mut S {
    fn execute(&mut self, sql: &str) -> impl Future<Output = Result<(), ClientError>> + Send {
        (**self).execute(sql)
    }
}
