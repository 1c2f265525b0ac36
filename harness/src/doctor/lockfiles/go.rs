//! Go: `go.mod`'s `require` directives (one line, or a block).

use super::Package;
use crate::doctor::LineError;

/// The modules a go.mod requires, at their versions (`v5.7.1`, read as `5.7.1`).
///
/// # Errors
/// A `require` line without a module and a version (at its line), a block never closed.
pub fn go_mod(text: &str) -> Result<Vec<Package>, LineError> {
    let mut out = Vec::new();
    let mut block_from = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split("//").next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let entry = if block_from.is_some() {
            if line == ")" {
                block_from = None;
                continue;
            }
            line
        } else if let Some(rest) = line.strip_prefix("require") {
            let rest = rest.trim();
            if rest == "(" {
                block_from = Some(i + 1);
                continue;
            }
            rest
        } else {
            continue;
        };
        let fields: Vec<&str> = entry.split_whitespace().collect();
        match fields.as_slice() {
            [module, version] if version.starts_with('v') => {
                out.push(Package::locked(*module, version.trim_start_matches('v'), Some(i + 1)));
            }
            _ => {
                return Err(LineError::at(
                    i + 1,
                    format!("a require without a module and a version: `{entry}`"),
                ));
            }
        }
    }
    if let Some(from) = block_from {
        return Err(LineError::at(from, "a `require (` block that is never closed"));
    }
    Ok(out)
}
