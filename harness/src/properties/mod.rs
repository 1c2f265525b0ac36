//! Properties: the guide's safety rules, and locklab's own findings, as
//! declared rules a column passes or fails (`properties/NAME.yaml`, one rule
//! per file; the JSON Schema `properties/property.schema.json` is generated
//! from the types below).
//!
//! A property names the scenario cells and recorded observations that decide
//! it and how each reading of them reads: holds, violated, or not applicable.
//! [`evaluate`] turns the cells of a run (or of a baseline) into a verdict per
//! property and column, with the deciding cells as evidence; the report,
//! `locklab verdict` and `locklab check` read those verdicts.
//!
//! A property file:
//!
//! ```yaml
//! id: session-lock-released-on-return      # the file's name without .yaml
//! rule: A session-level lock … does not outlive the code that took it.
//! source: the guide, §3 and Verification
//! severity: unsafe                          # unsafe | surprising | informational
//! scope: column                             # column (default) | server
//! advice: Unlock before the connection goes back …
//! decided_by:
//!   - scenario: session-lock-pool-return    # a file's name (every parameter set) or NAME[k=v]
//!     record: held_after_return             # a `record:` of it, or `invariant NAME`
//!     readings:                             # first match wins
//!       - when: {held: false}
//!         reads: holds
//!       - when: {held: true}
//!         reads: violated
//!         says: still held by the idle pooled connection after the return
//! ```
//!
//! Without `record`, the readings read the cell's status (`when: {status:
//! deviates}`). A column's verdict is violated if any deciding reading
//! violates the property, else undecided if a deciding cell failed or has a
//! reading no rule reads, else holds if any reading holds, else n/a. A cell
//! with a reading that reads n/a (no guard API, no cancel request sent)
//! decides nothing through its other records. A race row reads as violated
//! when any of its trials did (with the count), as holds when none did.

mod evaluate;

pub use evaluate::{
    ColumnVerdict, Evidence, Mark, PropertyVerdicts, ServerVerdicts, TrialCount, VerdictChange, changes, evaluate,
    evaluate_report,
};

use std::path::{Path, PathBuf};

use locklab_core::FileError;
use locklab_core::located::Pos;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use crate::outcome::{Reading, Status, Value};
use crate::scenario::Scenario;

/// How much a violation matters to a user of the column.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// A lock can be held by nobody's code, or work can run unprotected.
    Unsafe,
    /// Not what a reader of the PostgreSQL documentation or the guide would
    /// expect, but no lock is lost or leaked by it.
    Surprising,
    /// Worth knowing; nothing to do.
    Informational,
}

impl Severity {
    /// `unsafe`, `surprising`, `informational`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Unsafe => "unsafe",
            Severity::Surprising => "surprising",
            Severity::Informational => "informational",
        }
    }
}

/// Whom a property judges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The column: the pool, pooler or library and its configuration.
    #[default]
    Column,
    /// The server: PostgreSQL behaves so through every column. Shown once
    /// per server version, as a server finding, never as a column verdict;
    /// `locklab verdict --require` does not fail a column for it.
    Server,
}

/// What one reading of a deciding observation says about the property.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Reads {
    /// The property holds.
    #[serde(rename = "holds")]
    Holds,
    /// The property is violated.
    #[serde(rename = "violated")]
    Violated,
    /// The reading cannot decide it (say why in `says`).
    #[serde(rename = "n/a")]
    NotApplicable,
}

/// A scalar an `is:` compares with: `true`, `0`, `"4321ms"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Scalar {
    /// `t` / `f`.
    Bool(bool),
    /// A number.
    Int(i64),
    /// Text, compared with the value as the report shows it.
    Text(String),
}

