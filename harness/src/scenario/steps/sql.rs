//! `sql:` in the foreground: a statement on the actor's connection (simple
//! query protocol), checked against `expect`, saved with `save`, recorded
//! with `record`; bounded by `client_timeout_ms` when it has one.

use locklab_drivers::{DirectConn, Pool};

use super::declaration::{BASE, Declaration, Expects};
use super::expect::{ClientBound, SqlExpect};
use super::{Checking, Kind, RawStep, Step, context::StepCx};
use crate::scenario::steps::error::StepResult;
use crate::scenario::validate::expect::Expect;
use crate::scenario::{Actor, When, template};

macro_rules! raw_fields {
    ($next:ident [$($f:tt)*] $($rest:tt)*) => {
        $next! { @collect [$($f)*
            /// SQL run with the simple query protocol; `${name}` is replaced by a saved value or a parameter.
            #[serde(default)]
            pub(crate) sql: Option<String>,
        ] $($rest)* }
    };
}
pub(crate) use raw_fields;

/// A foreground `sql` step.
#[derive(Clone, Debug, PartialEq)]
pub struct SqlStep {
    /// Actor index.
    pub actor: usize,
    /// The SQL; `${name}` is replaced by saved values.
    pub sql: String,
    /// What must hold afterwards.
    pub expect: Option<SqlExpect>,
    /// Variable to store the first value of the first row in (`save:`).
    pub save: Option<String>,
    /// Only for some driver kinds.
    pub when: Option<When>,
    /// A client-side bound on the call (`client_timeout_ms`, `on_timeout`).
    pub bound: Option<ClientBound>,
}

/// The declaration of `sql` (in the foreground and, see
/// [`super::background`], in the background).
pub(crate) const SQL: Declaration = Declaration {
    word: "sql",
    bounded: true,
    on_timeout: true,
    background: true,
    save: true,
    when: true,
    expects: Expects::Sql,
    ..BASE
};

/// The step's SQL, checked: not empty, and every `${name}` a parameter or
/// a value an earlier step saved.
pub(crate) fn text(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<String> {
    let sql = raw.sql.as_ref()?;
    let (n, pos) = (cx.n, cx.pos);
    if sql.trim().is_empty() {
        cx.err(pos, format!("step {n}: 'sql' is empty"));
    }
    for var in template::names(sql) {
        if !cx.walk.saved.contains(&var) {
            cx.err(
                pos,
                format!("step {n}: '${{{var}}}' is neither a parameter nor saved by an earlier step"),
            );
        }
    }
    Some(sql.clone())
}

/// A statement as a label shows it: on one line.
pub(crate) fn one_line(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Kind for SqlStep {
    const KEY: &'static str = "sql";
    const FORMS: &'static [Declaration] = &[SQL];

    fn has_key(raw: &RawStep) -> bool {
        raw.sql.is_some()
    }

    fn is(raw: &RawStep) -> bool {
        !raw.background
    }

    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        Some(SqlStep {
            actor: cx.actor,
            sql: text(raw, cx)?,
            expect: None,
            save: raw.save.as_ref().map(|v| v.value.clone()),
            when: raw.when,
            bound: cx.bound,
        })
    }

    fn expect(&mut self, e: Expect) {
        self.expect = Some(e.sql);
    }

    fn actor(&self) -> Option<usize> {
        Some(self.actor)
    }

    fn when(&self) -> Option<When> {
        self.when
    }

    fn describe(&self, _: &[Actor], _: &[Step]) -> String {
        one_line(&self.sql)
    }

    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, _: &dyn Pool, _: &mut DirectConn) -> StepResult {
        let sql = cx.substitute(&self.sql)?;
        if let Some(bound) = self.bound {
            return cx.bounded_sql(step, self.actor, &sql, bound, self.expect.as_ref()).await;
        }
        let outcome = cx.statement(step, self.actor, &sql).await?;
        cx.finish_sql(step, self.actor, self.expect.as_ref(), self.save.as_deref(), outcome, None)
    }
}
