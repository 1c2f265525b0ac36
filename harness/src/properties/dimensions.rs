//! Dimensions: the ways of running a case that can break a property (pool
//! size, which connection a later checkout gets, how a lock call is given
//! up, the pooler's mode), where each deciding cell stands in them
//! ([`Coordinates`], read from its scenario and its column), and what a
//! column's verdict was tried across ([`Coverage`]).
//!
//! An unsafe property declares every dimension: it applies, or why it does
//! not. A column whose cells hold the property but leave a value of a
//! dimension that applies to it untried reads "holds where tried"
//! ([`super::Mark::HoldsWhereTried`]), never ✓.

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::scenario::{
    AbandonStep, BackgroundStep, CheckoutStep, GuardStep, OnTimeout, ReturnStep, Scenario, SqlStep, StepKind, Via,
};

/// A dimension that can break a property.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    /// The pool's maximum size: 1, or 2 and more (another connection exists).
    PoolSize,
    /// Which connection a later checkout gets: the one given back, or another.
    HandBack,
    /// How the client gives up on a waiting lock call: a server-side timeout,
    /// a dropped future, a cancel request, a dropped connection object.
    GiveUp,
    /// How the column reaches the server: directly, through a session-mode
    /// or a transaction-mode pooler.
    PoolerMode,
}

impl Dimension {
    /// Every dimension, in the order the report states them.
    pub const ALL: &'static [Dimension] = &[
        Dimension::PoolSize,
        Dimension::HandBack,
        Dimension::GiveUp,
        Dimension::PoolerMode,
    ];

    /// `pool_size`, … as property files name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::PoolSize => "pool_size",
            Dimension::HandBack => "hand_back",
            Dimension::GiveUp => "give_up",
            Dimension::PoolerMode => "pooler_mode",
        }
    }

    /// The values a column must be tried in for this dimension, given the
    /// column; empty when the dimension does not apply to the column (a
    /// column without a pool has no pool size and hands nothing back).
    fn required(self, column: &Column) -> Vec<&'static str> {
        match self {
            Dimension::PoolSize if column.pooled => vec![POOL_1, POOL_2],
            Dimension::HandBack if column.pooled => vec![SAME, OTHER],
            Dimension::PoolSize | Dimension::HandBack => Vec::new(),
            Dimension::GiveUp => vec![SERVER_TIMEOUT, DROPPED_FUTURE, CANCEL_REQUEST, DROPPED_CONNECTION],
            Dimension::PoolerMode => vec![column.mode()],
        }
    }
}

const POOL_1: &str = "pool size 1";
const POOL_2: &str = "pool size ≥ 2";
pub(super) const SAME: &str = "same connection";
pub(super) const OTHER: &str = "other connection";
const EITHER: &str = "either connection (the pool's order decides)";
const SERVER_TIMEOUT: &str = "server-side timeout";
const DROPPED_FUTURE: &str = "dropped future";
const CANCEL_REQUEST: &str = "cancel request";
const DROPPED_CONNECTION: &str = "dropped connection object";

/// What a column is, as far as the dimensions go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// The column id.
    pub id: String,
    /// Whether it has a pool (or a pooler) between the code and the server;
    /// `false` for a column that opens a connection per checkout.
    pub pooled: bool,
    /// The pooler's mode (`session`, `transaction`), `None` without a pooler.
    pub pooler: Option<String>,
    /// Whether it is a column of the lock crate (`pg-advisory-lock+…`),
    /// which runs the crate's scenarios only.
    pub lock_crate: bool,
}

impl Column {
    /// A column known only by its id (a baseline without column facts):
    /// taken as pooled, without a pooler.
    pub fn unknown(id: &str) -> Column {
        Column {
            id: id.to_owned(),
            pooled: true,
            pooler: None,
            lock_crate: false,
        }
    }

    /// The column of a driver.
    pub fn of_driver(info: &locklab_drivers::DriverInfo) -> Column {
        Column {
            id: info.id.to_owned(),
            pooled: info.kind != locklab_drivers::DriverKind::Direct,
            pooler: info.pooler_mode().map(|m| m.as_str().to_owned()),
            lock_crate: info.crate_name == locklab_drivers::libraries::LOCK_CRATE,
        }
    }

