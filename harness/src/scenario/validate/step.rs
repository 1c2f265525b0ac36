//! Validating one step: exactly one kind, its actor, the fields that go with
//! it, and the typed [`Step`] it becomes (what it refers to: `refs.rs`).

use std::collections::HashMap;

use serde_saphyr::Spanned;

use super::Validator;
use super::walk::{ABANDONED, Conn, Walk};
use crate::keys::AdvisoryKey;
use crate::scenario::kind::{Kind, Placement, Side};
use crate::scenario::raw::{Action, GuardEndRaw, ObserveDetail, Process, RawStep, Via};
use crate::scenario::step::{
    AwaitStep, ClientBound, Fault, HeldCountStep, ObserveStep, SqlStep, Step, StepKind, Transaction, TransactionStep,
};
use crate::scenario::{Actor, Pos, template};

/// What a step does with what it refers to, as the rules below see it
/// (before it becomes a typed [`StepKind`]); its [`Kind`] says the rest.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Parsed {
    Sql(String),
    Do(Action),
    Observe(Option<AdvisoryKey>),
    HeldCount(AdvisoryKey, bool),
    Blocked(Vec<usize>, bool),
    Granted(usize),
    Restart(bool),
    Await(usize),
    Guard(i64, GuardEndRaw),
    Library(
        locklab_drivers::libraries::Library,
        locklab_drivers::libraries::LibraryCall,
    ),
    Order(Vec<usize>),
}

