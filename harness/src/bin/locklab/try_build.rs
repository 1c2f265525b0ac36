//! `locklab try`'s build: a scratch Cargo project outside the workspace
//! (one per crate and version, under `--dir`) that depends on the kit
//! (`locklab-drivers` without its `columns` feature), on the requested
//! version of the pool crate, and whose `main` is the family's driver
//! macro served over the driver protocol
//! (`locklab_drivers::try_kit::serve_main`). All scratch projects share
//! one target directory, so cargo's own cache makes a second `try` of a
//! version (or of a crate whose dependencies another one built) quick.

use std::fmt::Write as _;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use locklab_drivers::try_kit::{COMMON, Dep, Family, families, family};

/// Where the pool crate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A version requirement as `Cargo.toml` takes it: `0.12`, `=0.12.2`.
    Version(String),
    /// A git repository, at a revision (a commit, tag or branch) or its default branch.
    Git {
        /// The repository's URL.
        url: String,
        /// The revision, if given after `#`.
        rev: Option<String>,
    },
    /// A directory on this machine holding the crate (or a workspace with it).
    Path(PathBuf),
}

/// One `CRATE@VERSION` of the command line.
#[derive(Clone, Debug)]
pub struct Asked {
    /// The family the crate belongs to.
    pub family: Family,
    /// Where the crate comes from.
    pub source: Source,
    /// What was given, for messages.
    pub text: String,
}

/// Parses `CRATE@VERSION`, `CRATE@git+URL[#REV]` or `CRATE@path:DIR`.
///
/// # Errors
/// No `@`, an empty version, or a crate no family tests (the message lists them).
pub fn parse(text: &str) -> Result<Asked> {
    let Some((name, version)) = text.split_once('@') else {
        bail!("`{text}`: give CRATE@VERSION, e.g. deadpool-postgres@0.12 (or CRATE@git+URL#REV, CRATE@path:DIR)");
    };
    let Some(family) = family(name) else {
        let known: Vec<String> = families()
            .iter()
            .map(|f| {
                if f.aliases.is_empty() {
                    f.crate_name.to_owned()
                } else {
                    format!("{} (or {})", f.crate_name, f.aliases.join(", "))
                }
            })
            .collect();
        bail!(
            "`{text}`: no Rust column tests the crate '{name}'; the pool crates locklab builds are: {}",
            known.join(", ")
        );
    };
    let source = if let Some(git) = version.strip_prefix("git+") {
        let (url, rev) = match git.split_once('#') {
            Some((url, rev)) => (url.to_owned(), Some(rev.to_owned()).filter(|r| !r.is_empty())),
            None => (git.to_owned(), None),
        };
        Source::Git { url, rev }
    } else if let Some(dir) = version.strip_prefix("path:") {
        let dir = std::fs::canonicalize(dir).with_context(|| format!("`{text}`: {dir}"))?;
        Source::Path(dir)
    } else if version.trim().is_empty() {
        bail!("`{text}`: no version after '@' (e.g. {name}@0.12)");
    } else {
        Source::Version(version.trim().to_owned())
    };
    Ok(Asked {
        family,
        source,
        text: text.to_owned(),
    })
}

/// A built driver.
#[derive(Clone, Debug)]
pub struct Built {
    /// The program serving the family's columns (`PROGRAM pool-adapter ID`).
    pub program: PathBuf,
    /// The resolved version of the tried crate, e.g. `0.12.2`.
    pub version: String,
    /// A short label of the source for column ids: the version, or
    /// `git-REV`, or `path`.
    pub label: String,
}

/// How to build.
pub struct BuildOptions {
    /// The directory of the scratch projects and their shared target directory.
    pub root: PathBuf,
    /// Pass `--offline` to cargo (the crates must be in cargo's cache).
    pub offline: bool,
}

/// The default `--dir`: `$XDG_CACHE_HOME/locklab/try`, else `~/.cache/locklab/try`.
pub fn default_root() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("locklab").join("try")
}