    /// The column of a report.
    pub fn of(d: &crate::outcome::DriverColumn) -> Column {
        Column {
            id: d.id.clone(),
            pooled: d.kind != "direct",
            pooler: d.pooler.clone(),
            lock_crate: d.crate_name == locklab_drivers::libraries::LOCK_CRATE,
        }
    }

    fn mode(&self) -> &'static str {
        match self.pooler.as_deref() {
            Some("transaction") => "transaction pooling",
            Some(_) => "session pooling",
            None => "no pooler",
        }
    }
}

/// How a property treats one dimension (`applies`, or `does not apply: WHY`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Applies {
    /// The dimension can break the property: the deciding cells must cover it.
    Applies,
    /// It cannot, and why.
    DoesNotApply(String),
}

/// Where one deciding cell stands, read from its scenario.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coordinates {
    /// The pool's maximum size, when the scenario has a pool actor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_size: Option<u32>,
    /// What later checkouts before the reading got, as the scenario sets
    /// them up (a pool that makes connections when asked): `same
    /// connection` (a given-back connection is the only idle one),
    /// `other connection` (the actor's given-back connection is checked out
    /// by another actor, or none is idle), `either …` (several idle: the
    /// pool's order decides).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hand_back: Vec<String>,
    /// How a lock call was given up before the reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub give_up: Option<String>,
    /// The recorded backend comparisons before the reading (`select
    /// pg_backend_pid() = ${saved}`), each with whether its actor is the one
    /// that saved the pid (and gave that connection back): what the pool
    /// really handed out, read by [`Coordinates::measured`] in place of the
    /// model's guess.
    #[serde(skip)]
    pub compared: Vec<(String, bool)>,
    /// Whether the scenario is one of the lock crate's (a `library:
    /// pg-advisory-lock…` step): it runs on the crate's columns only, and
    /// the others' scenarios not there.
    #[serde(skip)]
    pub lock_crate: bool,
}

impl Coordinates {
    /// Whether it says nothing (a scenario without a pool or a give-up).
    pub fn is_empty(&self) -> bool {
        *self == Coordinates::default()
    }

    /// The coordinates of the reading of `record` (the whole scenario for
    /// `None`: a cell's status) in scenario `s`.
    pub fn of(s: &Scenario, record: Option<&str>) -> Coordinates {
        let at = record.and_then(|r| s.steps.iter().position(|st| st.record.as_deref() == Some(r)));
        let end = at.map_or(s.steps.len(), |i| i + 1);
        let steps = &s.steps[..end];
        let pooled = s.actors.iter().any(|a| a.via == Via::Pool);
        // A pool actor's own reading: its own later checkouts are what count.
        let actor = at
            .and_then(|i| step_actor(&s.steps[i].kind))
            .filter(|a| s.actors.get(*a).is_some_and(|a| a.via == Via::Pool));
        Coordinates {
            pool_size: pooled.then_some(s.pool_max_size),
            hand_back: if pooled { hand_backs(s, end, actor) } else { Vec::new() },
            give_up: give_up(s, steps),
            compared: if pooled { comparisons(steps, actor) } else { Vec::new() },
            lock_crate: s.uses_lock_crate(),
        }
    }

    /// These coordinates with the hand-back the cell measured, where it
    /// recorded a backend comparison: `true` is the given-back connection
    /// handed out again (same), `false` by the actor that gave it back is
    /// another connection (other). Without one, the model's guess stays.
    pub fn measured(mut self, cell: &crate::outcome::cell::BaselineCell) -> Coordinates {
        let mut seen = BTreeSet::new();
        for (record, own) in &self.compared {
            let Some(o) = cell.observations.get(record) else {
                continue;
            };
            if let crate::outcome::Seen::Value(r) = &o.seen
                && let crate::outcome::Value::Bool(same) = r.value
            {
                match (same, own) {
                    (true, _) => seen.insert(SAME),
                    (false, true) => seen.insert(OTHER),
                    (false, false) => false,
                };
            }
        }
        if !seen.is_empty() || self.compared.iter().any(|(r, _)| cell.observations.contains_key(r)) {
            self.hand_back = seen.into_iter().map(str::to_owned).collect();
        }
        self
    }