/// Which readings a rule matches: every field given must match (at least one).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct When {
    /// The value's kind, as `matrix.json` names it (`error`, `locks`,
    /// `checkout`, `return`, `dropped`, `released`, `still_held`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// For a `checkout`, `return`, `guard` or `invariant` value: its variant
    /// (`ok`, `no_answer`, `dropped`, `failed`; `to_pool`, `closed`,
    /// `to_pooler`, `unfinished`; `release_now`, `dropped`, `leaked`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// A `bool`, `int`/`number` or `text` value equal to this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is: Option<Scalar>,
    /// A lock snapshot (`observe`): whether a matching lock was granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<bool>,
    /// A lock snapshot with a holder of this actor name (`server connection`
    /// behind transaction pooling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// A lock snapshot with a holder in this `pg_stat_activity.state`
    /// (`idle`, `idle in transaction`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// A lock snapshot with (true) or without (false) a waiter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<bool>,
    /// An error with this SQLSTATE (`55P03`); `none` for an error without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqlstate: Option<String>,
    /// A dropped call whose cancel request went so: `none` (none asked
    /// for), `not_sent`, `no_effect`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<String>,
    /// The row of an invariant over a race cell's trials, as one trial came
    /// out: `holds` or `violated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<InvariantRow>")]
    pub invariant: Option<crate::outcome::Verdict>,
    /// The severity of the step's first server notice (`WARNING`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// Without `record`: the cell's status (`pass`, `deviates`, `n/a`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub status: Option<Status>,
}

/// How one trial came out for an invariant (the schema's view of
/// [`crate::outcome::Verdict`]).
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum InvariantRow {
    /// The trial kept the invariant.
    Holds,
    /// The trial broke it.
    Violated,
}

/// The value kinds `when: {kind: …}` may name: [`Value`]'s serialised tags.
pub const KINDS: &[&str] = &[
    "no_rows",
    "null",
    "not_applicable",
    "settings_cannot_pass",
    "bool",
    "int",
    "number",
    "text",
    "error",
    "locks",
    "order",
    "checkout",
    "return",
    "dropped",
    "guard",
    "unsupported",
    "no_connection",
    "released",
    "still_held",
    "invariant",
];

impl When {
    /// Whether the reading `r` matches every field given (`status` aside:
    /// see [`When::matches_status`]).
    pub fn matches(&self, r: &Reading) -> bool {
        let v = &r.value;
        let json = serde_json::to_value(v).unwrap_or_default();
        let kind_ok = self.kind.as_deref().is_none_or(|k| json["kind"] == k);
        let variant_ok = self.variant.as_deref().is_none_or(|want| match &json["value"] {
            serde_json::Value::String(s) => s == want,
            serde_json::Value::Object(o) if o.len() == 1 => o.contains_key(want),
            _ => false,
        });
        let is_ok = self.is.as_ref().is_none_or(|want| match (want, v) {
            (Scalar::Bool(b), Value::Bool(x)) => b == x,
            (Scalar::Int(i), Value::Int(x) | Value::Number(x, _)) => i == x,
            (Scalar::Text(t), Value::Text(x)) => t == x,
            (Scalar::Text(t), other) => *t == other.to_string(),
            _ => false,
        });
        let locks = v.locks();
        let held_ok = self.held.is_none_or(|h| locks.is_some_and(|l| l.held == h));
        let holder_ok = self
            .holder
            .as_deref()
            .is_none_or(|a| locks.is_some_and(|l| l.holders.iter().any(|h| h.actor.as_deref() == Some(a))));
        let state_ok = self
            .state
            .as_deref()
            .is_none_or(|s| locks.is_some_and(|l| l.holders.iter().any(|h| h.state.as_deref() == Some(s))));
        let waiting_ok = self
            .waiting
            .is_none_or(|w| locks.is_some_and(|l| l.waiters.is_empty() != w));
        let sqlstate_ok = self.sqlstate.as_deref().is_none_or(|want| match v {
            Value::Error(e) => match e.sqlstate.as_deref() {
                Some(s) => s == want,
                None => want == "none",
            },
            _ => false,
        });
        let cancel_ok = self.cancel.as_deref().is_none_or(|want| match v {
            Value::Dropped { cancel, .. } => {
                let name = match cancel {
                    crate::outcome::Cancel::None => "none",
                    crate::outcome::Cancel::NotSent(_) => "not_sent",
                    crate::outcome::Cancel::NoEffect(_) => "no_effect",
                };
                name == want
            }
            _ => false,
        });
        let invariant_ok = self
            .invariant
            .is_none_or(|want| matches!(v, Value::Invariant(x) if *x == want));
        let notice_ok = self.notice.as_deref().is_none_or(|n| r.notice.as_deref() == Some(n));
        self.status.is_none()
            && kind_ok
            && variant_ok
            && is_ok
            && held_ok
            && holder_ok
            && state_ok
            && waiting_ok
            && sqlstate_ok
            && cancel_ok
            && invariant_ok
            && notice_ok
    }

