//! Validating one step: exactly one kind, its actor, the fields that go with
//! it, and the typed [`Step`] it becomes (what it refers to: `refs.rs`).

use std::collections::HashMap;

use serde_saphyr::Spanned;

use super::Validator;
use super::conn::Conn;
use crate::keys::AdvisoryKey;
use crate::scenario::raw::{Action, GuardEndRaw, Process, RawStep, Via};
use crate::scenario::step::{
    AwaitStep, ClientBound, Fault, ObserveStep, SqlStep, Step, StepKind, Transaction, TransactionStep,
};
use crate::scenario::{Actor, Pos, template};

/// Marks a background step in [`Walk::background`] as dropped by `do: abandon`
/// (it is never awaited and never completes).
pub(super) const ABANDONED: usize = usize::MAX;

/// What a step does, as the rules below see it (before it becomes a typed
/// [`StepKind`]).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Kind {
    Sql(String),
    Do(Action),
    Observe(Option<AdvisoryKey>),
    Blocked(Vec<usize>),
    Granted(usize),
    Restart(bool),
    Await(usize),
    Guard(i64, GuardEndRaw),
    Order(Vec<usize>),
}

/// What the validator knows while it walks the steps in order.
pub(super) struct Walk<'s> {
    /// The scenario's actors.
    pub(super) actors: &'s [Actor],
    /// Actor name → index.
    pub(super) index_of: HashMap<&'s str, usize>,
    /// Each actor's connection after the steps so far.
    pub(super) state: Vec<Conn>,
    /// Step id → step index.
    pub(super) ids: HashMap<String, usize>,
    /// Background step index → the step that awaited it (`None`: in flight,
    /// [`ABANDONED`]: abandoned).
    pub(super) background: HashMap<usize, Option<usize>>,
    /// Names saved by earlier steps.
    pub(super) saved: Vec<String>,
    /// Record names used so far, with where.
    pub(super) records: HashMap<String, Pos>,
    /// The scenario's default step deadline, ms.
    step_deadline: u64,
    /// Whether a fault step (crash, terminate, partition, restart) came before.
    faulted: bool,
    /// `partition` steps (indices) not healed since.
    partitioned: Vec<usize>,
    /// Where the pool under test lives (`pool.process`).
    pub(super) pool_process: Process,
    /// The step (1-based) that crashed the pool under test, if one did.
    pub(super) pool_crashed: Option<usize>,
}

