//! `locklab try CRATE@VERSION…`: another version of a Rust pool crate,
//! built from locklab's driver for it ([`crate::try_build`]), run through
//! the matrix next to the built-in column of the same configuration, and
//! compared with it as `check --upgrade` compares two columns.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use locklab::baseline::Tolerance;

use crate::cli::TryArgs;
use crate::execute::execute;
use crate::output::emit;
use crate::try_build::{self, Asked, BuildOptions, Built};

/// One tried column and the built-in column it is compared with.
struct Pair {
    /// The built-in column.
    builtin: String,
    /// The built-in column hosted as the tried one is (the "before"),
    /// `ID+try-built-in`: both pools live in a program of their own behind
    /// the driver protocol, whose round trip moves the shares of the race
    /// cells (a cancel request sent from the adapter lands later).
    before: String,
    /// The tried column's id, `ID+try-VERSION` (or `+try-git-REV`, `+try-path`).
    tried: String,
}

/// Builds every asked crate, runs the pairs of columns, prints a diff per
/// pair. Exit 0 when no cell differs, 1 when one does or failed.
///
/// # Errors
/// A bad CRATE@VERSION; a version cargo cannot resolve (the registry's
/// answer); a driver that does not compile with it (the compiler's first
/// error and the driver file); as [`execute`].
pub fn try_crates(dir: &Path, args: &TryArgs) -> Result<ExitCode> {
    let asked: Vec<Asked> = args.crates.iter().map(|c| try_build::parse(c)).collect::<Result<_>>()?;
    let opts = BuildOptions {
        root: args.dir.clone().unwrap_or_else(try_build::default_root),
        offline: args.offline,
    };
    std::fs::create_dir_all(&opts.root).with_context(|| format!("cannot create {}", opts.root.display()))?;
    let registry = locklab_drivers::registry();
    // The built-in column runs the way the tried one does, in a program of
    // its own behind the driver protocol: `locklab pool-adapter ID`.
    let host = std::env::current_exe().context("the path of the locklab program")?;
    let mut pairs = Vec::new();
    let mut columns = String::new();
    for a in &asked {
        let built = try_build::build(a, &opts)?;
        for (id, _) in a.family.columns {
            let pair = pair_for(a, &built, id, &registry);
            if !args.run.driver.is_empty()
                && !args
                    .run
                    .driver
                    .iter()
                    .any(|d| d == &pair.builtin || d == &pair.tried || d == id)
            {
                continue;
            }
            let builtin_info = registry.iter().find(|d| d.info().id == pair.builtin).map(|d| d.info());
            let configuration = builtin_info.as_ref().map(|i| i.configuration).unwrap_or_default();
            let builtin_version = builtin_info.map(|i| i.crate_version).unwrap_or_default();
            let entry = |column: &str, version: &str, program: &Path, serves: &str| {
                format!(
                    "- id: {column}\n  package: {}\n  version: {version:?}\n  configuration: {configuration:?}\n  command: [{:?}, {:?}, {serves:?}]\n",
                    a.family.crate_name,
                    program.display().to_string(),
                    locklab_drivers::external::HOST_COMMAND,
                )
            };
            columns.push_str(&entry(&pair.tried, &built.version, &built.program, id));
            if !columns.contains(&format!("- id: {}\n", pair.before)) {
                columns.push_str(&entry(&pair.before, &builtin_version, &host, &pair.builtin));
            }
            pairs.push(pair);
        }
    }
    if pairs.is_empty() {
        bail!(
            "-d selects none of the tried columns; they are: {}",
            asked
                .iter()
                .flat_map(|a| a.family.columns.iter().map(|(id, _)| *id))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let file = opts.root.join(format!("columns-{}.yaml", std::process::id()));
    std::fs::write(&file, &columns).with_context(|| format!("cannot write {}", file.display()))?;
    let added = locklab_drivers::external::add_columns_file(&file).map_err(|e| anyhow::anyhow!("{e}"));
    // The file is read; the columns live on in this process only.
    let kept = opts.root.join("columns.yaml");
    let _ = std::fs::rename(&file, &kept);
    added?;
    if args.build_only {
        let mut text = String::new();
        for p in &pairs {
            let _ = writeln!(text, "{} (compared with {}, which is {})", p.tried, p.before, p.builtin);
        }
        let _ = writeln!(
            text,
            "columns file: {} (`locklab --columns {} run -d ID` runs them)",
            kept.display(),
            kept.display()
        );
        emit(&text)?;
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "locklab try: the columns are in {} (`locklab --columns {} run -d ID` runs one again without building)",
        kept.display(),
        kept.display()
    );
    let mut run = args.run.clone();
    run.driver = Vec::new();
    for p in &pairs {
        for id in [&p.before, &p.tried] {
            if !run.driver.contains(id) {
                run.driver.push(id.clone());
            }
        }
    }
    let report = execute(dir, &run)?;
    let max_lines = (!args.full).then_some(30);
    let mut text = String::new();
    let mut clean = true;
    let mut summary = Vec::new();
    for p in &pairs {
        let (diff, same) = crate::check::between_columns(
            &report,
            &p.before,
            &p.tried,
            Tolerance::default(),
            max_lines,
            "this run",
        )?;
        clean &= same;
        let _ = writeln!(
            text,
            "\n== {} → {} ({} hosted as the tried column is)",
            p.before, p.tried, p.builtin
        );
        text.push_str(&diff);
        let first = diff
            .lines()
            .find(|l| l.starts_with("locklab check:"))
            .unwrap_or_default();
        summary.push(format!(
            "  {} → {}: {}",
            p.before,
            p.tried,
            first.trim_start_matches("locklab check: ")
        ));
    }
    let _ = writeln!(
        text,
        "\nlocklab try: {} pair(s) of columns\n{}",
        pairs.len(),
        summary.join("\n")
    );
    emit(&text)?;
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The built-in column a tried column is compared with: the one of the
/// same crate at the same version and configuration when the build has one
/// (trying sqlx 0.8.6 compares with `sqlx-0.8`), else column `id` (the
/// current version's).
fn pair_for(asked: &Asked, built: &Built, id: &str, registry: &[Box<dyn locklab_drivers::Driver>]) -> Pair {
    let current = registry.iter().find(|d| d.info().id == id).map(|d| d.info());
    let same_version = current.as_ref().and_then(|cur| {
        registry
            .iter()
            .map(|d| d.info())
            .filter(|i| i.pooler.is_none() && i.crate_name == asked.family.crate_name)
            .filter(|i| i.configuration == cur.configuration)
            .find(|i| i.crate_version.split(' ').next() == Some(built.version.as_str()))
    });
    let builtin = same_version.map_or_else(|| id.to_owned(), |i| i.id.to_owned());
    Pair {
        before: format!("{builtin}{}built-in", locklab_drivers::try_kit::TRIED),
        builtin,
        tried: format!("{id}{}{}", locklab_drivers::try_kit::TRIED, built.label),
    }
}