    /// Whether a record-less rule matches a cell of this status.
    pub fn matches_status(&self, status: Status) -> bool {
        self.status == Some(status)
    }

    fn is_empty(&self) -> bool {
        *self == When::default()
    }
}

/// One reading rule: which readings, and what they say.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadingRule {
    /// Which readings.
    pub when: When,
    /// What they say about the property.
    pub reads: Reads,
    /// The fact in words, for the column's card (default: the reading).
    pub says: Option<String>,
    /// Advice for a column with this reading, after the property's.
    pub advice: Option<String>,
}

/// One deciding observation: a scenario's cells (every parameter set of a
/// file, or one) and a record of them, or the cells' status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decider {
    /// A scenario file's name (every parameter set) or one run's name (`NAME[k=v]`).
    pub scenario: String,
    /// A `record:` of it (or `invariant NAME`); `None`: the cell's status.
    pub record: Option<String>,
    /// The reading rules, first match wins.
    pub readings: Vec<ReadingRule>,
}

impl Decider {
    /// Whether a cell of scenario `name` (`family[params]`) is one of this decider's.
    pub fn covers(&self, name: &str) -> bool {
        name == self.scenario || name.split('[').next() == Some(self.scenario.as_str())
    }
}

/// A declared property, validated (and as `matrix.json`'s `properties[]`
/// keeps it, so that the report says what its verdicts judged).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Property {
    /// Its id: the file's name without `.yaml`.
    pub id: String,
    /// The rule in one sentence.
    pub rule: String,
    /// Where it comes from: a section of the guide, of the PostgreSQL
    /// documentation, or the scenario that found it.
    pub source: String,
    /// How much a violation matters.
    pub severity: Severity,
    /// Whom it judges.
    pub scope: Scope,
    /// What a user whose column violates it should do.
    pub advice: String,
    /// The deciding observations.
    pub decided_by: Vec<Decider>,
    /// The file, relative to the workspace when inside it.
    pub file: PathBuf,
}

/// A locklab property: one rule a column passes or fails, and the scenario
/// cells that decide it.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "locklab property")]
struct RawProperty {
    /// The property's id: the file's name without `.yaml`. Letters, digits and `-`.
    #[schemars(with = "String")]
    id: Spanned<String>,
    /// The rule, in one sentence, as it holds when all is well.
    rule: String,
    /// Where the rule comes from: a section of the guide, of the PostgreSQL documentation, or the scenario that found it.
    source: String,
    /// `unsafe`, `surprising` or `informational`.
    severity: Severity,
    /// `column` (default): a verdict per column. `server`: a rule PostgreSQL itself breaks, shown once per server version.
    #[serde(default)]
    scope: Scope,
    /// What a user whose column violates the rule should do.
    advice: String,
    /// The scenario cells and recorded observations that decide the rule.
    #[schemars(with = "Vec<RawDecider>", length(min = 1))]
    decided_by: Spanned<Vec<Spanned<RawDecider>>>,
}

