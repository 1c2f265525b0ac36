//! JavaScript: `package-lock.json` (npm 7+'s `packages`, npm 6's
//! `dependencies`), `yarn.lock` (Yarn 1's and Berry's entries) and
//! `pnpm-lock.yaml` (its `packages` keys, `name@version`).

use super::Package;
use crate::doctor::{LineError, line_containing};

/// The packages of a package-lock.json: `packages` (`node_modules/pg` →
/// `pg`; nested ones too) or, in lockfile version 1, `dependencies`.
///
/// # Errors
/// Malformed JSON (at its line).
pub fn package_lock(text: &str) -> Result<Vec<Package>, LineError> {
    let doc: serde_json::Value = serde_json::from_str(text).map_err(|e| LineError {
        line: Some(e.line()),
        message: format!("not JSON: {e}"),
    })?;
    let mut out = Vec::new();
    if let Some(packages) = doc.get("packages").and_then(|p| p.as_object()) {
        for (path, entry) in packages {
            let Some(name) = path
                .rsplit("node_modules/")
                .next()
                .filter(|n| !n.is_empty() && path.contains("node_modules/"))
            else {
                continue;
            };
            if let Some(v) = entry.get("version").and_then(|v| v.as_str()) {
                out.push(Package::locked(name, v, line_containing(text, &format!("\"{path}\""))));
            }
        }
    } else if let Some(deps) = doc.get("dependencies").and_then(|p| p.as_object()) {
        for (name, entry) in deps {
            if let Some(v) = entry.get("version").and_then(|v| v.as_str()) {
                out.push(Package::locked(name, v, line_containing(text, &format!("\"{name}\""))));
            }
        }
    }
    Ok(out)
}

/// The name in a yarn.lock or pnpm key: `pg@^8.11.0` → `pg`,
/// `@scope/x@npm:1.0` → `@scope/x`.
fn name_of_spec(spec: &str) -> Option<&str> {
    let spec = spec.trim().trim_matches('"');
    let at = if let Some(rest) = spec.strip_prefix('@') {
        rest.find('@').map(|i| i + 1)?
    } else {
        spec.find('@')?
    };
    Some(&spec[..at]).filter(|n| !n.is_empty())
}

/// The packages of a yarn.lock: each entry is a line at column 0 ending
/// with `:` that names one or more specs, followed by an indented
/// `version "X"` (Yarn 1) or `version: X` (Berry). Comments and Berry's
/// `__metadata` are skipped.
///
/// # Errors
/// An entry with no version line before the next entry (at the entry's line),
/// or an entry line whose spec names no package.
pub fn yarn_lock(text: &str) -> Result<Vec<Package>, LineError> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') {
            if let Some((at, name)) = open.take() {
                return Err(LineError::at(at, format!("the entry of {name} has no version")));
            }
            let Some(head) = line.strip_suffix(':') else {
                return Err(LineError::at(
                    i + 1,
                    format!("not an entry (`SPEC[, SPEC]:`): `{line}`"),
                ));
            };
            if head.trim_matches('"') == "__metadata" {
                continue;
            }
            let first = head.split(", ").next().unwrap_or(head);
            let Some(name) = name_of_spec(first) else {
                return Err(LineError::at(
                    i + 1,
                    format!("an entry whose spec names no package: `{head}`"),
                ));
            };
            open = Some((i + 1, name.to_owned()));
            continue;
        }
        let trimmed = line.trim();
        let version = trimmed
            .strip_prefix("version ")
            .or_else(|| trimmed.strip_prefix("version: "))
            .map(|v| v.trim().trim_matches('"'));
        if let (Some(v), Some((at, name))) = (version, open.as_ref())
            && line.starts_with("  ")
            && !line.starts_with("   ")
        {
            out.push(Package::locked(name.clone(), v, Some(*at)));
            open = None;
        }
    }
    if let Some((at, name)) = open {
        return Err(LineError::at(at, format!("the entry of {name} has no version")));
    }
    Ok(out)
}

/// The packages of a pnpm-lock.yaml: the keys of its `packages` map,
/// `name@version` (lockfile 9) or `/name@version` (6), a peer suffix
/// `(…)` dropped.
///
/// # Errors
/// Malformed YAML (at its line), a key that is not `name@version`.
pub fn pnpm_lock(text: &str) -> Result<Vec<Package>, LineError> {
    let doc: serde_json::Value = serde_saphyr::from_str(text).map_err(|e| {
        let message = e.to_string();
        LineError {
            line: line_in_message(&message),
            message: format!("not YAML: {}", message.lines().next().unwrap_or_default()),
        }
    })?;
    let mut out = Vec::new();
    let Some(packages) = doc.get("packages").and_then(|p| p.as_object()) else {
        return Ok(out);
    };
    for key in packages.keys() {
        let line = line_containing(text, key);
        let spec = key.trim_start_matches('/');
        let spec = spec.split('(').next().unwrap_or(spec);
        let name = name_of_spec(spec).ok_or_else(|| LineError {
            line,
            message: format!("a package key that is not `name@version`: `{key}`"),
        })?;
        out.push(Package::locked(name, &spec[name.len() + 1..], line));
    }
    Ok(out)
}

/// The line a parser's message names (`… at line 3 column 5`, `3:5`).
fn line_in_message(message: &str) -> Option<usize> {
    let re = regex::Regex::new(r"line (\d+)|^(\d+):\d+|at (\d+):\d+").ok()?;
    let c = re.captures(message)?;
    c.iter().skip(1).flatten().next()?.as_str().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_name_their_package() {
        assert_eq!(name_of_spec("pg@^8.11.0"), Some("pg"));
        assert_eq!(name_of_spec("\"@scope/x@npm:1.0\""), Some("@scope/x"));
        assert_eq!(name_of_spec("nope"), None);
    }
}
