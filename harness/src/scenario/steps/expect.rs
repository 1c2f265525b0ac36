//! The typed expectations and client-side bound that several step kinds
//! share.

use crate::scenario::raw::expect::{Bounds, RowsExpect};
use crate::scenario::raw::step::OnTimeout;
use crate::scenario::scalar::Scalar;

/// A client-side bound on a call: when `ms` elapse the call's future is
/// dropped (or a cancel request sent), and the step records that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientBound {
    /// The bound, in ms (below the step's deadline).
    pub ms: u64,
    /// What the client does when it elapses.
    pub on_timeout: OnTimeout,
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
