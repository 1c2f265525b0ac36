//! `locklab repro`: the script it writes for a cell of the committed report,
//! run in a clean shell (nothing but `PATH` with `psql`, and the `PG*` and
//! `POOLER_*` variables) against a fresh database and the pooler, reads
//! what the committed report read: a violated cell shows the violation, a
//! cell that holds shows that. And its bad input.

mod common;

use std::process::Command;

use locklab::properties::Mark;
use locklab::server::{BackendChoice, ServerOptions};

use common::locklab;

/// The committed report's verdict of `property` on `column`.
fn committed_verdict(property: &str, column: &str) -> Mark {
    let report = locklab::judge::load(&common::root().join("reports/matrix.json")).unwrap();
    report.verdicts[0]
        .properties
        .iter()
        .find(|p| p.id == property)
        .and_then(|p| p.of(column))
        .map(|v| v.verdict)
        .unwrap_or_else(|| panic!("the committed report judges {property} on {column}"))
}

/// The script for `session-lock-pool-return` behind Debian 12's PgBouncer in
/// each mode, and in transaction mode with `DISCARD ALL` after every
/// transaction, run by bash against a database of its own on the test
/// server, through a PgBouncer configured as the column's: it reproduces
/// every recorded reading, and its header says the committed verdict of
/// `session-lock-released-on-return` there (violated in transaction mode,
/// where the lock stays on the server connection; what session mode's
/// reset and the per-transaction `DISCARD ALL` do; the latter's script
/// waits for that reset after each statement, as locklab does).
#[test]
fn a_repro_script_reads_what_the_committed_cell_read() {
    let server = common::server();
    let bin = locklab::server::local::resolve_binaries(&ServerOptions::new(BackendChoice::Local, 17)).unwrap();
    assert!(bin.join("psql").is_file(), "psql in {}", bin.display());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let spec = server.spec("postgres", "");
    for column in [
        "pgbouncer-transaction",
        "pgbouncer-session",
        "pgbouncer-transaction-discard-always",
    ] {
        // The pooler as the column declares it (mode and check-in).
        let pooler = locklab_drivers::find(column).unwrap().info().pooler.unwrap();
        let (port, _, password) = rt.block_on(server.pooler(pooler)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("repro.sh");
        let wrote = locklab(&[
            "repro",
            "-s",
            "session-lock-pool-return",
            "-d",
            column,
            "-o",
            file.to_str().unwrap(),
        ]);
        assert!(wrote.status.success(), "{}", String::from_utf8_lossy(&wrote.stderr));
        let mut run = Command::new("bash");
        run.arg(&file)
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("HOME", dir.path())
            .env("TMPDIR", dir.path())
            .env("PGHOST", &spec.host)
            .env("PGPORT", spec.port.to_string())
            .env("PGUSER", &spec.user)
            .env("POOLER_HOST", "127.0.0.1")
            .env("POOLER_PORT", port.to_string())
            .env("POOLER_PASSWORD", &password);
        if let Some(p) = &spec.password {
            run.env("PGPASSWORD", p);
        }
        let out = run.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{column}:\n{stdout}\n{stderr}");
        assert!(stdout.contains("reproduced: "), "{column}:\n{stdout}");
        let verdict = committed_verdict("session-lock-released-on-return", column);
        // (`pgbouncer-transaction-discard-always` holds where tried: its
        // per-transaction DISCARD ALL also ends the locks a client meant to keep.)
        let said = match verdict {
            Mark::Violated => "violated on this column",
            Mark::Holds => "holds on this column",
            other => other.as_str(),
        };
        let said = format!("session-lock-released-on-return (unsafe): {said};");
        assert!(
            stdout.contains(&said),
            "{column}: says the committed verdict:\n{stdout}"
        );
        // Nothing left: the script drops its database and removes its files.
        let left = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("locklab-repro"))
            .count();
        assert_eq!(left, 0, "{column}: the script's directory is removed");
    }
}

/// For a pool column, the steps in the pool's terms, not a script.
#[test]
fn a_pool_column_gets_the_steps_in_its_terms() {
    let out = locklab(&["repro", "-s", "session-lock-pool-return", "-d", "deadpool-fast"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("`pool.get().await`"), "{text}");
    assert!(!text.starts_with("#!"), "{text}");
}

/// A column of the lock crate: its steps in the wrapped pool's terms and
/// the crate's own calls, behind transaction pooling with the declared
/// `Pooling::Transaction`.
#[test]
fn a_lock_crate_column_gets_the_crates_calls_on_its_pool() {
    let out = locklab(&["repro", "-s", "lock-crate-refusal", "-d", "pg-advisory-lock+sqlx"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "`SessionLock::acquire(conn, Key::new(99), Wait::Try)` on a connection from `pool.acquire().await`"
        ),
        "{text}"
    );
    let out = locklab(&[
        "repro",
        "-s",
        "lock-crate-refusal",
        "-d",
        "pg-advisory-lock+pgbouncer-transaction",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Pooling::Transaction)` on a connection from `pool.get().await`"),
        "{text}"
    );
    assert!(
        text.contains("`BEGIN`, then `lock_xact(&mut tx, Key::new(99), Wait::Try)`"),
        "{text}"
    );
}

/// A cell that does not exist, a scenario or column that does not, a step
/// without a psql form: one line, exit code 2.
#[test]
fn repro_bad_input_is_one_line() {
    for (args, says) in [
        (
            vec!["repro", "-s", "no-such-scenario", "-d", "tokio-postgres"],
            "no such scenario",
        ),
        (
            vec!["repro", "-s", "unlock-all", "-d", "no-such-column"],
            "no such column",
        ),
        (
            vec!["repro", "-s", "extreme-keys", "-d", "tokio-postgres"],
            "parameter sets",
        ),
        (
            vec!["repro", "-s", "crash-session-holder", "-d", "tokio-postgres"],
            "no psql form",
        ),
    ] {
        let out = locklab(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
    }
}
