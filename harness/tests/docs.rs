//! The README and the book (`docs/src/`) link only to files that exist and
//! to headings that exist. `just docs` (mdbook-linkcheck2) checks the book's
//! links to files; this test also checks the `#heading` part, which the link
//! checker does not, and the README's links.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The id mdBook (and GitHub) gives a heading: its text in lower case,
/// spaces as `-`, other punctuation dropped (mdBook's `normalize_id`).
fn heading_id(text: &str) -> String {
    text.trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_ascii_lowercase())
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The ids of a Markdown file's headings (outside code blocks).
fn ids(text: &str) -> HashSet<String> {
    let mut fence = false;
    let mut out = HashSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
        } else if !fence && line.starts_with('#') {
            let title = line.trim_start_matches('#');
            if title.starts_with(' ') {
                out.insert(heading_id(title));
            }
        }
    }
    out
}

/// The targets of the inline links `[text](target)` outside code blocks and
/// code spans, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut fence = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        // Code spans are not links.
        let plain: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((i + 1, after[..end].to_owned()));
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_link_of_the_readme_and_the_book_resolves() {
    let root = root();
    let mut files: Vec<PathBuf> = vec![root.join("README.md")];
    let mut book: Vec<PathBuf> = std::fs::read_dir(root.join("docs/src"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    book.sort();
    assert!(book.len() > 10, "the book has {} chapters", book.len());
    files.extend(book);
    let mut headings: HashMap<PathBuf, HashSet<String>> = HashMap::new();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (line, target) in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            let place = format!("{}:{line}: {target}", file.strip_prefix(&root).unwrap().display());
            if !dest.exists() {
                broken.push(format!("{place}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                let dest = dest.canonicalize().unwrap();
                let known = headings
                    .entry(dest.clone())
                    .or_insert_with(|| ids(&std::fs::read_to_string(&dest).unwrap_or_default()));
                if !known.contains(anchor) {
                    broken.push(format!("{place}: no such heading"));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} links checked");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_stays_a_page() {
    let lines = std::fs::read_to_string(root().join("README.md"))
        .unwrap()
        .lines()
        .count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines: move the detail into a chapter of docs/"
    );
}

#[test]
fn heading_ids_follow_mdbook() {
    assert_eq!(
        heading_id(" Upgrading a pool crate: what changed?"),
        "upgrading-a-pool-crate-what-changed"
    );
    assert_eq!(heading_id(" The guide's table, measured"), "the-guides-table-measured");
    assert_eq!(
        heading_id(" In production: `locklab holders`"),
        "in-production-locklab-holders"
    );
    let found = links("see [a](b.md#c) and `[x](y)`\n```\n[z](w)\n```\n");
    assert_eq!(found, [(1, "b.md#c".to_owned())]);
}

/// The lab API's example program, which `locklab::lab`'s documentation shows
/// (`tests/examples/lab_api.rs`, included there as text): one scenario
/// through deadpool on a local cluster, its outcome and its report.
#[path = "examples/lab_api.rs"]
mod lab_api;

#[test]
fn the_lab_api_example_in_the_docs_runs() {
    lab_api::main().unwrap();
}

/// The README's findings and the book's cards are generated from the
/// committed report's verdicts (`locklab::report::regions`): a test fails
/// when one is stale, say after `reports/matrix.json` or a property changed.
#[test]
fn the_generated_findings_match_the_committed_report() {
    let root = root();
    let report = locklab::judge::load(&root.join("reports/matrix.json")).unwrap();
    assert!(!report.verdicts.is_empty(), "the committed report has no verdicts");
    let stale = locklab::report::regions::stale(&report, &root).unwrap();
    assert!(
        stale.is_empty(),
        "stale generated findings (rewrite them with `cargo locklab report --from reports/matrix.json`):\n{}",
        stale.join("\n")
    );
}

/// So are the committed `matrix.md` and `index.html`: what `report --from
/// reports/matrix.json` writes (a new property or a template change needs
/// the re-render, not a new run).
#[test]
fn the_committed_report_files_match_their_matrix_json() {
    let root = root();
    let report = locklab::judge::load(&root.join("reports/matrix.json")).unwrap();
    let md = std::fs::read_to_string(root.join("reports/matrix.md")).unwrap();
    assert!(
        md == report.to_markdown().unwrap(),
        "reports/matrix.md is stale: run `cargo locklab report --from reports/matrix.json`"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("reports/matrix.json")).unwrap()).unwrap();
    assert_eq!(
        json["verdicts"],
        serde_json::to_value(&report.verdicts).unwrap(),
        "the verdicts of reports/matrix.json are stale: run `cargo locklab report --from reports/matrix.json`"
    );
}

/// Every file `docs/src/architecture.md` names exists: a backticked path
/// with a known extension is the end of the path of a file of the
/// workspace (`runner/place.rs`, `harness/src/runner/place.rs`), and a bare
/// file name is the name of one. A placeholder (`NAME.rs`, a segment in
/// capitals) is not a file.
#[test]
fn the_architecture_chapter_names_only_files_that_exist() {
    let root = root();
    let text = std::fs::read_to_string(root.join("docs/src/architecture.md")).unwrap();
    let extensions = [".rs", ".sh", ".py", ".yaml", ".list", ".toml", ".j2"];
    let mut files = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if ![".git", ".cache", "target", "node_modules"].contains(&name.as_str()) {
                    stack.push(path);
                }
            } else if let Ok(rel) = path.strip_prefix(&root) {
                files.push(format!("/{}", rel.display()));
            }
        }
    }
    let placeholder = |part: &str| {
        part.split(['/', '.'])
            .any(|seg| seg.len() > 1 && seg.chars().all(|c| c.is_ascii_uppercase()))
    };
    let mut missing = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 || part.contains(' ') || !extensions.iter().any(|e| part.ends_with(e)) || placeholder(part) {
                continue;
            }
            let end = format!("/{}", part.trim_start_matches('/'));
            if !files.iter().any(|f| f.ends_with(&end)) {
                missing.push(format!("docs/src/architecture.md:{}: `{part}`", n + 1));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "names a file that does not exist:\n{}",
        missing.join("\n")
    );
}

