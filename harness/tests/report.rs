//! The report made from a small matrix (every scenario × three driver
//! configurations, one run each, on the local cluster; the whole matrix is
//! `matrix.rs`'s, and repeats are `locklab report --repeat`'s, `check`'s and
//! `soak`'s): the Markdown and JSON have a cell for every observation and
//! driver, the HTML page renders in headless Chromium, so does the committed
//! `reports/index.html`, and `locklab check` names a cell that differs from
//! its baseline. A libtest-mimic harness (`harness = false`): the Chromium
//! tests are ignored, by name and with the reason, where Chromium is neither
//! found nor installable (`locklab::browser::availability`), and under nextest
//! the test processes share one server per run.
//!
//! Nothing here hard-codes a measured behaviour.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use common::{root, server};
use libtest_mimic::Trial;
use locklab::baseline::{self, Baseline, Tolerance};
use locklab::browser::{self, Availability};
use locklab::outcome::RunResult;
use locklab::properties::Mark;
use locklab::report::{Format, Report};
use locklab::scenario::{self, Scenario};
use locklab::shard::Shard;

/// The report's columns: no pool, a pool, and transaction pooling (whose
/// deviations and `n/a` cells the report shows differently).
const DRIVERS: [&str; 3] = ["tokio-postgres", "deadpool-fast", "pgbouncer-transaction"];

/// The tests that need Chromium.
const BROWSER_TESTS: [&str; 2] = [
    "the_html_report_renders_the_matrix_in_chromium",
    "the_committed_html_report_renders",
];

fn main() {
    let args = common::init_binary();
    let trials = vec![
        common::trial(
            "the_report_has_a_cell_for_every_observation_and_driver",
            the_report_has_a_cell_for_every_observation_and_driver,
        ),
        common::trial(
            "the_html_report_renders_the_matrix_in_chromium",
            the_html_report_renders_the_matrix_in_chromium,
        ),
        common::trial("the_committed_html_report_renders", the_committed_html_report_renders),
        common::trial(
            "a_sharded_matrix_merges_into_the_unsharded_one",
            a_sharded_matrix_merges_into_the_unsharded_one,
        ),
        common::trial(
            "check_of_a_shard_compares_its_cells",
            check_of_a_shard_compares_its_cells,
        ),
        common::trial(
            "check_from_a_report_file_runs_nothing",
            check_from_a_report_file_runs_nothing,
        ),
        common::trial(
            "upgrade_between_columns_of_the_committed_report",
            upgrade_between_columns_of_the_committed_report,
        ),
        common::trial(
            "without_docker_pooler_columns_are_not_applicable",
            without_docker_pooler_columns_are_not_applicable,
        ),
        common::trial(
            "a_scenario_no_property_names_decides_the_unlock_property_as_a_witness",
            a_scenario_no_property_names_decides_the_unlock_property_as_a_witness,
        ),
    ];
    let needs_chromium = |t: &Trial| BROWSER_TESTS.contains(&t.name());
    // Chromium is installed on first use where it can be (as root, with
    // apt-get); a listing only looks, except nextest's, which decides there
    // which tests are ignored.
    let chromium = if !common::any_selected(&trials, needs_chromium, &args) {
        None
    } else if args.list && !common::under_nextest() {
        match browser::availability() {
            Availability::Unavailable(why) => Some(why),
            Availability::Found(_) | Availability::Installable => None,
        }
    } else {
        browser::chromium().err().map(|e| format!("{e:#}"))
    };
    let trials = common::ignore_when(trials, needs_chromium, "needs Chromium", chromium.as_deref(), &args);
    libtest_mimic::run(&args, trials).exit();
}

fn scenarios() -> &'static [Scenario] {
    static S: OnceLock<Vec<Scenario>> = OnceLock::new();
    S.get_or_init(|| scenario::load_dir(&root().join("scenarios")).unwrap())
}

fn drivers() -> Vec<Box<dyn locklab_drivers::Driver>> {
    DRIVERS.iter().map(|d| locklab_drivers::find(d).unwrap()).collect()
}

