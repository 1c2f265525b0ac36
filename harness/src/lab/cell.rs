//! [`Cell`]: one scenario run through one column, as a program that uses the
//! lab reads it, and its recorded [`Observation`]s.

use crate::outcome::{self, RunResult, Status};

/// One cell of the matrix: a scenario run (`NAME`, or `NAME[k=v]` for a file
/// with `params`) through one column (a driver id, `locklab list`), with
/// every repeat of [`crate::lab::Lab::repeat`] folded in.
#[derive(Clone, Debug)]
pub struct Cell(pub(crate) RunResult);

impl Cell {
    /// The scenario run: `NAME`, or `NAME[k=v]` for a scenario file with
    /// `params`.
    pub fn scenario(&self) -> &str {
        &self.0.scenario
    }

    /// The column's driver id (as `locklab list` prints it).
    pub fn driver(&self) -> &str {
        &self.0.driver
    }

    /// The cell's status as the report shows it (see [`Status`]).
    pub fn status(&self) -> Status {
        self.0.status()
    }

    /// `None` when every step and expectation held; else what failed,
    /// naming the scenario, driver, step, actor and file position.
    pub fn failure(&self) -> Option<&str> {
        self.0.failure.as_deref()
    }

    /// The cell's `record:` steps, in step order.
    pub fn observations(&self) -> impl ExactSizeIterator<Item = Observation<'_>> {
        self.0.observations.iter().map(Observation)
    }
}

/// One `record:` step's reading in a [`Cell`]: a row of the matrix.
#[derive(Clone, Copy, Debug)]
pub struct Observation<'a>(&'a outcome::Observation);

impl Observation<'_> {
    /// The `record:` name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The reading as the baseline compares it and the properties judge it
    /// (e.g. `true`, `error 55P03`); in a race cell (`trials:`), the
    /// readings seen in at least 5 % of the trials, sorted and joined by ` | `
    /// (docs/src/faults-and-races.md).
    pub fn reading(&self) -> String {
        self.0.seen().to_string()
    }

    /// The SQLSTATE when the step failed on the server (as expected), e.g.
    /// `55P03` for `lock_timeout` (PostgreSQL's "Appendix A. PostgreSQL
    /// Error Codes").
    pub fn sqlstate(&self) -> Option<&str> {
        self.0.sqlstate.as_deref()
    }
}
