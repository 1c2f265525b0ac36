//! Ruby: `Gemfile.lock`'s `specs:` (a gem at four spaces, `name (version)`).

use super::Package;
use crate::doctor::LineError;

/// The gems a Gemfile.lock resolved. A platform suffix (`1.5.4-x86_64-linux`) is kept out of the version.
///
/// # Errors
/// A spec line (four spaces in) that is not `name (version)`, at its line.
pub fn gemfile_lock(text: &str) -> Result<Vec<Package>, LineError> {
    let mut out = Vec::new();
    let mut in_specs = false;
    for (i, line) in text.lines().enumerate() {
        if !line.starts_with(' ') {
            in_specs = false;
            continue;
        }
        if line.trim() == "specs:" {
            in_specs = true;
            continue;
        }
        if !in_specs || !line.starts_with("    ") || line.starts_with("     ") {
            continue;
        }
        let spec = line.trim();
        let parsed = spec
            .split_once(" (")
            .and_then(|(name, rest)| Some((name, rest.strip_suffix(')')?)));
        let Some((name, version)) = parsed.filter(|(n, v)| !n.contains(' ') && !v.is_empty()) else {
            return Err(LineError::at(
                i + 1,
                format!("a spec that is not `name (version)`: `{spec}`"),
            ));
        };
        let version = version.split('-').next().unwrap_or(version);
        out.push(Package::locked(name, version, Some(i + 1)));
    }
    Ok(out)
}
