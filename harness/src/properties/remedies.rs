//! Remedies: the ways out of a violation a property offers (`remedies:`),
//! each with what proves it in a report, so that a card's "Do:" names the
//! cell that shows the advice working rather than prose no column follows.
//!
//! A remedy is proven for a violating column by one of:
//! - `columns:` a column of the same pool or pooler (same pooler, else same
//!   crate) that follows the advice and holds the property in the same report
//!   (sqlx's `after_release` column for sqlx);
//! - `cell:` a cell of the same column whose reading matches (the unlock on
//!   the same checkout released the lock);
//! - `holds:` another property that holds on the same column (for "use
//!   transaction-level locks": `xact-lock-released-at-transaction-end`);
//! - `instead:` a column to use instead of this one (point the migrator at
//!   the server, not through the pooler) that holds the property.
//!
//! A card shows the first remedy, in file order, proven for its column; when
//! the property has `columns:` remedies and none is proven for the column,
//! it says so ("no configuration of this pool in this report holds it").

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Mark, PropertyVerdicts, When};
use crate::outcome::DriverColumn;
use crate::outcome::Seen;
use crate::outcome::cell::BaselineCell;

/// One way out of a violation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Remedy {
    /// What to do, in words.
    #[serde(rename = "do")]
    pub action: String,
    /// What proves it.
    pub proven_by: Proof,
}

/// What proves a remedy for a violating column, in the same report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Proof {
    /// Columns configured to follow the advice: one of the violating
    /// column's pool or pooler that holds the property proves it.
    Columns(Vec<String>),
    /// A cell of the violating column itself whose reading matches.
    Cell {
        /// The scenario run (`NAME` or `NAME[k=v]`).
        scenario: String,
        /// Its `record:`.
        record: String,
        /// The reading that proves it.
        when: When,
    },
    /// Another property that holds (or holds where tried) on the same column.
    Holds(String),
    /// Columns to use instead of the violating one (another way to reach
    /// the server): one that holds the property proves it.
    Instead(Vec<String>),
}

/// A remedy proven for one column: what a card's "Do:" says.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Proven {
    /// What to do.
    pub action: String,
    /// What proves it, in words (`column sqlx-after-release follows it and
    /// holds the property`).
    pub proof: String,
    /// The proving column (this one, for a cell or another property).
    pub column: String,
    /// The proving cell's scenario, for a `cell:` proof.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// Said first when the property offers configured columns and none of
    /// this column's pool or pooler holds it in the report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_configuration: Option<String>,
}

/// What a proof is checked against: one server's verdicts, columns and cells.
pub struct Context<'a> {
    /// The verdicts of every property on this server.
    pub verdicts: &'a [PropertyVerdicts],
    /// The report's columns.
    pub columns: &'a [DriverColumn],
    /// The cells of this server.
    pub cells: &'a [BaselineCell],
}

/// The pool or pooler a column is a configuration of: its pooler, else its crate.
fn family(c: &DriverColumn) -> &str {
    c.pooler_kind.as_deref().unwrap_or(&c.crate_name)
}

/// How `property` fares on `column` when it holds: `holds` or `holds where
/// tried`; `None` otherwise.
fn holds(ctx: &Context<'_>, property: &str, column: &str) -> Option<&'static str> {
    ctx.verdicts
        .iter()
        .find(|p| p.id == property)
        .and_then(|p| p.of(column))
        .filter(|v| matches!(v.verdict, Mark::Holds | Mark::HoldsWhereTried))
        .map(|v| v.verdict.as_str())
}

impl Remedy {
    /// Whether (and how) this remedy is proven for `column` violating `property`.
    fn proven(&self, property: &str, column: &DriverColumn, ctx: &Context<'_>) -> Option<Proven> {
        let proven = |proof: String, by: &str, scenario: Option<String>| Proven {
            action: self.action.clone(),
            proof,
            column: by.to_owned(),
            scenario,
            no_configuration: None,
        };
        match &self.proven_by {
            Proof::Columns(ids) => ids
                .iter()
                .filter_map(|id| ctx.columns.iter().find(|c| &c.id == id))
                .filter(|c| c.id != column.id && family(c) == family(column))
                .find_map(|c| Some((c, holds(ctx, property, &c.id)?)))
                .map(|(c, how)| {
                    proven(
                        format!(
                            "column `{}` ({}) follows it and {how} {property}",
                            c.id, c.configuration
                        ),
                        &c.id,
                        None,
                    )
                }),
            Proof::Cell { scenario, record, when } => ctx
                .cells
                .iter()
                .filter(|c| c.driver == column.id)
                .filter(|c| c.scenario == *scenario || c.scenario.split('[').next() == Some(scenario))
                .find_map(|c| match &c.observations.get(record)?.seen {
                    Seen::Value(r) if when.matches(r) => Some(proven(
                        format!("on this column `{}` · `{record}` reads {r}", c.scenario),
                        &column.id,
                        Some(c.scenario.clone()),
                    )),
                    _ => None,
                }),
            Proof::Holds(other) => holds(ctx, other, &column.id)
                .map(|how| proven(format!("on this column {other} {how}"), &column.id, None)),
            Proof::Instead(ids) => ids
                .iter()
                .filter(|id| **id != column.id)
                .find_map(|id| Some((id, holds(ctx, property, id)?)))
                .map(|(id, how)| proven(format!("column `{id}` {how} {property}"), id, None)),
        }
    }
}

/// The first of `remedies` proven for `column`, which violates `property`;
/// `None` when none is.
pub fn first_proven(remedies: &[Remedy], property: &str, column: &DriverColumn, ctx: &Context<'_>) -> Option<Proven> {
    let configured: Vec<&Remedy> = remedies
        .iter()
        .filter(|r| matches!(r.proven_by, Proof::Columns(_)))
        .collect();
    let mut found = remedies.iter().find_map(|r| r.proven(property, column, ctx))?;
    if !configured.is_empty() && !configured.iter().any(|r| r.proven(property, column, ctx).is_some()) {
        found.no_configuration = Some(format!(
            "no configured column of {} in this report holds it",
            family(column)
        ));
    }
    Some(found)
}
