//! `locklab list`: the scenario families and the driver configurations.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use crate::output::emit;
use crate::selection::load;

/// Lists the scenarios of `dir` (one line per family) and the drivers; exit
/// code 1 when the scenario files do not load (the drivers are still listed).
///
/// # Errors
/// Writing to stdout failed.
pub fn list(dir: &Path) -> Result<ExitCode> {
    let mut text = format!("scenarios ({}):\n", dir.display());
    let loaded = load(dir);
    let mut families: Vec<(&str, usize, &str)> = Vec::new();
    for s in loaded.as_deref().unwrap_or_default() {
        match families.last_mut() {
            Some((f, n, _)) if *f == s.family => *n += 1,
            _ => families.push((&s.family, 1, first_sentence(&s.description))),
        }
    }
    let width = families.iter().map(|(f, _, _)| f.chars().count()).max().unwrap_or(0);
    for (family, n, what) in families {
        let runs = if n > 1 {
            format!(" ({n} parameter sets)")
        } else {
            String::new()
        };
        let what: String = if what.chars().count() > 100 {
            what.chars().take(99).chain(['…']).collect()
        } else {
            what.to_owned()
        };
        let _ = writeln!(text, "  {family:<width$}  {what}{runs}");
    }
    if let Err(e) = &loaded {
        let _ = writeln!(text, "  (not listed: {e:#})");
    }
    text.push_str("drivers:\n");
    let drivers: Vec<_> = locklab_drivers::registry().iter().map(|d| d.info()).collect();
    let id_width = drivers.iter().map(|i| i.id.chars().count()).max().unwrap_or(0);
    for i in drivers {
        let _ = writeln!(
            text,
            "  {:<id_width$}  {} {} — {}",
            i.id, i.crate_name, i.crate_version, i.configuration
        );
    }
    emit(&text)?;
    Ok(if loaded.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn first_sentence(s: &str) -> &str {
    s.split_once(". ").map(|(a, _)| a).unwrap_or(s)
}
