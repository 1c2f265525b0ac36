//! `locklab doctor DIR`: fixture projects of every ecosystem it reads
//! (`tests/fixtures/doctor/`, written for these tests) map to the columns,
//! versions and check-in of their stack; the verdicts it prints are the
//! report's for those columns; its gate exits as the report's verdicts say;
//! `examples/own-pool` is its sqlx; and bad input is one line naming the
//! file and line, a non-zero exit, no panic.

mod common;

use std::path::PathBuf;

use locklab::doctor::map::{Closeness, Mapping, map};
use locklab::properties::{Mark, Scope, Severity};

fn fixture(name: &str) -> PathBuf {
    common::root().join("harness/tests/fixtures/doctor").join(name)
}

use common::locklab;

/// The committed report, read once per test binary.
fn report() -> &'static locklab::report::Report {
    static REPORT: std::sync::OnceLock<locklab::report::Report> = std::sync::OnceLock::new();
    REPORT.get_or_init(|| locklab::report::read(&common::root().join("reports/matrix.json")).unwrap())
}

fn mapping(name: &str) -> Mapping {
    let project = locklab::doctor::read(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    map(&project, &report().drivers)
}

/// One expected line of a fixture's stack: what it found starts with
/// `found`, maps to exactly `columns`, exact or not.
struct Expect {
    found: &'static str,
    source: &'static str,
    columns: &'static [&'static str],
    closeness: Closeness,
}

const fn line(
    found: &'static str,
    source: &'static str,
    columns: &'static [&'static str],
    closeness: Closeness,
) -> Expect {
    Expect {
        found,
        source,
        columns,
        closeness,
    }
}

use Closeness::{Exact, Nearest};

/// Per fixture, its whole stack in order. The columns are the registry's
/// (which column tests which package is locklab's own mapping, not a
/// measured behaviour); a column that left the registry fails here.
const STACKS: &[(&str, &[Expect])] = &[
    (
        "cargo-deadpool-pgbouncer-transaction",
        &[
            line(
                "deadpool-postgres 0.14.2",
                "Cargo.lock:11",
                &[
                    "deadpool-fast",
                    "deadpool-verified",
                    "deadpool-clean",
                    "deadpool-custom",
                ],
                Exact,
            ),
            line(
                "PgBouncer pool_mode = transaction",
                "deploy/pgbouncer.ini:8",
                &[
                    "pgbouncer-transaction+deadpool",
                    "pgbouncer-trixie-transaction+deadpool",
                ],
                Exact,
            ),
        ],
    ),
    (
        "python-requirements-pgbouncer-session",
        &[
            line(
                "asyncpg 0.31.0",
                "requirements.txt:2",
                &["asyncpg-0.31", "asyncpg-reset"],
                Exact,
            ),
            line(
                "SQLAlchemy",
                "requirements.txt:6",
                &["sqlalchemy-queuepool", "sqlalchemy-reset-unlock-all"],
                Nearest,
            ),
            line(
                "psycopg2-binary 2.9.13",
                "requirements.txt:7",
                &["psycopg2-pool"],
                Exact,
            ),
            line(
                "PgBouncer pool_mode = session, check-in: DISCARD ALL",
                "pgbouncer.ini:5",
                &["pgbouncer-session", "pgbouncer-trixie-session"],
                Nearest,
            ),
        ],
    ),
    (
        "python-poetry",
        &[line(
            "psycopg 3.3.9",
            "poetry.lock:4",
            &["psycopg-pool", "psycopg-pool-unlock-all", "psycopg-pool-check"],
            Exact,
        )],
    ),
    (
        "python-uv",
        &[line(
            "sqlalchemy 2.0.41",
            "uv.lock:9",
            &["sqlalchemy-queuepool", "sqlalchemy-reset-unlock-all"],
            Nearest,
        )],
    ),
    (
        "python-pipfile",
        &[line("asyncpg 0.32.0", "Pipfile.lock:9", &["asyncpg-0.32"], Exact)],
    ),
    (
        "go",
        &[line(
            "github.com/jackc/pgx/v5 5.7.1",
            "go.mod:6",
            &["pgxpool", "pgxpool-after-release"],
            Nearest,
        )],
    ),
    (
        "npm",
        &[line(
            "pg 8.14.1",
            "package-lock.json:14",
            &["node-postgres", "node-postgres-unlock-all"],
            Exact,
        )],
    ),
    (
        "yarn",
        &[
            line(
                "pg 8.11.3",
                "yarn.lock:9",
                &["node-postgres", "node-postgres-unlock-all"],
                Nearest,
            ),
            line(
                "PgBouncer pool_mode = transaction",
                "pgbouncer.ini:2",
                &["pgbouncer-transaction", "pgbouncer-trixie-transaction"],
                Nearest,
            ),
        ],
    ),
    (
        "pnpm",
        &[line(
            "pg 8.14.1",
            "pnpm-lock.yaml:11",
            &["node-postgres", "node-postgres-unlock-all"],
            Exact,
        )],
    ),
    (
        "maven",
        &[line("com.zaxxer:HikariCP 2.7.9", "pom.xml:14", &["hikaricp"], Exact)],
    ),
    (
        "gradle",
        &[line(
            "com.zaxxer:HikariCP 5.1.0",
            "gradle.lockfile:4",
            &["hikaricp"],
            Nearest,
        )],
    ),
    (
        "ruby",
        &[line(
            "activerecord 6.1.7.10",
            "Gemfile.lock:4",
            &["activerecord"],
            Exact,
        )],
    ),
    (
        "cargo-try",
        &[line(
            "deadpool-postgres 0.12.1",
            "Cargo.lock:4",
            &["deadpool-0.13-fast", "deadpool-0.13-clean"],
            Nearest,
        )],
    ),
];

