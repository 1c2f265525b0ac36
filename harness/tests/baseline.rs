//! The full scenario × driver matrix, run once per test process with every
//! cell repeated ([`REPEAT`] times) on the local cluster, and what is built
//! from it: the regression check against the committed
//! `reports/baseline.json`, stability over repeats, the Markdown and JSON
//! report, and the HTML report rendered in headless Chromium.
//!
//! Nothing here hard-codes a measured behaviour: the baseline is the matrix
//! as last accepted (`locklab check --update`), and a deliberate change
//! (e.g. deadpool `RecyclingMethod::Fast` → `Clean`) fails
//! `the_matrix_matches_the_committed_baseline` with the per-cell diff.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::server;
use locklab::baseline::{self, Baseline, Tolerance};
use locklab::report::{Format, Report};
use locklab::scenario::{self, Scenario};

/// Runs per cell: two are enough to catch a cell that flips between runs of
/// the same build (`--repeat 20` in the README is the thorough check).
const REPEAT: usize = 2;

/// Lines of cell diffs in a failure message: about one screen.
const DIFF_LINES: usize = 30;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn scenarios() -> &'static [Scenario] {
    static S: OnceLock<Vec<Scenario>> = OnceLock::new();
    S.get_or_init(|| scenario::load_dir(&root().join("scenarios")).unwrap())
}

/// The matrix as `locklab report --repeat 2` makes it, once per process.
fn report() -> &'static Report {
    static REPORT: OnceLock<Report> = OnceLock::new();
    REPORT.get_or_init(|| {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let drivers = locklab_drivers::registry();
        let servers = std::slice::from_ref(server());
        let runs = rt.block_on(locklab::matrix::run_all(
            servers,
            scenarios(),
            &drivers,
            locklab::matrix::DEFAULT_JOBS,
            REPEAT,
            |_, _| {},
        ));
        Report::new(servers, scenarios(), &drivers, runs, 0.0)
    })
}

