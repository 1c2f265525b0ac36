//! What a run measured: the data every later stage (repeat folding, the
//! baseline, the report writers) reads. The runner produces these values; the
//! report turns them into text and HTML.

use serde::{Deserialize, Serialize};

pub mod cell;
mod column;
mod reading;
pub mod shares;
pub mod trials;
mod value;
pub mod when;

pub use column::DriverColumn;
pub use reading::{Counted, LeftLock, LocksLeft, Reading, Seen};
pub use value::{
    Cancel, Checkout, GuardEnded, LockHolder, LockSnapshot, Return, StatementError, Value, Verdict, Wait, WaitEvent,
};

use crate::observe::LockRow;

/// The status of one cell, in precedence order (most severe last): serialised
/// as `pass`, `deviates`, `n/a`, `varies` and `fail` (files written before
/// the variation rule say `unstable` for `varies`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
pub enum Status {
    /// Every step and expectation held.
    #[serde(rename = "pass")]
    Pass,
    /// Behind transaction pooling, an expectation did not hold: the measured
    /// behaviour, not a failure.
    #[serde(rename = "deviates")]
    Deviates,
    /// The configuration cannot run the scenario as written.
    #[serde(rename = "n/a")]
    NotApplicable,
    /// Its repeats read differently (a pooler's hand-out order, a race):
    /// not a failure. What it says is judged over every repeat by the
    /// variation rule (docs/src/faults-and-races.md, "The variation rule";
    /// the report keeps each variant).
    #[serde(rename = "varies", alias = "unstable")]
    Varies,
    /// The cell could not run, an `expect:` was not met outside a declared
    /// deviation, a step met an error its scenario did not allow, a deadline
    /// passed, or the clean-up failed.
    #[serde(rename = "fail")]
    Fail,
}

impl Status {
    /// The status of one cell: fail, varies (its repeats read differently),
    /// n/a (skipped), deviates (behind a pooler that breaks session
    /// assumptions), pass, in that precedence. The one place it is decided.
    pub(crate) fn of(varied: bool, failed: bool, skipped: bool, deviated: bool) -> Status {
        if failed {
            Status::Fail
        } else if varied {
            Status::Varies
        } else if skipped {
            Status::NotApplicable
        } else if deviated {
            Status::Deviates
        } else {
            Status::Pass
        }
    }

    /// The status of several runs shown as one (a scenario file's parameter
    /// sets in one column), with how many runs have it:
    /// fail if any run is; else varies if any run does; n/a only if every
    /// run is; else deviates if any run does; else pass (count 0). `None`
    /// for no runs.
    pub(crate) fn of_family(statuses: &[Status]) -> Option<(Status, usize)> {
        let count = |want: &[Status]| statuses.iter().filter(|s| want.contains(s)).count();
        let n = statuses.len();
        Some(if n == 0 {
            return None;
        } else if count(&[Status::Fail]) > 0 {
            (Status::Fail, count(&[Status::Fail]))
        } else if count(&[Status::Varies]) > 0 {
            (Status::Varies, count(&[Status::Varies]))
        } else if count(&[Status::NotApplicable]) == n {
            (Status::NotApplicable, n)
        } else if count(&[Status::Deviates]) > 0 {
            (Status::Deviates, count(&[Status::Deviates]))
        } else {
            (Status::Pass, 0)
        })
    }

    /// Whether a run with it passed (deviates, n/a and varies included).
    pub fn passed(self) -> bool {
        self != Status::Fail
    }

    /// The serialised form: `pass`, `deviates`, `n/a`, `varies` or `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Deviates => "deviates",
            Status::NotApplicable => "n/a",
            Status::Varies => "varies",
            Status::Fail => "fail",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A phase of a cell's life, in run order (docs/src/architecture.md, "How a run works"):
/// what [`RunResult::phases_ms`] times. Serialised as its snake-case name
/// (`create_database`, …, `drop_database`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// `create database` (or a database an earlier cell left clean), with
    /// the scenario's server settings.
    CreateDatabase,
    /// The pool, the monitor connection, `setup`.
    Open,
    /// The direct actors' connections.
    Actors,
    /// The steps (or the trials).
    Steps,
    /// The Verify step and the end of leftovers.
    Verify,
    /// Connections, background steps, the pool closed.
    Close,
    /// `teardown`.
    Teardown,
    /// The pooler told to close its server connections, then the leak guard.
    LeakGuard,
    /// `drop database` (or the database kept for a later cell).
    DropDatabase,
}

