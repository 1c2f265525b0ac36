//! Rust: `Cargo.lock`, its packages that the project's own crates depend
//! on. The project's crates are those its `Cargo.toml` beside the lockfile
//! names (the `[package]`, and the `[workspace]`'s members); a package
//! only a dependency locks (a pool crate under a library, or every pool
//! of locklab's under a path dependency on locklab) is not the project's.
//! Without a readable `Cargo.toml` every package counts.

use std::path::Path;

use super::{Package, toml_package_tables};
use crate::doctor::{LineError, line_of};

/// The packages of a `Cargo.lock` the project's own crates depend on
/// (normal, dev and build dependencies alike: Cargo.lock does not tell them apart).
///
/// # Errors
/// Malformed TOML, a package without `name` and `version`.
pub fn cargo_lock(text: &str, path: &Path) -> Result<Vec<Package>, LineError> {
    let all = toml_package_tables(text)?;
    let Some(own) = own_crates(path) else {
        return Ok(all);
    };
    let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| LineError {
        line: e.span().map(|s| line_of(text, s.start)),
        message: format!("not TOML: {}", e.message()),
    })?;
    // `dependencies = ["sqlx 0.9.0", "locklab"]` of each own crate: a name,
    // with the version where several are locked.
    let mut direct: Vec<(String, Option<String>)> = Vec::new();
    for p in doc.get("package").and_then(|p| p.as_array()).into_iter().flatten() {
        let name = p.get("name").and_then(|n| n.as_str()).unwrap_or_default();
        if !own.iter().any(|o| o == name) || p.get("source").is_some() {
            continue;
        }
        for d in p.get("dependencies").and_then(|d| d.as_array()).into_iter().flatten() {
            let mut words = d.as_str().unwrap_or_default().split_whitespace();
            let dep = words.next().unwrap_or_default().to_owned();
            direct.push((dep, words.next().map(str::to_owned)));
        }
    }
    Ok(all
        .into_iter()
        .filter(|p| {
            direct
                .iter()
                .any(|(n, v)| n == &p.name && v.as_ref().is_none_or(|v| Some(v) == p.version.as_ref()))
        })
        .collect())
}

/// The names of the project's own crates, from the `Cargo.toml` beside
/// `lockfile`: its package, and its workspace's members (a member path
/// ending in `/*` is every directory there). `None` when it cannot be read.
fn own_crates(lockfile: &Path) -> Option<Vec<String>> {
    let dir = lockfile.parent()?;
    let manifest: toml::Table = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?.parse().ok()?;
    let mut names = Vec::new();
    let package_name = |m: &toml::Table| {
        m.get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .map(str::to_owned)
    };
    names.extend(package_name(&manifest));
    let members = manifest
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(|m| m.as_array());
    for member in members.into_iter().flatten().filter_map(|m| m.as_str()) {
        let dirs: Vec<std::path::PathBuf> = match member.strip_suffix("/*") {
            Some(parent) => std::fs::read_dir(dir.join(parent))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .collect(),
            None => vec![dir.join(member)],
        };
        for d in dirs {
            let m: Option<toml::Table> = std::fs::read_to_string(d.join("Cargo.toml"))
                .ok()
                .and_then(|t| t.parse().ok());
            names.extend(m.as_ref().and_then(package_name));
        }
    }
    (!names.is_empty()).then_some(names)
}