    /// The values this cell stands at in `d` for `column`.
    fn values(&self, d: Dimension, column: &Column) -> Vec<&'static str> {
        match d {
            Dimension::PoolSize => match self.pool_size {
                Some(1) => vec![POOL_1],
                Some(_) => vec![POOL_2],
                None => Vec::new(),
            },
            Dimension::HandBack => self
                .hand_back
                .iter()
                .filter_map(|h| [SAME, OTHER, EITHER].into_iter().find(|v| v == h))
                .collect(),
            Dimension::GiveUp => self
                .give_up
                .iter()
                .filter_map(|g| {
                    [SERVER_TIMEOUT, DROPPED_FUTURE, CANCEL_REQUEST, DROPPED_CONNECTION]
                        .into_iter()
                        .find(|v| v == g)
                })
                .collect(),
            Dimension::PoolerMode => vec![column.mode()],
        }
    }
}

/// A symbolic pool: which connection each checkout gets, when the pool makes
/// a connection only when none is idle (a pool that keeps connections made
/// in advance may differ: a recorded backend comparison then says what it
/// did, [`Coordinates::measured`]). With `actor`, only that actor's later
/// checkouts count.
fn hand_backs(s: &Scenario, end: usize, actor: Option<usize>) -> Vec<String> {
    let mut idle: Vec<usize> = Vec::new();
    let mut holding: HashMap<usize, usize> = HashMap::new();
    let mut had: HashMap<usize, usize> = HashMap::new();
    let mut made = 0;
    let mut out = BTreeSet::new();
    for step in &s.steps[..end] {
        match &step.kind {
            StepKind::Checkout(CheckoutStep { actor: a, .. }) => {
                let previous = had.get(a).copied();
                let got = match idle.len() {
                    // The pool is full: this checkout would wait; a scenario
                    // does not do that, and the model does not follow it.
                    0 if holding.len() >= s.pool_max_size as usize => continue,
                    0 => {
                        made += 1;
                        made
                    }
                    1 => idle.remove(0),
                    _ => {
                        if actor.is_none_or(|x| x == *a) {
                            out.insert(EITHER);
                        }
                        idle.remove(idle.len() - 1)
                    }
                };
                holding.insert(*a, got);
                if actor.is_some_and(|x| x != *a) {
                    continue;
                }
                match previous {
                    Some(p) if p == got => {
                        out.insert(SAME);
                    }
                    Some(_) => {
                        out.insert(OTHER);
                    }
                    // Another actor's given-back connection, handed on.
                    None if had.values().any(|v| *v == got) => {
                        out.insert(SAME);
                    }
                    None => {}
                }
            }
            // A dropped connection object goes back to the pool too.
            StepKind::Return(ReturnStep { actor: a, .. }) | StepKind::Abandon(AbandonStep { actor: a }) => {
                if let Some(c) = holding.remove(a) {
                    idle.push(c);
                    had.insert(*a, c);
                }
            }
            _ => {}
        }
    }
    out.into_iter().map(str::to_owned).collect()
}

fn step_actor(kind: &StepKind) -> Option<usize> {
    match kind {
        StepKind::Sql(SqlStep { actor, .. })
        | StepKind::Background(BackgroundStep { actor, .. })
        | StepKind::Checkout(CheckoutStep { actor, .. })
        | StepKind::Return(ReturnStep { actor, .. }) => Some(*actor),
        StepKind::Observe(o) => Some(o.observer),
        _ => None,
    }
}

fn backend_comparison() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        Regex::new(r"(?i)^\s*select\s+pg_backend_pid\(\)\s*=\s*\$\{(\w+)\}\s*;?\s*$").expect("a valid regex")
    })
}

