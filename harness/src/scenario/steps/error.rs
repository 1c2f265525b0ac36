//! Why a step, or a phase of the run, failed: typed, so that a failed
//! expectation behind transaction pooling can be told from the harness
//! failing to run a step.

use std::fmt;

/// The failure of a step or phase. Its text (`Display`) is what the cell's
/// failure says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepError {
    /// An expectation of the scenario did not hold (a value, an SQLSTATE, a
    /// held flag, a completion order, an actor that did not block).
    Mismatch(String),
    /// A step's deadline passed before what it waited for happened.
    Deadline(String),
    /// A call to the driver or the server failed unexpectedly.
    Driver(String),
    /// The harness could not do its part (no connection for the actor, a
    /// catalog query failed, a panic).
    Harness(String),
}

impl StepError {
    /// Whether a scenario's expectation failed (rather than the harness, a
    /// deadline or the driver).
    pub fn is_mismatch(&self) -> bool {
        matches!(self, StepError::Mismatch(_))
    }

    /// Whether the driver's call failed because the client connection was
    /// closed under it, by its peer (tokio-postgres: "connection closed";
    /// the adapters: "server closed the connection unexpectedly",
    /// "Connection reset by peer", an unexpected EOF).
    pub fn is_connection_closed(&self) -> bool {
        const CLOSED: [&str; 5] = [
            "connection closed",
            "server closed the connection unexpectedly",
            "Connection reset by peer",
            "unexpected EOF",
            "unexpected end of file",
        ];
        matches!(self, StepError::Driver(m) if CLOSED.iter().any(|c| m.contains(c)))
    }

    /// The same kind of error with its text changed by `f`.
    pub fn map(self, f: impl FnOnce(String) -> String) -> StepError {
        match self {
            StepError::Mismatch(m) => StepError::Mismatch(f(m)),
            StepError::Deadline(m) => StepError::Deadline(f(m)),
            StepError::Driver(m) => StepError::Driver(f(m)),
            StepError::Harness(m) => StepError::Harness(f(m)),
        }
    }

    /// The text.
    pub fn message(&self) -> &str {
        match self {
            StepError::Mismatch(m) | StepError::Deadline(m) | StepError::Driver(m) | StepError::Harness(m) => m,
        }
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl From<String> for StepError {
    /// A harness error (`?` on the harness's own `Result<_, String>` helpers).
    fn from(m: String) -> StepError {
        StepError::Harness(m)
    }
}

/// A step's result.
pub type StepResult = Result<(), StepError>;
