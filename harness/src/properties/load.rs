//! Reading property files: the serde types they are written in (and the
//! JSON Schema generated from them), and the validation against the
//! scenarios, with located errors.

use std::path::{Path, PathBuf};

use locklab_core::FileError;
use locklab_core::located::Pos;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_saphyr::Spanned;

use super::dimensions::{Applies, Coordinates, Dimension};
use super::remedies::{Proof, Remedy};
use super::witness::{self, WitnessKind};
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
    /// What a user whose column violates the rule should do, in words.
    advice: String,
    /// What a violation means for a pooler's author, in words, where it
    /// differs from `advice` (`locklab pooler-check` prints it).
    #[serde(default)]
    for_poolers: Option<String>,
    /// Ways out of a violation, each with what proves it in a report (an unsafe property needs at least one): a card's "Do:" is the first proven for its column.
    #[serde(default)]
    #[schemars(with = "Vec<Remedy>")]
    remedies: Vec<Spanned<Remedy>>,
    /// How the rule treats each dimension that can break it: `applies`, or `does not apply: WHY`. Required, with every dimension, for an unsafe property.
    #[serde(default)]
    #[schemars(with = "Option<RawDimensions>")]
    dimensions: Option<Spanned<RawDimensions>>,
    /// The scenario cells and recorded observations that decide the rule.
    #[schemars(with = "Vec<RawDecider>", length(min = 1))]
    decided_by: Spanned<Vec<Spanned<RawDecider>>>,
}

/// Every dimension that can break a property, each `applies` or `does not apply: WHY`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawDimensions {
    /// The pool's maximum size: 1, and 2 or more.
    pool_size: String,
    /// Which connection a later checkout gets: the one given back, or another.
    hand_back: String,
    /// How a lock call is given up: server-side timeout, dropped future, cancel request, dropped connection object.
    give_up: String,
    /// Direct, session pooling, transaction pooling.
    pooler_mode: String,
}

