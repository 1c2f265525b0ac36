//! Properties: the guide's safety rules, and locklab's own findings, as
//! declared rules a column passes or fails (`properties/NAME.yaml`, one rule
//! per file; the JSON Schema `properties/property.schema.json` is generated
//! from the types below).
//!
//! A property names the scenario cells and recorded observations that decide
//! it and how each reading of them reads: holds, violated, or not applicable.
//! [`evaluate`] turns the cells of a run (or of a baseline) into a verdict per
//! property and column, with the deciding cells as evidence; the report,
//! `locklab verdict` and `locklab check` read those verdicts.
//!
//! A property file:
//!
//! ```yaml
//! id: session-lock-released-on-return      # the file's name without .yaml
//! rule: A session-level lock … does not outlive the code that took it.
//! source: the guide, §3 and Verification
//! severity: unsafe                          # unsafe | surprising | informational
//! scope: column                             # column (default) | server
//! advice: Unlock before the connection goes back …
//! decided_by:
//!   - scenario: session-lock-pool-return    # a file's name (every parameter set) or NAME[k=v]
//!     record: held_after_return             # a `record:` of it, or `invariant NAME`
//!     readings:                             # first match wins
//!       - when: {held: false}
//!         reads: holds
//!       - when: {held: true}
//!         reads: violated
//!         says: still held by the idle pooled connection after the return
//! ```
//!
//! Without `record`, the readings read the cell's status (`when: {status:
//! deviates}`). A column's verdict is violated if any deciding reading
//! violates the property, else undecided if a deciding cell failed or has a
//! reading no rule reads, else holds if any reading holds, else n/a. A cell
//! with a reading that reads n/a (no guard API, no cancel request sent)
//! decides nothing through its other records. A race row reads as violated
//! when any of its trials did (with the count), as holds when none did; a
//! cell whose repeats read differently, likewise over its repeats
//! ([`variation`]).

pub mod dimensions;
mod evaluate;
mod load;
pub mod remedies;
pub mod witness;

pub use dimensions::{Applies, Column, Coordinates, Coverage, Dimension, DimensionCoverage};
pub use evaluate::variation::{self, RepeatCount};
pub use evaluate::{
    ColumnVerdict, Evidence, Mark, PropertyVerdicts, ServerVerdicts, TrialCount, VARIES_UNKEPT, VerdictChange, changes,
    evaluate,
};
pub use remedies::{Proof, Proven, Remedy};
pub use witness::{Meaning, Taken, Witness, WitnessKind};

pub use crate::outcome::when::{KINDS, Scalar, When};
pub use load::{for_scenarios, json_schema, load_dir, load_file, shipped, shipped_cached, shipped_dir};

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How much a violation matters to a user of the column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// A lock can be held by nobody's code, or work can run unprotected.
    Unsafe,
    /// Not what a reader of the PostgreSQL documentation or the guide would
    /// expect, but no lock is lost or leaked by it.
    Surprising,
    /// Worth knowing; nothing to do.
    Informational,
}

impl Severity {
    /// `unsafe`, `surprising`, `informational`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Unsafe => "unsafe",
            Severity::Surprising => "surprising",
            Severity::Informational => "informational",
        }
    }
}

/// Whom a property judges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The column: the pool, pooler or library and its configuration.
    #[default]
    Column,
    /// The server: PostgreSQL behaves so through every column. Shown once
    /// per server version, as a server finding, never as a column verdict;
    /// `locklab verdict --require` does not fail a column for it.
    Server,
}

/// What one reading of a deciding observation says about the property.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Reads {
    /// The property holds.
    #[serde(rename = "holds")]
    Holds,
    /// The property is violated.
    #[serde(rename = "violated")]
    Violated,
    /// The reading cannot decide it (say why in `says`).
    #[serde(rename = "n/a")]
    NotApplicable,
}

/// One reading rule: which readings, and what they say.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadingRule {
    /// Which readings.
    pub when: When,
    /// What they say about the property.
    pub reads: Reads,
    /// The fact in words, for the column's card (default: the reading).
    pub says: Option<String>,
    /// Advice for a column with this reading, after the property's.
    pub advice: Option<String>,
}

/// One deciding observation: a scenario's cells (every parameter set of a
/// file, or one) and a record of them, or the cells' status. A decider the
/// property file writes as `witness: KIND` is one per witness of that kind
/// in the scenarios the property was loaded with ([`witness::of_scenario`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decider {
    /// A scenario file's name (every parameter set) or one run's name (`NAME[k=v]`).
    pub scenario: String,
    /// A `record:` of it (or `invariant NAME`); `None`: the cell's status.
    pub record: Option<String>,
    /// The reading rules, first match wins.
    pub readings: Vec<ReadingRule>,
    /// For a decider selected by witness: what the step meant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub witness: Option<Meaning>,
    /// Where each of its scenario instances stands in the dimensions
    /// (instance name → coordinates), read from the scenarios at load.
    #[serde(skip)]
    pub coordinates: std::collections::BTreeMap<String, Coordinates>,
}

impl Decider {
    /// Whether a cell of scenario `name` (`family[params]`) is one of this decider's.
    pub fn covers(&self, name: &str) -> bool {
        name == self.scenario || name.split('[').next() == Some(self.scenario.as_str())
    }
}

/// A declared property, validated (and as `matrix.json`'s `properties[]`
/// keeps it, so that the report says what its verdicts judged).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Property {
    /// Its id: the file's name without `.yaml`.
    pub id: String,
    /// The rule in one sentence.
    pub rule: String,
    /// Where it comes from: a section of the guide, of the PostgreSQL
    /// documentation, or the scenario that found it.
    pub source: String,
    /// How much a violation matters.
    pub severity: Severity,
    /// Whom it judges.
    pub scope: Scope,
    /// What a user whose column violates it should do, in words (the
    /// finding's; a card shows the first proven [`Remedy`]).
    pub advice: String,
    /// What a violation means for a pooler's author, where it differs from
    /// [`Property::advice`] (`locklab pooler-check` prints it, else the advice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_poolers: Option<String>,
    /// Ways out of a violation, each with what proves it in a report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remedies: Vec<Remedy>,
    /// How it treats each dimension that can break it (every dimension, for
    /// an unsafe property).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dimensions: Vec<(Dimension, Applies)>,
    /// The witness kinds it selects (`decided_by: - witness: KIND`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub witnesses: Vec<WitnessKind>,
    /// The deciding observations.
    pub decided_by: Vec<Decider>,
    /// The file, relative to the workspace when inside it.
    pub file: PathBuf,
}