impl Validator<'_> {
    /// Validates every step in order.
    pub(super) fn steps(
        &mut self,
        raw: Spanned<Vec<Spanned<RawStep>>>,
        actors: &[Actor],
        step_deadline: u64,
        preset: &[String],
        trials: bool,
        pool_process: Process,
    ) -> Vec<Step> {
        if raw.value.is_empty() {
            self.err(Pos::of(&raw.referenced), "a scenario needs at least one step");
        }
        let mut walk = Walk {
            actors,
            index_of: actors.iter().enumerate().map(|(i, a)| (a.name.as_str(), i)).collect(),
            state: actors
                .iter()
                .map(|a| if a.via == Via::Direct { Conn::Ready } else { Conn::None })
                .collect(),
            ids: HashMap::new(),
            background: HashMap::new(),
            saved: preset.to_vec(),
            records: HashMap::new(),
            step_deadline,
            faulted: false,
            partitioned: Vec::new(),
            pool_process,
            pool_crashed: None,
        };
        let mut steps = Vec::new();
        for (index, spanned) in raw.value.into_iter().enumerate() {
            let pos = Pos::of(&spanned.referenced);
            if let Some(step) = self.step(&mut walk, index, pos, spanned.value) {
                steps.push(step);
            }
        }
        let at_end = steps.last().map(|s| s.pos).unwrap_or_default();
        if trials {
            if let Some(p) = walk.partitioned.first() {
                let pos = steps.iter().find(|s| s.index == *p).map(|s| s.pos).unwrap_or(at_end);
                self.err(
                    pos,
                    "with 'trials', each trial must end as it began: this 'partition' is never healed (add a 'do: heal')",
                );
            }
            if let Some(c) = walk.pool_crashed
                && let Some(s) = steps.iter().find(|s| s.index + 1 == c)
            {
                self.err(
                    s.pos,
                    "with 'trials', each trial must end as it began: a 'crash' of the pool leaves no pool for the next trial",
                );
            }
            if let Some(r) = steps.iter().find(|s| matches!(s.kind, StepKind::Restart { .. })) {
                self.err(
                    r.pos,
                    "with 'trials', each trial must end as it began: a 'restart' leaves every connection broken",
                );
            }
        }
        for (i, st) in walk.state.iter().enumerate() {
            // With `trials`, the next trial starts where this one ends.
            if trials && actors[i].via == Via::Pool && *st == Conn::Ready {
                self.err(
                    at_end,
                    format!("with 'trials', each trial must end as it began: pool actor '{}' still has a connection after the last step (add a 'do: return')", actors[i].name),
                );
            }
            if trials && actors[i].via == Via::Direct && *st == Conn::None {
                self.err(
                    at_end,
                    format!("with 'trials', each trial must end as it began: direct actor '{}' has no connection after the last step", actors[i].name),
                );
            }
            if let Conn::Busy(b) = st {
                let pos = steps.iter().find(|s| s.index == *b).map(|s| s.pos).unwrap_or_default();
                self.err(
                    pos,
                    format!("background step of actor '{}' is never awaited", actors[i].name),
                );
            }
        }
        steps
    }

    /// One step; `None` when it is too broken to go on with (the error is recorded).
    fn step(&mut self, walk: &mut Walk, index: usize, pos: Pos, s: RawStep) -> Option<Step> {
        let n = index + 1;
        if walk.actors.is_empty() {
            // Already reported ("a scenario needs at least one actor").
            return None;
        }
        if !self.one_kind(n, pos, &s) {
            return None;
        }
        let deadline_ms = self.step_deadline(n, &s, walk.step_deadline);
        let client_timeout_ms = self.field_combinations(n, pos, &s, deadline_ms);
        let actor = self.resolve_actor(walk, n, pos, &s)?;
        let kind = self.kind(walk, n, pos, index, &s)?;
        self.connection_rules(walk, n, pos, &kind, actor);
        self.uses(walk, n, pos, index, &s, &kind, actor, client_timeout_ms);
        let direct = walk.actors[actor].via == Via::Direct;
        let expect = match s.expect {
            Some(e) => self.expect(n, e, &kind, s.background, direct, &walk.saved),
            None => None,
        };
        let bound = client_timeout_ms.map(|ms| ClientBound {
            ms,
            on_timeout: s.on_timeout.unwrap_or_default(),
        });
        let idle = self.idle_actors(walk, n, s.idle.as_ref());
        let kind = typed(
            kind,
            actor,
            s.background,
            (s.settle, idle),
            s.save.map(|v| v.value),
            s.when,
            bound,
            expect,
        );
        Some(Step {
            index,
            pos,
            id: s.id.map(|i| i.value),
            deadline_ms,
            record: s.record.map(|r| r.value),
            kind,
        })
    }

    /// Whether the step has exactly one kind key.
    fn one_kind(&mut self, n: usize, pos: Pos, s: &RawStep) -> bool {
        let kinds = [
            s.sql.is_some(),
            s.action.is_some(),
            s.observe.is_some(),
            s.blocked.is_some(),
            s.granted.is_some(),
            s.restart.is_some(),
            s.await_step.is_some(),
            s.order.is_some(),
            s.lock_guard.is_some(),
        ];
        let count = kinds.iter().filter(|k| **k).count();
        if count != 1 {
            self.err(
                pos,
                format!(
                    "step {n} must have exactly one of 'sql', 'do', 'observe', 'blocked', 'granted', 'restart', 'await', 'order', 'lock_guard' (found {count})"
                ),
            );
        }
        count == 1
    }

    /// The step's deadline in ms (an `await` or `order` step has the
    /// background step's and may not set its own).
    fn step_deadline(&mut self, n: usize, s: &RawStep, default: u64) -> u64 {
        match &s.deadline_ms {
            Some(d) if s.await_step.is_some() || s.order.is_some() => {
                self.err(
                    Pos::of(&d.referenced),
                    format!(
                        "step {n}: an '{}' step runs within the background step's deadline; set 'deadline_ms' there",
                        if s.order.is_some() { "order" } else { "await" }
                    ),
                );
                default
            }
            Some(d) => self.deadline(d),
            None => default,
        }
    }

    /// Fields that belong to one kind only; returns the valid `client_timeout_ms`.
    fn field_combinations(&mut self, n: usize, pos: Pos, s: &RawStep, deadline_ms: u64) -> Option<u64> {
        if s.key.is_some() && s.observe.is_none() {
            self.err(pos, format!("step {n}: 'key' only applies to 'observe' steps"));
        }
        if s.settle && s.observe.is_none() {
            self.err(pos, format!("step {n}: 'settle' only applies to 'observe' steps"));
        }
        if s.idle.is_some() && s.observe.is_none() {
            self.err(pos, format!("step {n}: 'idle' only applies to 'observe' steps"));
        }
        if s.end.is_some() != s.lock_guard.is_some() {
            self.err(pos, format!("step {n}: 'lock_guard' and 'end' go together"));
        }
        let client_timeout_ms = s.client_timeout_ms.as_ref().and_then(|c| {
            let cpos = Pos::of(&c.referenced);
            let takes = !s.background
                && (s.sql.is_some()
                    || s.lock_guard.is_some()
                    || matches!(
                        s.action,
                        Some(Action::Checkout | Action::Return | Action::Begin | Action::Commit | Action::Rollback)
                    ));
            if !takes {
                self.err(
                    cpos,
                    format!("step {n}: 'client_timeout_ms' applies to foreground 'sql', transaction, 'checkout', 'return' and 'lock_guard' steps"),
                );
            }
            match u64::try_from(c.value) {
                Ok(v) if (1..deadline_ms).contains(&v) => Some(v),
                _ => {
                    self.err(
                        cpos,
                        format!(
                            "step {n}: 'client_timeout_ms' must be between 1 and the step's deadline ({deadline_ms} ms) minus 1, got {}",
                            c.value
                        ),
                    );
                    None
                }
            }
        });
        if s.on_timeout.is_some() && (s.client_timeout_ms.is_none() || s.sql.is_none()) {
            self.err(
                pos,
                format!("step {n}: 'on_timeout' goes with 'client_timeout_ms' on an 'sql' step"),
            );
        }
        client_timeout_ms
    }

    /// The step's actor: named by `actor`, or for `await` the awaited step's
    /// (for `order`, 0 and unused).
    fn resolve_actor(&mut self, walk: &Walk, n: usize, pos: Pos, s: &RawStep) -> Option<usize> {
        if let Some(aw) = &s.await_step {
            if s.actor.is_some() {
                self.err(
                    pos,
                    format!("step {n}: an 'await' step takes the actor of the awaited step; remove 'actor'"),
                );
            }
            let Some(&target) = walk.ids.get(&aw.value) else {
                self.err(
                    Pos::of(&aw.referenced),
                    format!("step {n} awaits '{}', which is not the id of an earlier step", aw.value),
                );
                return None;
            };
            let Some(a) = walk.state.iter().position(|c| *c == Conn::Busy(target)) else {
                let why = match walk.background.get(&target) {
                    None => "not a background step",
                    Some(Some(ABANDONED)) => "abandoned by an earlier step",
                    Some(Some(_)) => "already awaited",
                    Some(None) => "not in flight",
                };
                self.err(
                    Pos::of(&aw.referenced),
                    format!("step {n} awaits '{}', which is {why}", aw.value),
                );
                return None;
            };
            return Some(a);
        }
        if s.order.is_some() {
            if s.actor.is_some() {
                self.err(pos, format!("step {n}: an 'order' step has no actor; remove 'actor'"));
            }
            return Some(0);
        }
        let Some(a) = &s.actor else {
            self.err(pos, format!("step {n} has no 'actor'"));
            return None;
        };
        let found = walk.index_of.get(a.value.as_str()).copied();
        if found.is_none() {
            let known: Vec<&str> = walk.actors.iter().map(|a| a.name.as_str()).collect();
            self.err(
                Pos::of(&a.referenced),
                format!(
                    "step {n}: unknown actor '{}'; actors are: {}",
                    a.value,
                    known.join(", ")
                ),
            );
        }
        found
    }

    /// What the step does; `None` when its kind's own fields are unusable.
    fn kind(&mut self, walk: &mut Walk, n: usize, pos: Pos, index: usize, s: &RawStep) -> Option<Kind> {
        if let Some(sql) = &s.sql {
            if sql.trim().is_empty() {
                self.err(pos, format!("step {n}: 'sql' is empty"));
            }
            for var in template::names(sql) {
                if !walk.saved.contains(&var) {
                    self.err(
                        pos,
                        format!("step {n}: '${{{var}}}' is neither a parameter nor saved by an earlier step"),
                    );
                }
            }
            return Some(Kind::Sql(sql.clone()));
        }
        if let Some(a) = s.action {
            match a {
                Action::Crash | Action::Terminate | Action::Partition => walk.faulted = true,
                _ => {}
            }
            if a == Action::Partition {
                walk.partitioned.push(index);
            }
            if a == Action::Heal {
                walk.partitioned.clear();
            }
            return Some(Kind::Do(a));
        }
        if let Some(k) = &s.lock_guard {
            return Some(Kind::Guard(k.value, s.end.unwrap_or(GuardEndRaw::ReleaseNow)));
        }
        if s.observe.is_some() {
            return Some(Kind::Observe(s.key));
        }
        if let Some(b) = &s.blocked {
            return self.blocked(walk, n, b).map(Kind::Blocked);
        }
        if let Some(mode) = s.restart {
            if walk
                .actors
                .iter()
                .any(|a| a.network == crate::scenario::Network::Namespace)
            {
                self.err(
                    pos,
                    format!("step {n}: 'restart' runs on a cluster of the cell's own, 'network: namespace' actors on the fault cells' shared server: a scenario cannot have both"),
                );
            }
            walk.faulted = true;
            return Some(Kind::Restart(mode == crate::scenario::raw::RestartMode::Immediate));
        }
        if let Some(g) = &s.granted {
            let gpos = Pos::of(&g.referenced);
            let name = &g.value;
            if !walk.faulted {
                self.err(
                    gpos,
                    format!("step {n}: 'granted' times the lock's release from a fault; put a 'do: crash', 'terminate' or 'partition' (or a 'restart') before it"),
                );
            }
            return match walk.index_of.get(name.as_str()) {
                Some(&t) if matches!(walk.state[t], Conn::Busy(_)) => Some(Kind::Granted(t)),
                Some(_) => {
                    self.err(
                        gpos,
                        format!(
                            "step {n}: 'granted: {name}' needs a background step of '{name}' in flight (its lock call)"
                        ),
                    );
                    None
                }
                None => {
                    self.err(gpos, format!("step {n}: unknown actor '{name}' in 'granted'"));
                    None
                }
            };
        }
        if let Some(o) = &s.order {
            return Some(Kind::Order(self.order(walk, n, o)));
        }
        let aw = s.await_step.as_ref()?;
        let target = walk.ids[&aw.value];
        walk.background.insert(target, Some(index));
        Some(Kind::Await(target))
    }
}

