//! Where the local backend's PostgreSQL binaries come from: `--pg-bin` /
//! `LOCKLAB_PG_BIN`, or the cache `.cache/postgres/MAJOR` that the install
//! script fills on first use.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use super::super::{DEFAULT_PG_MAJOR, ServerOptions, workspace_root};

/// The install script shared by the harness and `just setup`.
pub fn install_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-postgres.sh")
}

/// Finds `postgres` and `initdb`: `--pg-bin`/`LOCKLAB_PG_BIN`, else the cache
/// `.cache/postgres/<major>/bin` under the workspace, else installs into the
/// cache with [`install_script`].
///
/// # Errors
/// A given directory without the binaries, or a failed install.
pub fn resolve_binaries(opts: &ServerOptions) -> Result<PathBuf> {
    let given = opts.pg_bin.clone().or_else(|| {
        std::env::var_os("LOCKLAB_PG_BIN")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    });
    if let Some(dir) = given {
        check_bin(&dir).with_context(|| {
            format!("LOCKLAB_PG_BIN/--pg-bin = {} is not a PostgreSQL bin directory (unset it to install binaries automatically)", dir.display())
        })?;
        return Ok(dir);
    }
    let major = opts.pg_major.unwrap_or(DEFAULT_PG_MAJOR);
    let dest = workspace_root().join(".cache/postgres").join(major.to_string());
    let bin = dest.join("bin");
    if check_bin(&bin).is_ok() {
        return Ok(bin);
    }
    eprintln!(
        "locklab: no PostgreSQL {major} binaries in {}; installing them (once)",
        dest.display()
    );
    let status = Command::new("bash")
        .arg(install_script())
        .arg(major.to_string())
        .arg(&dest)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .context("cannot run bash for the PostgreSQL install script")?;
    if !status.success() {
        bail!(
            "installing PostgreSQL {major} binaries failed ({status}); run `just setup` to see why, \
             or set LOCKLAB_PG_BIN to a directory with postgres and initdb, or LOCKLAB_DSN to use a running server"
        );
    }
    check_bin(&bin)?;
    Ok(bin)
}

fn check_bin(dir: &Path) -> Result<()> {
    for b in ["postgres", "initdb"] {
        let p = dir.join(b);
        if !p.is_file() {
            bail!("{} not found", p.display());
        }
    }
    Ok(())
}
