//! `report:` — a user's report that a scenario re-enacts: where it was
//! filed, what the user saw, and which readings show it. Whether a cell
//! reproduces the report is then computed from its readings
//! ([`UserReport::reproduced_by`]), never stated by hand: the book's table
//! of reports (`docs/src/lock-libraries.md`, region `report-reproduced`) is
//! generated from the committed report.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use crate::outcome::Reading;
use crate::outcome::when::{Scalar, When as ReadingWhen};

/// `report:` as the file spells it.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUserReport {
    /// Where the report was filed: `owner/repo#N` (an issue or pull request).
    pub(crate) tracker: String,
    /// What the user saw, in a line (an error message, a hang).
    pub(crate) saw: String,
    /// The readings that show what the user saw: a list of alternatives,
    /// each a map of `record:` name → reading rule (as a property's `when:`,
    /// e.g. `{ is: false }`, `{ held: true }`, `{ kind: dropped }`,
    /// `{ sqlstate: 25P02 }`). A cell reproduces the report when every rule
    /// of one alternative matches its reading.
    #[schemars(with = "Vec<IndexMap<String, ReadingWhen>>")]
    pub(crate) reproduced_when: Spanned<Vec<Spanned<IndexMap<String, ReadingWhen>>>>,
}

/// A user's report a scenario re-enacts (`report:`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserReport {
    /// Where it was filed: `owner/repo#N`.
    pub tracker: String,
    /// What the user saw, in a line.
    pub saw: String,
    /// Alternatives, each a map of `record:` name → reading rule: a cell
    /// reproduces the report when one alternative matches entirely.
    pub reproduced_when: Vec<IndexMap<String, ReadingWhen>>,
}

impl UserReport {
    /// Whether a cell whose reading of each record is `reading(name)`
    /// reproduces the report: every rule of one alternative matches (a
    /// record the cell lacks matches nothing).
    pub fn reproduced_by<'a>(&self, reading: impl Fn(&str) -> Option<&'a Reading>) -> bool {
        self.reproduced_when.iter().any(|alt| {
            alt.iter()
                .all(|(name, when)| reading(name).is_some_and(|r| when.matches(r)))
        })
    }

    /// The condition in words, for the book: `` `unlock` is false and
    /// `next_lock` dropped ``; alternatives joined by "; or ".
    pub fn condition(&self) -> String {
        self.reproduced_when
            .iter()
            .map(|alt| {
                alt.iter()
                    .map(|(name, when)| format!("`{name}` {}", describe(when)))
                    .collect::<Vec<_>>()
                    .join(" and ")
            })
            .collect::<Vec<_>>()
            .join("; or ")
    }
}

/// A reading rule in words (the fields a report's condition uses; others
/// as their YAML).
fn describe(w: &ReadingWhen) -> String {
    let mut parts = Vec::new();
    if let Some(k) = &w.kind {
        parts.push(match (k.as_str(), w.variant.as_deref()) {
            ("dropped", _) | ("checkout", Some("dropped")) => "given up at its client bound (a hang)".to_owned(),
            ("error", _) => "an error".to_owned(),
            (other, Some(v)) => format!("of kind {other}, {v}"),
            (other, None) => format!("of kind {other}"),
        });
    }
    if let Some(v) = &w.is {
        parts.push(match v {
            Scalar::Bool(b) => format!("is {b}"),
            Scalar::Int(i) => format!("is {i}"),
            Scalar::Text(t) => format!("reads {t}"),
        });
    }
    if let Some(c) = &w.contains {
        parts.push(format!("says \"{c}\""));
    }
    if let Some(h) = w.held {
        parts.push(if h { "held" } else { "not held" }.to_owned());
    }
    if let Some(h) = &w.holder {
        parts.push(format!("by {h}"));
    }
    if let Some(s) = &w.state {
        parts.push(format!("({s})"));
    }
    if let Some(s) = &w.sqlstate {
        parts.push(format!("fails with SQLSTATE {s}"));
    }
    if let Some(n) = &w.notice {
        parts.push(format!("with a {n}"));
    }
    if parts.is_empty() {
        serde_json::to_string(w).unwrap_or_default()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Cancel, Value};

    fn report(yaml: &str) -> UserReport {
        UserReport {
            tracker: "example/tool#1".into(),
            saw: "a hang".into(),
            reproduced_when: serde_saphyr::from_str(yaml).unwrap(),
        }
    }

    #[test]
    fn a_cell_reproduces_when_one_alternative_matches_entirely() {
        let r = report("- { unlock: { is: false }, next: { kind: dropped } }\n- { both: { is: true } }\n");
        let unlock_false = Reading::of(&Value::Bool(false), &[]);
        let unlock_true = Reading::of(&Value::Bool(true), &[]);
        let dropped = Reading::of(
            &Value::Dropped {
                at_ms: 2000,
                cancel: Cancel::None,
            },
            &[],
        );
        let cell = |unlock: &'static Reading, next: Option<&'static Reading>| {
            move |name: &str| match name {
                "unlock" => Some(unlock),
                "next" => next,
                _ => None,
            }
        };
        let (f, t, d) = (
            Box::leak(Box::new(unlock_false)),
            Box::leak(Box::new(unlock_true)),
            Box::leak(Box::new(dropped)),
        );
        assert!(r.reproduced_by(cell(f, Some(d))));
        assert!(!r.reproduced_by(cell(t, Some(d))), "one rule of the alternative fails");
        assert!(
            !r.reproduced_by(cell(f, None)),
            "a record the cell lacks matches nothing"
        );
        assert!(!r.reproduced_by(cell(f, Some(t))));
        assert_eq!(
            r.condition(),
            "`unlock` is false and `next` given up at its client bound (a hang); or `both` is true"
        );
    }
}
