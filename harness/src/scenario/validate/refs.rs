//! The parts of a step that refer to other actors and steps: whom a
//! `blocked` or `idle` step waits for, an `order` over step ids, the `${name}`
//! values a step uses, and what it saves and records.

use serde_saphyr::Spanned;

use super::Validator;
use super::walk::{ABANDONED, Conn, Walk};
use crate::scenario::Pos;
use crate::scenario::kind::{Kind, Record, Side};
use crate::scenario::params::is_identifier;
use crate::scenario::raw::{RawStep, Via};

impl Validator<'_> {
    /// The actors a `blocked` step waits for: each with a background step in flight.
    pub(super) fn blocked(
        &mut self,
        walk: &Walk,
        n: usize,
        b: &Spanned<crate::scenario::raw::OneOrMany>,
    ) -> Option<Vec<usize>> {
        let bpos = Pos::of(&b.referenced);
        let names = b.value.clone().into_vec();
        if names.is_empty() {
            self.err(bpos, format!("step {n}: 'blocked' lists no actor"));
            return None;
        }
        let mut targets = Vec::new();
        for name in names {
            match walk.index_of.get(name.as_str()) {
                Some(&t) if matches!(walk.state[t], Conn::Busy(_)) => {
                    if targets.contains(&t) {
                        self.err(bpos, format!("step {n}: 'blocked' lists '{name}' twice"));
                    }
                    targets.push(t);
                }
                Some(_) => self.err(
                    bpos,
                    format!("step {n}: 'blocked: {name}' needs a background step of '{name}' in flight"),
                ),
                None => self.err(bpos, format!("step {n}: unknown actor '{name}' in 'blocked'")),
            }
        }
        Some(targets)
    }

    /// The actors an observe step's `idle` names (each once, each known).
    pub(super) fn idle_actors(
        &mut self,
        walk: &Walk,
        n: usize,
        idle: Option<&Spanned<crate::scenario::raw::OneOrMany>>,
    ) -> Vec<usize> {
        let Some(idle) = idle else { return Vec::new() };
        let ipos = Pos::of(&idle.referenced);
        let mut out = Vec::new();
        for name in idle.value.clone().into_vec() {
            match walk.index_of.get(name.as_str()) {
                Some(&a) if !out.contains(&a) => out.push(a),
                Some(_) => self.err(ipos, format!("step {n}: 'idle' lists '{name}' twice")),
                None => self.err(ipos, format!("step {n}: unknown actor '{name}' in 'idle'")),
            }
        }
        out
    }

    /// The steps an `order` step names: awaited background steps, once each.
    pub(super) fn order(&mut self, walk: &Walk, n: usize, o: &Spanned<Vec<String>>) -> Vec<usize> {
        let opos = Pos::of(&o.referenced);
        if o.value.len() < 2 {
            self.err(opos, format!("step {n}: 'order' needs at least two step ids"));
        }
        let mut steps = Vec::new();
        for id in &o.value {
            match walk.ids.get(id).map(|i| (*i, walk.background.get(i))) {
                None => self.err(
                    opos,
                    format!("step {n}: 'order' names '{id}', which is not the id of an earlier step"),
                ),
                Some((_, None)) => self.err(
                    opos,
                    format!("step {n}: 'order' names '{id}', which is not a background step"),
                ),
                Some((_, Some(None))) => self.err(
                    opos,
                    format!("step {n}: 'order' names '{id}', which is still in flight (await it first)"),
                ),
                Some((_, Some(Some(ABANDONED)))) => self.err(
                    opos,
                    format!("step {n}: 'order' names '{id}', which was abandoned (it never completes)"),
                ),
                Some((i, Some(Some(_)))) => {
                    if steps.contains(&i) {
                        self.err(opos, format!("step {n}: 'order' names '{id}' twice"));
                    }
                    steps.push(i);
                }
            }
        }
        steps
    }

    /// `background`, `lock_guard`, `client_timeout_ms`, observations, `id`,
    /// `save`, `record` and `when`: where each may be used.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn uses(
        &mut self,
        walk: &mut Walk,
        n: usize,
        pos: Pos,
        index: usize,
        s: &RawStep,
        kind: Kind,
        actor: usize,
        client_timeout_ms: Option<u64>,
    ) {
        let declared = kind.declaration();
        let an = walk.actors[actor].name.clone();
        let via = walk.actors[actor].via;
        if s.background {
            if declared.background {
                walk.state[actor] = Conn::Busy(index);
                walk.background.insert(index, None);
            } else {
                self.err(pos, format!("step {n}: only 'sql' steps can run in the background"));
            }
            if s.id.is_none() {
                self.err(pos, format!("step {n}: a background step needs an 'id' to await it by"));
            }
        }
        if client_timeout_ms.is_some() {
            if s.save.is_some() {
                self.err(
                    pos,
                    format!(
                        "step {n}: 'save' cannot be combined with 'client_timeout_ms' (a dropped call saves nothing)"
                    ),
                );
            }
            if s.record.is_none() {
                self.err(pos, format!("step {n}: a step with 'client_timeout_ms' needs 'record', so that a timeout shows in the report"));
            }
        }
        if declared.side == Side::Observer && via != Via::Direct {
            self.err(
                pos,
                format!("step {n}: observations run on a direct actor (the observer), not on pool actor '{an}'"),
            );
        }
        if let Some(id) = &s.id
            && walk.ids.insert(id.value.clone(), index).is_some()
        {
            self.err(
                Pos::of(&id.referenced),
                format!("step {n}: id '{}' is used twice", id.value),
            );
        }
        self.save(walk, n, s, kind);
        self.record(walk, n, s, kind, client_timeout_ms.is_some());
        if s.when.is_some() && !(declared.when && !s.background) {
            self.err(
                pos,
                format!("step {n}: 'when' applies to foreground 'sql' and 'observe' steps only"),
            );
        }
    }

    /// `save:` on a foreground SQL step that runs everywhere and succeeds.
    pub(super) fn save(&mut self, walk: &mut Walk, n: usize, s: &RawStep, kind: Kind) {
        let Some(v) = &s.save else { return };
        let at = Pos::of(&v.referenced);
        if !kind.declaration().save || s.background {
            self.err(at, format!("step {n}: 'save' works on foreground 'sql' steps only"));
        }
        // Later steps rely on the value: the step must run everywhere and succeed.
        if s.when.is_some() {
            self.err(at, format!("step {n}: 'save' cannot be combined with 'when'"));
        }
        if s.expect.as_ref().is_some_and(|e| e.value.error.is_some()) {
            self.err(at, format!("step {n}: 'save' on a step expected to fail saves nothing"));
        }
        if !is_identifier(&v.value) {
            self.err(
                at,
                format!(
                    "step {n}: 'save: {}' must be a letter or '_' followed by letters, digits or '_' (it is used as ${{name}})",
                    v.value
                ),
            );
        }
        if self.params.iter().any(|(p, _)| *p == v.value) {
            self.err(at, format!("step {n}: 'save: {}' has the name of a parameter", v.value));
        }
        walk.saved.push(v.value.clone());
    }

    /// `record:` on a step whose outcome can be shown, under a name not used before.
    pub(super) fn record(&mut self, walk: &mut Walk, n: usize, s: &RawStep, kind: Kind, timed: bool) {
        let Some(r) = &s.record else { return };
        let at = Pos::of(&r.referenced);
        let recordable = match kind.declaration().record {
            Record::Yes => true,
            Record::WhenBounded => timed,
            Record::No => false,
        };
        if !recordable || s.background {
            self.err(
                at,
                if s.background {
                    format!("step {n}: a background step's outcome is recorded on its 'await' step; move 'record' there")
                } else {
                    format!("step {n}: 'record' works on 'sql', 'observe', 'granted', 'await', 'order', 'lock_guard', 'library' and transaction steps, and on 'checkout' and 'return' with 'client_timeout_ms'")
                },
            );
        }
        if let Some(first) = walk.records.insert(r.value.clone(), at) {
            self.err(
                at,
                format!(
                    "step {n}: record name '{}' is already used at line {}",
                    r.value, first.line
                ),
            );
        }
    }
}