impl Parsed {
    /// Its kind, whose declaration the rules read.
    pub(super) fn kind(&self) -> Kind {
        match self {
            Parsed::Sql(_) => Kind::Sql,
            Parsed::Do(a) => Kind::Do(*a),
            Parsed::Observe(_) => Kind::Observe,
            Parsed::HeldCount(..) => Kind::HeldCount,
            Parsed::Blocked(..) => Kind::Blocked,
            Parsed::Granted(_) => Kind::Granted,
            Parsed::Restart(_) => Kind::Restart,
            Parsed::Await(_) => Kind::Await,
            Parsed::Guard(..) => Kind::Guard,
            Parsed::Library(..) => Kind::Library,
            Parsed::Order(_) => Kind::Order,
        }
    }
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
            if let Some(r) = steps
                .iter()
                .find(|s| s.kind.kind().declaration().placement == Placement::OwnCluster)
            {
                self.err(
                    r.pos,
                    format!(
                        "with 'trials', each trial must end as it began: a '{}' leaves every connection broken",
                        r.kind.kind().declaration().word
                    ),
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
        let kind = self.one_kind(n, pos, &s)?;
        let deadline_ms = self.step_deadline(n, &s, kind, walk.step_deadline);
        let client_timeout_ms = self.field_combinations(n, pos, &s, kind, deadline_ms);
        let actor = self.resolve_actor(walk, n, pos, &s, kind)?;
        let parsed = self.parse(walk, n, pos, index, &s, kind)?;
        debug_assert_eq!(parsed.kind(), kind, "step {n}: parsed as another kind than its key");
        self.connection_rules(walk, n, pos, kind, actor);
        self.uses(walk, n, pos, index, &s, kind, actor, client_timeout_ms);
        let expect = match s.expect {
            Some(e) => self.expect(n, e, kind, s.background, &walk.saved),
            None => None,
        };
        let bound = client_timeout_ms.map(|ms| ClientBound {
            ms,
            on_timeout: s.on_timeout.unwrap_or_default(),
        });
        let idle = self.idle_actors(walk, n, s.idle.as_ref());
        let mut detail = s.detail.clone().unwrap_or_default();
        detail.sort_unstable();
        detail.dedup();
        if kind == Kind::HeldCount && s.record.is_none() {
            self.err(
                pos,
                format!("step {n}: 'held_count' is a reading; name it with 'record'"),
            );
        }
        let kind = typed(
            parsed,
            actor,
            s.background,
            (s.settle, idle, detail),
            s.save.map(|v| v.value),
            s.when,
            bound,
            expect,
        );
        if s.time_varies && s.record.is_none() {
            self.err(
                pos,
                format!("step {n}: 'time_varies' needs 'record' (it says the recorded time is not compared)"),
            );
        }
        Some(Step {
            index,
            pos,
            id: s.id.map(|i| i.value),
            deadline_ms,
            record: s.record.map(|r| r.value),
            time_varies: s.time_varies,
            kind,
        })
    }

    /// The step's one kind, from its kind keys; `None` (the error
    /// recorded) unless it has exactly one. Every field of [`RawStep`] is
    /// named here: a new one does not compile until it is said whether it
    /// makes a kind.
    fn one_kind(&mut self, n: usize, pos: Pos, s: &RawStep) -> Option<Kind> {
        let RawStep {
            sql,
            action,
            observe,
            held_count,
            blocked,
            granted,
            restart,
            await_step,
            order,
            lock_guard,
            library,
            // The fields that go with a kind, or with any.
            detail: _,
            shared: _,
            call: _,
            migrate: _,
            actor: _,
            id: _,
            key: _,
            end: _,
            background: _,
            client_timeout_ms: _,
            on_timeout: _,
            settle: _,
            or_finished: _,
            idle: _,
            deadline_ms: _,
            expect: _,
            record: _,
            time_varies: _,
            save: _,
            when: _,
        } = s;
        let kinds = [
            sql.as_ref().map(|_| Kind::Sql),
            action.map(Kind::Do),
            observe.as_ref().map(|_| Kind::Observe),
            held_count.as_ref().map(|_| Kind::HeldCount),
            blocked.as_ref().map(|_| Kind::Blocked),
            granted.as_ref().map(|_| Kind::Granted),
            restart.map(|_| Kind::Restart),
            await_step.as_ref().map(|_| Kind::Await),
            order.as_ref().map(|_| Kind::Order),
            lock_guard.as_ref().map(|_| Kind::Guard),
            library.as_ref().map(|_| Kind::Library),
        ];
        let mut found = kinds.into_iter().flatten();
        let (first, count) = (found.next(), 1 + found.count());
        match first {
            Some(kind) if count == 1 => Some(kind),
            _ => {
                let count = if first.is_some() { count } else { 0 };
                self.err(
                    pos,
                    format!(
                        "step {n} must have exactly one of 'sql', 'do', 'observe', 'held_count', 'blocked', 'granted', 'restart', 'await', 'order', 'lock_guard', 'library' (found {count})"
                    ),
                );
                None
            }
        }
    }

    /// The step's deadline in ms (an `await` or `order` step has the
    /// background step's and may not set its own).
    fn step_deadline(&mut self, n: usize, s: &RawStep, kind: Kind, default: u64) -> u64 {
        let declared = kind.declaration();
        match &s.deadline_ms {
            Some(d) if !declared.own_deadline => {
                self.err(
                    Pos::of(&d.referenced),
                    format!(
                        "step {n}: an '{}' step runs within the background step's deadline; set 'deadline_ms' there",
                        declared.word
                    ),
                );
                default
            }
            Some(d) => self.deadline(d),
            None => default,
        }
    }

    /// Fields that belong to one kind only; returns the valid `client_timeout_ms`.
    fn field_combinations(&mut self, n: usize, pos: Pos, s: &RawStep, kind: Kind, deadline_ms: u64) -> Option<u64> {
        let declared = kind.declaration();
        // The fields of one kind's own.
        let observe = kind == Kind::Observe;
        if s.key.is_some() && !observe && kind != Kind::Library {
            self.err(
                pos,
                format!("step {n}: 'key' only applies to 'observe' and 'library' steps"),
            );
        }
        if (s.call.is_some() || s.migrate.is_some()) && kind != Kind::Library {
            self.err(
                pos,
                format!("step {n}: 'call' and 'migrate' only apply to 'library' steps"),
            );
        }
        if s.detail.is_some() && !observe {
            self.err(pos, format!("step {n}: 'detail' only applies to 'observe' steps"));
        }
        if s.shared && kind != Kind::HeldCount {
            self.err(pos, format!("step {n}: 'shared' only applies to 'held_count' steps"));
        }
        if s.settle && !observe {
            self.err(pos, format!("step {n}: 'settle' only applies to 'observe' steps"));
        }
        if s.idle.is_some() && !observe {
            self.err(pos, format!("step {n}: 'idle' only applies to 'observe' steps"));
        }
        if s.or_finished && kind != Kind::Blocked {
            self.err(pos, format!("step {n}: 'or_finished' only applies to 'blocked' steps"));
        }
        if s.end.is_some() != (kind == Kind::Guard) {
            self.err(pos, format!("step {n}: 'lock_guard' and 'end' go together"));
        }
        let client_timeout_ms = s.client_timeout_ms.as_ref().and_then(|c| {
            let cpos = Pos::of(&c.referenced);
            if s.background || !declared.bounded {
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
        if s.on_timeout.is_some() && (s.client_timeout_ms.is_none() || !declared.on_timeout) {
            self.err(
                pos,
                format!("step {n}: 'on_timeout' goes with 'client_timeout_ms' on an 'sql' step"),
            );
        }
        client_timeout_ms
    }

    /// The step's actor: named by `actor`, or for `await` the awaited step's
    /// (for `order`, 0 and unused).
    fn resolve_actor(&mut self, walk: &Walk, n: usize, pos: Pos, s: &RawStep, kind: Kind) -> Option<usize> {
        let side = kind.declaration().side;
        if side == Side::Awaited
            && let Some(aw) = &s.await_step
        {
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
        if side == Side::Nobody {
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

    /// What the step of kind `kind` does, with what it refers to; `None`
    /// when its kind's own fields are unusable.
    fn parse(&mut self, walk: &mut Walk, n: usize, pos: Pos, index: usize, s: &RawStep, kind: Kind) -> Option<Parsed> {
        let declared = kind.declaration();
        if declared.placement == Placement::OwnCluster
            && walk
                .actors
                .iter()
                .any(|a| a.network == crate::scenario::Network::Namespace)
        {
            self.err(
                pos,
                format!("step {n}: '{}' runs on a cluster of the cell's own, 'network: namespace' actors on the fault cells' shared server: a scenario cannot have both", declared.word),
            );
        }
        // (`granted` asks for a fault before it, not counting itself.)
        let faulted_before = walk.faulted;
        walk.faulted |= declared.fault;
        Some(match kind {
            Kind::Sql => {
                let sql = s.sql.as_ref()?;
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
                Parsed::Sql(sql.clone())
            }
            Kind::Do(a) => {
                if a == Action::Partition {
                    walk.partitioned.push(index);
                }
                if a == Action::Heal {
                    walk.partitioned.clear();
                }
                Parsed::Do(a)
            }
            Kind::Guard => Parsed::Guard(s.lock_guard.as_ref()?.value, s.end.unwrap_or(GuardEndRaw::ReleaseNow)),
            Kind::Library => {
                let library = s.library?;
                // (The step's deadline: its own, or the scenario's.)
                let deadline_ms = s
                    .deadline_ms
                    .as_ref()
                    .and_then(|d| u64::try_from(d.value).ok())
                    .unwrap_or(walk.step_deadline);
                Parsed::Library(library, self.library_call(n, pos, s, library, deadline_ms)?)
            }
            Kind::Observe => Parsed::Observe(s.key),
            Kind::HeldCount => Parsed::HeldCount(s.held_count?, s.shared),
            Kind::Blocked => {
                let b = s.blocked.as_ref()?;
                let targets = self.blocked(walk, n, b)?;
                if targets.len() > 1 && (s.or_finished || s.record.is_some()) {
                    self.err(
                        Pos::of(&b.referenced),
                        format!(
                            "step {n}: a 'blocked' step with 'record' or 'or_finished' reads one actor's call; list one actor"
                        ),
                    );
                }
                Parsed::Blocked(targets, s.or_finished)
            }
            Kind::Restart => Parsed::Restart(s.restart? == crate::scenario::raw::RestartMode::Immediate),
            Kind::Granted => {
                let g = s.granted.as_ref()?;
                let gpos = Pos::of(&g.referenced);
                let name = &g.value;
                if !faulted_before {
                    self.err(
                        gpos,
                        format!("step {n}: 'granted' times the lock's release from a fault; put a 'do: crash', 'terminate' or 'partition' (or a 'restart') before it"),
                    );
                }
                match walk.index_of.get(name.as_str()) {
                    Some(&t) if matches!(walk.state[t], Conn::Busy(_)) => Parsed::Granted(t),
                    Some(_) => {
                        self.err(
                            gpos,
                            format!(
                                "step {n}: 'granted: {name}' needs a background step of '{name}' in flight (its lock call)"
                            ),
                        );
                        return None;
                    }
                    None => {
                        self.err(gpos, format!("step {n}: unknown actor '{name}' in 'granted'"));
                        return None;
                    }
                }
            }
            Kind::Order => Parsed::Order(self.order(walk, n, s.order.as_ref()?)),
            Kind::Await => {
                let aw = s.await_step.as_ref()?;
                let target = walk.ids[&aw.value];
                walk.background.insert(target, Some(index));
                Parsed::Await(target)
            }
        })
    }
}

/// The typed step kind of a step that passed validation.
#[allow(clippy::too_many_arguments)]
fn typed(
    kind: Parsed,
    actor: usize,
    background: bool,
    (settle, idle, detail): (bool, Vec<usize>, Vec<ObserveDetail>),
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
        Parsed::Sql(sql) if background => StepKind::Background { actor, sql },
        Parsed::Sql(sql) => StepKind::Sql(SqlStep {
            actor,
            sql,
            expect: sql_expect,
            save,
            when,
            bound,
        }),
        Parsed::Do(Action::Begin) => transaction(Transaction::Begin),
        Parsed::Do(Action::Commit) => transaction(Transaction::Commit),
        Parsed::Do(Action::Rollback) => transaction(Transaction::Rollback),
        Parsed::Do(Action::Checkout) => StepKind::Checkout {
            actor,
            client_timeout_ms: bound.map(|b| b.ms),
        },
        Parsed::Do(Action::Return) => StepKind::Return {
            actor,
            client_timeout_ms: bound.map(|b| b.ms),
        },
        Parsed::Do(Action::Disconnect) => StepKind::Disconnect { actor },
        Parsed::Do(Action::Abandon) => StepKind::Abandon { actor },
        Parsed::Do(Action::Crash) => StepKind::Fault {
            actor,
            fault: Fault::Crash,
        },
        Parsed::Do(Action::Terminate) => StepKind::Fault {
            actor,
            fault: Fault::Terminate,
        },
        Parsed::Do(Action::Partition) => StepKind::Fault {
            actor,
            fault: Fault::Partition,
        },
        Parsed::Do(Action::Heal) => StepKind::Fault {
            actor,
            fault: Fault::Heal,
        },
        Parsed::Restart(immediate) => StepKind::Restart {
            observer: actor,
            immediate,
        },
        Parsed::Granted(target) => StepKind::Granted {
            observer: actor,
            target,
        },
        Parsed::Observe(key) => StepKind::Observe(ObserveStep {
            observer: actor,
            key,
            settle,
            idle,
            detail,
            expect: expect.map(|e| e.observe),
            when,
        }),
        Parsed::HeldCount(key, shared) => StepKind::HeldCount(HeldCountStep { actor, key, shared }),
        Parsed::Blocked(targets, or_finished) => StepKind::Blocked {
            observer: actor,
            targets,
            or_finished,
        },
        Parsed::Await(target) => StepKind::Await(AwaitStep {
            actor,
            target,
            expect: sql_expect,
        }),
        Parsed::Guard(key, end) => StepKind::Guard {
            actor,
            key,
            end,
            client_timeout_ms: bound.map(|b| b.ms),
        },
        Parsed::Library(library, call) => {
            StepKind::Library(crate::scenario::step::LibraryStep { actor, library, call })
        }
        Parsed::Order(steps) => StepKind::Order { steps },
    }
}