/// The small matrix as `locklab report` makes it, once per process.
fn report() -> &'static Report {
    static REPORT: OnceLock<Report> = OnceLock::new();
    REPORT.get_or_init(|| {
        // The races' short version, as in the matrix test.
        locklab::runner::set_max_trials(Some(12));
        let drivers = drivers();
        let servers = std::slice::from_ref(server());
        let runs = common::block_on_multi(locklab::matrix::run_all(
            servers,
            scenarios(),
            &drivers,
            locklab::matrix::DEFAULT_JOBS,
            1,
            |_, _| {},
        ));
        locklab::judge::report(servers, scenarios(), &drivers, runs, 0.0)
    })
}

/// `locklab report` end to end, minus the files: the Markdown and JSON name
/// every cell.
fn the_report_has_a_cell_for_every_observation_and_driver() {
    let report = report();
    let scenarios = scenarios();
    let drivers = drivers();
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
    // The verdicts lead.
    let verdicts = md.find("## Verdicts").expect("no verdicts");
    assert!(verdicts < md.find("## Drivers").unwrap(), "the verdicts come first");
    for d in &drivers {
        assert!(
            md.contains(&format!("### `{}`", d.info().id)),
            "no card for {}",
            d.info().id
        );
    }
    for s in scenarios {
        let heading = format!("## {}\n", s.family);
        assert!(md.contains(&heading), "no section for {}", s.name);
        let section = md.split(&heading).nth(1).unwrap().split("\n## ").next().unwrap();
        // A table per parameter set (titled when the file has several), one
        // row per column and one column per observation.
        let suffix = s.name.strip_prefix(&s.family).unwrap();
        let table = if s.params.is_empty() {
            section
        } else {
            section
                .split(&format!("### {} {suffix}\n", s.family))
                .nth(1)
                .unwrap_or_else(|| panic!("no table for {}", s.name))
                .split("\n### ")
                .next()
                .unwrap()
        };
        let header = table
            .lines()
            .find(|l| l.starts_with("| column |"))
            .unwrap_or_else(|| panic!("no header in {}", s.name));
        for name in s.steps.iter().filter_map(|st| st.record.as_deref()) {
            assert!(
                header.contains(&format!("| `{name}` |")),
                "no column {name} in {header}"
            );
        }
        let columns = header.matches(" | ").count();
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| `")).collect();
        // one row per driver, in order, none missing a cell
        assert_eq!(rows.len(), drivers.len(), "{}", s.name);
        for (d, row) in drivers.iter().zip(&rows) {
            let id = d.info().id;
            assert!(row.starts_with(&format!("| `{id}")), "{row}");
            assert_eq!(row.matches(" | ").count(), columns, "{row}");
            // A run that deviated (behind transaction pooling) stops at the
            // failed expectation: its later cells are empty, nobody else's.
            let deviated = report
                .runs
                .iter()
                .any(|r| r.scenario == s.name && r.driver == id && r.deviation.is_some());
            // (the observations' cells: a run not made has no locks left)
            let records = s.steps.iter().filter(|st| st.record.is_some()).count();
            let observed: Vec<&str> = row
                .trim_matches('|')
                .split(" | ")
                .skip(1)
                .take(records)
                .map(str::trim)
                .collect();
            assert!(deviated || !observed.contains(&"—"), "missing cell in {row}");
        }
    }
}

/// The HTML page of the matrix, rendered by headless Chromium: the DOM it
/// builds holds the verdicts first (the properties table, a card per
/// column), the overview with one cell per scenario file × driver, a
/// section per scenario file with one row per observation, the timing charts,
/// and no reference to anything outside the file; the screenshot is a PNG of
/// the requested size.
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
        .map(|s| {
            // The recorded steps, then one row per invariant of a race scenario.
            s.steps.iter().filter(|st| st.record.is_some()).count()
                + s.trials.as_ref().map_or(0, |t| t.invariants.len())
        })
        .sum();
    let detail_cells: usize = dom
        .split("class=\"matrix detail\"")
        .skip(1)
        .map(|t| t.split("</table>").next().unwrap().matches("\" title=\"").count())
        .sum();
    // Each observation's row name carries the step (once per row, not per cell).
    let row_titles: usize = dom
        .split("class=\"matrix detail\"")
        .skip(1)
        .map(|t| {
            t.split("</table>")
                .next()
                .unwrap()
                .matches("class=\"rowname\" title=\"")
                .count()
        })
        .sum();
    assert_eq!(row_titles, observations);
    // per file: its observations' and invariants' rows, "locks left after run" and "expectations"
    assert_eq!(detail_cells - row_titles, (observations + 2 * families.len()) * columns);
    // The verdicts come first: the properties × columns table and a card per column.
    let verdicts = dom.find("id=\"properties\"").expect("no verdicts table");
    assert!(verdicts < dom.find("id=\"matrix\"").unwrap(), "the verdicts lead");
    for d in &report.drivers {
        assert!(dom.contains(&format!("id=\"card-{}\"", d.id)), "no card for {}", d.id);
    }
    assert!(dom.contains("<svg"), "no timing chart");
    let png = dir.path().join("index.png");
    locklab::browser::screenshot(page, &png, 1200, 900).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    let size = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    assert_eq!((size(16), size(20)), (1200, 900), "PNG width × height");
}