/// One deciding observation: a scenario (`scenario`, with `record`) or every reading that witnesses a kind (`witness`).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawDecider {
    /// A scenario file's name (all its parameter sets) or one parameter set's run (`NAME[k=v,…]`).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    scenario: Option<Spanned<String>>,
    /// Instead of `scenario` and `record`: every recorded reading of this kind in the scenarios, found from the steps themselves (`unlock`: a recorded `select pg_advisory_unlock[_shared](KEY)`).
    #[serde(default)]
    #[schemars(with = "Option<WitnessKind>")]
    witness: Option<Spanned<WitnessKind>>,
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
    if errors.is_empty() {
        for p in &out {
            for r in &p.remedies {
                if let Proof::Holds(other) = &r.proven_by
                    && !out.iter().any(|q| &q.id == other)
                {
                    errors.push(FileError::at_start(
                        &p.file,
                        format!(
                            "remedy '{}': 'proven_by: {{holds: {other}}}' names no property of {}",
                            r.action,
                            dir.display()
                        ),
                    ));
                }
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    out.sort_by(|a, b| (a.severity, &a.id).cmp(&(b.severity, &b.id)));
    Ok(out)
}

/// The shipped properties, loaded against the shipped scenarios and
/// `scenarios` (a run's own, e.g. `--scenarios DIR`), so that their
/// witnesses decide too; the cached [`shipped_cached`] when every one of
/// `scenarios` is shipped.
///
/// # Errors
/// As [`shipped`], one located error per line.
pub fn for_scenarios(scenarios: &[Scenario]) -> Result<std::borrow::Cow<'static, [Property]>, String> {
    let join = |errors: Vec<FileError>| errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
    let shipped_scenarios = shipped_scenarios()?;
    let own: Vec<&Scenario> = scenarios
        .iter()
        .filter(|s| !shipped_scenarios.iter().any(|t| t.name == s.name && t.file == s.file))
        .collect();
    if own.is_empty() {
        return shipped_cached().map(std::borrow::Cow::Borrowed).map_err(str::to_owned);
    }
    let mut all: Vec<Scenario> = shipped_scenarios
        .iter()
        .filter(|t| !own.iter().any(|s| s.name == t.name))
        .cloned()
        .collect();
    all.extend(own.into_iter().cloned());
    load_dir(&shipped_dir(), &all)
        .map(std::borrow::Cow::Owned)
        .map_err(join)
}

/// The shipped scenarios, read once per process.
fn shipped_scenarios() -> Result<&'static [Scenario], String> {
    static SHIPPED: std::sync::OnceLock<Result<Vec<Scenario>, String>> = std::sync::OnceLock::new();
    SHIPPED
        .get_or_init(|| {
            crate::scenario::load_dir(&crate::server::workspace_root().join("scenarios"))
                .map_err(|errors| errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))
        })
        .as_ref()
        .map(Vec::as_slice)
        .map_err(Clone::clone)
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
    let mut witnesses = Vec::new();
    for d in &raw.decided_by.value {
        let d_pos = pos(&d.referenced);
        let d = &d.value;
        let readings = reading_rules(d, &at, &mut errors);
        match (&d.scenario, &d.witness) {
            (Some(name), None) => {
                decided_by.push(named_decider(d, name, readings, scenarios, &at, &mut errors));
            }
            (None, Some(kind)) => {
                if let Some(record) = &d.record {
                    errors.push(at(
                        pos(&record.referenced),
                        "a 'witness' decider reads the witness step's own record: leave out 'record'".to_owned(),
                    ));
                }
                if !witnesses.contains(&kind.value) {
                    witnesses.push(kind.value);
                }
                for s in scenarios {
                    for w in witness::of_scenario(s)
                        .into_iter()
                        .filter(|w| w.meaning.kind == kind.value)
                    {
                        decided_by.push(Decider {
                            scenario: w.scenario,
                            record: Some(w.record.clone()),
                            readings: readings.clone(),
                            coordinates: [(s.name.clone(), Coordinates::of(s, Some(&w.record)))].into(),
                            witness: Some(w.meaning),
                        });
                    }
                }
            }
            _ => errors.push(at(
                d_pos,
                "a decider names exactly one of 'scenario' (with an optional 'record') or 'witness'".to_owned(),
            )),
        }
        if d.witness.is_none()
            && let Some(r) = d.readings.value.iter().find(|r| r.value.when.reads_witness())
        {
            errors.push(at(
                pos(&r.referenced),
                "'lock', 'across_return' and 'held_after' read what a witness step meant: they need a 'witness' decider"
                    .to_owned(),
            ));
        }
    }
    let dimensions = dimensions(&raw, &at, &mut errors);
    let remedies = remedies(&raw, scenarios, &at, &mut errors);
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
        for_poolers: raw.for_poolers.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()),
        remedies,
        dimensions,
        witnesses,
        decided_by,
        file: path
            .strip_prefix(&root)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| path.to_owned()),
    })
}

type At<'a> = dyn Fn(Pos, String) -> FileError + 'a;

