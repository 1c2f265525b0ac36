//! Expectations: which keys fit which step kind, regular expressions that
//! compile, SQLSTATEs and condition names, holders.

use serde_saphyr::Spanned;

use super::Validator;
use crate::scenario::raw::expect::{RawExpect, RawHolders, RawWaiters, RowsExpect};
use crate::scenario::scalar::Scalar;
use crate::scenario::steps::declaration::{Declaration, Expects};
use crate::scenario::steps::expect::{ObserveExpect, SqlExpect};
use crate::scenario::{Pos, template};

/// A step's validated expectations, before they go to their step kind.
#[derive(Clone, Debug, Default)]
pub(crate) struct Expect {
    /// The keys that check SQL results.
    pub(crate) sql: SqlExpect,
    /// The keys that check an `observe` snapshot.
    pub(crate) observe: ObserveExpect,
}

/// Values of `pg_stat_activity.state` (PostgreSQL docs, "pg_stat_activity").
const STATES: &[&str] = &[
    "active",
    "idle",
    "idle in transaction",
    "idle in transaction (aborted)",
    "fastpath function call",
    "disabled",
];

/// SQLSTATE condition names accepted in `expect.error` (PostgreSQL docs, Appendix A).
const CONDITIONS: &[(&str, &str)] = &[
    ("lock_not_available", "55P03"),
    ("deadlock_detected", "40P01"),
    ("query_canceled", "57014"),
    ("admin_shutdown", "57P01"),
    ("idle_in_transaction_session_timeout", "25P03"),
    ("in_failed_sql_transaction", "25P02"),
    ("undefined_function", "42883"),
    ("syntax_error", "42601"),
    ("numeric_value_out_of_range", "22003"),
    ("idle_session_timeout", "57P05"),
    ("serialization_failure", "40001"),
    ("object_in_use", "55006"),
    ("insufficient_privilege", "42501"),
    ("undefined_table", "42P01"),
    ("invalid_parameter_value", "22023"),
    ("active_sql_transaction", "25001"),
    ("no_active_sql_transaction", "25P01"),
    ("connection_failure", "08006"),
];

pub(crate) fn sqlstate_of(s: &str) -> Option<String> {
    if s.len() == 5 && s.chars().all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()) {
        return Some(s.to_owned());
    }
    CONDITIONS.iter().find(|(n, _)| *n == s).map(|(_, c)| (*c).to_owned())
}