/// The committed `reports/index.html` renders too, with one overview cell
/// per scenario file × column of the committed `matrix.json`.
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

/// The scenario files the shard test splits: plain cells, a parameterised
/// file, a timing, and locks left after the run. (Not a race: two short runs
/// of 12 trials may each see a value the other did not, by nature; the
/// race cells' round trip through a shard file is the unit test's on the
/// committed report.)
const SHARDED: [&str; 5] = [
    "xact-lock-competition",
    "session-lock-pool-return",
    "lock-timeout-200ms",
    "extreme-keys",
    "unlock-all",
];

/// The cells of `SHARDED` run in three shards and put together by `locklab
/// merge` are the unsharded run's: the same cells in the same order, equal
/// under the comparison `check` makes (values, SQLSTATEs, locks left; timings
/// within its tolerance), and each the shard file's cell unchanged. And a
/// merge that lacks a shard is refused, naming it.
fn a_sharded_matrix_merges_into_the_unsharded_one() {
    let whole = report();
    let chosen: Vec<Scenario> = scenarios()
        .iter()
        .filter(|s| SHARDED.contains(&s.family.as_str()))
        .cloned()
        .collect();
    assert!(chosen.len() > SHARDED.len(), "extreme-keys has several parameter sets");
    let drivers = drivers();
    let servers = std::slice::from_ref(server());
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for index in 1..=3 {
        let shard = Shard { index, count: 3 };
        let runs = common::block_on_multi(locklab::matrix::run_shard(
            servers,
            &chosen,
            &drivers,
            shard,
            locklab::matrix::DEFAULT_JOBS,
            1,
            |_, _| {},
        ));
        assert!(
            runs.len() >= chosen.len() * drivers.len() / 3,
            "shard {shard}: {} cells",
            runs.len()
        );
        let mut part = locklab::judge::report(servers, &chosen, &drivers, runs, 0.0);
        part.shard = Some(shard);
        let out = dir.path().join(format!("shard-{index}"));
        part.write(&out, &[Format::Json]).unwrap();
        files.push(out.join("matrix.json"));
    }
    let merge = |files: &[std::path::PathBuf], out: &Path| {
        Command::new(env!("CARGO_BIN_EXE_locklab"))
            .arg("merge")
            .args(files)
            .arg("--out")
            .arg(out)
            .output()
            .unwrap()
    };
    let out = merge(&files[..2], &dir.path().join("partial"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("shard(s) 3/3 missing"), "{stderr}");

    let merged_dir = dir.path().join("merged");
    let out = merge(&files, &merged_dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let unsharded_runs: Vec<RunResult> = whole
        .runs
        .iter()
        .filter(|r| chosen.iter().any(|s| s.name == r.scenario))
        .cloned()
        .collect();
    let unsharded = locklab::judge::report(servers, &chosen, &drivers, unsharded_runs, 0.0);
    let all_passed = unsharded.runs.iter().all(RunResult::passed);
    assert_eq!(
        out.status.success(),
        all_passed,
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("merged 3 shard(s)"), "{stdout}");
    for f in ["matrix.json", "matrix.md", "index.html"] {
        assert!(merged_dir.join(f).is_file(), "no {f}");
    }
    let merged = locklab::judge::load(&merged_dir.join("matrix.json")).unwrap();
    assert_eq!(merged.shard, None);
    let cell = |r: &RunResult| format!("{} × {} × {}", r.server, r.scenario, r.driver);
    assert_eq!(
        merged.runs.iter().map(cell).collect::<Vec<_>>(),
        unsharded.runs.iter().map(cell).collect::<Vec<_>>()
    );
    let before = Baseline::from_report(&unsharded).unwrap();
    let after = Baseline::from_report(&merged).unwrap();
    let comparison = baseline::compare(&before, &after, Tolerance::default(), &|_| true);
    assert!(
        comparison.is_clean(),
        "{}",
        comparison.render(&before, Path::new("unsharded"), "merged", None)
    );
    // And the merge changed no cell of the shards' files.
    let cells_of = |path: &Path| -> Vec<serde_json::Value> {
        let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        json["runs"].as_array().unwrap().clone()
    };
    let mut from_shards: Vec<serde_json::Value> = files.iter().flat_map(|f| cells_of(f)).collect();
    let key = |c: &serde_json::Value| format!("{}|{}|{}", c["server"], c["scenario"], c["driver"]);
    from_shards.sort_by_key(key);
    let mut merged_cells = cells_of(&merged_dir.join("matrix.json"));
    merged_cells.sort_by_key(key);
    assert!(
        from_shards == merged_cells,
        "the merge changed a cell of the shard files"
    );
    let counts = |r: &Report| {
        let s = &r.summary;
        (s.runs, s.passed, s.deviated, s.not_applicable, s.failed)
    };
    assert_eq!(counts(&merged), counts(&unsharded));
}

/// `check --shard` compares the shard's cells with the baseline and counts
/// the others as not run (not as missing).
fn check_of_a_shard_compares_its_cells() {
    let out = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args([
            "check",
            "--backend",
            "local",
            "-s",
            "xact-lock-competition",
            "-d",
            "tokio-postgres",
            "-d",
            "deadpool-fast",
            "-d",
            "sqlx",
            "--shard",
            "2/3",
        ])
        .env_remove("LOCKLAB_DSN")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("1 cell(s)"), "{stdout}");
}

/// `check --from FILE` compares a report that is already made with the
/// baseline: the committed matrix.json against a baseline made from it has
/// no difference, and the same file with one value changed has that one,
/// named.
fn check_from_a_report_file_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let committed = root().join("reports").join("matrix.json");
    let report = locklab::judge::load(&committed).unwrap();
    let baseline = dir.path().join("baseline");
    Baseline::from_report(&report).unwrap().save_as_dir(&baseline).unwrap();
    let check = |file: &Path| {
        Command::new(env!("CARGO_BIN_EXE_locklab"))
            .args(["check", "--from"])
            .arg(file)
            .arg("--baseline")
            .arg(&baseline)
            .output()
            .unwrap()
    };
    let out = check(&committed);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains(&format!("0 of {} cell(s) differ", report.runs.len())),
        "{stdout}"
    );

    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&committed).unwrap()).unwrap();
    let run = json["runs"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| r["scenario"] == "xact-lock-competition" && r["driver"] == "sqlx")
        .expect("the committed report has xact-lock-competition × sqlx");
    let real = shown(&run["observations"][0]);
    run["observations"][0]["value"] = serde_json::json!({"kind": "text", "value": "something else"});
    let tampered = dir.path().join("matrix.json");
    std::fs::write(&tampered, serde_json::to_string(&json).unwrap()).unwrap();
    let out = check(&tampered);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("1 of "), "{stdout}");
    assert!(stdout.contains("xact-lock-competition × sqlx"), "{stdout}");
    assert!(stdout.contains(&format!("{real} → something else")), "{stdout}");
}

