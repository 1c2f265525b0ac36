//! A scenario run many times within one cell (`trials:`): what varies per
//! trial (`random:`) and what must hold in each (`invariants:`).

use super::Pos;

/// `trials`, `random` and `invariants` of a scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Trials {
    /// How many times the steps run in the cell (2–10000; the runner may run
    /// fewer: [`crate::runner::set_max_trials`]).
    pub count: u32,
    /// Values drawn per trial, uniformly from `[min, max]` (ms), as `${name}`.
    pub random: Vec<RandomValue>,
    /// Checked on every trial.
    pub invariants: Vec<Invariant>,
    /// Every reading a trial may record, per `record` name (`outcomes:`).
    pub outcomes: Vec<(String, Vec<Possible>)>,
}

/// One possible reading of a race scenario's recorded step (`outcomes:`).
#[derive(Clone, Debug, PartialEq)]
pub enum Possible {
    /// The first column of the first row.
    Value(super::Scalar),
    /// An error with this SQLSTATE (five characters); `None`: without one.
    Error(Option<String>),
    /// The call was given up at its `client_timeout_ms`.
    Dropped,
    /// A snapshot with (`true`) or without (`false`) a granted lock.
    Held(bool),
    /// A snapshot whose holders are all this actor, in this state if given.
    HeldBy {
        /// The actor (`server connection` behind transaction pooling).
        actor: String,
        /// `pg_stat_activity.state`, if it matters.
        state: Option<String>,
    },
}

impl std::fmt::Display for Possible {
    /// As the file writes it: `value: true`, `error: 57014`, `held_by: waiter (idle)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Possible::Value(v) => write!(f, "value: {v}"),
            Possible::Error(Some(code)) => write!(f, "error: {code}"),
            Possible::Error(None) => f.write_str("error: none"),
            Possible::Dropped => f.write_str("dropped"),
            Possible::Held(h) => write!(f, "held: {h}"),
            Possible::HeldBy { actor, state: None } => write!(f, "held_by: {actor}"),
            Possible::HeldBy { actor, state: Some(s) } => write!(f, "held_by: {actor} ({s})"),
        }
    }
}

/// One `random:` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct RandomValue {
    /// The `${name}` it fills.
    pub name: String,
    /// Lower bound, ms.
    pub min: f64,
    /// Upper bound, ms (≥ `min`).
    pub max: f64,
}

/// One invariant over a trial's recorded observations.
#[derive(Clone, Debug, PartialEq)]
pub struct Invariant {
    /// Its name (the report row is `invariant NAME`).
    pub name: String,
    /// Where it is in the file.
    pub pos: Pos,
    /// The `record` name of the `observe` step whose snapshot it reads.
    pub observe: String,
    /// Only trials in which the observation recorded under this name is an error.
    pub if_error: Option<String>,
    /// Only trials in which the observation recorded under `.0` is not the
    /// text `.1` (an error, or another value).
    pub unless_value: Option<(String, String)>,
    /// What the snapshot must show.
    pub check: InvariantCheck,
    /// A violation is the finding: reported, the cell does not fail.
    pub finding: bool,
}

impl Invariant {
    /// What it checks, for the report's row: `checked on every trial: no
    /// advisory lock held by 'waiter' in snapshot 'after' (trials where
    /// 'lock' failed); a violation is the finding`.
    pub fn describe(&self) -> String {
        let check = match &self.check {
            InvariantCheck::NotHeldBy(actor) => format!("no advisory lock held by '{actor}'"),
            InvariantCheck::MaxHolders(n) => format!("at most {n} holder(s)"),
        };
        let mut t = format!("checked on every trial: {check} in snapshot '{}'", self.observe);
        if let Some(e) = &self.if_error {
            t.push_str(&format!(" (trials where '{e}' failed)"));
        }
        if let Some((r, v)) = &self.unless_value {
            t.push_str(&format!(" (trials where '{r}' is not '{v}')"));
        }
        if self.finding {
            t.push_str("; a violation is the finding");
        }
        t
    }
}

/// What an invariant's snapshot must show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InvariantCheck {
    /// No advisory lock held by this actor (by name, as the snapshot names holders).
    NotHeldBy(String),
    /// At most this many holders.
    MaxHolders(u32),
}

/// The name of an invariant's report row: `invariant NAME`.
pub fn row_name(invariant: &str) -> String {
    format!("invariant {invariant}")
}