/// A decider that names its scenario: checked against `scenarios`, with the
/// coordinates of each instance it covers.
fn named_decider(
    d: &RawDecider,
    name: &Spanned<String>,
    readings: Vec<ReadingRule>,
    scenarios: &[Scenario],
    at: &At<'_>,
    errors: &mut Vec<FileError>,
) -> Decider {
    let pos = |s: &serde_saphyr::Location| Pos::of(s);
    let matching: Vec<&Scenario> = scenarios
        .iter()
        .filter(|s| s.name == name.value || s.family == name.value)
        .collect();
    if matching.is_empty() {
        let family = name.value.split('[').next().unwrap_or(&name.value);
        let message = if scenarios.iter().any(|s| s.family == family) {
            format!("scenario '{family}' has no parameter set named '{}'", name.value)
        } else {
            format!(
                "scenario '{}' does not exist (no scenario file or parameter set of that name)",
                name.value
            )
        };
        errors.push(at(pos(&name.referenced), message));
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
    let record = d.record.as_ref().map(|r| r.value.clone());
    Decider {
        scenario: name.value.clone(),
        coordinates: matching
            .iter()
            .map(|s| (s.name.clone(), Coordinates::of(s, record.as_deref())))
            .collect(),
        record,
        readings,
        witness: None,
    }
}

/// The decider's reading rules, with their errors.
fn reading_rules(d: &RawDecider, at: &At<'_>, errors: &mut Vec<FileError>) -> Vec<ReadingRule> {
    let pos = |s: &serde_saphyr::Location| Pos::of(s);
    if d.readings.value.is_empty() {
        errors.push(at(
            pos(&d.readings.referenced),
            "readings is empty: say how each reading reads".to_owned(),
        ));
    }
    let mut readings = Vec::new();
    for r in &d.readings.value {
        let r_pos = pos(&r.referenced);
        let w = &r.value.when;
        if w.is_empty() {
            errors.push(at(r_pos, "'when' matches nothing: give at least one field".to_owned()));
        }
        let reads_record = d.record.is_some() || d.witness.is_some();
        match (reads_record, w.status) {
            (true, Some(_)) => errors.push(at(
                r_pos,
                "'when: {status}' reads the cell's status: it needs a decider without 'record'".to_owned(),
            )),
            (false, None) if !w.is_empty() => errors.push(at(
                r_pos,
                "a decider without 'record' reads the cell's status: use only 'when: {status: …}'".to_owned(),
            )),
            (false, Some(_))
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
    readings
}

/// The property's `dimensions:`, every one `applies` or `does not apply:
/// WHY`; required for an unsafe property.
fn dimensions(raw: &RawProperty, at: &At<'_>, errors: &mut Vec<FileError>) -> Vec<(Dimension, Applies)> {
    let Some(d) = &raw.dimensions else {
        if raw.severity == Severity::Unsafe {
            errors.push(at(
                Pos::of(&raw.id.referenced),
                format!(
                    "an unsafe property declares its dimensions: 'dimensions:' with {} (each `applies` or `does not apply: WHY`)",
                    Dimension::ALL.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        return Vec::new();
    };
    let d_pos = Pos::of(&d.referenced);
    let d = &d.value;
    let mut out = Vec::new();
    for (dim, text) in [
        (Dimension::PoolSize, &d.pool_size),
        (Dimension::HandBack, &d.hand_back),
        (Dimension::GiveUp, &d.give_up),
        (Dimension::PoolerMode, &d.pooler_mode),
    ] {
        let text = text.trim();
        let applies = if text == "applies" {
            Applies::Applies
        } else if let Some(why) = text
            .strip_prefix("does not apply:")
            .map(str::trim)
            .filter(|w| !w.is_empty())
        {
            Applies::DoesNotApply(why.to_owned())
        } else {
            errors.push(at(
                d_pos,
                format!(
                    "dimension {}: '{text}' is neither `applies` nor `does not apply: WHY`",
                    dim.as_str()
                ),
            ));
            continue;
        };
        out.push((dim, applies));
    }
    out
}

/// The property's `remedies:`, their `cell:` proofs checked against
/// `scenarios`; an unsafe property needs at least one.
fn remedies(raw: &RawProperty, scenarios: &[Scenario], at: &At<'_>, errors: &mut Vec<FileError>) -> Vec<Remedy> {
    if raw.remedies.is_empty() && raw.severity == Severity::Unsafe && raw.scope == Scope::Column {
        errors.push(at(
            Pos::of(&raw.id.referenced),
            "an unsafe property offers at least one remedy ('remedies:' with `do` and `proven_by`), so that a card's advice names the cell that proves it".to_owned(),
        ));
    }
    for r in &raw.remedies {
        let r_pos = Pos::of(&r.referenced);
        if r.value.action.trim().is_empty() {
            errors.push(at(r_pos, "a remedy's 'do' is empty".to_owned()));
        }
        match &r.value.proven_by {
            Proof::Columns(ids) | Proof::Instead(ids) if ids.is_empty() => {
                errors.push(at(
                    r_pos,
                    "'proven_by: {columns}' (or 'instead') names no column".to_owned(),
                ));
            }
            Proof::Cell { scenario, record, when } => {
                let matching: Vec<&Scenario> = scenarios
                    .iter()
                    .filter(|s| s.name == *scenario || s.family == *scenario)
                    .collect();
                if matching.is_empty() {
                    errors.push(at(
                        r_pos,
                        format!("remedy: scenario '{scenario}' does not exist (no scenario file or parameter set of that name)"),
                    ));
                } else if !matching.iter().all(|s| s.records().contains(record)) {
                    errors.push(at(
                        r_pos,
                        format!("remedy: '{record}' is not recorded by scenario '{scenario}'"),
                    ));
                }
                if when.is_empty() || when.status.is_some() || when.reads_witness() {
                    errors.push(at(
                        r_pos,
                        "remedy: 'when' names the reading that proves it (no 'status', nor a witness's fields)"
                            .to_owned(),
                    ));
                }
            }
            Proof::Columns(_) | Proof::Instead(_) | Proof::Holds(_) => {}
        }
    }
    raw.remedies.iter().map(|r| r.value.clone()).collect()
}
