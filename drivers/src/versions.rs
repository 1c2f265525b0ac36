//! Exact crate versions, read from the workspace `Cargo.lock` embedded at build time.

use std::sync::OnceLock;

const LOCKFILE: &str = include_str!("../../Cargo.lock");

/// The version of `name` resolved in the workspace `Cargo.lock`, e.g. `"0.14.2"`;
/// several versions are joined with `+`; `"unknown"` when the crate is not in the lock file.
pub fn crate_version(name: &str) -> String {
    static LOCK: OnceLock<Option<cargo_lock::Lockfile>> = OnceLock::new();
    let Some(lock) = LOCK.get_or_init(|| LOCKFILE.parse().ok()) else {
        return "unknown".to_owned();
    };
    let versions: Vec<String> = lock
        .packages
        .iter()
        .filter(|p| p.name.as_str() == name)
        .map(|p| p.version.to_string())
        .collect();
    if versions.is_empty() {
        "unknown".to_owned()
    } else {
        versions.join("+")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_crates_resolve_to_a_version() {
        for name in ["tokio-postgres", "deadpool-postgres", "bb8-postgres", "sqlx"] {
            let v = crate_version(name);
            assert!(v.split('.').count() >= 3, "{name} resolved to {v}");
        }
        assert_eq!(crate_version("no-such-crate-here"), "unknown");
    }
}