#[test]
fn every_fixture_maps_to_the_columns_of_its_stack() {
    for (name, expected) in STACKS {
        let m = mapping(name);
        let got: Vec<String> = m
            .stack
            .iter()
            .map(|s| format!("{} ({}) → {:?} {:?}", s.found, s.source, s.columns, s.closeness))
            .collect();
        assert_eq!(m.stack.len(), expected.len(), "{name}: {got:#?}");
        for (s, e) in m.stack.iter().zip(expected.iter()) {
            assert!(s.found.starts_with(e.found), "{name}: {} is not {}", s.found, e.found);
            assert_eq!(s.source, e.source, "{name}: {}", s.found);
            assert_eq!(s.columns, e.columns, "{name}: {}", s.found);
            assert_eq!(s.closeness, e.closeness, "{name}: {} ({:?})", s.found, s.difference);
            // A nearest match says what differs; an exact one needs no word.
            if e.closeness == Nearest {
                assert!(
                    s.difference.as_deref().is_some_and(|d| !d.is_empty()),
                    "{name}: {}",
                    s.found
                );
            }
        }
        // Every column a stack line names is the report's, with the version said.
        for s in &m.stack {
            for c in &s.columns {
                let column = report().drivers.iter().find(|d| &d.id == c).unwrap();
                if s.closeness == Exact && column.pooler.is_none() {
                    let version = s.found.rsplit(' ').next().unwrap();
                    assert!(
                        column.crate_version.starts_with(version),
                        "{name}: {c} {}",
                        column.crate_version
                    );
                }
            }
        }
    }
}

#[test]
fn what_has_no_column_is_listed_with_why() {
    let not_mapped = |name: &str| -> Vec<String> {
        mapping(name)
            .not_mapped
            .iter()
            .map(|n| format!("{} ({}): {}", n.what, n.source, n.why))
            .collect()
    };
    let cargo = not_mapped("cargo-deadpool-pgbouncer-transaction");
    assert!(
        cargo
            .iter()
            .any(|n| n.contains("listen_port (line 6)") && n.contains("not read")),
        "settings doctor does not read are listed, not errors: {cargo:#?}"
    );
    assert!(
        cargo.iter().any(|n| n.contains("%include (line 11)")),
        "PgBouncer's %include is listed as not read, not an error: {cargo:#?}"
    );
    let maven = not_mapped("maven");
    assert!(
        maven
            .iter()
            .any(|n| n.starts_with("org.postgresql:postgresql (no version) (pom.xml:19)")),
        "{maven:#?}"
    );
    let project = locklab::doctor::read(&fixture("maven")).unwrap();
    let pgjdbc = project
        .packages
        .iter()
        .find(|p| p.name == "org.postgresql:postgresql")
        .unwrap();
    assert!(
        pgjdbc.unresolved.as_deref().is_some_and(|u| u.contains("parent POM")),
        "a version from a parent or BOM is reported as not resolved: {pgjdbc:?}"
    );
    assert!(
        not_mapped("go")
            .iter()
            .any(|n| n.starts_with("github.com/lib/pq 1.10.9 (go.mod:10)"))
    );
    let offers = mapping("cargo-try").tries;
    assert_eq!(offers.len(), 1);
    assert_eq!(offers[0].command, "locklab try deadpool-postgres@0.12.1");
    assert!(
        mapping("cargo-deadpool-pgbouncer-transaction").tries.is_empty(),
        "an exact version needs no try"
    );
}

