//! `sql:` in the foreground: a statement on the actor's connection (simple
//! query protocol, or the extended one with `protocol: extended` and its
//! `params`), checked against `expect`, saved with `save`, recorded with
//! `record`; bounded by `client_timeout_ms` when it has one.

use locklab_drivers::{DirectConn, Pool};

use super::declaration::{BASE, Declaration, Expects};
use super::expect::{ClientBound, SqlExpect};
use super::{Checking, Kind, RawStep, Step, context::StepCx};
use crate::scenario::steps::error::StepResult;
use crate::scenario::validate::expect::Expect;
use crate::scenario::validate::validator::Validator;
use crate::scenario::{Actor, Pos, Scalar, When, template};

macro_rules! raw_fields {
    ($next:ident [$($f:tt)*] $($rest:tt)*) => {
        $next! { @collect [$($f)*
            /// SQL run with the simple query protocol; `${name}` is replaced by a saved value or a parameter.
            #[serde(default)]
            pub(crate) sql: Option<String>,
            /// For a foreground `sql` step: `extended` sends its one statement with the extended
            /// query protocol (Parse, Bind, Execute, Sync) instead of the simple one; `n/a` on a
            /// column whose client sends the simple protocol only.
            #[serde(default)]
            pub(crate) protocol: Option<$crate::scenario::steps::sql::Protocol>,
            /// With `protocol: extended`: the values bound to `$1`, `$2`, … (integers as `bigint`,
            /// strings as `text`).
            #[serde(default)]
            #[schemars(with = "Option<crate::scenario::raw::OrParam<Vec<crate::scenario::raw::Scalar>>>")]
            pub(crate) params: Option<serde_saphyr::Spanned<Vec<$crate::scenario::raw::Scalar>>>,
        ] $($rest)* }
    };
}
pub(crate) use raw_fields;

/// How an `sql` step sends its statement (`protocol:`; PostgreSQL docs
/// §55.2.2, §55.2.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// One Query message (the default).
    #[default]
    Simple,
    /// Parse, Bind, Execute, Sync: one statement, with its parameters bound.
    Extended,
}

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
    /// The protocol it is sent with.
    pub protocol: Protocol,
    /// With the extended protocol: the values bound to `$1`, `$2`, ….
    pub params: Vec<locklab_drivers::Param>,
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

    fn stray(raw: &RawStep, v: &mut Validator<'_>, n: usize, pos: Pos) {
        if raw.protocol.is_some() || raw.params.is_some() {
            v.err(
                pos,
                format!("step {n}: 'protocol' and 'params' only apply to 'sql' steps in the foreground"),
            );
        }
    }

    fn fields(raw: &RawStep, v: &mut Validator<'_>, n: usize, pos: Pos) {
        if raw.params.is_some() && raw.protocol != Some(Protocol::Extended) {
            v.err(pos, format!("step {n}: 'params' need 'protocol: extended'"));
        }
    }

    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        let protocol = raw.protocol.unwrap_or_default();
        let (n, pos) = (cx.n, cx.pos);
        if protocol == Protocol::Extended {
            if cx.bound.is_some() {
                cx.err(pos, format!("step {n}: 'protocol: extended' with 'client_timeout_ms' is not supported"));
            }
            if raw.sql.as_deref().is_some_and(|s| s.trim().trim_end_matches(';').contains(';')) {
                cx.err(
                    pos,
                    format!("step {n}: the extended protocol sends one statement; this 'sql' has several"),
                );
            }
        }
        let params = raw
            .params
            .as_ref()
            .map(|p| {
                p.value
                    .iter()
                    .filter_map(|s| match s {
                        Scalar::Int(i) if i64::try_from(*i).is_ok() => Some(locklab_drivers::Param::Int(*i as i64)),
                        Scalar::Text(t) => Some(locklab_drivers::Param::Text(t.clone())),
                        other => {
                            cx.err(
                                Pos::of(&p.referenced),
                                format!("step {n}: a parameter is an integer or a string, not {other:?}"),
                            );
                            None
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(SqlStep {
            actor: cx.actor,
            sql: text(raw, cx)?,
            expect: None,
            save: raw.save.as_ref().map(|v| v.value.clone()),
            when: raw.when,
            bound: cx.bound,
            protocol,
            params,
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
        let outcome = match self.protocol {
            Protocol::Simple => cx.statement(step, self.actor, &sql).await?,
            Protocol::Extended => cx.extended_statement(step, self.actor, &sql, &self.params).await?,
        };
        cx.finish_sql(step, self.actor, self.expect.as_ref(), self.save.as_deref(), outcome, None)
    }
}