/// The recorded `select pg_backend_pid() = ${saved}` steps in `steps` (of
/// `actor` alone, when given), each with whether its actor saved that pid.
fn comparisons(steps: &[crate::scenario::Step], actor: Option<usize>) -> Vec<(String, bool)> {
    let mut saved_by: HashMap<&str, usize> = HashMap::new();
    let mut out = Vec::new();
    for step in steps {
        let StepKind::Sql(SqlStep {
            actor: a, sql, save, ..
        }) = &step.kind
        else {
            continue;
        };
        if let Some(var) = save {
            saved_by.insert(var.as_str(), *a);
        }
        if let (Some(record), Some(c)) = (&step.record, backend_comparison().captures(sql))
            && actor.is_none_or(|x| x == *a)
            && let Some(by) = saved_by.get(&c[1])
        {
            out.push((record.clone(), by == a));
        }
    }
    out
}

fn server_timeout() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        Regex::new(r"(?i)\b(?:lock_timeout|statement_timeout)\s*(?:=|to)\s*'?([0-9]+)").expect("a valid regex")
    })
}

/// A blocking lock call (not a try-lock: it cannot wait, so nothing is
/// given up).
fn lock_call() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| Regex::new(r"(?i)\bpg_advisory_(?:xact_)?lock(?:_shared)?\s*\(").expect("a valid regex"))
}

/// Whether a setting's value (`200ms`, `'0'`, `2s`) is a bound other than 0.
fn nonzero(value: &str) -> bool {
    let digits: String = value
        .trim_matches(|c: char| c == '\'' || c.is_whitespace())
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse::<u64>().is_ok_and(|n| n > 0)
}

/// How a lock call was given up in `steps`: a client-side bound (dropped
/// future or cancel request), a dropped connection object (`do: abandon`), a
/// guard acquire given up, or a server-side timeout (`lock_timeout`,
/// `statement_timeout`) in the pool's or the server's settings or set by the
/// calling actor before the call.
fn give_up(s: &Scenario, steps: &[crate::scenario::Step]) -> Option<String> {
    let everywhere = s
        .pool_settings
        .list
        .iter()
        .chain(&s.server_settings.list)
        .any(|(name, value)| matches!(name.as_str(), "lock_timeout" | "statement_timeout") && nonzero(value));
    let mut set_by: HashMap<usize, bool> = HashMap::new();
    for step in steps {
        match &step.kind {
            StepKind::Sql(SqlStep { actor, sql, bound, .. }) => {
                if let Some(c) = server_timeout().captures(sql) {
                    set_by.insert(*actor, &c[1] != "0");
                }
                if !lock_call().is_match(sql) {
                    continue;
                }
                if everywhere || set_by.get(actor).copied().unwrap_or(false) {
                    return Some(SERVER_TIMEOUT.to_owned());
                }
                match bound.map(|b| b.on_timeout) {
                    Some(OnTimeout::Drop) => return Some(DROPPED_FUTURE.to_owned()),
                    Some(OnTimeout::Cancel) => return Some(CANCEL_REQUEST.to_owned()),
                    None => {}
                }
            }
            StepKind::Guard(GuardStep {
                client_timeout_ms: Some(_),
                ..
            }) => return Some(DROPPED_FUTURE.to_owned()),
            StepKind::Abandon(AbandonStep { .. }) => return Some(DROPPED_CONNECTION.to_owned()),
            // The lock crate's acquire: its future dropped, a
            // statement_timeout of the pool's, or, in a race, its own bound
            // (a lock_timeout).
            StepKind::Library(l) if l.library.is_lock_crate() => {
                if l.client_timeout_ms.is_some() {
                    return Some(DROPPED_FUTURE.to_owned());
                }
                let bounded = matches!(
                    l.call,
                    locklab_drivers::libraries::LibraryCall::Acquire {
                        timeout_ms: Some(_),
                        ..
                    }
                );
                if bounded && (everywhere || s.trials.is_some()) {
                    return Some(SERVER_TIMEOUT.to_owned());
                }
            }
            _ => {}
        }
    }
    None
}

/// What one dimension of a column's verdict was tried across.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DimensionCoverage {
    /// The dimension (`pool_size`, …).
    pub dimension: Dimension,
    /// Values a deciding cell decided in (holds or violated).
    pub tried: Vec<String>,
    /// Values that apply to the column and no deciding cell decided in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub untried: Vec<String>,
    /// Values whose cells all read n/a in this column (the column does not
    /// support them, e.g. no cancel request).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_applicable: Vec<String>,
}

