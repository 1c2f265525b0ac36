//! `do: begin | commit | rollback`: transaction control on the actor's
//! connection, through the driver's own transaction API.

use std::time::{Duration, Instant};

use locklab_drivers::{DirectConn, Pool};

use super::declaration::{BASE, Declaration, Expects};
use super::expect::{ClientBound, SqlExpect};
use super::statement::late;
use super::{Checking, Kind, RawStep, Step, context::StepCx};
use crate::scenario::steps::error::StepResult;
use crate::scenario::raw::step::Action;
use crate::scenario::validate::expect::Expect;
use crate::scenario::Actor;

// No keys of its own.
pub(crate) use super::no_raw_fields as raw_fields;

/// Transaction control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transaction {
    /// `begin`.
    Begin,
    /// `commit`.
    Commit,
    /// `rollback`.
    Rollback,
}

impl Transaction {
    /// The driver's transaction control for it.
    pub fn control(self) -> locklab_drivers::TxControl {
        match self {
            Transaction::Begin => locklab_drivers::TxControl::Begin,
            Transaction::Commit => locklab_drivers::TxControl::Commit,
            Transaction::Rollback => locklab_drivers::TxControl::Rollback,
        }
    }

    /// The SQL it sends (`begin`, `commit`, `rollback`: its `do:` word).
    pub fn sql(self) -> &'static str {
        TransactionStep::FORMS[self as usize].word
    }
}

/// A `do: begin | commit | rollback` step.
#[derive(Clone, Debug, PartialEq)]
pub struct TransactionStep {
    /// Actor index.
    pub actor: usize,
    /// Which statement.
    pub action: Transaction,
    /// What must hold afterwards.
    pub expect: Option<SqlExpect>,
    /// A client-side bound on the call (its `on_timeout` is always `drop`).
    pub bound: Option<ClientBound>,
}

/// A transaction-control step's declaration.
const fn transaction(word: &'static str) -> Declaration {
    Declaration {
        word,
        bounded: true,
        expects: Expects::Sql,
        ..BASE
    }
}

impl Kind for TransactionStep {
    const KEY: &'static str = "do";
    /// In [`Transaction`]'s order.
    const FORMS: &'static [Declaration] = &[transaction("begin"), transaction("commit"), transaction("rollback")];

    fn has_key(raw: &RawStep) -> bool {
        raw.action.is_some()
    }

    fn is(raw: &RawStep) -> bool {
        matches!(raw.action, Some(Action::Begin | Action::Commit | Action::Rollback))
    }

    fn form_of_raw(raw: &RawStep) -> usize {
        match raw.action {
            Some(Action::Commit) => 1,
            Some(Action::Rollback) => 2,
            _ => 0,
        }
    }

    fn form(&self) -> usize {
        self.action as usize
    }

    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        let action = match raw.action? {
            Action::Begin => Transaction::Begin,
            Action::Commit => Transaction::Commit,
            Action::Rollback => Transaction::Rollback,
            _ => return None,
        };
        Some(TransactionStep {
            actor: cx.actor,
            action,
            expect: None,
            // (`on_timeout` goes with `sql` steps only: always `drop` here)
            bound: cx.bound,
        })
    }

    fn expect(&mut self, e: Expect) {
        self.expect = Some(e.sql);
    }

    fn actor(&self) -> Option<usize> {
        Some(self.actor)
    }

    fn describe(&self, _: &[Actor], _: &[Step]) -> String {
        self.action.sql().to_owned()
    }

    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, _: &dyn Pool, _: &mut DirectConn) -> StepResult {
        if let Some(bound) = self.bound {
            return cx
                .bounded_sql(step, self.actor, self.action.sql(), bound, self.expect.as_ref())
                .await;
        }
        let deadline = Duration::from_millis(step.deadline_ms);
        let conn = cx.conn(self.actor)?;
        let t0 = Instant::now();
        let r = tokio::time::timeout(deadline, conn.transaction(self.action.control()))
            .await
            .map_err(|_| late(step, "the statement had not finished"))?;
        let took = conn.last_elapsed().unwrap_or_else(|| t0.elapsed());
        cx.finish_sql(step, self.actor, self.expect.as_ref(), None, (r, took), None)
    }
}