impl Phase {
    /// Every phase, in run order.
    pub const ALL: [Phase; 9] = [
        Phase::CreateDatabase,
        Phase::Open,
        Phase::Actors,
        Phase::Steps,
        Phase::Verify,
        Phase::Close,
        Phase::Teardown,
        Phase::LeakGuard,
        Phase::DropDatabase,
    ];

    /// Its serialised name (`create_database`).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::CreateDatabase => "create_database",
            Phase::Open => "open",
            Phase::Actors => "actors",
            Phase::Steps => "steps",
            Phase::Verify => "verify",
            Phase::Close => "close",
            Phase::Teardown => "teardown",
            Phase::LeakGuard => "leak_guard",
            Phase::DropDatabase => "drop_database",
        }
    }
}

/// One recorded observation: a row of the matrix, for one driver column.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Observation {
    /// The `record:` name.
    pub name: String,
    /// 1-based step number that recorded it.
    pub step: usize,
    /// What was measured, typed (serialised as `{"kind", "value"}`; see
    /// [`Value`]); in a race cell, the first trial's.
    pub value: Value,
    /// SQLSTATE when the step failed on the server (as expected).
    pub sqlstate: Option<String>,
    /// Wall time of the step, in ms, measured around the driver call.
    pub elapsed_ms: Option<f64>,
    /// For an `await` step: the part of `elapsed_ms` spent at the `await` (from
    /// the step's start until the result was in, 0 when it already was), in ms:
    /// e.g. how long a waiter still waited once the step before it released the lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<f64>,
    /// Server notices of the step (`SEVERITY: message`): a direct actor's,
    /// and a pool actor's where the column's library passes them on
    /// ([`NoticesRead`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// Whose notices `notices` are, and whether they are part of the reading.
    #[serde(default, skip_serializing_if = "NoticesRead::is_compared")]
    pub notices_read: NoticesRead,
    /// Spread of `elapsed_ms` over the cell's repeats (`--repeat`), in ms; set
    /// by [`crate::matrix::run_all`], `None` for observations without a timing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_stats: Option<Stats>,
    /// Spread of `waited_ms` over the cell's repeats, in ms (`await` steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_stats: Option<Stats>,
    /// In a cell with `trials`: each [`Reading`] recorded over the trials and
    /// in how many (in [`Reading`]'s order). What the observation compares as
    /// is then the readings seen in at least [`trials::SEEN_SHARE`] of them
    /// ([`Observation::seen`], [`trials`]); `elapsed_stats` is over the trials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<Vec<Counted>>,
    /// The step said `time_varies: true`: its time is shown, but the
    /// baseline keeps no p50 of it and `check` does not compare it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub time_varies: bool,
}

/// How a recorded step's notices were read. A direct actor's notices are
/// read alike on every column (the harness's own connection), so its
/// reading carries the first one's severity. A pool actor's go through the
/// column's client library: shown and checked by `notices:` expectations,
/// but left out of the reading, which would otherwise differ between
/// columns by whether their libraries pass notices on (one meaning per
/// step). Where a library does not pass them on, a pool actor's step has
/// none ([`locklab_drivers::Notices`], and a scenario that expects them is
/// `n/a` on that column with the reason).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticesRead {
    /// A direct actor's: in the reading (`true + WARNING`).
    #[default]
    Compared,
    /// A pool actor's step that drew notices: shown, not compared.
    Shown,
}

impl NoticesRead {
    /// A direct actor's (the default, not serialised).
    pub fn is_compared(&self) -> bool {
        *self == NoticesRead::Compared
    }
}

/// min / p50 / p95 / max of one timing over a cell's repeats, in ms
/// (percentiles by nearest rank: p50 of 20 samples is the 10th smallest).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Stats {
    /// Number of samples (repeats that produced this timing).
    pub n: usize,
    /// Smallest sample, ms.
    pub min: f64,
    /// Median (nearest rank), ms.
    pub p50: f64,
    /// 95th percentile (nearest rank), ms.
    pub p95: f64,
    /// Largest sample, ms.
    pub max: f64,
}

impl Stats {
    /// The statistics of `samples` (ms); `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Stats> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Some(Stats {
            n: v.len(),
            min: v[0],
            p50: rank(0.5),
            p95: rank(0.95),
            max: v[v.len() - 1],
        })
    }
}