/// `check --upgrade A B --from FILE` compares two columns of one report.
/// On the committed report, for the two version pairs it holds (sqlx 0.8 →
/// 0.9, PgBouncer 1.18 → 1.24) and two pooler changes (PgBouncer 1.24 to
/// pgagroal, to Odyssey, in transaction mode): it names both columns with
/// their versions, its exit code agrees with the count of differing cells
/// it prints, and docs/src/upgrading.md shows that count.
/// With column B made a copy of column A with one value changed, it prints
/// exactly that cell, before → after; a column compared with itself, or one
/// the file lacks, is refused.
fn upgrade_between_columns_of_the_committed_report() {
    let committed = root().join("reports").join("matrix.json");
    let report = locklab::judge::load(&committed).unwrap();
    let upgrade = |file: &Path, from: &str, to: &str| {
        Command::new(env!("CARGO_BIN_EXE_locklab"))
            .args(["check", "--upgrade", from, to, "--full", "--from"])
            .arg(file)
            .output()
            .unwrap()
    };
    // The book's chapter on upgrades shows each of these comparisons; its
    // count of differing cells must be the command's.
    let book = std::fs::read_to_string(root().join("docs/src/upgrading.md")).unwrap();
    for (from, to) in [
        ("sqlx-0.8", "sqlx"),
        ("pgbouncer-session", "pgbouncer-trixie-session"),
        ("pgbouncer-trixie-transaction", "pgagroal-transaction"),
        ("pgbouncer-trixie-transaction", "odyssey-transaction"),
    ] {
        let out = upgrade(&committed, from, to);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let summary = stdout
            .lines()
            .find(|l| l.starts_with("locklab check: "))
            .unwrap_or_else(|| panic!("no summary line: {stdout}{stderr}"));
        assert!(
            book.contains(&format!("check --upgrade {from} {to}")) && book.contains(summary),
            "docs/src/upgrading.md does not show `check --upgrade {from} {to}` with its summary {summary:?}"
        );
        for id in [from, to] {
            let d = report
                .drivers
                .iter()
                .find(|d| d.id == id)
                .expect("a column of the committed report");
            assert!(
                stdout.contains(&format!("{id}: {} {}", d.crate_name, d.crate_version)),
                "{stdout}{stderr}"
            );
            if let Some(v) = &d.pooler_version {
                assert!(stdout.contains(v.as_str()), "{stdout}");
            }
        }
        let cells = report.runs.iter().filter(|r| r.driver == to).count();
        let clean = stdout.contains(&format!("0 of {cells} cell(s) differ"));
        assert_eq!(out.status.success(), clean, "{stdout}{stderr}");
    }

    // Column B := column A with one value changed.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = ("sqlx-0.8", "sqlx");
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&committed).unwrap()).unwrap();
    let runs = json["runs"].as_array_mut().unwrap();
    let copies: Vec<serde_json::Value> = runs
        .iter()
        .filter(|r| r["driver"] == a)
        .map(|r| {
            let mut r = r.clone();
            r["driver"] = b.into();
            r
        })
        .collect();
    runs.retain(|r| r["driver"] != b);
    runs.extend(copies);
    let run = runs
        .iter_mut()
        .find(|r| r["scenario"] == "xact-lock-competition" && r["driver"] == b)
        .expect("the committed report has xact-lock-competition × sqlx-0.8");
    let real = shown(&run["observations"][0]);
    run["observations"][0]["value"] = serde_json::json!({"kind": "text", "value": "something else"});
    let tampered = dir.path().join("matrix.json");
    std::fs::write(&tampered, serde_json::to_string(&json).unwrap()).unwrap();
    let out = upgrade(&tampered, a, b);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("locklab check: 1 of "), "{stdout}");
    assert!(stdout.contains("xact-lock-competition × sqlx-0.8 → sqlx"), "{stdout}");
    assert!(stdout.contains(&format!("{real} → something else")), "{stdout}");

    let out = upgrade(&committed, "sqlx", "sqlx");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("two different columns"));
    let out = upgrade(&committed, "sqlx", "no-such-column");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown driver 'no-such-column'"));
}

