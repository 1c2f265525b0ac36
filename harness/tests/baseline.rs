//! The baseline directory as a user works with it, through the `locklab`
//! binary on a local cluster: `check` writes what differs as a pending file
//! for that scenario only, `review` rejects or accepts it (by name, and once
//! by key through a pseudo-terminal), `check --update` on a run that
//! changes nothing rewrites no file, a user's own scenarios and column get a
//! baseline directory of their own, and `migrate-baseline` keeps every
//! value of a whole-matrix file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use locklab::baseline::{self, Baseline, BaselineDir, ScenarioBaseline};

/// The workspace.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The committed baseline directory.
fn committed() -> PathBuf {
    root().join("reports").join("baseline")
}

/// `locklab ARGS…`, on a local cluster of its own.
fn locklab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(args)
        .env_remove("LOCKLAB_DSN")
        .env_remove("LOCKLAB_SCENARIOS")
        .output()
        .expect("locklab runs")
}

/// stdout and stderr of `out`, for messages.
fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A copy of the committed files of `names` in a directory of its own.
fn copy_of(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in names {
        std::fs::copy(
            committed().join(format!("{name}.json")),
            dir.path().join(format!("{name}.json")),
        )
        .unwrap();
    }
    dir
}

/// The scenario whose accepted file the tests edit, the one left alone, and
/// the two columns they run.
const EDITED: &str = "lock-timeout-200ms";
const UNTOUCHED: &str = "xact-lock-competition";
const COLUMNS: [&str; 2] = ["tokio-postgres", "deadpool-fast"];

/// `check` of [`EDITED`] and [`UNTOUCHED`] through [`COLUMNS`] against the
/// baseline directory `dir` (with `extra` arguments).
fn check(dir: &Path, extra: &[&str]) -> Output {
    let d = dir.to_str().unwrap();
    let mut args = vec![
        "check",
        "--backend",
        "local",
        "-s",
        EDITED,
        "-s",
        UNTOUCHED,
        "-d",
        COLUMNS[0],
        "-d",
        COLUMNS[1],
        "--baseline",
        d,
    ];
    args.extend_from_slice(extra);
    locklab(&args)
}

/// Changes the first observation's value of `EDITED` × deadpool-fast in the
/// accepted file of `dir`, by hand as a person would; returns the text it
/// had.
fn edit_by_hand(dir: &Path) -> String {
    let path = dir.join(format!("{EDITED}.json"));
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let cell = json["cells"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["driver"] == COLUMNS[1])
        .expect("the file has a deadpool-fast cell");
    let (_, obs) = cell["observations"].as_object_mut().unwrap().iter_mut().next().unwrap();
    let real = serde_json::from_value::<locklab::outcome::Reading>(obs["value"].clone())
        .unwrap()
        .to_string();
    obs["value"] = serde_json::json!({"kind": "text", "value": "something else"});
    std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap() + "\n").unwrap();
    real
}

/// The bytes of `dir/NAME.json`.
fn bytes(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(baseline::dir::accepted_path(dir, name)).unwrap()
}

