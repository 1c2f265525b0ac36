//! Exact crate versions, read from the `Cargo.lock` of the build: the one
//! of the project `cargo` runs in (found from `CARGO_MANIFEST_DIR` upwards,
//! which `cargo run` and `cargo test` set), else the locklab workspace's,
//! embedded at build time (`build.rs`; empty for a crate built from a package),
//! unless the program names its own ([`use_lockfile`]).

use std::path::Path;
use std::sync::OnceLock;

const EMBEDDED: &str = include_str!(concat!(env!("OUT_DIR"), "/Cargo.lock"));

/// A lock file given by the program itself ([`use_lockfile`]).
static GIVEN: OnceLock<String> = OnceLock::new();

/// Reads crate versions from `text`, a `Cargo.lock`, from now on: a driver
/// built outside the workspace (`locklab try`) gives its own project's,
/// whose versions the embedded workspace lock file does not have. Has no
/// effect once a version has been read, or when called a second time.
pub fn use_lockfile(text: &str) {
    let _ = GIVEN.set(text.to_owned());
}

/// The lock file's text: one given by [`use_lockfile`], else the running
/// project's, else the embedded one.
fn lockfile() -> String {
    if let Some(text) = GIVEN.get() {
        return text.clone();
    }
    if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
        for d in Path::new(&dir).ancestors() {
            if let Ok(text) = std::fs::read_to_string(d.join("Cargo.lock")) {
                return text;
            }
        }
    }
    EMBEDDED.to_owned()
}

/// The version of `name` resolved in the build's `Cargo.lock`, e.g. `"0.14.2"`;
/// several versions are joined with `+`; `"unknown"` when the crate is not in the lock file.
pub fn crate_version(name: &str) -> String {
    crate_version_matching(name, "")
}

/// Like [`crate_version`], but only the versions equal to `prefix` or
/// starting with `prefix` followed by a dot (`"0.8"` matches `0.8.6`, not
/// `0.80.1`; `""` matches all): for a column built on a second version of a
/// crate pulled in under another name (`sqlx08 = { package = "sqlx", version = "0.8" }`).
pub fn crate_version_matching(name: &str, prefix: &str) -> String {
    static LOCK: OnceLock<Option<cargo_lock::Lockfile>> = OnceLock::new();
    let Some(lock) = LOCK.get_or_init(|| lockfile().parse().ok()) else {
        return "unknown".to_owned();
    };
    let versions: Vec<String> = lock
        .packages
        .iter()
        .filter(|p| p.name.as_str() == name)
        .map(|p| p.version.to_string())
        .filter(|v| prefix.is_empty() || v == prefix || v.strip_prefix(prefix).is_some_and(|r| r.starts_with('.')))
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
        // Two versions of one crate (sqlx 0.8 and 0.9): joined, and told apart by prefix.
        let sqlx = crate_version("sqlx");
        let both: Vec<&str> = sqlx.split('+').collect();
        assert_eq!(both.len(), 2, "sqlx resolved to {sqlx}");
        for v in &both {
            let major_minor: String = v.split('.').take(2).collect::<Vec<_>>().join(".");
            assert_eq!(crate_version_matching("sqlx", &major_minor), *v);
        }
        assert_eq!(crate_version_matching("sqlx", "999"), "unknown");
        // "0.8" does not match 0.80.x or 0.9.x.
        assert_eq!(crate_version_matching("sqlx", "0.80"), "unknown");
    }
}
