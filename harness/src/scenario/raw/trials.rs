//! The raw form of a race scenario's `outcomes:` and `invariants:`.

use schemars::JsonSchema;
use serde::Deserialize;

use super::OrParam;
use crate::scenario::Scalar;
use crate::scenario::scalar::present;

/// One possible reading of a race scenario's recorded step (`outcomes:`):
/// exactly one of its fields, `state` only with `held_by`.
#[derive(Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOutcome {
    /// The first column of the first row, compared as `expect.value` (`""`: the empty text a
    /// `void` function returns; `null`: SQL NULL).
    #[serde(default, deserialize_with = "present")]
    pub(crate) value: Option<Scalar>,
    /// An error with this SQLSTATE (five characters or a condition name), or `none`: without one.
    #[serde(default)]
    pub(crate) error: Option<String>,
    /// `true`: the call was given up at its `client_timeout_ms` (whatever became of a cancel).
    #[serde(default)]
    pub(crate) dropped: Option<bool>,
    /// An `observe` snapshot with (`true`) or without (`false`) a granted lock.
    #[serde(default)]
    pub(crate) held: Option<bool>,
    /// An `observe` snapshot whose holders are all this actor (`server connection`: a backend
    /// behind transaction pooling, nobody's).
    #[serde(default)]
    pub(crate) held_by: Option<String>,
    /// With `held_by`: each holder's `pg_stat_activity.state` (`idle`, `active`, …).
    #[serde(default)]
    pub(crate) state: Option<String>,
}

/// An invariant's `unless_value`: a step's record and the text that
/// leaves the trial unchecked.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUnlessValue {
    /// The `record` name of a step of the trial.
    pub(crate) record: String,
    /// The text value for which the trial is not checked, e.g. `acquired`.
    pub(crate) value: String,
}

/// An invariant over one trial's recorded observations.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawInvariant {
    /// The `record` name of an `observe` step of the trial: the snapshot the check reads.
    pub(crate) observe: String,
    /// Only trials in which the step recorded under this name failed (an error, any SQLSTATE).
    #[serde(default)]
    pub(crate) if_error: Option<String>,
    /// Only trials in which the step recorded under `record` did not record
    /// the text `value` (an error, or another value): for a call whose
    /// "not acquired" is a value, such as the lock crate's `busy`.
    #[serde(default)]
    pub(crate) unless_value: Option<RawUnlessValue>,
    /// The snapshot shows no advisory lock held by this actor's backend.
    #[serde(default)]
    pub(crate) not_held_by: Option<String>,
    /// The snapshot shows at most this many holders (backends with a granted lock).
    #[serde(default)]
    pub(crate) max_holders: Option<u32>,
    /// A violation is the finding being measured: reported, but the cell does not fail.
    #[serde(default)]
    #[schemars(with = "OrParam<bool>")]
    pub(crate) finding: bool,
}
