//! `locklab validate`: checks scenario and property files without running them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use locklab::{properties, scenario};

use crate::output::emit;

/// Whether `p` is checked as properties: a directory named `properties`,
/// or a file in one.
fn is_properties(p: &Path) -> bool {
    let dir = if p.is_dir() { Some(p) } else { p.parent() };
    dir.and_then(Path::file_name).is_some_and(|n| n == "properties")
}

/// Checks `paths` (files or directories; none: `dir` and the shipped
/// `properties/`), printing counts on stdout when all are valid (exit code
/// 0), else every error on stderr (1). Property files are checked against
/// the scenarios of `dir`: a scenario, parameter set or record they name
/// must exist there.
///
/// # Errors
/// Writing to stdout failed.
pub fn validate(dir: &Path, paths: &[PathBuf]) -> Result<ExitCode> {
    let paths = if paths.is_empty() {
        vec![dir.to_path_buf(), properties::shipped_dir()]
    } else {
        paths.to_vec()
    };
    let (mut files, mut instances, mut property_files, mut errors) = (0, 0, 0, Vec::new());
    let mut known: Option<Vec<scenario::Scenario>> = None;
    for p in &paths {
        if is_properties(p) {
            if known.is_none() {
                match scenario::load_dir(dir) {
                    Ok(s) => known = Some(s),
                    Err(mut e) => {
                        errors.append(&mut e);
                        continue;
                    }
                }
            }
            let scenarios = known.as_deref().unwrap_or_default();
            let loaded = if p.is_dir() {
                properties::load_dir(p, scenarios).map(|v| v.len())
            } else {
                properties::load_file(p, scenarios).map(|_| 1)
            };
            match loaded {
                Ok(n) => property_files += n,
                Err(mut e) => errors.append(&mut e),
            }
            continue;
        }
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
        let mut text = String::new();
        if files > 0 {
            text.push_str(&format!(
                "{files} scenario file(s) valid ({instances} scenario(s) with their parameter sets)\n"
            ));
        }
        if property_files > 0 {
            text.push_str(&format!("{property_files} property file(s) valid\n"));
        }
        emit(&text)?;
        return Ok(ExitCode::SUCCESS);
    }
    for e in &errors {
        eprintln!("{e}");
    }
    eprintln!("locklab: {} error(s)", errors.len());
    Ok(ExitCode::from(1))
}