impl Validator<'_> {
    pub(super) fn expect(
        &mut self,
        n: usize,
        e: Spanned<RawExpect>,
        declared: Declaration,
        background: bool,
        saved: &[String],
    ) -> Option<Expect> {
        let pos = Pos::of(&e.referenced);
        let e = e.value;
        let expects = declared.expects;
        let is_observe = expects == Expects::Locks;
        let runs_sql = expects == Expects::Sql;
        if background {
            self.err(
                pos,
                format!("step {n}: put 'expect' on the 'await' step of a background step"),
            );
            return None;
        }
        let observe_keys = e.held.is_some() || e.holders.is_some() || e.waiters.is_some();
        let sql_keys =
            e.value.is_some() || e.rows.is_some() || e.error.is_some() || e.message.is_some() || e.notices.is_some();
        if !observe_keys && !sql_keys && e.elapsed_ms.is_none() {
            self.err(
                pos,
                format!(
                    "step {n}: 'expect' is empty; give one of value, rows, error, message, notices, elapsed_ms, held, holders, waiters"
                ),
            );
            return None;
        }
        if observe_keys && !is_observe {
            self.err(
                pos,
                format!("step {n}: 'held', 'holders' and 'waiters' apply to 'observe' steps only"),
            );
        }
        if sql_keys && !runs_sql {
            self.err(
                pos,
                format!("step {n}: 'value', 'rows', 'error', 'message' and 'notices' apply to steps that run SQL"),
            );
        }
        if e.elapsed_ms.is_some() && !runs_sql {
            self.err(pos, format!("step {n}: 'elapsed_ms' applies to steps that run SQL"));
        }
        if e.error.is_some() && (e.value.is_some() || e.rows.is_some()) {
            self.err(
                pos,
                format!("step {n}: 'error' cannot be combined with 'value' or 'rows'"),
            );
        }
        if e.message.is_some() && e.error.is_none() {
            self.err(
                pos,
                format!("step {n}: 'message' matches the error's message; add 'error' with its SQLSTATE"),
            );
        }
        self.expect_patterns(n, pos, &e);
        if let Some(b) = e.elapsed_ms {
            let (min, max) = (b.min.unwrap_or(0.0), b.max.unwrap_or(f64::INFINITY));
            let finite = !min.is_nan() && !max.is_nan() && min.is_finite() && (b.max.is_none() || max.is_finite());
            if !finite || min < 0.0 || max < min || (b.min.is_none() && b.max.is_none()) {
                self.err(pos, format!("step {n}: elapsed_ms needs 0 ≤ min ≤ max (ms)"));
            }
        }
        self.expect_placeholders(n, pos, &e, saved);
        let error = self.expect_error(n, pos, e.error.as_deref());
        let (holder_pid, holder_state) = self.expect_holders(n, pos, e.holders, saved);
        let (waiter_wait_event, waiter_xmin) = self.expect_waiters(n, pos, e.waiters);
        Some(Expect {
            sql: SqlExpect {
                value: e.value,
                rows: e.rows,
                error,
                message: e.message.map(|m| m.value),
                notices: e.notices.map(|v| v.into_iter().map(|p| p.value).collect()),
                elapsed_ms: e.elapsed_ms,
            },
            observe: ObserveExpect {
                held: e.held,
                holder_pid,
                holder_state,
                waiter_wait_event,
                waiter_xmin,
            },
        })
    }

    /// `message` and `notices` are regular expressions; notices are kept on
    /// successful steps only.
    fn expect_patterns(&mut self, n: usize, pos: Pos, e: &RawExpect) {
        for pattern in e.message.iter().chain(e.notices.iter().flatten()) {
            if let Err(err) = regex::Regex::new(&pattern.value) {
                let why = err.to_string().lines().last().unwrap_or_default().trim().to_owned();
                let why = why.strip_prefix("error: ").unwrap_or(&why).to_owned();
                self.err(
                    Pos::of(&pattern.referenced),
                    format!("step {n}: '{}' is not a valid regular expression: {why}", pattern.value),
                );
            }
        }
        if e.notices.is_some() && e.error.is_some() {
            self.err(
                pos,
                format!("step {n}: 'notices' are checked on steps that succeed; a failed step's notices are not kept"),
            );
        }
    }

    /// `${name}` in expected values names a saved value; rows have one length.
    fn expect_placeholders(&mut self, n: usize, pos: Pos, e: &RawExpect, saved: &[String]) {
        let texts = e
            .value
            .iter()
            .chain(match &e.rows {
                Some(RowsExpect::Exact(rows)) => rows.iter().flatten().collect::<Vec<_>>(),
                _ => Vec::new(),
            })
            .filter_map(|v| match v {
                Scalar::Text(t) => Some(t.clone()),
                _ => None,
            })
            .collect::<Vec<_>>();
        for t in texts {
            for var in template::names(&t) {
                if !saved.contains(&var) {
                    self.err(
                        pos,
                        format!(
                            "step {n}: '${{{var}}}' in 'expect' is neither a parameter nor saved by an earlier step"
                        ),
                    );
                }
            }
        }
        if let Some(RowsExpect::Exact(rows)) = &e.rows
            && let Some(first) = rows.first()
            && rows.iter().any(|r| r.len() != first.len())
        {
            self.err(
                pos,
                format!("step {n}: the rows in 'expect.rows' have different lengths"),
            );
        }
    }

    /// `error:` as a SQLSTATE: five characters, or a condition name.
    fn expect_error(&mut self, n: usize, pos: Pos, error: Option<&str>) -> Option<String> {
        match error {
            Some(code) => match sqlstate_of(code) {
                Some(c) => Some(c),
                None => {
                    let names: Vec<&str> = CONDITIONS.iter().map(|(n, _)| *n).collect();
                    self.err(pos, format!("step {n}: '{code}' is neither a SQLSTATE (five characters such as 55P03) nor a known condition name ({})", names.join(", ")));
                    None
                }
            },
            None => None,
        }
    }

    /// `holders:` names a saved pid and/or a `pg_stat_activity` state.
    fn expect_holders(
        &mut self,
        n: usize,
        pos: Pos,
        holders: Option<RawHolders>,
        saved: &[String],
    ) -> (Option<String>, Option<String>) {
        match holders {
            Some(h) => {
                if let Some(p) = &h.pid
                    && !saved.contains(p)
                {
                    self.err(
                        pos,
                        format!("step {n}: holders.pid names '{p}', which no earlier step saves"),
                    );
                }
                if let Some(st) = &h.state
                    && !STATES.contains(&st.as_str())
                {
                    self.err(
                        pos,
                        format!(
                            "step {n}: holders.state '{st}' is not a pg_stat_activity state ({})",
                            STATES.join(", ")
                        ),
                    );
                }
                if h.pid.is_none() && h.state.is_none() {
                    self.err(pos, format!("step {n}: 'holders' needs 'pid' or 'state'"));
                }
                (h.pid, h.state)
            }
            None => (None, None),
        }
    }

    /// `waiters:` gives a `wait_event_type:wait_event` (two words of letters,
    /// digits and `_`, as `pg_stat_activity` has them) and/or `xmin`.
    fn expect_waiters(&mut self, n: usize, pos: Pos, waiters: Option<RawWaiters>) -> (Option<String>, Option<bool>) {
        let Some(w) = waiters else {
            return (None, None);
        };
        if w.wait_event.is_none() && w.xmin.is_none() {
            self.err(pos, format!("step {n}: 'waiters' needs 'wait_event' or 'xmin'"));
        }
        let word = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if let Some(ev) = &w.wait_event
            && !ev.value.split_once(':').is_some_and(|(a, b)| word(a) && word(b))
        {
            self.err(
                Pos::of(&ev.referenced),
                format!(
                    "step {n}: waiters.wait_event '{}' is not 'wait_event_type:wait_event' (e.g. 'Lock:advisory')",
                    ev.value
                ),
            );
        }
        (w.wait_event.map(|e| e.value), w.xmin)
    }
}