/// One deciding observation.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawDecider {
    /// A scenario file's name (all its parameter sets) or one parameter set's run (`NAME[k=v,…]`).
    #[schemars(with = "String")]
    scenario: Spanned<String>,
    /// A `record:` of the scenario, or `invariant NAME` for a race scenario's invariant row. Absent: the readings read the cell's status.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    record: Option<Spanned<String>>,
    /// How each reading reads, first match wins. A reading no rule matches leaves the verdict undecided.
    #[schemars(with = "Vec<RawReading>", length(min = 1))]
    readings: Spanned<Vec<Spanned<RawReading>>>,
}

/// One reading rule.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawReading {
    /// Which readings (every field given must match).
    when: When,
    /// `holds`, `violated` or `n/a`.
    reads: Reads,
    /// The fact in words, for the column's card (default: the reading as the report shows it).
    #[serde(default)]
    says: Option<String>,
    /// Advice for a column with this reading, after the property's.
    #[serde(default)]
    advice: Option<String>,
}

/// The JSON Schema of property files (shipped as
/// `properties/property.schema.json`), generated from the types the loader reads.
pub fn json_schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(RawProperty);
    schema.insert("$id".into(), "https://locklab.invalid/property.schema.json".into());
    serde_json::to_value(schema).unwrap_or_default()
}

/// The shipped properties' directory: `properties/` of the workspace.
pub fn shipped_dir() -> PathBuf {
    crate::server::workspace_root().join("properties")
}

/// Loads and validates every `*.yaml` in `dir` against `scenarios` (every
/// scenario a property may name), sorted by severity, then id.
///
/// # Errors
/// Every located error of every file: YAML and type errors, an id other
/// than the file's name, a scenario, parameter set or record that does not
/// exist, an empty or contradictory `when`; a directory that cannot be read
/// or holds no property file.
pub fn load_dir(dir: &Path, scenarios: &[Scenario]) -> Result<Vec<Property>, Vec<FileError>> {
    let files = locklab_core::located::yaml_files(dir, "property").map_err(|e| vec![e])?;
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        match load_file(&f, scenarios) {
            Ok(p) => out.push(p),
            Err(mut e) => errors.append(&mut e),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    out.sort_by(|a, b| (a.severity, &a.id).cmp(&(b.severity, &b.id)));
    Ok(out)
}

/// The shipped properties, validated against the shipped scenarios.
///
/// # Errors
/// As [`load_dir`], and the scenarios' own errors.
pub fn shipped() -> Result<Vec<Property>, Vec<FileError>> {
    let scenarios = crate::scenario::load_dir(&crate::server::workspace_root().join("scenarios"))?;
    load_dir(&shipped_dir(), &scenarios)
}

/// [`shipped`], read once per process; the error is the located errors,
/// one per line.
///
/// # Errors
/// As [`shipped`].
pub fn shipped_cached() -> Result<&'static [Property], &'static str> {
    static SHIPPED: std::sync::OnceLock<Result<Vec<Property>, String>> = std::sync::OnceLock::new();
    SHIPPED
        .get_or_init(|| {
            shipped().map_err(|errors| errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))
        })
        .as_ref()
        .map(Vec::as_slice)
        .map_err(String::as_str)
}