/// How a step went.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepReport {
    /// 1-based step number.
    pub step: usize,
    /// Human label.
    pub label: String,
    /// Wall time in ms (for background steps: from start to completion).
    pub elapsed_ms: f64,
    /// `ok`, `skipped (pooled only)`, or the failure.
    pub outcome: String,
}

/// The result of one scenario × driver run. `matrix.json` keeps `steps`
/// for failed runs only; one read back without them has none.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult {
    /// Server column group ([`crate::server::Server::id`], e.g. `pg17`).
    pub server: String,
    /// Scenario name.
    pub scenario: String,
    /// Driver id.
    pub driver: String,
    /// `None` when every step and expectation passed, else what failed (naming
    /// scenario, driver, step, actor and file position).
    pub failure: Option<String>,
    /// Recorded observations in step order.
    pub observations: Vec<Observation>,
    /// Every step.
    #[serde(default)]
    pub steps: Vec<StepReport>,
    /// Advisory locks held in the run's database (granted rows of `pg_locks`):
    /// for a passed run, after the last step once every pool actor has returned
    /// its connection (a closed one: once its backend has exited) with the pool
    /// still open; for a failed run, when it failed.
    pub locks_left: Vec<LockRow>,
    /// Backends the harness ended after the run because they still held or
    /// waited for an advisory lock in the run's database (a ghost lock, a
    /// leak), so that nothing carries over into the next run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cleaned_backends: Vec<i32>,
    /// The leak guard: what was still in the run's database once the run was
    /// over (its pool closed, its connections dropped, PgBouncer told to close
    /// its server connections to it): backends as `pid N (application_name,
    /// state)` and advisory locks as `lock KEY (pid N)`, after waiting up to
    /// 5 s for them to go. The harness ends them before the next run, and
    /// a leak fails the cell; empty when nothing was left.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends_left: Vec<String>,
    /// For a configuration behind transaction pooling: the expectation that
    /// did not hold (the run stops there, as a failure would), recorded as
    /// the measured behaviour rather than a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deviation: Option<String>,
    /// Its scenario's readings vary from run to run by nature (the
    /// scenario's `readings_vary:`): the cell compares with the baseline by
    /// status alone (and its verdicts by the variation rule).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub readings_vary: bool,
    /// For a cell with `trials`: how many ran, the distribution of their
    /// outcomes and each invariant's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trials: Option<trials::TrialsSummary>,
    /// Where the cell ran when not on the column's server: fault cells with a
    /// `network: namespace` actor run on a local cluster of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran_on: Option<String>,
    /// Why the run was not made (e.g. a configuration that cannot carry the
    /// scenario's connection settings); its observations are `n/a`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Wall time of the whole run in ms, database creation and drop included.
    pub elapsed_ms: f64,
    /// Where that time went, ms per phase in the order they ran:
    /// `create_database` (with the scenario's server settings), `open` (the
    /// pool, the monitor connection, `setup`), `actors` (the direct actors'
    /// connections), `steps` (or the trials), `verify` (the Verify step and
    /// the end of leftovers), `close` (connections, background steps, the
    /// pool), `teardown`, `leak_guard` (PgBouncer told to close, then the
    /// guard), `drop_database`. A phase a run did not reach is missing. With
    /// repeats, the first run's.
    #[serde(default, skip_serializing_if = "indexmap::IndexMap::is_empty")]
    pub phases_ms: indexmap::IndexMap<Phase, f64>,
    /// How many times the cell ran (`--repeat`, 1 by default). With more than
    /// one, the fields above are the first run's, or the first failing run's
    /// if any failed, and the timings' spread is in `*_stats`.
    pub repeats: usize,
    /// Spread of `elapsed_ms` over the repeats, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_stats: Option<Stats>,
    /// What differed between the repeats' [`Outcome`]s, one line per item
    /// (`` `held`: true ×19, false ×1 ``); empty when every repeat agreed.
    /// A cell whose repeats read differently [`Status::Varies`]: that is a
    /// reading, never a failure (files written before the variation rule
    /// call it `unstable`).
    #[serde(default, skip_serializing_if = "Vec::is_empty", alias = "unstable")]
    pub varied: Vec<String>,
    /// When the repeats read differently: each distinct way they read, with
    /// how many repeats read so, in the order first seen. What the
    /// properties judge over (a property is violated when any variant
    /// violates it: [`crate::properties`]) and what the baseline keeps as
    /// the cell's set of readings. Empty when every repeat agreed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<Variant>,
}

