//! Loading the scenarios and picking what `-s` and `-d` select.

use std::path::Path;

use anyhow::{Result, bail};
use locklab::scenario::{self, Scenario};

/// The scenarios of `dir`, in file order.
///
/// # Errors
/// Any invalid scenario file (all their errors, one per line).
pub fn load(dir: &Path) -> Result<Vec<Scenario>> {
    scenario::load_dir(dir).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        anyhow::anyhow!("invalid scenario files:\n{}", lines.join("\n"))
    })
}

/// The items of `all` whose `name` is in `wanted` (empty: all of them), in
/// the order of `all`; `what` names the kind of item in errors.
///
/// # Errors
/// A wanted name no item has (the message lists the known ones).
pub fn select<T>(all: Vec<T>, wanted: &[String], name: impl Fn(&T) -> String, what: &str) -> Result<Vec<T>> {
    if wanted.is_empty() {
        return Ok(all);
    }
    let names: Vec<String> = all.iter().map(&name).collect();
    for w in wanted {
        if !names.contains(w) {
            bail!("unknown {what} '{w}'; known {what}s: {}", names.join(", "));
        }
    }
    Ok(all.into_iter().filter(|x| wanted.contains(&name(x))).collect())
}

/// The scenarios named by `-s`: a file's name selects all its parameter sets,
/// `name[param=value]` one of them.
///
/// # Errors
/// An unknown name (the message lists the known scenarios, or the parameter
/// sets of the named file).
pub fn select_scenarios(all: Vec<Scenario>, wanted: &[String]) -> Result<Vec<Scenario>> {
    if wanted.is_empty() {
        return Ok(all);
    }
    for w in wanted {
        if !all.iter().any(|s| &s.name == w || &s.family == w) {
            let family = w.split('[').next().unwrap_or_default();
            let sets: Vec<&str> = all
                .iter()
                .filter(|s| s.family == family && s.name != s.family)
                .map(|s| s.name.as_str())
                .collect();
            if !sets.is_empty() {
                bail!(
                    "unknown scenario '{w}'; the parameter sets of '{family}' are: {}",
                    sets.join(", ")
                );
            }
            let mut names: Vec<&str> = all.iter().map(|s| s.family.as_str()).collect();
            names.dedup();
            bail!("unknown scenario '{w}'; known scenarios: {}", names.join(", "));
        }
    }
    Ok(all
        .into_iter()
        .filter(|s| wanted.iter().any(|w| *w == s.name || *w == s.family))
        .collect())
}

/// The scenarios of `all` that carry any of the tags `tags` (empty: all of
/// them).
///
/// # Errors
/// A tag no scenario may carry (the message lists the known ones), or one
/// that no scenario of the selection carries.
pub fn select_tagged(all: Vec<Scenario>, tags: &[String]) -> Result<Vec<Scenario>> {
    if tags.is_empty() {
        return Ok(all);
    }
    for t in tags {
        if !scenario::TAGS.iter().any(|(k, _)| k == t) {
            let known: Vec<String> = scenario::TAGS.iter().map(|(k, what)| format!("{k} ({what})")).collect();
            bail!("unknown tag '{t}'; known tags: {}", known.join(", "));
        }
    }
    let out: Vec<Scenario> = all
        .into_iter()
        .filter(|s| s.tags.iter().any(|t| tags.contains(t)))
        .collect();
    if out.is_empty() {
        bail!("no scenario of the selection has the tag {}", tags.join(" or "));
    }
    Ok(out)
}
