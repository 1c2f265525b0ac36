//! The parts of any step that refer to other steps: its `id`, whether it
//! runs in the background, what it saves and records, and `when`. (What a
//! kind's own fields refer to, e.g. the actors a `blocked` step waits for,
//! is checked in the kind's file.)

use super::Validator;
use super::walk::{Conn, Walk};
use crate::scenario::Pos;
use crate::scenario::params::is_identifier;
use crate::scenario::raw::Via;
use crate::scenario::steps::{Declaration, RawStep, Record, Side};

impl Validator<'_> {
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
        declared: Declaration,
        actor: usize,
        client_timeout_ms: Option<u64>,
    ) {
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
        self.save(walk, n, s, declared);
        self.record(walk, n, s, declared, client_timeout_ms.is_some());
        if s.when.is_some() && !(declared.when && !s.background) {
            self.err(
                pos,
                format!("step {n}: 'when' applies to foreground 'sql' and 'observe' steps only"),
            );
        }
    }

    /// `save:` on a foreground SQL step that runs everywhere and succeeds.
    pub(super) fn save(&mut self, walk: &mut Walk, n: usize, s: &RawStep, declared: Declaration) {
        let Some(v) = &s.save else { return };
        let at = Pos::of(&v.referenced);
        if !declared.save || s.background {
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
    pub(super) fn record(&mut self, walk: &mut Walk, n: usize, s: &RawStep, declared: Declaration, timed: bool) {
        let Some(r) = &s.record else { return };
        let at = Pos::of(&r.referenced);
        let recordable = match declared.record {
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