/// The report's verdict marks of `columns` for the column properties.
fn report_marks(report: &locklab::report::Report, columns: &[String]) -> Vec<(String, String, Mark)> {
    let mut marks = Vec::new();
    for p in report.verdicts[0]
        .properties
        .iter()
        .filter(|p| p.scope == Scope::Column)
    {
        for c in p.columns.iter().filter(|c| columns.contains(&c.driver)) {
            marks.push((p.id.clone(), c.driver.clone(), c.verdict));
        }
    }
    marks
}

#[test]
fn its_verdicts_and_its_gate_are_the_reports() {
    let dir = fixture("cargo-deadpool-pgbouncer-transaction");
    let out = locklab(&["doctor", dir.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let columns: Vec<String> = serde_json::from_value(json["columns"].clone()).unwrap();
    assert_eq!(columns.len(), 6, "{columns:?}");
    let judged = locklab::judge::load(&common::root().join("reports/matrix.json")).unwrap();
    let expected = report_marks(&judged, &columns);
    let mut printed = Vec::new();
    for p in json["verdicts"][0]["properties"].as_array().unwrap() {
        for c in p["columns"].as_array().unwrap() {
            printed.push((
                p["id"].as_str().unwrap().to_owned(),
                c["column"].as_str().unwrap().to_owned(),
                c["verdict"].as_str().unwrap().to_owned(),
            ));
        }
    }
    let expected_words: Vec<(String, String, String)> = expected
        .iter()
        .map(|(p, c, m)| (p.clone(), c.clone(), m.as_str().to_owned()))
        .collect();
    assert_eq!(printed, expected_words);
    assert_eq!(json["cards"].as_array().unwrap().len(), columns.len());

    // The gate: exit 1 exactly when the report has an unsafe violation (or an
    // undecided required verdict) in one of the columns.
    let unsafe_failures = judged.verdicts[0]
        .properties
        .iter()
        .filter(|p| p.scope == Scope::Column && p.severity == Severity::Unsafe)
        .flat_map(|p| &p.columns)
        .filter(|c| columns.contains(&c.driver) && matches!(c.verdict, Mark::Violated | Mark::Undecided))
        .count();
    let gated = locklab(&["doctor", dir.to_str().unwrap(), "--require-severity", "unsafe"]);
    let stderr = String::from_utf8_lossy(&gated.stderr);
    assert_eq!(
        gated.status.code(),
        Some(if unsafe_failures > 0 { 1 } else { 0 }),
        "{stderr}"
    );
    if unsafe_failures > 0 {
        assert!(
            stderr.contains(&format!("locklab doctor: {unsafe_failures} required")),
            "{stderr}"
        );
    }
}

#[test]
fn own_pool_is_its_sqlx() {
    let out = locklab(&["doctor", common::root().join("examples/own-pool").to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let stack: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("## What locklab runs"))
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| l.starts_with("- "))
        .collect();
    let sqlx = report().drivers.iter().find(|d| d.id == "sqlx").unwrap();
    let version = sqlx.crate_version.split(' ').next().unwrap();
    // Its one pool (locklab's own pools, locked through the path dependency on locklab, are not its).
    assert_eq!(stack.len(), 1, "{text}");
    assert!(
        stack[0].starts_with(&format!("- sqlx {version} (Cargo.lock:")) && stack[0].contains("`sqlx`"),
        "{text}"
    );
    assert!(text.contains("### `sqlx`: sqlx"), "{text}");
}

#[test]
fn bad_input_is_one_line_naming_the_file_and_line() {
    for (name, file, line) in [
        ("bad-cargo-lock", "Cargo.lock", Some(5)),
        ("bad-pgbouncer-mode", "pgbouncer.ini", Some(3)),
        ("bad-gemfile", "Gemfile.lock", Some(4)),
        ("bad-empty", "", None),
    ] {
        let dir = fixture(name);
        let out = locklab(&["doctor", dir.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(out.stdout.is_empty(), "{name}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        let at = match line {
            Some(l) => format!("{}:{l}: ", dir.join(file).display()),
            None => "no lockfile or pooler configuration".to_owned(),
        };
        assert!(stderr.contains(&at), "{name}: {stderr}");
    }
    let missing = locklab(&["doctor", "/nonexistent-locklab-project"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("/nonexistent-locklab-project: cannot read the directory")
    );
}
