//! `locklab validate`: checks scenario files without running them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use locklab::scenario;

use crate::output::emit;

/// Checks `paths` (files or directories; none: `dir`), printing a count on
/// stdout when all are valid (exit code 0), else every error on stderr (1).
///
/// # Errors
/// Writing to stdout failed.
pub fn validate(dir: &Path, paths: &[PathBuf]) -> Result<ExitCode> {
    let paths = if paths.is_empty() {
        vec![dir.to_path_buf()]
    } else {
        paths.to_vec()
    };
    let (mut files, mut instances, mut errors) = (0, 0, Vec::new());
    for p in &paths {
        let loaded = if p.is_dir() {
            scenario::load_dir(p)
        } else {
            scenario::load_file(p)
        };
        match loaded {
            Ok(v) => {
                let mut fams: Vec<&str> = v.iter().map(|s| s.family.as_str()).collect();
                fams.dedup();
                files += fams.len();
                instances += v.len();
            }
            Err(mut e) => errors.append(&mut e),
        }
    }
    if errors.is_empty() {
        emit(&format!(
            "{files} scenario file(s) valid ({instances} scenario(s) with their parameter sets)\n"
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    for e in &errors {
        eprintln!("{e}");
    }
    eprintln!("locklab: {} error(s)", errors.len());
    Ok(ExitCode::from(1))
}
