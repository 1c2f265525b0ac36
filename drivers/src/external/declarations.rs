//! The out-of-process columns declared in `drivers/adapters/adapters.yaml`
//! ([`AdapterSpec`] each), and the install command each runs once per
//! process before its adapter starts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::Deserialize;

use super::ExternalDriver;

/// One declared out-of-process column (an entry of `drivers/adapters/adapters.yaml`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterSpec {
    /// Column id, e.g. `asyncpg-0.31`.
    pub id: String,
    /// The package under test, e.g. `asyncpg`.
    pub package: String,
    /// The pinned version; the adapter's `hello` reports the installed one,
    /// which the report shows once the adapter has run.
    pub version: String,
    /// The configuration, in the library's own terms.
    pub configuration: String,
    /// Program and arguments that install the adapter's program, run once per
    /// process before the adapter first starts, in the workspace root: it
    /// must be idempotent, quick when there is nothing to do, and safe to run
    /// from several processes at once.
    #[serde(default)]
    pub install: Vec<String>,
    /// Program and arguments of the adapter, relative to the workspace root.
    pub command: Vec<String>,
}

/// The workspace root (paths in the declarations are relative to it).
pub(super) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The declarations file.
pub fn declarations_file() -> PathBuf {
    root().join("drivers/adapters/adapters.yaml")
}

/// Reads `path` as a list of [`AdapterSpec`].
///
/// # Errors
/// The file cannot be read, or is not such a list (with serde-saphyr's line
/// and column), or repeats an id.
pub fn read_declarations(path: &Path) -> Result<Vec<AdapterSpec>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let specs: Vec<AdapterSpec> = serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    for (i, s) in specs.iter().enumerate() {
        if specs[..i].iter().any(|o| o.id == s.id) {
            return Err(format!("{}: driver id '{}' is declared twice", path.display(), s.id));
        }
        if s.command.is_empty() {
            return Err(format!("{}: driver '{}' has an empty command", path.display(), s.id));
        }
    }
    Ok(specs)
}

/// The declared columns, read once; a broken file is reported once on
/// stderr and gives no columns.
pub fn declared() -> Vec<ExternalDriver> {
    static SPECS: OnceLock<Vec<AdapterSpec>> = OnceLock::new();
    SPECS
        .get_or_init(|| {
            read_declarations(&declarations_file()).unwrap_or_else(|e| {
                eprintln!("locklab: no out-of-process drivers: {e}");
                Vec::new()
            })
        })
        .iter()
        .cloned()
        .map(ExternalDriver::new)
        .collect()
}

/// The adapter's command with its program made absolute, after running its
/// `install` command (once per process and column: an install command must
/// return at once when it has nothing to do). It runs even when the program
/// exists, since another process may be installing it right now (a virtual
/// environment's `python` exists before its packages do); the install
/// command's own lock makes this one wait.
pub(super) fn install(spec: &AdapterSpec) -> Result<Vec<String>, String> {
    static TRIED: OnceLock<Mutex<HashMap<String, Result<(), String>>>> = OnceLock::new();
    let mut command = spec.command.clone();
    if command[0].contains('/') {
        command[0] = root().join(&command[0]).to_string_lossy().into_owned();
    }
    if spec.install.is_empty() {
        return Ok(command);
    }
    let tried = TRIED.get_or_init(Default::default);
    let mut tried = tried.lock().unwrap_or_else(|p| p.into_inner());
    let outcome = tried.entry(spec.id.clone()).or_insert_with(|| {
        if !Path::new(&command[0]).exists() {
            eprintln!(
                "locklab: installing the adapter of driver '{}' (once): {}",
                spec.id,
                spec.install.join(" ")
            );
        }
        let out = std::process::Command::new(&spec.install[0])
            .args(&spec.install[1..])
            .current_dir(root())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", spec.install[0]))?;
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            eprint!("{err}");
            Ok(())
        } else {
            let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
            let line = format!(
                "driver '{}' is not available: its install ({}) failed: {last}",
                spec.id,
                spec.install.join(" ")
            );
            eprintln!("locklab: {line}");
            Err(line)
        }
    });
    outcome.clone().map(|()| command)
}
