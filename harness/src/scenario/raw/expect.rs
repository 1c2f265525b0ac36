//! A step's `expect:` as serde reads it.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::scenario::scalar::{Scalar, present};

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