#[test]
fn every_cell_passes_and_agrees_with_itself_over_repeats() {
    let report = report();
    assert_eq!(report.runs.len(), scenarios().len() * locklab_drivers::registry().len());
    assert!(report.runs.iter().all(|r| r.repeats == REPEAT));
    let failures: Vec<&str> = report.runs.iter().filter_map(|r| r.failure.as_deref()).collect();
    assert!(
        failures.is_empty(),
        "{} cell(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(report.summary.unstable, 0);
}

#[test]
fn the_matrix_matches_the_committed_baseline() {
    let path = root().join("reports").join("baseline.json");
    let before = Baseline::load(&path).unwrap();
    let fresh = Baseline::from_report(report()).unwrap();
    let comparison = baseline::compare(&before, &fresh, Tolerance::default(), &|_| true);
    assert!(comparison.compared > 0);
    if !comparison.is_clean() {
        panic!(
            "{}",
            comparison.render(
                &before,
                Path::new("reports/baseline.json"),
                "this test run (local cluster)",
                Some(DIFF_LINES)
            ) + "\n`just check` shows the same; if the change is intended, `just baseline` rewrites the baseline."
        );
    }
}

/// `locklab report` end to end, minus the files: the Markdown and JSON name
/// every cell.
#[test]
fn the_report_has_a_cell_for_every_observation_and_driver() {
    let report = report();
    let scenarios = scenarios();
    let drivers = locklab_drivers::registry();
    let json: serde_json::Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
    assert_eq!(json["schema_version"], locklab::report::SCHEMA_VERSION);
    assert!(
        json["servers"][0]["version"]
            .as_str()
            .unwrap()
            .starts_with("PostgreSQL ")
    );
    assert_eq!(json["servers"][0]["id"], server().id());
    for d in json["drivers"].as_array().unwrap() {
        assert_ne!(d["crate_version"], "unknown", "{d}");
    }
    assert_eq!(json["runs"].as_array().unwrap().len(), scenarios.len() * drivers.len());

    let md = report.to_markdown().unwrap();
    for s in scenarios {
        let heading = format!("## {}\n", s.family);
        assert!(md.contains(&heading), "no section for {}", s.name);
        let section = md.split(&heading).nth(1).unwrap().split("\n## ").next().unwrap();
        for name in s.steps.iter().filter_map(|st| st.record.as_deref()) {
            let row = section
                .lines()
                .find(|l| {
                    let suffix = s.name.strip_prefix(&s.family).unwrap();
                    let label = if s.params.is_empty() {
                        format!("| `{name}` |")
                    } else {
                        format!("| `{name}` {suffix} |")
                    };
                    l.starts_with(&label)
                })
                .unwrap_or_else(|| panic!("no row {name}"));
            // one cell per driver, none missing
            assert_eq!(row.matches(" | ").count(), drivers.len(), "{row}");
            // A run that deviated (behind transaction pooling) stops at the
            // failed expectation: its later cells are empty, nobody else's.
            let deviated: Vec<usize> = drivers
                .iter()
                .enumerate()
                .filter(|(_, d)| {
                    report
                        .runs
                        .iter()
                        .any(|r| r.scenario == s.name && r.driver == d.info().id && r.deviation.is_some())
                })
                .map(|(i, _)| i)
                .collect();
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").skip(1).collect();
            for (i, c) in cells.iter().enumerate() {
                assert!(deviated.contains(&i) || !c.contains('—'), "missing cell in {row}");
            }
        }
    }
}

/// The HTML page of the matrix, rendered by headless Chromium: the DOM it
/// builds holds the overview with one cell per scenario file × driver, a
/// section per scenario file with one row per observation, the timing charts,
/// and no reference to anything outside the file; the screenshot is a PNG of
/// the requested size.
#[test]
fn the_html_report_renders_the_matrix_in_chromium() {
    let report = report();
    let dir = tempfile::tempdir().unwrap();
    let written = report.write(dir.path(), &[Format::Html]).unwrap();
    let page = &written[0];
    let html = std::fs::read_to_string(page).unwrap();
    for external in ["<script", "<link", "src=\"http", "href=\"http", "url("] {
        assert!(!html.contains(external), "index.html refers outside itself: {external}");
    }
    let dom = locklab::browser::dump_dom(page).unwrap();
    let overview = dom
        .split("id=\"matrix\"")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .expect("no overview table in the DOM");
    let mut families: Vec<&str> = scenarios().iter().map(|s| s.family.as_str()).collect();
    families.dedup();
    let columns = report.drivers.len();
    assert_eq!(
        overview.matches("<tr>").count(),
        families.len() + 1,
        "rows: header + one per file"
    );
    // (cells with evidence carry a title; the row names do not)
    assert_eq!(overview.matches("\" title=\"").count(), families.len() * columns);
    for f in &families {
        assert!(
            dom.contains(&format!("<section class=\"scenario\" id=\"s-{f}\">")),
            "no section {f}"
        );
        assert!(overview.contains(&format!("href=\"#s-{f}\"")), "no overview row {f}");
    }
    let observations: usize = scenarios()
        .iter()
        .map(|s| s.steps.iter().filter(|st| st.record.is_some()).count())
        .sum();
    let detail_cells: usize = dom
        .split("class=\"matrix detail\"")
        .skip(1)
        .map(|t| t.split("</table>").next().unwrap().matches("\" title=\"").count())
        .sum();
    // per file: its observations' rows, "locks left after run" and "expectations"
    assert_eq!(detail_cells, (observations + 2 * families.len()) * columns);
    assert!(dom.contains("<svg"), "no timing chart");
    let png = dir.path().join("index.png");
    locklab::browser::screenshot(page, &png, 1200, 900).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    let size = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    assert_eq!((size(16), size(20)), (1200, 900), "PNG width × height");
}

/// The committed `reports/index.html` renders too, with one overview cell
/// per scenario file × column of the committed `matrix.json`.
#[test]
fn the_committed_html_report_renders() {
    let reports = root().join("reports");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(reports.join("matrix.json")).unwrap()).unwrap();
    let mut families: Vec<&str> = json["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["family"].as_str().unwrap())
        .collect();
    families.dedup();
    let columns = json["servers"].as_array().unwrap().len() * json["drivers"].as_array().unwrap().len();
    let dom = locklab::browser::dump_dom(&reports.join("index.html")).unwrap();
    let overview = dom
        .split("id=\"matrix\"")
        .nth(1)
        .unwrap()
        .split("</table>")
        .next()
        .unwrap();
    assert_eq!(overview.matches("\" title=\"").count(), families.len() * columns);
}

/// `locklab check` as a user runs it: one cell against a baseline in which
/// that cell's first observation was changed exits 1 and names the cell,
/// the observation and both values; against the committed baseline it exits 0.
#[test]
fn check_names_the_cell_that_changed() {
    let dir = tempfile::tempdir().unwrap();
    let committed = root().join("reports").join("baseline.json");
    let mut tampered: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&committed).unwrap()).unwrap();
    let cell = tampered["cells"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["scenario"] == "lock-timeout-200ms" && c["driver"] == "deadpool-fast")
        .expect("the baseline has lock-timeout-200ms × deadpool-fast");
    let (name, obs) = cell["observations"].as_object_mut().unwrap().iter_mut().next().unwrap();
    let name = name.clone();
    let real = obs["value"].as_str().unwrap().to_owned();
    obs["value"] = "something else".into();
    let path = dir.path().join("baseline.json");
    std::fs::write(&path, serde_json::to_string(&tampered).unwrap()).unwrap();
    let run = |baseline: &Path| {
        Command::new(env!("CARGO_BIN_EXE_locklab"))
            .args([
                "check",
                "--backend",
                "local",
                "-s",
                "lock-timeout-200ms",
                "-d",
                "deadpool-fast",
            ])
            .arg("--baseline")
            .arg(baseline)
            .env_remove("LOCKLAB_DSN")
            .output()
            .unwrap()
    };
    let out = run(&path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 of 1 cell(s) differ"), "{stdout}");
    assert!(
        stdout.contains("lock-timeout-200ms × deadpool-fast (deadpool-postgres "),
        "{stdout}"
    );
    let line = stdout
        .lines()
        .find(|l| l.contains(&format!("`{name}`: ")))
        .unwrap_or_default();
    assert!(
        line.contains("something else") && line.ends_with(&format!("→ {real}")),
        "{stdout}"
    );
    let out = run(&committed);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
