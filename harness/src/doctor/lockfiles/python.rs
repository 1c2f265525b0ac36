//! Python: `requirements*.txt` (pip's requirement lines), `poetry.lock`
//! and `uv.lock` (TOML `[[package]]` tables), `Pipfile.lock` (JSON).

use std::sync::LazyLock;

use regex::Regex;

use super::{Package, toml_package_tables};
use crate::doctor::LineError;

/// The packages of a poetry.lock or uv.lock.
///
/// # Errors
/// Malformed TOML, a package without `name` and `version`.
pub fn toml_packages(text: &str) -> Result<Vec<Package>, LineError> {
    toml_package_tables(text)
}

/// A requirement line: a name, extras, then a version specifier (PEP 508,
/// without URLs).
static REQUIREMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([=!<>~][^;]*)?(;.*)?$").expect("a valid regex")
});

/// The packages of a requirements file: `name==version` is locked;
/// another specifier (`>=`, `~=`) leaves the version unresolved. Options
/// (`-r`, `--hash`, `-e`), URLs and comments are skipped; a line
/// continued with `\` is joined.
///
/// # Errors
/// A line that is no requirement (at its line).
pub fn requirements(text: &str) -> Result<Vec<Package>, LineError> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, raw)) = lines.next() {
        let mut line = raw.to_owned();
        while line.trim_end().ends_with('\\') {
            line = line.trim_end().trim_end_matches('\\').to_owned();
            match lines.next() {
                Some((_, next)) => line.push_str(next),
                None => break,
            }
        }
        let line = line.split(" #").next().unwrap_or_default();
        let line = line.split("--hash").next().unwrap_or_default().trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('-') || line.contains("://") {
            continue;
        }
        let Some(m) = REQUIREMENT.captures(line) else {
            return Err(LineError::at(i + 1, format!("not a requirement: `{line}`")));
        };
        let name = m[1].to_owned();
        let spec = m.get(3).map(|s| s.as_str().trim()).unwrap_or_default();
        let pinned = spec
            .strip_prefix("===")
            .or_else(|| spec.strip_prefix("=="))
            .filter(|v| !v.contains([',', '*']));
        out.push(match pinned {
            Some(v) => Package::locked(name, v.trim(), Some(i + 1)),
            None => Package {
                name,
                version: None,
                unresolved: Some(if spec.is_empty() {
                    "not pinned (no version in the requirement)".into()
                } else {
                    format!("not pinned ({spec})")
                }),
                line: Some(i + 1),
            },
        });
    }
    Ok(out)
}

/// The packages of a Pipfile.lock: its `default` and `develop` sections,
/// each `"name": {"version": "==X"}`.
///
/// # Errors
/// Malformed JSON (at its line), a section that is not an object.
pub fn pipfile_lock(text: &str) -> Result<Vec<Package>, LineError> {
    let doc: serde_json::Value = serde_json::from_str(text).map_err(|e| LineError {
        line: Some(e.line()),
        message: format!("not JSON: {e}"),
    })?;
    let mut out = Vec::new();
    for section in ["default", "develop"] {
        let Some(entries) = doc.get(section) else { continue };
        let entries = entries.as_object().ok_or_else(|| LineError {
            line: crate::doctor::line_containing(text, &format!("\"{section}\"")),
            message: format!("`{section}` is not an object of packages"),
        })?;
        for (name, entry) in entries {
            let line = crate::doctor::line_containing(text, &format!("\"{name}\""));
            let version = entry.get("version").and_then(|v| v.as_str());
            out.push(match version.and_then(|v| v.strip_prefix("==")) {
                Some(v) => Package::locked(name, v, line),
                None => Package {
                    name: name.clone(),
                    version: None,
                    unresolved: Some("no `==` version (a VCS or path dependency)".into()),
                    line,
                },
            });
        }
    }
    Ok(out)
}
