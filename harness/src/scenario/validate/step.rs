//! The rules every step follows: exactly one kind, its deadline, its
//! actor, the fields that go with a kind, and the typed [`Step`] it
//! becomes. What one kind alone checks is in its file (`scenario/steps/`),
//! reached through [`KindOf`]; what a step refers to is in `refs.rs`.

use std::collections::HashMap;

use serde_saphyr::Spanned;

use super::Validator;
use super::walk::{Conn, Walk};
use crate::scenario::raw::{Process, Via};
use crate::scenario::steps::{Checking, ClientBound, Declaration, KindOf, Placement, RawStep, Side, Step};
use crate::scenario::{Actor, Pos};

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
                .find(|s| s.kind.declaration().placement == Placement::OwnCluster)
            {
                self.err(
                    r.pos,
                    format!(
                        "with 'trials', each trial must end as it began: a '{}' leaves every connection broken",
                        r.kind.declaration().word
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
        let declared = kind.declared(&s);
        let deadline_ms = self.step_deadline(n, &s, declared, walk.step_deadline);
        let client_timeout_ms = self.field_combinations(n, pos, &s, kind, declared, deadline_ms);
        let actor = self.resolve_actor(walk, n, pos, &s, declared)?;
        self.placement(walk, n, pos, declared);
        // (`granted` asks for a fault before it, not counting itself.)
        let faulted_before = walk.faulted;
        walk.faulted |= declared.fault;
        let bound = client_timeout_ms.map(|ms| ClientBound {
            ms,
            on_timeout: s.on_timeout.unwrap_or_default(),
        });
        let mut checking = Checking {
            v: self,
            walk,
            n,
            pos,
            index,
            actor,
            bound,
            faulted_before,
        };
        let mut typed = kind.check(&s, &mut checking)?;
        // (An `await` step's actor is the awaited step's, which its kind found.)
        let actor = typed.actor().unwrap_or(actor);
        self.connection_rules(walk, n, pos, declared, actor);
        self.uses(walk, n, pos, index, &s, declared, actor, client_timeout_ms);
        if let Some(e) = s.expect
            && let Some(e) = self.expect(n, e, declared, s.background, &walk.saved)
        {
            typed.take_expect(e);
        }
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
            kind: typed,
        })
    }

    /// The step's one kind, from its kind keys ([`KindOf::of`]); `None`
    /// (the error recorded) unless it has exactly one.
    fn one_kind(&mut self, n: usize, pos: Pos, s: &RawStep) -> Option<KindOf> {
        match KindOf::of(s) {
            Ok(kind) => Some(kind),
            Err(count) => {
                self.err(
                    pos,
                    format!(
                        "step {n} must have exactly one of {} (found {count})",
                        KindOf::keys_message()
                    ),
                );
                None
            }
        }
    }

    /// The step's deadline in ms (an `await` or `order` step has the
    /// background step's and may not set its own).
    fn step_deadline(&mut self, n: usize, s: &RawStep, declared: Declaration, default: u64) -> u64 {
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

    /// Fields that belong to one kind only (each kind's own: [`KindOf::strays`]);
    /// returns the valid `client_timeout_ms`.
    fn field_combinations(
        &mut self,
        n: usize,
        pos: Pos,
        s: &RawStep,
        kind: KindOf,
        declared: Declaration,
        deadline_ms: u64,
    ) -> Option<u64> {
        if s.key.is_some() && !declared.key {
            self.err(
                pos,
                format!(
                    "step {n}: 'key' only applies to {} steps",
                    KindOf::words_where(|d| d.key)
                ),
            );
        }
        kind.strays(s, self, n, pos);
        let client_timeout_ms = s.client_timeout_ms.as_ref().and_then(|c| {
            let cpos = Pos::of(&c.referenced);
            if s.background || !declared.bounded {
                self.err(
                    cpos,
                    format!("step {n}: 'client_timeout_ms' applies to foreground 'sql', transaction, 'checkout', 'return', 'lock_guard' and the lock crate's 'library' steps"),
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

    /// The step's actor, named by `actor` (for `await`, which takes the
    /// awaited step's, and `order`, which has none: 0, until its kind says).
    fn resolve_actor(&mut self, walk: &Walk, n: usize, pos: Pos, s: &RawStep, declared: Declaration) -> Option<usize> {
        if matches!(declared.side, Side::Awaited | Side::Nobody) {
            if s.actor.is_some() {
                let why = match declared.side {
                    Side::Awaited => format!("an '{}' step takes the actor of the awaited step", declared.word),
                    _ => format!("an '{}' step has no actor", declared.word),
                };
                self.err(pos, format!("step {n}: {why}; remove 'actor'"));
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

    /// A step that runs on a cluster of the cell's own cannot share a
    /// scenario with `network: namespace` actors.
    fn placement(&mut self, walk: &Walk, n: usize, pos: Pos, declared: Declaration) {
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
    }
}