/// One way a varying cell's repeats read ([`RunResult::variants`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Variant {
    /// In how many repeats the cell read so (≥ 1).
    pub repeats: usize,
    /// What those repeats read.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Observation {
    /// The observation `name` of step `step` (1-based): its SQLSTATE comes
    /// from `value`; `notices` are `SEVERITY: message`; `elapsed` and
    /// `waited` in ms.
    pub fn new(
        name: &str,
        step: usize,
        value: Value,
        notices: Vec<String>,
        elapsed_ms: Option<f64>,
        waited_ms: Option<f64>,
    ) -> Observation {
        Observation {
            name: name.to_owned(),
            step,
            sqlstate: value.sqlstate().map(str::to_owned),
            value,
            elapsed_ms,
            waited_ms,
            notices,
            notices_read: NoticesRead::Compared,
            elapsed_stats: None,
            waited_stats: None,
            distribution: None,
            time_varies: false,
        }
    }

    /// Its [`Reading`]: the value as compared, with its first notice's
    /// severity when the notices are compared ([`NoticesRead::Compared`]).
    pub fn reading(&self) -> Reading {
        Reading::of(&self.value, self.compared_notices())
    }

    /// The notices that are part of its reading: a direct actor's.
    pub fn compared_notices(&self) -> &[String] {
        match self.notices_read {
            NoticesRead::Compared => &self.notices,
            NoticesRead::Shown => &[],
        }
    }

    /// What it compares as: its reading, or in a race cell the readings seen
    /// in at least [`trials::SEEN_SHARE`] of the trials ([`trials::seen`]);
    /// the row of an invariant declared the finding compares by its shares
    /// alone, as its reading ([`Verdict::Finding`]).
    pub fn seen(&self) -> Seen {
        match &self.distribution {
            Some(d) if self.value != Value::Invariant(Verdict::Finding) => Seen::Seen(trials::seen(d)),
            _ => Seen::Value(self.reading()),
        }
    }

    /// What the report's cell shows: the value (`true + WARNING`); for a race
    /// cell's observation, each reading's share of the trials
    /// (`55P03 51% · true 49% (1000 trials)`).
    pub fn shown(&self) -> String {
        match &self.distribution {
            Some(d) => format!(
                "{} ({} trials)",
                trials::shares(d),
                d.iter().map(|c| c.trials).sum::<u64>()
            ),
            None => self.reading().to_string(),
        }
    }

    /// As [`Observation::shown`], in a column behind the pooler product
    /// `pooler` ([`Value::shown_through`]).
    pub fn shown_through(&self, pooler: Option<&str>) -> String {
        match (&self.distribution, &self.value) {
            (None, Value::SettingsCannotPass) => self.value.shown_through(pooler),
            _ => self.shown(),
        }
    }

    /// `201.2 ms, 3.1 at await`; `None` for observations without a timing.
    /// With several repeats: `p50 201.2 ms, 198.0–230.5` (min–max), and for
    /// an `await` step the p50 at the await.
    pub fn timing(&self) -> Option<String> {
        let ms = self.elapsed_ms?;
        if let Some(s) = self.elapsed_stats.filter(|s| s.n > 1) {
            if self.distribution.is_some() {
                return Some(format!(
                    "p50 {:.1} ms, {:.1}–{:.1} over the trials",
                    s.p50, s.min, s.max
                ));
            }
            return Some(match self.waited_stats {
                Some(w) => format!("p50 {:.1} ms, {:.1}–{:.1}; {:.1} at await", s.p50, s.min, s.max, w.p50),
                None => format!("p50 {:.1} ms, {:.1}–{:.1}", s.p50, s.min, s.max),
            });
        }
        Some(match self.waited_ms {
            Some(w) => format!("{ms:.1} ms, {w:.1} at await"),
            None => format!("{ms:.1} ms"),
        })
    }
}

/// What a run measured, without timings or backend pids: what repeats of a
/// cell must agree on and what the baseline (`reports/baseline/`) keeps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Outcome {
    /// `pass`, `deviates` (behind transaction pooling), `n/a`, `varies`
    /// (repeats read differently) or `fail`.
    pub status: Status,
    /// Each observation in step order.
    pub observations: Vec<Recorded>,
    /// The "locks left after run" cell: `none`, or keys with backend states.
    pub locks_left: LocksLeft,
    /// How many backends the harness had to end after the run.
    pub cleaned_backends: usize,
    /// How many backends or advisory locks the leak guard found once the run
    /// was over ([`RunResult::backends_left`]); 0 in files written before it existed.
    #[serde(default)]
    pub backends_left: usize,
}