/// What a column's verdict was tried across: one entry per dimension the
/// property declares as applying and the column has values in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    /// Per dimension.
    pub dimensions: Vec<DimensionCoverage>,
}

impl Coverage {
    /// Whether a value that applies was left untried.
    pub fn has_untried(&self) -> bool {
        self.dimensions.iter().any(|d| !d.untried.is_empty())
    }

    /// "pool size 1, pool size ≥ 2; same connection, other connection;
    /// no pooler" — what was tried, one group per dimension.
    pub fn tried_text(&self) -> String {
        self.text(|d| &d.tried)
    }

    /// "pool size ≥ 2; other connection" — what was not tried.
    pub fn untried_text(&self) -> String {
        self.text(|d| &d.untried)
    }

    fn text(&self, values: impl Fn(&DimensionCoverage) -> &Vec<String>) -> String {
        self.dimensions
            .iter()
            .map(values)
            .filter(|v| !v.is_empty())
            .map(|v| v.join(", "))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The coverage of `column` by `decided` (the coordinates of cells that
    /// held or violated) and `not_decided` (of cells that read n/a), for the
    /// dimensions that apply.
    pub fn of(
        applies: &[(Dimension, Applies)],
        column: &Column,
        decided: &[&Coordinates],
        not_decided: &[&Coordinates],
    ) -> Coverage {
        let mut dimensions = Vec::new();
        for (d, a) in applies {
            if *a != Applies::Applies {
                continue;
            }
            let required = d.required(column);
            if required.is_empty() {
                continue;
            }
            let tried: BTreeSet<&str> = decided.iter().flat_map(|c| c.values(*d, column)).collect();
            let seen_na: BTreeSet<&str> = not_decided.iter().flat_map(|c| c.values(*d, column)).collect();
            let mut cov = DimensionCoverage {
                dimension: *d,
                tried: tried.iter().map(|v| (*v).to_owned()).collect(),
                untried: Vec::new(),
                not_applicable: Vec::new(),
            };
            for v in required {
                if tried.contains(v) {
                    continue;
                }
                if seen_na.contains(v) {
                    cov.not_applicable.push(v.to_owned());
                } else {
                    cov.untried.push(v.to_owned());
                }
            }
            dimensions.push(cov);
        }
        Coverage { dimensions }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(name: &str, record: &str) -> Coordinates {
        let all = crate::scenario::load_dir(&crate::server::workspace_root().join("scenarios")).unwrap();
        let s = all.iter().find(|s| s.name == name).unwrap();
        Coordinates::of(s, Some(record))
    }

    #[test]
    fn the_pool_model_tells_the_same_connection_from_another() {
        let c = at("session-lock-pool-return", "held_after_next_checkout");
        assert_eq!((c.pool_size, c.hand_back.clone()), (Some(1), vec![SAME.to_owned()]));
        // Before any later checkout, nothing was handed back yet.
        assert!(at("session-lock-pool-return", "held_after_return").hand_back.is_empty());
        // Another request gets the given-back connection; the worker another.
        let c = at("session-lock-pool-return-other", "held_after_next_checkout");
        assert_eq!(c.pool_size, Some(2));
        assert_eq!(c.hand_back, vec![OTHER.to_owned(), SAME.to_owned()]);
    }

    #[test]
    fn each_way_of_giving_up_is_read_from_the_steps() {
        let give_up = |name: &str, record: &str| at(name, record).give_up;
        assert_eq!(
            give_up("cancel-timeout-session-lock[on_timeout=drop]", "lock_call").as_deref(),
            Some(DROPPED_FUTURE)
        );
        assert_eq!(
            give_up("cancel-timeout-session-lock[on_timeout=cancel]", "lock_call").as_deref(),
            Some(CANCEL_REQUEST)
        );
        assert_eq!(
            give_up("cancel-timeout-xact-lock[bound=lock_timeout]", "after_holder_released").as_deref(),
            Some(SERVER_TIMEOUT)
        );
        assert_eq!(
            give_up(
                "cancel-drop-connection-mid-call[in=autocommit]",
                "after_holder_released"
            )
            .as_deref(),
            Some(DROPPED_CONNECTION)
        );
        assert_eq!(give_up("session-lock-pool-return", "held_after_return"), None);
    }
}