/// No module of any crate of the workspace imports, through others, one
/// that imports it (`harness/scripts/module-cycles.py`: a module may use its
/// ancestors; test code is left out).
#[test]
fn no_crate_has_an_import_circle() {
    let out = std::process::Command::new("python3")
        .arg(root().join("harness/scripts/module-cycles.py"))
        .arg(root())
        .output()
        .expect("python3 runs harness/scripts/module-cycles.py");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "import circles:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("no import circle"), "{text}");
}

/// The crate's public items without the `internals` feature, as
/// `harness/scripts/public-api.py` reads them from the source.
fn public_items(features: &[&str]) -> usize {
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(root().join("harness/scripts/public-api.py"));
    if !features.is_empty() {
        cmd.arg("--features").arg(features.join(","));
    }
    let out = cmd.output().expect("python3 runs harness/scripts/public-api.py");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    text.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {text:?}"))
}

/// What a dependent of `locklab` sees is the lab's API (`locklab::lab`,
/// `locklab::keys`: about a hundred items, each documented: the crate
/// denies `missing_docs`), not its machinery, which only the `internals`
/// feature makes public (docs/src/architecture.md).
#[test]
fn the_public_api_is_the_lab() {
    let api = public_items(&[]);
    assert!(
        api <= 110,
        "{api} public items without the internals feature (at most 110)"
    );
    let all = public_items(&["internals"]);
    assert!(
        all > 10 * api,
        "{all} items with the internals feature, {api} without: is the machinery still gated?"
    );
}

/// A reason in `reports/matrix.md` names the product it is about: no cell
/// of a column that does not go through PgBouncer names PgBouncer, and a
/// cell that says settings cannot pass a pooler names the column's own.
#[test]
fn the_matrix_names_the_right_pooler_in_every_reason() {
    let md = std::fs::read_to_string(root().join("reports/matrix.md")).unwrap();
    let mut checked = 0;
    for (n, line) in md.lines().enumerate() {
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let id = rest.split([' ', '`']).next().unwrap_or_default();
        let Ok(driver) = locklab_drivers::find(id) else {
            continue;
        };
        let product = driver.info().pooler.map(|p| p.kind.product());
        checked += usize::from(product.is_some());
        let cells: Vec<&str> = line.split(" | ").skip(1).collect();
        for cell in cells {
            if product != Some("PgBouncer") {
                assert!(
                    !cell.contains("PgBouncer"),
                    "reports/matrix.md:{}: column {id} ({product:?}) has a cell naming PgBouncer: {cell}",
                    n + 1
                );
            }
            if let Some(named) = cell.split("settings cannot pass ").nth(1) {
                let named = named.trim_end_matches([')', '|', ' ']);
                assert_eq!(Some(named), product, "reports/matrix.md:{}: column {id}", n + 1);
            }
        }
    }
    assert!(checked > 0, "no row of a pooler's column: the test reads nothing");
}
