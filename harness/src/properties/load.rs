//! Reading property files: the serde types they are written in (and the
//! JSON Schema generated from them), and the validation against the
//! scenarios, with located errors.

use std::path::{Path, PathBuf};

use locklab_core::FileError;
use locklab_core::located::Pos;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{Decider, KINDS, Property, ReadingRule, Reads, Scope, Severity, When};
use crate::scenario::Scenario;

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