/// A hand-edited accepted file: `check` exits 1, names the cell, writes a
/// pending file for that scenario only and leaves every accepted file as it
/// was; `review --reject` removes the pending file (the edited file stays);
/// the next `check` writes it again and `review --accept` takes it: the
/// cell reads as the run did, every other cell of the file is the edited
/// file's to the byte, and `check` is clean. Then the same through a
/// pseudo-terminal: `review` shows the diff and a key (`a`) accepts it.
#[test]
fn check_writes_a_pending_file_that_review_rejects_or_accepts() {
    let dir = copy_of(&[EDITED, UNTOUCHED]);
    let d = dir.path();
    let real = edit_by_hand(d);
    let (edited, untouched) = (bytes(d, EDITED), bytes(d, UNTOUCHED));

    let out = check(d, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("1 of "), "{t}");
    assert!(t.contains(&format!("{EDITED} × {}", COLUMNS[1])), "{t}");
    assert!(
        t.lines()
            .any(|l| l.contains("something else") && l.ends_with(&format!("→ {real}"))),
        "{t}"
    );
    assert_eq!(BaselineDir::pending(d).unwrap(), vec![EDITED.to_owned()], "{t}");
    assert_eq!(
        (bytes(d, EDITED), bytes(d, UNTOUCHED)),
        (edited.clone(), untouched.clone())
    );

    let d_arg = d.to_str().unwrap();
    let out = locklab(&["review", "--baseline", d_arg, "--reject", EDITED]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(BaselineDir::pending(d).unwrap().is_empty());
    assert_eq!(bytes(d, EDITED), edited, "reject leaves the accepted file");

    let out = check(d, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let out = locklab(&["review", "--baseline", d_arg, "--accept", EDITED]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(BaselineDir::pending(d).unwrap().is_empty());
    let before: serde_json::Value = serde_json::from_slice(&edited).unwrap();
    let after: serde_json::Value = serde_json::from_slice(&bytes(d, EDITED)).unwrap();
    for (b, a) in before["cells"]
        .as_array()
        .unwrap()
        .iter()
        .zip(after["cells"].as_array().unwrap())
    {
        if a["driver"] == COLUMNS[1] {
            assert_ne!(a, b, "the accepted cell is the run's");
        } else {
            assert_eq!(a, b, "{}: a cell that did not differ is kept", a["driver"]);
        }
    }
    assert_eq!(bytes(d, UNTOUCHED), untouched);
    let out = check(d, &[]);
    assert!(out.status.success(), "accepted, it compares clean:\n{}", text(&out));

    // Once by key, in a terminal.
    edit_by_hand(d);
    let out = check(d, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locklab"));
    cmd.args(["review", "--baseline", d_arg]);
    let mut session = rexpect::session::spawn_command(cmd, Some(60_000)).expect("a pseudo-terminal");
    session.exp_string(&format!("1 of 1: {EDITED}")).unwrap();
    session.exp_string("something else").unwrap();
    // rexpect reads the terminal byte by byte: match ASCII only.
    session.exp_string("s skip").unwrap();
    session.exp_string("q quit: ").unwrap();
    session.send("a").unwrap();
    session.flush().unwrap();
    session.exp_string("accepted").unwrap();
    session.exp_string(&format!("review: accepted {EDITED}")).unwrap();
    session.exp_eof().unwrap();
    assert!(BaselineDir::pending(d).unwrap().is_empty());
    let out = check(d, &[]);
    assert!(
        out.status.success(),
        "accepted by key, it compares clean:\n{}",
        text(&out)
    );
}

/// `check --update` on a run that changes no behaviour rewrites no accepted
/// file (timings within the tolerance, the same readings) and says so; a
/// scenario with no accepted file gets one written from its own cells,
/// touching no other file.
#[test]
fn check_update_rewrites_only_what_differs() {
    let dir = copy_of(&[EDITED, UNTOUCHED]);
    let d = dir.path();
    let before = (bytes(d, EDITED), bytes(d, UNTOUCHED));
    let out = check(d, &["--update"]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("no accepted file changed"), "{t}");
    assert_eq!((bytes(d, EDITED), bytes(d, UNTOUCHED)), before);

    // A scenario without an accepted file.
    std::fs::remove_file(baseline::dir::accepted_path(d, EDITED)).unwrap();
    let out = check(d, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains(&format!("no baseline for scenario {EDITED}")), "{t}");
    assert_eq!(BaselineDir::pending(d).unwrap(), vec![EDITED.to_owned()]);
    let out = locklab(&["review", "--baseline", d.to_str().unwrap(), "--accept-all"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        bytes(d, UNTOUCHED),
        before.1,
        "accepting a new scenario touches no other file"
    );
    let file = ScenarioBaseline::load(&baseline::dir::accepted_path(d, EDITED)).unwrap();
    let drivers: Vec<&str> = file.cells.iter().map(|c| c.driver.as_str()).collect();
    assert_eq!(drivers, COLUMNS, "its own cells, nothing else");
}

/// A user's own scenario directory and columns file: `check --baseline DIR`
/// says their scenario has no baseline and writes a pending file; accepted,
/// the next `check` is clean; after a change in their column (its reset:
/// psycopg_pool's `reset=` running `pg_advisory_unlock_all()`), `check`
/// exits 1 naming the cell and the column's configuration change. Without
/// `--baseline`, their scenarios are refused with the way out, and so is a
/// `--baseline` file name that does not exist.
#[test]
fn a_users_scenarios_and_column_get_a_baseline_directory_of_their_own() {
    let work = tempfile::tempdir().unwrap();
    let scenarios = work.path().join("scenarios");
    std::fs::create_dir(&scenarios).unwrap();
    std::fs::copy(
        root().join("scenarios/session-lock-pool-return.yaml"),
        scenarios.join("session-lock-pool-return.yaml"),
    )
    .unwrap();
    let columns = work.path().join("columns.yaml");
    let r = root();
    let column = |reset: &str, configuration: &str| {
        format!(
            "- id: our-psycopg\n  package: psycopg\n  version: 3.3.9\n  configuration: \"{configuration}\"\n  \
             toolchain: {{program: python3, install: \"apt-get install python3 python3-venv\"}}\n  \
             install: [bash, {r}/drivers/adapters/python/install.sh, psycopg-3.3]\n  \
             command: [{r}/.cache/python/psycopg-3.3/bin/python, {r}/drivers/adapters/python/adapter.py, psycopg, {reset}]\n",
            r = r.display()
        )
    };
    std::fs::write(&columns, column("defaults", "our pool, as we configure it")).unwrap();
    let base = work.path().join("our-baseline");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "check",
            "--backend",
            "local",
            "--scenarios",
            scenarios.to_str().unwrap(),
            "--columns",
            columns.to_str().unwrap(),
            "-d",
            "our-psycopg",
        ];
        args.extend_from_slice(extra);
        locklab(&args)
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--baseline DIR"), "{}", text(&out));

    // A baseline is a directory: a file name that does not exist is refused
    // before anything runs (a directory that does not exist is a new one).
    let old = work.path().join("baseline.json");
    let out = run(&["--baseline", old.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("a baseline is a directory"), "{}", text(&out));

    let b = base.to_str().unwrap();
    let out = run(&["--baseline", b]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("no baseline for scenario session-lock-pool-return"), "{t}");
    let out = locklab(&["review", "--baseline", b, "--accept", "session-lock-pool-return"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = run(&["--baseline", b]);
    assert!(out.status.success(), "{}", text(&out));

    std::fs::write(
        &columns,
        column(
            "reset-unlock-all",
            "our pool, now resetting with pg_advisory_unlock_all()",
        ),
    )
    .unwrap();
    let out = run(&["--baseline", b]);
    let t = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a change in their column fails their check:\n{t}"
    );
    assert!(t.contains("session-lock-pool-return × our-psycopg"), "{t}");
    assert!(
        t.contains("configuration our pool, as we configure it → our pool, now resetting"),
        "{t}"
    );
    assert_eq!(
        BaselineDir::pending(&base).unwrap(),
        vec!["session-lock-pool-return".to_owned()]
    );
}

/// `migrate-baseline` splits a whole-matrix baseline (version 2, here made
/// from the committed report) into one file per scenario and checks every
/// value; a new file with one value changed fails that check, naming the
/// cell and the value.
#[test]
fn migrate_baseline_keeps_every_value() {
    let report = locklab::judge::load(&root().join("reports/matrix.json")).unwrap();
    let mut whole = Baseline::from_report(&report).unwrap();
    whole.baseline_version = baseline::WHOLE_FILE_VERSION;
    let work = tempfile::tempdir().unwrap();
    let old = work.path().join("baseline.json");
    std::fs::write(&old, serde_json::to_string_pretty(&whole).unwrap()).unwrap();
    let into = work.path().join("baseline");
    let out = locklab(&["migrate-baseline", old.to_str().unwrap(), into.to_str().unwrap()]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains(&format!("every one of the {} cell(s)", report.runs.len())),
        "{t}"
    );
    let dir = BaselineDir::load(&into).unwrap();
    let key = |c: &baseline::BaselineCell| (c.scenario.clone(), c.driver.clone());
    let mut split = dir.whole().cells;
    let mut cells = whole.cells.clone();
    split.sort_by_key(key);
    cells.sort_by_key(key);
    assert!(split == cells, "the files' cells are the old file's");

    let cell = &whole.cells[whole.cells.len() / 2];
    let name = baseline::family(&cell.scenario);
    let path = baseline::dir::accepted_path(&into, name);
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let c = json["cells"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["scenario"] == cell.scenario.as_str() && c["driver"] == cell.driver.as_str())
        .unwrap();
    c["cleaned_backends"] = serde_json::json!(99);
    std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    let e = baseline::migrate::check(&old, &into).unwrap_err().to_string();
    assert!(
        e.contains(&format!("{} × {}.cleaned_backends", cell.scenario, cell.driver)) && e.contains("99"),
        "{e}"
    );
}
