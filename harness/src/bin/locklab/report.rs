//! `locklab report`: run a selection and write the report files (and, with
//! `--screenshot`, index.png).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use locklab::report::Format;
use locklab::server;

use crate::cli::ReportArgs;
use crate::execute::execute;
use crate::output::{emit, exit_for};
use crate::run::summary;
use locklab_core::signals::Interrupts;

/// Size of the `index.png` screenshot, in CSS px: wide enough for the
/// overview's columns, tall enough for its rows.
const SHOT_WIDTH: u32 = 1800;
const SHOT_HEIGHT: u32 = 1700;

/// Runs the selection, writes the report's files into `--out` (default:
/// `reports/`, only for the whole matrix of this repository's scenarios:
/// `custom_dir` says whether another directory was given) and prints what
/// it wrote and the summary. Written into this repository's `reports/`, it
/// also rewrites the generated findings of the README and the book
/// ([`locklab::report::regions`]). Exit code 1 when a run failed (a cell that
/// varied between repeats is no failure: the variation rule).
///
/// # Errors
/// A selection without `--out`; a `--from` file that is not a matrix.json;
/// `--screenshot` without the html format or
/// without Chromium (both before the runs); as [`execute`]; files that cannot
/// be written; a screenshot that failed (after the files are written).
pub fn report(dir: &Path, custom_dir: bool, args: &ReportArgs) -> Result<ExitCode> {
    let ReportArgs {
        run,
        out,
        json,
        format,
        screenshot,
        from,
    } = args;
    // A user's own columns (--columns) are never written into this repository's reports/.
    let yours = !locklab_drivers::external::user_columns().is_empty();
    let partial = !run.scenario.is_empty()
        || !run.tag.is_empty()
        || !run.driver.is_empty()
        || custom_dir
        || run.shard.is_some()
        || yours;
    let out: PathBuf = match (out, from) {
        (Some(out), _) => out.clone(),
        // Re-rendered where it is (reports/matrix.json into reports/).
        (None, Some(file)) => file.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf),
        (None, None) if partial => bail!(
            "`report` with --scenario, --driver, --shard, another scenario directory or columns of your own \
             (--columns) would replace locklab's matrix in reports/; give --out DIR, or use `run`"
        ),
        (None, None) => server::workspace_root().join("reports"),
    };
    let format: Vec<Format> = format.iter().map(|w| w.0).collect();
    if *screenshot && !format.contains(&Format::Html) {
        bail!("--screenshot needs the html format (--format …,html)");
    }
    if *screenshot {
        // Fail before the runs, not after them.
        locklab::browser::find_chromium()?;
    }
    let report = match from {
        Some(file) => locklab::judge::load(file)?,
        None => execute(dir, run)?,
    };
    let mut text = String::new();
    for p in report.write(&out, &format)? {
        let _ = writeln!(text, "wrote {}", p.display());
    }
    // This repository's reports/: the README's and the book's findings follow them.
    let root = server::workspace_root();
    if !partial && crate::output::same_dir(&out, &root.join("reports")) {
        for p in locklab::report::regions::sync(&report, &root)? {
            let _ = writeln!(text, "updated the generated findings in {}", p.display());
        }
    }
    text.push_str(&summary(&report));
    if *json {
        eprint!("{text}");
        emit(&report.to_json()?)?;
    } else {
        emit(&text)?;
    }
    if *screenshot {
        // After the results: a browser failure must not hide them.
        let png = out.join("index.png");
        take_screenshot(&out.join("index.html"), &png).context("no screenshot (the report files are written)")?;
        eprintln!("wrote {}", png.display());
    }
    Ok(exit_for(&report))
}

/// Screenshots `page` into `png` in headless Chromium.
///
/// # Errors
/// The browser failed; [`crate::signals::Interrupted`] on SIGINT or SIGTERM,
/// after ending Chromium and removing its profile.
fn take_screenshot(page: &Path, png: &Path) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (page, png) = (page.to_path_buf(), png.to_path_buf());
    let outcome = rt.block_on(async move {
        let mut interrupts = Interrupts::install();
        let shot =
            tokio::task::spawn_blocking(move || locklab::browser::screenshot(&page, &png, SHOT_WIDTH, SHOT_HEIGHT));
        tokio::select! {
            r = shot => Ok(r.context("the screenshot task failed").and_then(|r| r)),
            signal = interrupts.next() => Err(signal),
        }
    });
    match outcome {
        Ok(shot) => shot,
        Err(signal) => {
            eprintln!("locklab: {} during the screenshot: cleaning up", signal.what);
            locklab::browser::kill_running();
            // The screenshot thread is not waited for.
            rt.shutdown_background();
            Err(signal.into())
        }
    }
}