/// A file or directory name from `text`: letters, digits, `.`, `-`, `_` kept.
fn slug(text: &str) -> String {
    let s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    s.chars().take(80).collect()
}

/// The cargo to run: the one that runs us (`CARGO`), else `cargo` on PATH.
fn cargo() -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut c = Command::new(program);
    // Not the variables of a `cargo run` / `cargo test` around us.
    for v in [
        "CARGO_MANIFEST_DIR",
        "CARGO_PKG_NAME",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
    ] {
        c.env_remove(v);
    }
    c
}

/// One `[dependencies]` line.
fn dep_line(d: &Dep, source: &Source, pin: Option<&str>) -> String {
    let mut fields = vec![format!("package = \"{}\"", d.package)];
    match (d.version, source) {
        _ if pin.is_some() => fields.push(format!("version = \"={}\"", pin.unwrap_or_default())),
        (Some(v), _) => fields.push(format!("version = \"{v}\"")),
        (None, Source::Version(v)) => fields.push(format!("version = \"{v}\"")),
        (None, Source::Git { url, rev }) => {
            fields.push(format!("git = \"{url}\""));
            if let Some(rev) = rev {
                fields.push(format!("rev = \"{rev}\""));
            }
        }
        (None, Source::Path(dir)) => fields.push(format!("path = {:?}", dir.display().to_string())),
    }
    if !d.default_features {
        fields.push("default-features = false".into());
    }
    if !d.features.is_empty() {
        let f: Vec<String> = d.features.iter().map(|f| format!("\"{f}\"")).collect();
        fields.push(format!("features = [{}]", f.join(", ")));
    }
    format!("{} = {{ {} }}\n", d.name, fields.join(", "))
}