/// The typed step kind of a step that passed validation.
#[allow(clippy::too_many_arguments)]
fn typed(
    kind: Kind,
    actor: usize,
    background: bool,
    (settle, idle): (bool, Vec<usize>),
    save: Option<String>,
    when: Option<crate::scenario::When>,
    bound: Option<ClientBound>,
    expect: Option<super::expect::Expect>,
) -> StepKind {
    let sql_expect = expect.clone().map(|e| e.sql);
    let transaction = |action| {
        StepKind::Transaction(TransactionStep {
            actor,
            action,
            expect: sql_expect.clone(),
            // (`on_timeout` goes with `sql` steps only: always `drop` here)
            bound,
        })
    };
    match kind {
        Kind::Sql(sql) if background => StepKind::Background { actor, sql },
        Kind::Sql(sql) => StepKind::Sql(SqlStep {
            actor,
            sql,
            expect: sql_expect,
            save,
            when,
            bound,
        }),
        Kind::Do(Action::Begin) => transaction(Transaction::Begin),
        Kind::Do(Action::Commit) => transaction(Transaction::Commit),
        Kind::Do(Action::Rollback) => transaction(Transaction::Rollback),
        Kind::Do(Action::Checkout) => StepKind::Checkout {
            actor,
            client_timeout_ms: bound.map(|b| b.ms),
        },
        Kind::Do(Action::Return) => StepKind::Return {
            actor,
            client_timeout_ms: bound.map(|b| b.ms),
        },
        Kind::Do(Action::Disconnect) => StepKind::Disconnect { actor },
        Kind::Do(Action::Abandon) => StepKind::Abandon { actor },
        Kind::Do(Action::Crash) => StepKind::Fault {
            actor,
            fault: Fault::Crash,
        },
        Kind::Do(Action::Terminate) => StepKind::Fault {
            actor,
            fault: Fault::Terminate,
        },
        Kind::Do(Action::Partition) => StepKind::Fault {
            actor,
            fault: Fault::Partition,
        },
        Kind::Do(Action::Heal) => StepKind::Fault {
            actor,
            fault: Fault::Heal,
        },
        Kind::Restart(immediate) => StepKind::Restart {
            observer: actor,
            immediate,
        },
        Kind::Granted(target) => StepKind::Granted {
            observer: actor,
            target,
        },
        Kind::Observe(key) => StepKind::Observe(ObserveStep {
            observer: actor,
            key,
            settle,
            idle,
            expect: expect.map(|e| e.observe),
            when,
        }),
        Kind::Blocked(targets) => StepKind::Blocked {
            observer: actor,
            targets,
        },
        Kind::Await(target) => StepKind::Await(AwaitStep {
            actor,
            target,
            expect: sql_expect,
        }),
        Kind::Guard(key, end) => StepKind::Guard {
            actor,
            key,
            end,
            client_timeout_ms: bound.map(|b| b.ms),
        },
        Kind::Order(steps) => StepKind::Order { steps },
    }
}
