//! `params:`: expanding a file into one instance per combination, and mapping
//! error positions in an expanded text back to the file as written.

use std::path::Path;

use serde_saphyr::Spanned;

use super::raw::RawParams;
use super::template::{Piece, scan};
use super::{MAX_INSTANCES, Pos, Scalar, ScenarioError};

/// `key=7,fn=pg_advisory_lock`; parameters whose name starts with `_` are left out.
pub(super) fn instance_suffix(params: &[(String, String)]) -> String {
    params
        .iter()
        .filter(|(k, _)| !k.starts_with('_'))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The parameter combinations of `params:`, each as (name, text value) in file order.
pub(super) fn expand_params(
    path: &Path,
    p: Spanned<RawParams>,
) -> Result<Vec<Vec<(String, String)>>, Vec<ScenarioError>> {
    let pos = Pos::of(&p.referenced);
    let err = |message: String| {
        vec![ScenarioError {
            file: path.to_owned(),
            pos,
            message,
        }]
    };
    // A number too large for a float to hold exactly has already been rounded
    // by the YAML reader: ask for text instead of expanding a different value.
    let inexact = |v: &Scalar| matches!(v, Scalar::Float(f) if f.fract() == 0.0 && f.abs() >= 9_007_199_254_740_992.0);
    let values: Vec<(&String, &Scalar)> = match &p.value {
        RawParams::Matrix(m) => m.iter().flat_map(|(k, vs)| vs.iter().map(move |v| (k, v))).collect(),
        RawParams::Cases(cs) => cs.iter().flat_map(|c| c.iter()).collect(),
    };
    if let Some((name, v)) = values.into_iter().find(|(_, v)| inexact(v)) {
        return Err(err(format!(
            "parameter '{name}': a number this large ({v} after rounding) cannot be read exactly; quote it as text"
        )));
    }
    let mut combos = match p.value {
        RawParams::Matrix(m) => matrix(&m),
        RawParams::Cases(cases) => cases_of(cases),
    }
    .map_err(err)?;
    for (name, _) in combos.first().into_iter().flatten() {
        if !is_identifier(name) {
            return Err(err(format!(
                "parameter name '{name}' must be a letter or '_' followed by letters, digits or '_'"
            )));
        }
    }
    for (name, value) in combos.iter().flatten() {
        if value.contains("${") {
            return Err(err(format!("parameter '{name}': a value cannot contain '${{'")));
        }
    }
    for c in &mut combos {
        for (_, v) in c.iter_mut() {
            if v.contains('\n') {
                *v = v.replace('\n', " ");
            }
        }
    }
    let mut unique: Vec<String> = combos.iter().map(|c| instance_suffix(c)).collect();
    unique.sort();
    unique.dedup();
    if unique.len() != combos.len() {
        return Err(err(
            "'params' gives two runs the same name (the same values, apart from parameters named '_…')".into(),
        ));
    }
    Ok(combos)
}

pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `text` with every placeholder replaced by as many `x` (positions are
/// kept), for reading `params` before the placeholders are expanded.
pub(super) fn neutralize_placeholders(text: &str) -> String {
    scan(text)
        .iter()
        .map(|p| match p {
            Piece::Var(_) => "x".repeat(p.source().len()),
            other => other.source().into_owned(),
        })
        .collect()
}

/// Where substitutions changed a line's length: (line, column in the expanded
/// text, placeholder width, value width), in order.
#[derive(Default)]
pub(super) struct Shifts(Vec<(u64, u64, u64, u64)>);

impl Shifts {
    /// The position in the file as written of `pos` in the expanded text; a
    /// position inside a substituted value maps to its placeholder.
    pub(super) fn original(&self, pos: Pos) -> Pos {
        let mut delta: i64 = 0;
        for &(_, col, width, value) in self.0.iter().filter(|s| s.0 == pos.line) {
            if pos.column < col {
                break;
            }
            if pos.column < col + value {
                return Pos {
                    line: pos.line,
                    column: (col as i64 - delta).max(1) as u64,
                };
            }
            delta += value as i64 - width as i64;
        }
        Pos {
            line: pos.line,
            column: (pos.column as i64 - delta).max(1) as u64,
        }
    }
}

/// Replaces `${name}` for every parameter `name` in the file's text (other
/// placeholders, the saved values, and `$${` escapes are left for the
/// runner), in one pass, so a value is never expanded again. Values contain no
/// line breaks.
pub(super) fn substitute_params(text: &str, params: &[(String, String)]) -> (String, Shifts) {
    let mut out = String::with_capacity(text.len());
    let mut shifts = Shifts::default();
    let (mut line, mut col) = (1u64, 1u64);
    for piece in scan(text) {
        if let Piece::Var(name) = piece
            && let Some((_, value)) = params.iter().find(|(k, _)| k == name)
        {
            let len = value.chars().count() as u64;
            shifts.0.push((line, col, name.chars().count() as u64 + 3, len));
            out.push_str(value);
            col += len;
            continue;
        }
        let source = piece.source();
        for c in source.chars() {
            if c == '\n' {
                line += 1;
                col = 1;
            } else {
                col += 1;
            }
        }
        out.push_str(&source);
    }
    (out, shifts)
}

/// The text without the top-level `params:` block and without comment lines
/// (to tell used parameters from their declaration).
pub(super) fn without_params_and_comments(text: &str) -> String {
    let mut out = String::new();
    let mut in_params = false;
    for l in text.lines() {
        if l.trim_start().starts_with('#') {
            continue;
        }
        let top = !l.starts_with([' ', '\t', '-', '#']) && !l.trim().is_empty();
        if top {
            in_params = l.starts_with("params:");
        }
        if !in_params {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// Every combination of a map of lists, in file order.
fn matrix(m: &indexmap::IndexMap<String, Vec<Scalar>>) -> Result<Vec<Vec<(String, String)>>, String> {
    if m.is_empty() {
        return Err("'params' is empty; remove it or give each parameter a list of values".into());
    }
    let mut combos = vec![Vec::new()];
    for (name, values) in m {
        if values.is_empty() {
            return Err(format!("parameter '{name}' has no values"));
        }
        if combos.len().saturating_mul(values.len()) > MAX_INSTANCES {
            return Err(format!(
                "'params' gives more than {MAX_INSTANCES} combinations; split the file"
            ));
        }
        combos = combos
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((name.clone(), v.text()));
                    c
                })
            })
            .collect();
    }
    Ok(combos)
}

/// One instance per case; every case names the same parameters in the same order.
fn cases_of(cases: Vec<indexmap::IndexMap<String, Scalar>>) -> Result<Vec<Vec<(String, String)>>, String> {
    if cases.is_empty() {
        return Err("'params' is an empty list; give at least one case".into());
    }
    if cases.len() > MAX_INSTANCES {
        return Err(format!("'params' has more than {MAX_INSTANCES} cases; split the file"));
    }
    let names: Vec<&String> = cases[0].keys().collect();
    for (i, c) in cases.iter().enumerate() {
        let these: Vec<&String> = c.keys().collect();
        if these != names {
            return Err(format!(
                "params case {} has parameters [{}], but case 1 has [{}]; every case needs the same names in the same order",
                i + 1,
                these.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                names.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    Ok(cases
        .into_iter()
        .map(|c| c.into_iter().map(|(k, v)| (k, v.text())).collect())
        .collect())
}