/// Loads and validates one property file.
///
/// # Errors
/// As [`load_dir`], for this file.
pub fn load_file(path: &Path, scenarios: &[Scenario]) -> Result<Property, Vec<FileError>> {
    let bytes = std::fs::read(path).map_err(|e| vec![FileError::at_start(path, format!("cannot read: {e}"))])?;
    let text = String::from_utf8(bytes).map_err(|_| {
        vec![FileError::at_start(
            path,
            "not UTF-8 text: a property file is YAML in UTF-8",
        )]
    })?;
    let raw: RawProperty = serde_saphyr::from_str(&text)
        .map_err(|e| vec![locklab_core::located::yaml_error(path, &e, "property file", &[])])?;
    let at = |pos: Pos, message: String| FileError {
        file: path.to_owned(),
        pos,
        message,
    };
    let pos = |s: &serde_saphyr::Location| Pos::of(s);
    let mut errors = Vec::new();
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    if raw.id.value != stem {
        errors.push(at(
            pos(&raw.id.referenced),
            format!(
                "id '{}' must equal the file's name without .yaml ('{stem}')",
                raw.id.value
            ),
        ));
    }
    if raw.decided_by.value.is_empty() {
        errors.push(at(
            pos(&raw.decided_by.referenced),
            "decided_by is empty: name at least one scenario cell that decides the property".to_owned(),
        ));
    }
    for (what, text) in [("rule", &raw.rule), ("source", &raw.source), ("advice", &raw.advice)] {
        if text.trim().is_empty() {
            errors.push(at(pos(&raw.id.referenced), format!("'{what}' is empty")));
        }
    }
    let mut decided_by = Vec::new();
    for d in &raw.decided_by.value {
        let d_pos = pos(&d.referenced);
        let d = &d.value;
        let name = d.scenario.value.as_str();
        let matching: Vec<&Scenario> = scenarios
            .iter()
            .filter(|s| s.name == name || s.family == name)
            .collect();
        if matching.is_empty() {
            let family = name.split('[').next().unwrap_or(name);
            let message = if scenarios.iter().any(|s| s.family == family) {
                format!("scenario '{family}' has no parameter set named '{name}'")
            } else {
                format!("scenario '{name}' does not exist (no scenario file or parameter set of that name)")
            };
            errors.push(at(pos(&d.scenario.referenced), message));
        }
        if let Some(record) = &d.record {
            for s in &matching {
                if !s.records().contains(&record.value) {
                    errors.push(at(
                        pos(&record.referenced),
                        format!(
                            "'{}' is not recorded by scenario '{}' (its records: {})",
                            record.value,
                            s.name,
                            s.records().join(", ")
                        ),
                    ));
                    break;
                }
            }
        }
        if d.readings.value.is_empty() {
            errors.push(at(d_pos, "readings is empty: say how each reading reads".to_owned()));
        }
        let mut readings = Vec::new();
        for r in &d.readings.value {
            let r_pos = pos(&r.referenced);
            let w = &r.value.when;
            if w.is_empty() {
                errors.push(at(r_pos, "'when' matches nothing: give at least one field".to_owned()));
            }
            match (&d.record, w.status) {
                (Some(_), Some(_)) => errors.push(at(
                    r_pos,
                    "'when: {status}' reads the cell's status: it needs a decider without 'record'".to_owned(),
                )),
                (None, None) if !w.is_empty() => errors.push(at(
                    r_pos,
                    "a decider without 'record' reads the cell's status: use only 'when: {status: …}'".to_owned(),
                )),
                (None, Some(_))
                    if *w
                        != (When {
                            status: w.status,
                            ..When::default()
                        }) =>
                {
                    errors.push(at(
                        r_pos,
                        "a decider without 'record' reads the cell's status: use only 'when: {status: …}'".to_owned(),
                    ))
                }
                _ => {}
            }
            if let Some(kind) = &w.kind
                && !KINDS.contains(&kind.as_str())
            {
                errors.push(at(
                    r_pos,
                    format!("unknown value kind '{kind}' (one of: {})", KINDS.join(", ")),
                ));
            }
            if let Some(c) = &w.cancel
                && !["none", "not_sent", "no_effect"].contains(&c.as_str())
            {
                errors.push(at(
                    r_pos,
                    format!("unknown cancel '{c}' (one of: none, not_sent, no_effect)"),
                ));
            }
            readings.push(ReadingRule {
                when: w.clone(),
                reads: r.value.reads,
                says: r.value.says.clone(),
                advice: r.value.advice.clone(),
            });
        }
        decided_by.push(Decider {
            scenario: name.to_owned(),
            record: d.record.as_ref().map(|r| r.value.clone()),
            readings,
        });
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let root = crate::server::workspace_root();
    Ok(Property {
        id: raw.id.value,
        rule: raw.rule.trim().to_owned(),
        source: raw.source.trim().to_owned(),
        severity: raw.severity,
        scope: raw.scope,
        advice: raw.advice.trim().to_owned(),
        decided_by,
        file: path
            .strip_prefix(&root)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| path.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Checkout, LockSnapshot, StatementError};

    /// Every value kind is one `when: {kind}` may name (the match is
    /// exhaustive: a new kind fails to compile here until it is listed).
    #[test]
    fn every_value_kind_is_listed() {
        let sample = |v: &Value| -> Value {
            match v {
                Value::NoRows
                | Value::Null
                | Value::NotApplicable
                | Value::SettingsCannotPassPgBouncer
                | Value::Bool(_)
                | Value::Int(_)
                | Value::Number(..)
                | Value::Text(_)
                | Value::Error(_)
                | Value::Locks(_)
                | Value::Order(_)
                | Value::Checkout(_)
                | Value::Return(_)
                | Value::Dropped { .. }
                | Value::Guard(_)
                | Value::Unsupported(_)
                | Value::NoConnection(_)
                | Value::Released
                | Value::StillHeld(_)
                | Value::Invariant(_) => v.clone(),
            }
        };
        let values = [
            Value::NoRows,
            Value::Null,
            Value::NotApplicable,
            Value::SettingsCannotPassPgBouncer,
            Value::Bool(true),
            Value::Int(1),
            Value::Number(7, "007".into()),
            Value::Text("x".into()),
            Value::Error(StatementError {
                message: String::new(),
                sqlstate: None,
                from_server: true,
            }),
            Value::Locks(LockSnapshot {
                held: false,
                holders: vec![],
                waiters: vec![],
            }),
            Value::Order(vec![]),
            Value::Checkout(Checkout::Ok),
            Value::Return(crate::outcome::Return::ToPool),
            Value::Dropped {
                at_ms: 1,
                cancel: crate::outcome::Cancel::None,
            },
            Value::Guard(crate::outcome::GuardEnded::Dropped),
            Value::Unsupported(String::new()),
            Value::NoConnection(String::new()),
            Value::Released,
            Value::StillHeld(1),
            Value::Invariant(crate::outcome::Verdict::Holds),
        ];
        assert_eq!(values.len(), KINDS.len());
        for v in &values {
            let kind = serde_json::to_value(sample(v)).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned();
            assert!(KINDS.contains(&kind.as_str()), "{kind} is not in KINDS");
        }
    }

    fn when(yaml: &str) -> When {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn when_matches_each_field() {
        let error = |s: Option<&str>| {
            Reading::plain(Value::Error(StatementError {
                message: String::new(),
                sqlstate: s.map(str::to_owned),
                from_server: true,
            }))
        };
        assert!(when("{sqlstate: 55P03}").matches(&error(Some("55P03"))));
        assert!(!when("{sqlstate: 55P03}").matches(&error(None)));
        assert!(when("{sqlstate: none}").matches(&error(None)));
        assert!(when("{kind: error}").matches(&error(None)));
        assert!(!when("{kind: locks}").matches(&error(None)));
        let no_answer = Reading::plain(Value::Checkout(Checkout::NoAnswer(1000)));
        assert!(when("{kind: checkout, variant: no_answer}").matches(&no_answer));
        assert!(!when("{kind: checkout, variant: ok}").matches(&no_answer));
        assert!(when("{is: true}").matches(&Reading::plain(Value::Bool(true))));
        assert!(!when("{is: true}").matches(&Reading::plain(Value::Bool(false))));
        assert!(when("{is: 0}").matches(&Reading::plain(Value::Int(0))));
        assert!(when("{is: '4321ms'}").matches(&Reading::plain(Value::Text("4321ms".into()))));
        // A status rule never matches a reading.
        assert!(!when("{status: deviates}").matches(&Reading::plain(Value::Bool(true))));
        assert!(when("{status: deviates}").matches_status(Status::Deviates));
    }
}