/// One observation of an [`Outcome`]: what it compares as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Recorded {
    /// The `record:` name.
    pub name: String,
    /// Its reading (or a race row's often-seen readings).
    pub seen: Seen,
    /// SQLSTATE when the step failed on the server (a race row: `None`, each
    /// trial had its own).
    pub sqlstate: Option<String>,
}

impl RunResult {
    /// An empty result for one cell (server id, scenario name, driver id):
    /// passed so far, nothing observed or left, one repeat, 0 ms.
    pub fn new(server: &str, scenario: &str, driver: &str) -> RunResult {
        RunResult {
            server: server.to_owned(),
            scenario: scenario.to_owned(),
            driver: driver.to_owned(),
            failure: None,
            observations: Vec::new(),
            steps: Vec::new(),
            locks_left: Vec::new(),
            cleaned_backends: Vec::new(),
            backends_left: Vec::new(),
            deviation: None,
            readings_vary: false,
            skipped: None,
            ran_on: None,
            trials: None,
            elapsed_ms: 0.0,
            phases_ms: indexmap::IndexMap::new(),
            repeats: 1,
            elapsed_stats: None,
            varied: Vec::new(),
            variants: Vec::new(),
        }
    }

    /// Records `phase` as the time since `since` (ms) and returns now,
    /// the start of the next phase.
    pub fn phase(&mut self, phase: Phase, since: std::time::Instant) -> std::time::Instant {
        let now = std::time::Instant::now();
        self.phases_ms
            .insert(phase, (now.duration_since(since).as_secs_f64() * 1e6).round() / 1e3);
        now
    }

    /// Whether the run passed: nothing failed (a cell whose repeats read
    /// differently passed: [`Status::Varies`]).
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }

    /// Fail, varies, n/a, deviates or pass, in that precedence.
    pub fn status(&self) -> Status {
        Status::of(
            !self.varied.is_empty(),
            self.failure.is_some(),
            self.skipped.is_some(),
            self.deviation.is_some(),
        )
    }

    /// What this run measured, for comparing repeats and baselines.
    pub fn outcome(&self) -> Outcome {
        Outcome {
            status: self.status(),
            observations: self
                .observations
                .iter()
                .map(|o| Recorded {
                    name: o.name.clone(),
                    seen: o.seen(),
                    sqlstate: o.sqlstate.clone(),
                })
                .collect(),
            locks_left: LocksLeft::of(&self.locks_left),
            cleaned_backends: self.cleaned_backends.len(),
            backends_left: self.backends_left.len(),
        }
    }

    /// The observation named `name`.
    pub fn observation(&self, name: &str) -> Option<&Observation> {
        self.observations.iter().find(|o| o.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_serialise_as_before() {
        for (s, text) in [
            (Status::Pass, "pass"),
            (Status::Deviates, "deviates"),
            (Status::NotApplicable, "n/a"),
            (Status::Varies, "varies"),
            (Status::Fail, "fail"),
        ] {
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{text}\""));
            assert_eq!(s.to_string(), text);
        }
        // Files written before the variation rule.
        assert_eq!(serde_json::from_str::<Status>("\"unstable\"").unwrap(), Status::Varies);
    }

    /// A direct actor's notice is part of the reading; a pool actor's is
    /// kept and shown but not compared, and a file without `notices_read`
    /// reads as a direct actor's.
    #[test]
    fn only_a_direct_actors_notices_are_in_the_reading() {
        let warning = vec!["WARNING: you don't own a lock of type ExclusiveLock".to_owned()];
        let mut o = Observation::new("u", 2, Value::Bool(false), warning.clone(), Some(1.0), None);
        assert_eq!(o.reading().to_string(), "false + WARNING");
        let direct = serde_json::to_value(&o).unwrap();
        assert!(direct.get("notices_read").is_none(), "{direct}");
        o.notices_read = NoticesRead::Shown;
        assert_eq!(o.reading().to_string(), "false");
        assert_eq!(o.notices, warning);
        let shown = serde_json::to_value(&o).unwrap();
        assert_eq!(shown["notices_read"], "shown");
        let back: Observation = serde_json::from_value(shown).unwrap();
        assert_eq!(back.notices_read, NoticesRead::Shown);
        let old: Observation = serde_json::from_value(direct).unwrap();
        assert_eq!(old.notices_read, NoticesRead::Compared);
    }
}
