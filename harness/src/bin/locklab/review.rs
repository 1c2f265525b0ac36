//! `locklab review`: the pending baseline files `check` wrote
//! (`NAME.json.new` beside `NAME.json`), each shown as its diff with the
//! accepted file (verdict changes first, as `check` prints them) and
//! accepted (renamed over `NAME.json`), rejected (removed) or skipped: one
//! key at a time in a terminal, as `cargo insta review` does, or by name.
//! And `locklab migrate-baseline`, which makes a baseline directory of an
//! old whole-matrix file.

use std::io::{IsTerminal, Write as _};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use locklab::baseline::{self, BaselineDir, ScenarioBaseline, Tolerance, dir};

use crate::cli::ReviewArgs;
use crate::cli::{DIFF_LINES, default_baseline};
use crate::output::emit;

/// `locklab review`: accepts or rejects the named pending files, every one
/// (`--accept-all`, `--reject-all`), or, with none named, in a terminal,
/// one at a time by key; without a terminal, prints each pending diff and
/// exits 1 if there is any.
///
/// # Errors
/// A name with no pending file (naming those there are); a file that does
/// not load; I/O errors.
pub fn review(args: &ReviewArgs) -> Result<ExitCode> {
    let path = args.baseline.clone().unwrap_or_else(default_baseline);
    let max_lines = (!args.full).then_some(DIFF_LINES);
    let pending = BaselineDir::pending(&path)?;
    let by_name = !args.accept.is_empty() || !args.reject.is_empty() || args.accept_all || args.reject_all;
    if by_name {
        let known = |name: &String| -> Result<()> {
            if pending.contains(name) {
                return Ok(());
            }
            bail!(
                "no pending file for scenario '{name}' in {} (pending: {})",
                path.display(),
                if pending.is_empty() {
                    "none".to_owned()
                } else {
                    pending.join(", ")
                }
            )
        };
        for name in args.accept.iter().chain(&args.reject) {
            known(name)?;
        }
        if let Some(name) = args.accept.iter().find(|n| args.reject.contains(n)) {
            bail!("'{name}' is both accepted and rejected");
        }
        let mut out = String::new();
        for name in &pending {
            if args.accept_all || args.accept.contains(name) {
                accept(&path, name)?;
                out.push_str(&format!("accepted {name}\n"));
            } else if args.reject_all || args.reject.contains(name) {
                reject(&path, name)?;
                out.push_str(&format!("rejected {name}\n"));
            }
        }
        let left = BaselineDir::pending(&path)?;
        if !left.is_empty() {
            out.push_str(&format!("still pending: {}\n", left.join(", ")));
        }
        emit(&out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if pending.is_empty() {
        emit(&format!("no pending baseline files in {}\n", path.display()))?;
        return Ok(ExitCode::SUCCESS);
    }
    if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
        interactive(&path, max_lines)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = String::new();
    for name in &pending {
        out.push_str(&diff(&path, name, max_lines)?);
        out.push('\n');
    }
    out.push_str(&format!(
        "{} pending file(s) in {}: {}\nAccept or reject them in a terminal with `cargo locklab review`, or by name: \
         --accept NAME, --reject NAME, --accept-all.\n",
        pending.len(),
        path.display(),
        pending.join(", ")
    ));
    emit(&out)?;
    Ok(ExitCode::from(1))
}

/// Each pending file of `path` in turn: its diff, then one key: `a`
/// accepts, `r` rejects, `s` (or Enter) skips, `q` skips the rest. Prints
/// what was done at the end.
///
/// # Errors
/// The terminal cannot be read; a file does not load; I/O errors.
pub fn interactive(path: &Path, max_lines: Option<usize>) -> Result<()> {
    let pending = BaselineDir::pending(path)?;
    let term = console::Term::stdout();
    let (mut accepted, mut rejected, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    for (i, name) in pending.iter().enumerate() {
        let text = diff(path, name, max_lines)?;
        term.write_str(&format!("\n── {} of {}: {name} ──\n{text}\n", i + 1, pending.len()))?;
        loop {
            term.write_str("  a accept · r reject · s skip · q quit: ")?;
            std::io::stdout().flush()?;
            let key = term.read_key().context("cannot read a key from the terminal")?;
            let choice = match key {
                console::Key::Char(c) => c.to_ascii_lowercase(),
                console::Key::Enter => 's',
                console::Key::Escape => 'q',
                _ => continue,
            };
            match choice {
                'a' => {
                    accept(path, name)?;
                    term.write_line("accepted")?;
                    accepted.push(name.clone());
                }
                'r' => {
                    reject(path, name)?;
                    term.write_line("rejected")?;
                    rejected.push(name.clone());
                }
                's' => {
                    term.write_line("skipped")?;
                    skipped.push(name.clone());
                }
                'q' => {
                    term.write_line("quit")?;
                    skipped.extend(pending[i..].iter().cloned());
                    return summary(&term, &accepted, &rejected, &skipped);
                }
                _ => continue,
            }
            break;
        }
    }
    summary(&term, &accepted, &rejected, &skipped)
}

/// The line after an interactive review.
fn summary(term: &console::Term, accepted: &[String], rejected: &[String], skipped: &[String]) -> Result<()> {
    let list = |v: &[String]| {
        if v.is_empty() { "none".to_owned() } else { v.join(", ") }
    };
    term.write_line(&format!(
        "\nreview: accepted {}; rejected {}; still pending {}",
        list(accepted),
        list(rejected),
        list(skipped)
    ))?;
    Ok(())
}

/// Renames `NAME.json.new` over `NAME.json`.
fn accept(path: &Path, name: &str) -> Result<()> {
    let (from, to) = (dir::pending_path(path, name), dir::accepted_path(path, name));
    ScenarioBaseline::load(&from)?;
    std::fs::rename(&from, &to).with_context(|| format!("cannot rename {} to {}", from.display(), to.display()))
}

/// Removes `NAME.json.new`.
fn reject(path: &Path, name: &str) -> Result<()> {
    let file = dir::pending_path(path, name);
    std::fs::remove_file(&file).with_context(|| format!("cannot remove {}", file.display()))
}

/// The diff of scenario `name`'s pending file with its accepted one (with
/// none, a file of no cells), as `check` prints it: property verdicts that
/// changed first, then the cells. Race rows compare by the race rule over
/// the whole directory's race rows.
fn diff(path: &Path, name: &str, max_lines: Option<usize>) -> Result<String> {
    let pending = ScenarioBaseline::load(&dir::pending_path(path, name))?;
    let accepted_file = dir::accepted_path(path, name);
    let accepted = if accepted_file.is_file() {
        Some(ScenarioBaseline::load(&accepted_file)?)
    } else {
        None
    };
    let race_rows = BaselineDir::load(path).map_or(0, |d| d.race_rows());
    let before = match &accepted {
        Some(a) => a.as_baseline(race_rows),
        None => ScenarioBaseline {
            cells: Vec::new(),
            drivers: Default::default(),
            ..pending.clone()
        }
        .as_baseline(race_rows),
    };
    let after = pending.as_baseline(race_rows);
    let mut comparison = baseline::compare(&before, &after, Tolerance::default(), &|_| true);
    if let Ok(properties) = locklab::properties::shipped_cached() {
        comparison.judge(properties, &before, &after);
    }
    let mut text = String::new();
    if accepted.is_none() {
        text.push_str(&format!(
            "{name}: a new scenario, no accepted file; {} cell(s) over {} column(s)\n",
            after.cells.len(),
            after.drivers.len()
        ));
    }
    text.push_str(&comparison.render(
        &before,
        &accepted_file,
        &format!("{} at {}", pending.generated_at, short_commit(&pending)),
        max_lines,
    ));
    Ok(text)
}

/// The pending file's commit, shortened, or "an unknown commit".
fn short_commit(file: &ScenarioBaseline) -> String {
    file.git_commit
        .as_deref()
        .map_or("an unknown commit".to_owned(), |c| c[..c.len().min(12)].to_owned())
}

/// `locklab migrate-baseline FILE DIR`.
///
/// # Errors
/// As [`baseline::migrate::migrate`].
pub fn migrate(file: &Path, into: &Path) -> Result<ExitCode> {
    let done = baseline::migrate::migrate(file, into)?;
    emit(&format!(
        "wrote {} file(s) into {}; checked: every one of the {} cell(s) of {} is there, all {} value(s) equal\n",
        done.files,
        into.display(),
        done.cells,
        file.display(),
        done.values
    ))?;
    Ok(ExitCode::SUCCESS)
}
