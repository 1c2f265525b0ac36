//! A DSN's password never appears in what locklab prints or writes: its
//! output at the most verbose log level, the report files, and the errors for
//! DSNs it cannot parse, servers it cannot reach and passwords the server
//! refuses. The server is a local cluster where one role must give a
//! password (scram-sha-256), so the password is really used, also by PgBouncer.

mod common;

use std::path::Path;
use std::process::{Command, Output};

const PASSWORD: &str = "Zq9-s3cr3t-T0ken";
const ROLE: &str = "locklab_secret";

/// The test cluster with `ROLE` (LOGIN, CREATEDB, password `PASSWORD`), which
/// must authenticate with scram-sha-256 over TCP; every other role keeps trust.
fn server_with_password_role() -> (String, u16) {
    let server = common::server();
    common::block_on(async {
        let admin = server.admin().await.unwrap();
        let c = admin.client();
        let hba: String = c.query_one("show hba_file", &[]).await.unwrap().get(0);
        // The cluster's owner writes the file; a reload applies it.
        c.batch_execute(&format!(
            "copy (select unnest(array['host all {ROLE} 127.0.0.1/32 scram-sha-256', \
             'host all all 127.0.0.1/32 trust'])) to '{hba}'; \
             select pg_reload_conf(); \
             set password_encryption = 'scram-sha-256'; \
             drop role if exists {ROLE}; \
             create role {ROLE} login createdb password '{PASSWORD}'"
        ))
        .await
        .unwrap();
        admin.close().await;
    });
    let spec = server.spec("postgres", "");
    (spec.host, spec.port)
}

fn locklab(dsn: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(args)
        .env("LOCKLAB_DSN", dsn)
        .env("LOCKLAB_LOG", "trace")
        .env_remove("LOCKLAB_BACKEND")
        .output()
        .unwrap()
}

fn assert_secret_free(what: &str, text: &str) {
    // Also URL-encoded, in case a DSN is echoed in that form.
    for needle in [PASSWORD.to_owned(), PASSWORD.replace('-', "%2D"), "s3cr3t".to_owned()] {
        assert!(!text.contains(&needle), "{what} shows the password ({needle}):\n{text}");
    }
}

fn output_text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every file under `dir`, subdirectories included, as text.
fn files_text(dir: &Path) -> String {
    let mut all = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let path = e.path();
        if path.is_dir() {
            all.push_str(&files_text(&path));
        } else {
            all.push_str(&String::from_utf8_lossy(&std::fs::read(path).unwrap()));
        }
    }
    all
}

#[test]
fn a_dsn_password_never_appears_in_output_reports_or_errors() {
    let (host, port) = server_with_password_role();
    let dsn = format!("postgresql://{ROLE}:{PASSWORD}@{host}:{port}/postgres");

    // A real run with the password, directly and through PgBouncer, at log level
    // trace, one cell failing on purpose (its error text is printed), writing
    // every report format.
    let scenarios = tempfile::tempdir().unwrap();
    std::fs::write(
        scenarios.path().join("fails.yaml"),
        "name: fails\ndescription: an expectation that does not hold\nactors: { a: { via: pool } }\nsteps:\n  \
         - { actor: a, do: checkout }\n  - { actor: a, sql: select current_user, expect: { value: nobody } }\n",
    )
    .unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/lock-timeout-200ms.yaml"),
        scenarios.path().join("lock-timeout-200ms.yaml"),
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let run = locklab(
        &dsn,
        &[
            "report",
            "--format",
            "json,md,html",
            "--out",
            out.path().to_str().unwrap(),
            "-d",
            "tokio-postgres",
            "-d",
            "deadpool-fast",
            "-d",
            "bb8",
            "-d",
            "sqlx",
            "-d",
            "mobc",
            "-d",
            "r2d2",
            "-d",
            "diesel-async",
            "-d",
            "pgbouncer-session",
            "-d",
            "pgbouncer-transaction+deadpool",
            "--scenarios",
            scenarios.path().to_str().unwrap(),
        ],
    );
    let text = output_text(&run);
    // It really connected as the role, and the one failing scenario failed.
    assert_eq!(run.status.code(), Some(1), "{text}");
    assert!(text.contains(" passed, ") && text.contains("8 failed"), "{text}");
    assert!(text.contains("nobody"), "{text}");
    assert_secret_free("a run's output (LOCKLAB_LOG=trace)", &text);
    let files = files_text(out.path());
    assert!(
        files.contains(ROLE) || files.contains("lock-timeout-200ms"),
        "no report written"
    );
    assert_secret_free("the report files", &files);

    // Errors: a password the server refuses, servers that cannot be reached,
    // connection strings that cannot be parsed, a DSN where none may be.
    let wrong = format!("postgresql://{ROLE}:{PASSWORD}-not@{host}:{port}/postgres");
    let unreachable = format!("postgresql://{ROLE}:{PASSWORD}@127.0.0.1:1/postgres");
    let unparsable = [
        format!("postgresql://{ROLE}:{PASSWORD}@127.0.0.1:notaport/postgres"),
        format!("host=127.0.0.1 user={ROLE} password='{PASSWORD}"),
        format!("host=127.0.0.1 password={PASSWORD} port=99999"),
        format!("host=127.0.0.1 password={PASSWORD} bogus=1"),
        format!("postgresql://u:{PASSWORD}@[::1/db"),
        // An unquoted space: the rest of the password reads as an option name.
        "host=127.0.0.1 password=Zq9-x s3cr3t=T0ken".to_owned(),
    ];
    let cases = [
        (wrong.as_str(), "password authentication failed"),
        (unreachable.as_str(), "cannot connect"),
    ]
    .into_iter()
    .chain(unparsable.iter().map(|d| (d.as_str(), "not a valid connection string")));
    for (dsn, says) in cases {
        let o = locklab(dsn, &["run", "-s", "lock-timeout-200ms", "-d", "tokio-postgres"]);
        let text = output_text(&o);
        assert_eq!(o.status.code(), Some(2), "{dsn}: {text}");
        assert!(text.contains(says), "{dsn}: {says:?} not in {text}");
        assert_secret_free(&format!("the error for {dsn}"), &text);
        // `holders` takes the same DSN the same way: one line, exit 2.
        let o = locklab(dsn, &["holders"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "holders {dsn}: {err}");
        assert!(
            err.contains(says) && err.trim_end().lines().count() == 1,
            "holders {dsn}: {says:?} not in one line: {err}"
        );
        assert_secret_free(&format!("holders' error for {dsn}"), &output_text(&o));
    }
    // With the right password, holders and its /metrics work and say nothing of it.
    let o = locklab(&dsn, &["holders", "--format", "json"]);
    assert!(o.status.success(), "{}", output_text(&o));
    assert_secret_free("holders' snapshot", &output_text(&o));
    let o = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(["run", "--backend", "local", "--dsn", &dsn])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_secret_free("the error for --backend local --dsn", &output_text(&o));
}
