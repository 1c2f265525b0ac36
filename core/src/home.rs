//! Where locklab's files are: the scenario library (`scenarios/`), the
//! property files (`properties/`), the out-of-process columns
//! (`drivers/adapters/`) and what is installed on first use (`.cache/`).

use std::path::{Path, PathBuf};

/// The environment variable that names locklab's home: a checkout of the
/// locklab repository (or a copy of its `scenarios/`, `properties/` and
/// `drivers/adapters/`), for a project that depends on the packaged crates.
pub const HOME_VAR: &str = "LOCKLAB_HOME";

/// locklab's home: `LOCKLAB_HOME` when set and not empty, else the
/// workspace these crates were built from (the parent of `core/`), which a
/// project depending on locklab by path or by git has as it is.
///
/// A crate built from a package registry has no workspace around it: there
/// the directory this returns holds no `scenarios/`, and the lab's errors
/// name `LOCKLAB_HOME` ([`missing`]).
pub fn home() -> PathBuf {
    match std::env::var_os(HOME_VAR).filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
    }
}

/// The message for `what` (e.g. `the scenario library`) missing at `path`
/// under [`home`]: where it was looked for and how to point locklab at a
/// checkout.
pub fn missing(what: &str, path: &Path) -> String {
    format!(
        "{what} is not at {}: locklab looks for its files under {HOME_VAR} (unset: the workspace it was built \
         from); set {HOME_VAR} to a checkout of the locklab repository",
        path.display()
    )
}