/// The workspace's `[profile…]` sections (the dev build's optimised SCRAM
/// crates), so that a tried column is built as the built-in ones are.
fn profiles(workspace: &Path) -> String {
    let text = std::fs::read_to_string(workspace.join("Cargo.toml")).unwrap_or_default();
    let mut out = String::new();
    let mut keep = false;
    for line in text.lines() {
        if line.starts_with('[') {
            keep = line.starts_with("[profile");
        }
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Writes `text` to `path` unless it already holds it (so cargo sees no change).
fn write_if_changed(path: &Path, text: &str) -> Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|t| t == text) {
        return Ok(());
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// The package name of the scratch project of `asked` (unique per crate
/// and source: its binary has this name in the shared target directory).
fn package_name(asked: &Asked) -> String {
    let source = match &asked.source {
        Source::Version(v) => slug(v),
        Source::Git { url, rev } => slug(&format!("git-{url}-{}", rev.as_deref().unwrap_or("head"))),
        Source::Path(dir) => slug(&format!("path-{}", dir.display())),
    };
    format!("locklab-try-{}-{}", slug(asked.family.crate_name), source)
        .replace('.', "-")
        .to_lowercase()
}

/// Builds the family's driver for `asked` and returns the program. Cargo's
/// progress goes to stderr.
///
/// # Errors
/// locklab's source tree is not found (the kit is a path dependency); the
/// version cannot be resolved (the registry's answer, as cargo gives it);
/// the driver does not compile with that version (the compiler's first
/// error and the driver file to adapt); cargo cannot be run.
pub fn build(asked: &Asked, opts: &BuildOptions) -> Result<Built> {
    let workspace = locklab::server::workspace_root();
    let kit = workspace.join("drivers");
    if !kit.join("Cargo.toml").is_file() {
        bail!(
            "locklab try builds drivers from locklab's source tree, and {} has no drivers/Cargo.toml: run it from a clone of locklab",
            workspace.display()
        );
    }
    let name = package_name(asked);
    let project = opts.root.join(&name);
    std::fs::create_dir_all(project.join("src")).with_context(|| format!("cannot create {}", project.display()))?;
    let f = &asked.family;
    // Start from the workspace's lock file: the same versions of everything
    // else (and nothing to fetch for them).
    let lock = project.join("Cargo.lock");
    if !lock.exists() {
        std::fs::copy(workspace.join("Cargo.lock"), &lock)
            .with_context(|| format!("cannot write {}", lock.display()))?;
    }
    let main = project.join("src").join("main.rs");
    if !main.exists() {
        std::fs::write(&main, "fn main() {}\n")?;
    }
    // A dependency that follows the tried crate is pinned to the version it
    // depends on, found by resolving without it first; the pins are kept,
    // so that the manifest is the same from run to run.
    let pins_file = project.join("follows.txt");
    let mut pins: Vec<(String, String)> = std::fs::read_to_string(&pins_file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('=').map(|(a, b)| (a.to_owned(), b.to_owned())))
        .collect();
    let mut version;
    let mut rounds = 0;
    loop {
        let text = manifest(asked, &name, &kit, &workspace, &pins);
        write_if_changed(&project.join("Cargo.toml"), &text)?;
        let meta;
        (version, meta) = resolve(asked, &project, opts)?;
        let wanted = followed(f, &meta);
        rounds += 1;
        if wanted == pins || rounds > 2 {
            break;
        }
        pins = wanted;
        let text: String = pins.iter().map(|(p, v)| format!("{p}={v}\n")).collect();
        write_if_changed(&pins_file, &text)?;
    }
    let mut source = format!(
        "//! Written by `locklab try {}`: {} {version} built with {} ({}).\n\n{}\n\n\
         fn main() -> std::process::ExitCode {{\n    locklab_drivers::try_kit::serve_main(\n        include_str!(\"../Cargo.lock\"),\n        vec![\n",
        asked.text,
        f.crate_name,
        f.file,
        "locklab_drivers::try_kit",
        (f.module)(&version)
    );
    for (_, make) in f.columns {
        let _ = writeln!(source, "            Box::new({make}),");
    }
    source.push_str("        ],\n    )\n}\n");
    write_if_changed(&main, &source)?;
    let program = compile(asked, &project, &name, &version, opts)?;
    let label = match &asked.source {
        Source::Version(_) => version.clone(),
        Source::Git { rev, .. } => format!(
            "git-{}",
            slug(&rev.as_deref().unwrap_or("head").chars().take(12).collect::<String>())
        ),
        Source::Path(_) => "path".to_owned(),
    };
    Ok(Built {
        program,
        version,
        label,
    })
}

/// The scratch project's `Cargo.toml`: the kit, the family's dependencies
/// (those that follow the tried crate at their pinned version, or left out
/// until one is known), what the driver macros use, the workspace's profiles.
fn manifest(asked: &Asked, name: &str, kit: &Path, workspace: &Path, pins: &[(String, String)]) -> String {
    let f = &asked.family;
    let mut manifest = format!(
        "# Written by `locklab try {}`: a scratch project, rewritten on every run.\n\
         [package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [workspace]\n\n[dependencies]\n",
        asked.text
    );
    let _ = writeln!(
        manifest,
        "locklab-drivers = {{ path = {:?}, default-features = false }}",
        kit.display().to_string()
    );
    for d in f.deps {
        let pin = pins.iter().find(|(p, _)| p == d.package).map(|(_, v)| v.as_str());
        if d.follows && pin.is_none() {
            continue;
        }
        manifest.push_str(&dep_line(d, &asked.source, pin));
    }
    for d in COMMON {
        if !f.deps.iter().any(|x| x.name == d.name) {
            manifest.push_str(&dep_line(d, &asked.source, None));
        }
    }
    manifest.push('\n');
    manifest.push_str(&profiles(workspace));
    manifest
}

/// The versions the tried crate depends on of the family's dependencies
/// that follow it (`Dep::follows`), from `cargo metadata`'s answer.
fn followed(f: &Family, meta: &serde_json::Value) -> Vec<(String, String)> {
    let packages = meta["packages"].as_array().cloned().unwrap_or_default();
    let tried_name = f
        .deps
        .iter()
        .find(|d| d.version.is_none())
        .map_or(f.crate_name, |d| d.package);
    let nodes = meta["resolve"]["nodes"].as_array().cloned().unwrap_or_default();
    let id_of = |name: &str| {
        packages
            .iter()
            .filter(|p| p["name"] == name)
            .filter_map(|p| p["id"].as_str().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    let tried_ids = id_of(tried_name);
    let mut out = Vec::new();
    for d in f.deps.iter().filter(|d| d.follows) {
        let version = nodes
            .iter()
            .filter(|n| n["id"].as_str().is_some_and(|id| tried_ids.iter().any(|t| t == id)))
            .filter_map(|n| n["dependencies"].as_array())
            .flatten()
            .filter_map(|dep| dep.as_str())
            .find_map(|dep| {
                packages
                    .iter()
                    .find(|p| p["id"] == dep && p["name"] == d.package)
                    .and_then(|p| p["version"].as_str())
            });
        if let Some(v) = version {
            out.push((d.package.to_owned(), v.to_owned()));
        }
    }
    out
}

/// The version cargo resolves for the tried crate (`cargo metadata`,
/// which fetches the index as needed and writes the lock file). Filtered
/// to the host platform: unfiltered, cargo downloads every package of the
/// lock file, those of other targets too (js-sys, android_system_properties),
/// which a machine that only built locklab does not have (`--offline` then
/// fails: CI on 2026-12-04).
fn resolve(asked: &Asked, project: &Path, opts: &BuildOptions) -> Result<(String, serde_json::Value)> {
    let mut c = cargo();
    c.args([
        "metadata",
        "--format-version",
        "1",
        "--filter-platform",
        "host-tuple",
        "--manifest-path",
    ])
    .arg(project.join("Cargo.toml"));
    if opts.offline {
        c.arg("--offline");
    }
    let out = c
        .stdin(Stdio::null())
        .output()
        .context("cannot run cargo (it must be on PATH, or CARGO must name it)")?;
    if !out.status.success() {
        // Nothing was built: the scratch project of a version that does not
        // resolve is not kept.
        let _ = std::fs::remove_dir_all(project);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let answer: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.trim_start().starts_with("Updating") && !l.trim_start().starts_with("Locking"))
            .collect();
        bail!(
            "{}: cargo cannot resolve {} (the crate locklab's columns test) there:\n{}",
            asked.text,
            asked.family.crate_name,
            answer.join("\n").trim_end()
        );
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).context("cargo metadata's output")?;
    let tried = asked
        .family
        .deps
        .iter()
        .find(|d| d.version.is_none())
        .map_or(asked.family.crate_name, |d| d.name);
    let root = meta["resolve"]["root"].as_str().unwrap_or_default();
    let node = meta["resolve"]["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["id"] == root));
    let id = node
        .and_then(|n| n["deps"].as_array())
        .and_then(|deps| deps.iter().find(|d| d["name"] == tried))
        .and_then(|d| d["pkg"].as_str())
        .unwrap_or_default();
    let version = meta["packages"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["id"] == id))
        .and_then(|p| p["version"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{}: cargo resolved it, but its version is not in cargo metadata's answer",
                asked.text
            )
        })?;
    Ok((version, meta))
}

/// `cargo build` of the scratch project: the program, or the compiler's
/// first error with the driver file to adapt.
fn compile(asked: &Asked, project: &Path, name: &str, version: &str, opts: &BuildOptions) -> Result<PathBuf> {
    let release = !cfg!(debug_assertions);
    let target = opts.root.join("target");
    let mut c = cargo();
    c.args(["build", "--message-format", "json", "--manifest-path"])
        .arg(project.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target);
    if release {
        c.arg("--release");
    }
    if opts.offline {
        c.arg("--offline");
    }
    eprintln!(
        "locklab try: building {} {version} with {} ({} build; a scratch project in {}; the first build of a version takes minutes)",
        asked.family.crate_name,
        asked.family.file,
        if release { "release" } else { "debug" },
        project.display()
    );
    let started = Instant::now();
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run cargo (it must be on PATH, or CARGO must name it)")?;
    // Cargo's progress lines ("Compiling …") pass through; the rendered
    // diagnostics come on stdout as JSON: the first error is kept.
    let stderr = child.stderr.take().map(|e| {
        std::thread::spawn(move || {
            let mut tail = Vec::new();
            for line in std::io::BufReader::new(e).lines().map_while(Result::ok) {
                if line.trim_start().starts_with("Compiling") || line.trim_start().starts_with("Downloaded") {
                    eprintln!("  {}", line.trim_start());
                } else {
                    tail.push(line);
                }
            }
            tail
        })
    });
    let mut first_error: Option<String> = None;
    let mut program: Option<PathBuf> = None;
    let mut fresh = true;
    if let Some(out) = child.stdout.take() {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            match msg["reason"].as_str() {
                Some("compiler-message") if msg["message"]["level"] == "error" && first_error.is_none() => {
                    first_error = msg["message"]["rendered"].as_str().map(str::to_owned);
                }
                Some("compiler-artifact") => {
                    fresh &= msg["fresh"].as_bool().unwrap_or(false);
                    if msg["target"]["name"] == name.replace('-', "_") || msg["target"]["name"] == name {
                        program = msg["executable"].as_str().map(PathBuf::from);
                    }
                }
                _ => {}
            }
        }
    }
    let status = child.wait().context("cargo build")?;
    let tail = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    if !status.success() {
        if let Some(e) = first_error {
            bail!(
                "{} {version} does not compile with locklab's driver: adapt {} (its macro is the module `try` builds; \
                 the scratch project is {}). The compiler's first error:\n{}",
                asked.family.crate_name,
                asked.family.file,
                project.display(),
                e.trim_end()
            );
        }
        bail!(
            "{}: cargo build failed in {}:\n{}",
            asked.text,
            project.display(),
            tail.join("\n").trim_end()
        );
    }
    let program = program.unwrap_or_else(|| target.join(if release { "release" } else { "debug" }).join(name));
    if fresh {
        eprintln!(
            "locklab try: {} {version}: built before, up to date",
            asked.family.crate_name
        );
    } else {
        eprintln!(
            "locklab try: {} {version}: built in {:.0} s",
            asked.family.crate_name,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(program)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crate_at_version_is_parsed_with_clear_errors() {
        let a = parse("bb8@0.8").expect("parses");
        assert_eq!(a.family.crate_name, "bb8-postgres");
        assert_eq!(a.source, Source::Version("0.8".into()));
        let g = parse("sqlx@git+https://example.invalid/sqlx#abc").expect("parses");
        assert_eq!(
            g.source,
            Source::Git {
                url: "https://example.invalid/sqlx".into(),
                rev: Some("abc".into())
            }
        );
        let e = parse("bb8").expect_err("no version").to_string();
        assert!(e.contains("CRATE@VERSION"), "{e}");
        let e = parse("nosuchpool@1").expect_err("unknown").to_string();
        assert!(
            e.contains("deadpool-postgres") && e.contains("bb8-postgres (or bb8)"),
            "{e}"
        );
        let e = parse("sqlx@ ").expect_err("empty").to_string();
        assert!(e.contains("no version"), "{e}");
    }

    #[test]
    fn every_family_gets_a_distinct_scratch_project() {
        let names: Vec<String> = families()
            .into_iter()
            .map(|family| {
                package_name(&Asked {
                    family,
                    source: Source::Version("=1.2.3".into()),
                    text: String::new(),
                })
            })
            .collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(names.len(), unique.len(), "{names:?}");
        assert!(
            names.iter().all(|n| n.starts_with("locklab-try-") && !n.contains('.')),
            "{names:?}"
        );
    }
}