/// Without a Docker engine (`DOCKER_HOST` naming a socket that does not
/// exist), a column whose pooler runs in a container is `n/a` ("needs
/// Docker"), and `check` leaves its cells out rather than counting them as
/// differences: it exits 0 and says how many it left out. The other column
/// of the run is still compared.
fn without_docker_pooler_columns_are_not_applicable() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args([
            "check",
            "--backend",
            "local",
            "-s",
            "xact-lock-competition",
            "-d",
            "pgpool",
            "-d",
            "tokio-postgres",
        ])
        .env(
            "DOCKER_HOST",
            format!("unix://{}", dir.path().join("no-engine.sock").display()),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("1 cell(s) not compared: not applicable here (needs Docker)"),
        "{stderr}"
    );
    assert!(stdout.contains("0 of 1 cell(s) differ"), "{stdout}");
}

/// The cell text of an observation of `matrix.json` (its typed value as the
/// report shows it).
fn shown(observation: &serde_json::Value) -> String {
    serde_json::from_value::<locklab::outcome::Observation>(observation.clone())
        .unwrap()
        .seen()
        .to_string()
}

/// Issue 52: a scenario written for this test, which no property file names
/// (harness/tests/fixtures/witness/unlock-after-return.yaml: lock, return,
/// another request holds a connection, checkout, unlock), decides
/// `unlock-reaches-the-session` for a column through its recorded unlock,
/// with `properties/` untouched. deadpool-fast hands the job's later
/// checkout another connection: measured, not assumed, the verdict with
/// the fixture is read against the one without it, and it may only move
/// towards violated by the fixture's own cell.
fn a_scenario_no_property_names_decides_the_unlock_property_as_a_witness() {
    const PROPERTY: &str = "unlock-reaches-the-session";
    const FIXTURE: &str = "unlock-after-return";
    let properties_dir = root().join("properties");
    for entry in std::fs::read_dir(&properties_dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(!text.contains(FIXTURE), "a property file names the fixture");
    }
    let own = scenario::load_dir(&root().join("harness/tests/fixtures/witness")).unwrap();
    let shipped: Vec<Scenario> = scenarios()
        .iter()
        .filter(|s| s.family == "session-unlock-interleaved")
        .cloned()
        .collect();
    let drivers = vec![locklab_drivers::find("deadpool-fast").unwrap()];
    let servers = std::slice::from_ref(server());
    let mut both = shipped.clone();
    both.extend(own.iter().cloned());
    let runs = common::block_on_multi(locklab::matrix::run_all(
        servers,
        &both,
        &drivers,
        locklab::matrix::DEFAULT_JOBS,
        1,
        |_, _| {},
    ));
    let fixture_cell = runs.iter().find(|r| r.scenario == FIXTURE).expect("the fixture ran");
    assert!(fixture_cell.failure.is_none(), "{:?}", fixture_cell.failure);
    let verdict_of = |report: &Report| {
        report.verdicts[0]
            .properties
            .iter()
            .find(|p| p.id == PROPERTY)
            .and_then(|p| p.of("deadpool-fast"))
            .cloned()
            .expect("a verdict of deadpool-fast")
    };
    let without_runs: Vec<_> = runs.iter().filter(|r| r.scenario != FIXTURE).cloned().collect();
    let without = verdict_of(&locklab::judge::report(servers, &shipped, &drivers, without_runs, 0.0));
    let with = verdict_of(&locklab::judge::report(servers, &both, &drivers, runs.clone(), 0.0));
    // The fixture's unlock is a witness: it is evidence of the property.
    let from_fixture: Vec<_> = with.evidence.iter().filter(|e| e.scenario == FIXTURE).collect();
    assert_eq!(from_fixture.len(), 1, "{:?}", with.evidence);
    assert_eq!(from_fixture[0].record.as_deref(), Some("job_unlock"));
    assert!(without.evidence.iter().all(|e| e.scenario != FIXTURE));
    // The premise: deadpool-postgres's RecyclingMethod::Fast does not reset
    // a returned connection (its docs: "only run Client::is_closed()"), and
    // the request's transaction keeps the job's first connection busy, so
    // the unlock runs on another one. Read from the cell, not assumed.
    let unlock = fixture_cell
        .observations
        .iter()
        .find(|o| o.name == "job_unlock")
        .unwrap();
    let held = fixture_cell
        .observations
        .iter()
        .find(|o| o.name == "after_job_unlock")
        .unwrap();
    assert!(
        unlock.reading().to_string() == "false" && held.reading().to_string().starts_with("held"),
        "deadpool-fast no longer orphans the lock in this case (unlock {}, then {}): pick a column that does",
        unlock.reading(),
        held.reading()
    );
    assert_eq!(from_fixture[0].reads, Mark::Violated, "{:?}", from_fixture[0]);
    assert_ne!(without.verdict, Mark::Violated, "{without:?}");
    assert_eq!(with.verdict, Mark::Violated, "{with:?}");
}
