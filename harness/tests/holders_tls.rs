//! `locklab holders` against a TLS-only server: a local cluster of this
//! file's own with `ssl = on`, its CA, server and client certificates made
//! here (rcgen). The two roles the tests connect as are admitted only by
//! `hostssl` lines of `pg_hba.conf` (a password role and a `cert` role), and
//! refused by a `hostnossl … reject` before initdb's `trust` lines, which
//! the harness's own superuser keeps for its setup connections.
//!
//! Each way TLS fails has its own line; a leak is found through
//! `verify-full` as without TLS; many targets are probed from one exporter
//! at once, one that never answers delaying nobody.

mod common;
#[path = "support/tls.rs"]
mod tls;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libtest_mimic::Trial;
use locklab::server::{BackendChoice, Server, ServerOptions};
use locklab_drivers::DirectConn;
use serde_json::Value;
use tls::TestCa;

/// The address the tests connect to (the server certificate names it;
/// 127.0.0.1, which it does not name, is the wrong host).
const TLS_ADDR: &str = "127.0.0.2";
/// The password role (pg_monitor), and its password (never in a message).
const MONITOR: &str = "tls_monitor";
const PASSWORD: &str = "Pa55-w0rd-not-to-be-shown";
/// The role that logs in with its client certificate (CN = role).
const CERT_ROLE: &str = "tls_cert";
/// A name the server certificate has, besides 127.0.0.2.
const SERVER_NAME: &str = "pg.locklab.test";

/// The TLS cluster and the files the tests hand to `holders`.
struct Tls {
    server: Server,
    /// The directory of ca.pem, other-ca.pem, client.pem, client.key, broken.key.
    dir: tempfile::TempDir,
}

impl Tls {
    fn file(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn port(&self) -> u16 {
        self.server.spec("postgres", "").port
    }

    /// A DSN for 127.0.0.2 as the password role (pg_monitor), with `extra` settings.
    fn dsn(&self, extra: &str) -> String {
        format!(
            "host={TLS_ADDR} port={} user={MONITOR} password={PASSWORD} dbname=postgres {extra}",
            self.port()
        )
    }

    fn verify_full(&self) -> String {
        self.dsn(&format!("sslmode=verify-full sslrootcert={}", self.file("ca.pem")))
    }
}

/// The TLS cluster, started by the first test that needs it.
static TLS: OnceLock<Tls> = OnceLock::new();

fn tls() -> &'static Tls {
    TLS.get_or_init(start_tls_server)
}

fn start_tls_server() -> Tls {
    let mut opts = ServerOptions::new(BackendChoice::Local, 17);
    opts.settings = vec![format!("listen_addresses=127.0.0.1,{TLS_ADDR}")];
    // (Clients on loopback connect from 127.0.0.1, whatever 127.0.0.x they dial.)
    opts.hba_lines = vec![
        format!("hostssl all {CERT_ROLE} 127.0.0.1/32 cert"),
        format!("hostssl all {MONITOR} 127.0.0.1/32 scram-sha-256"),
        format!("hostnossl all {CERT_ROLE},{MONITOR} all reject"),
    ];
    let server = Server::start(&opts).expect("a local cluster");
    let dir = tempfile::tempdir().unwrap();
    // The CA, the server's certificate (127.0.0.2 and a name), a client
    // certificate for the cert role, and a CA that signed none of them.
    let ca = TestCa::new("locklab test CA").unwrap();
    let other = TestCa::new("another CA").unwrap();
    let (client_pem, client_key) = ca.issue(CERT_ROLE, &[]).unwrap();
    let put = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    put("ca.pem", &ca.pem());
    put("other-ca.pem", &other.pem());
    put("client.pem", &client_pem);
    put("client.key", &client_key);
    put(
        "broken.key",
        "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n",
    );
    common::block_on(async {
        let admin = server.admin().await.unwrap();
        for sql in [
            format!("create role {MONITOR} login password '{PASSWORD}' in role pg_monitor"),
            format!("create role {CERT_ROLE} login in role pg_monitor"),
        ] {
            admin.client().batch_execute(&sql).await.unwrap();
        }
        admin.close().await;
        tls::turn_on(&server, &ca, &[TLS_ADDR, SERVER_NAME]).await.unwrap();
    });
    Tls { server, dir }
}

/// The image `the_image_serves_two_targets` runs.
const IMAGE: &str = "locklab/holders:latest";

fn has_image() -> bool {
    Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn main() {
    let args = common::init_binary();
    let trials = vec![
        common::trial(
            "verify_full_finds_a_leak_through_tls",
            verify_full_finds_a_leak_through_tls,
        ),
        common::trial("each_tls_failure_has_its_own_line", each_tls_failure_has_its_own_line),
        common::trial(
            "client_certificate_and_libpq_variables",
            client_certificate_and_libpq_variables,
        ),
        common::trial(
            "one_exporter_probes_many_targets_at_once",
            one_exporter_probes_many_targets_at_once,
        ),
        common::trial("a_broken_targets_file_is_located", a_broken_targets_file_is_located),
        common::trial("the_image_serves_two_targets", the_image_serves_two_targets),
    ];
    let image_test = |t: &Trial| t.name() == "the_image_serves_two_targets";
    let missing = if !common::any_selected(&trials, image_test, &args) {
        None
    } else if let Err(e) = locklab::server::container::docker_answers() {
        Some(format!("no Docker engine ({e:#})"))
    } else if !has_image() && std::env::var_os("LOCKLAB_NO_INSTALL").is_some() {
        Some(format!(
            "no {IMAGE}, and LOCKLAB_NO_INSTALL forbids building it (just holders-image)"
        ))
    } else {
        None
    };
    let trials = common::ignore_when(trials, image_test, "needs Docker", missing.as_deref(), &args);
    let conclusion = libtest_mimic::run(&args, trials);
    // `exit` runs no destructors: the certificates' directory (with the
    // client's private key) goes here, not with the static.
    if let Some(t) = TLS.get()
        && let Err(e) = std::fs::remove_dir_all(t.dir.path())
    {
        eprintln!("cannot remove {}: {e}", t.dir.path().display());
    }
    conclusion.exit();
}

/// `locklab holders ARGS` with `dsn` in LOCKLAB_DSN (none when empty) and
/// `env` set; libpq's variables of the test process are removed.
fn holders(dsn: &str, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locklab"));
    cmd.arg("holders").args(args).env_remove("LOCKLAB_LOG");
    for v in [
        "PGHOST",
        "PGPORT",
        "PGUSER",
        "PGPASSWORD",
        "PGDATABASE",
        "PGSSLMODE",
        "PGSSLROOTCERT",
        "PGSSLCERT",
        "PGSSLKEY",
    ] {
        cmd.env_remove(v);
    }
    if dsn.is_empty() {
        cmd.env_remove("LOCKLAB_DSN");
    } else {
        cmd.env("LOCKLAB_DSN", dsn);
    }
    cmd.envs(env.iter().copied());
    cmd.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit 2, one line on stderr that says `says`, and never the password.
fn fails_with(o: &Output, says: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(says), "expected '{says}' in: {err}");
    assert!(!err.contains(PASSWORD), "the password was shown: {err}");
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}); stderr: {}", stderr(o)))
}

fn verify_full_finds_a_leak_through_tls() {
    let t = tls();
    common::block_on(async {
        // A session-level lock left on an idle session (the guide's leak),
        // taken over a plain connection on 127.0.0.1.
        let leaker = DirectConn::connect(&t.server.spec("postgres", "tls-leaker"))
            .await
            .unwrap();
        leaker
            .client()
            .execute("select pg_advisory_lock(4242)", &[])
            .await
            .unwrap();
        let pid: i32 = leaker
            .client()
            .query_one("select pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        let o = holders(
            &t.verify_full(),
            &[],
            &["--format", "json", "--idle-after", "0", "--fail-on", "leaked"],
        );
        assert_eq!(o.status.code(), Some(1), "--fail-on leaked finds it: {}", stderr(&o));
        let v = json(&o);
        assert_eq!(v["role"], MONITOR);
        let locks = v["locks"].as_array().unwrap();
        let lock = locks
            .iter()
            .find(|l| l["key"] == 4242)
            .unwrap_or_else(|| panic!("no key 4242 in {v}"));
        assert_eq!(lock["pid"], pid);
        assert_eq!(lock["verdict"], "leaked");
        assert_eq!(lock["application_name"], "tls-leaker");
        // (Only hostssl lines admit the role: see the next test.)
        // The table says so too.
        let table = holders(&t.verify_full(), &[], &["--idle-after", "0"]);
        assert!(
            String::from_utf8_lossy(&table.stdout).contains("leaked:   1"),
            "{}",
            stderr(&table)
        );
        leaker.close().await;
    });
}

fn each_tls_failure_has_its_own_line() {
    let t = tls();
    let ca = format!("sslrootcert={}", t.file("ca.pem"));
    // A CA that did not sign the server's certificate.
    fails_with(
        &holders(
            &t.dsn(&format!("sslmode=verify-full sslrootcert={}", t.file("other-ca.pem"))),
            &[],
            &[],
        ),
        "is not signed by a CA in sslrootcert",
    );
    // A host name the certificate does not have; verify-ca does not check it.
    let wrong_host = t.verify_full().replace(&format!("host={TLS_ADDR}"), "host=127.0.0.1");
    fails_with(
        &holders(&wrong_host, &[], &[]),
        &format!("does not name the host '127.0.0.1' (it names {TLS_ADDR}, {SERVER_NAME})"),
    );
    let o = holders(
        &wrong_host.replace("verify-full", "verify-ca"),
        &[],
        &["--format", "json"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // No TLS, to a server that admits this role here only over TLS.
    fails_with(
        &holders(&t.dsn("sslmode=disable"), &[], &[]),
        "only over TLS (pg_hba.conf: hostssl)",
    );
    // `allow` tries without TLS first, then with it.
    let o = holders(&t.dsn("sslmode=allow"), &[], &["--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A client key that is not a key.
    fails_with(
        &holders(
            &t.dsn(&format!(
                "sslmode=verify-full {ca} sslcert={} sslkey={}",
                t.file("client.pem"),
                t.file("broken.key")
            )),
            &[],
            &[],
        ),
        "is not a PEM private key",
    );
    // TLS asked of a server without it (the shared test server: ssl = off).
    let plain = common::server().spec("postgres", "");
    fails_with(
        &holders(
            &format!("host=127.0.0.1 port={} user={} sslmode=require", plain.port, plain.user),
            &[],
            &[],
        ),
        "does not accept TLS connections",
    );
    // A verify mode without a CA to verify with.
    fails_with(&holders(&t.dsn("sslmode=verify-full"), &[], &[]), "needs the CA");
}

fn client_certificate_and_libpq_variables() {
    let t = tls();
    let port = t.port().to_string();
    let cert_dsn = format!(
        "host={TLS_ADDR} port={port} user={CERT_ROLE} dbname=postgres sslmode=verify-full sslrootcert={} sslcert={} sslkey={}",
        t.file("ca.pem"),
        t.file("client.pem"),
        t.file("client.key")
    );
    let o = holders(&cert_dsn, &[], &["--format", "json"]);
    assert!(o.status.success(), "cert login: {}", stderr(&o));
    assert_eq!(json(&o)["role"], CERT_ROLE);
    // Without the certificate the server refuses the role (its words, one line).
    let no_cert = cert_dsn.split(" sslcert=").next().unwrap().to_owned();
    let o = holders(&no_cert, &[], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("certificate"), "{}", stderr(&o));
    // No DSN: libpq's variables, as libpq reads them.
    let ca = t.file("ca.pem");
    let env = [
        ("PGHOST", TLS_ADDR),
        ("PGPORT", port.as_str()),
        ("PGUSER", MONITOR),
        ("PGPASSWORD", PASSWORD),
        ("PGSSLMODE", "verify-full"),
        ("PGSSLROOTCERT", ca.as_str()),
    ];
    let o = holders("", &env, &["--format", "json"]);
    assert!(o.status.success(), "PG* variables: {}", stderr(&o));
    assert_eq!(json(&o)["role"], MONITOR);
    // A URI, its sslrootcert percent-encoded; the DSN's sslmode wins over PGSSLMODE.
    let uri = format!(
        "postgresql://{MONITOR}:{PASSWORD}@{TLS_ADDR}:{port}/postgres?sslmode=verify-full&sslrootcert={}",
        ca.replace('/', "%2F")
    );
    let o = holders(&uri, &[("PGSSLMODE", "disable")], &["--format", "json"]);
    assert!(o.status.success(), "URI: {}", stderr(&o));
}

/// GET `path` of `addr`; the status and body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent.get(&format!("http://{addr}{path}")).call().unwrap();
    (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
}

/// A TCP port that accepts connections and never says a word; a message on
/// the receiver for each connection it accepted.
fn silent_port() -> (u16, std::sync::mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
            let _ = tx.send(());
        }
    });
    (port, rx)
}

/// A targets file: `tls` (verify-full, its password from a file) and
/// `silent` (accepts TCP, never answers; timeout `silent_s`; the receiver
/// hears of each connection to it).
fn targets_file(dir: &Path, t: &Tls, silent_s: f64) -> (PathBuf, std::sync::mpsc::Receiver<()>) {
    let (silent, accepted) = silent_port();
    std::fs::write(dir.join("monitor.password"), format!("{PASSWORD}\n")).unwrap();
    let config = dir.join("targets.yaml");
    std::fs::write(
        &config,
        format!(
            "targets:\n  tls:\n    dsn: \"host={TLS_ADDR} port={} user={MONITOR} sslmode=verify-full sslrootcert={}\"\n    \
             password_file: monitor.password\n    timeout: 10\n  silent:\n    dsn: \"host=127.0.0.1 port={} user=nobody connect_timeout=30\"\n    \
             timeout: {silent_s}\n",
            t.port(),
            t.file("ca.pem"),
            silent
        ),
    )
    .unwrap();
    (config, accepted)
}

fn one_exporter_probes_many_targets_at_once() {
    let t = tls();
    let dir = tempfile::tempdir().unwrap();
    let silent_s = 4.0;
    let (config, accepted) = targets_file(dir.path(), t, silent_s);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locklab"));
    cmd.args(["holders", "serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config);
    let (mut child, addr, drain) = common::start_until(cmd, |line| {
        line.split("serving http://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .map(str::to_owned)
    });
    // The silent target's probe first; the TLS target's, started after it,
    // comes back first, taken, while the silent one still waits.
    let silent = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let answer = get(&addr, "/probe?target=silent");
            (answer, started.elapsed(), Instant::now())
        })
    };
    // The silent probe is under way once its target has a connection.
    accepted
        .recv_timeout(Duration::from_secs(10))
        .expect("the silent probe connects");
    let (status, body) = get(&addr, "/probe?target=tls");
    let tls_done = Instant::now();
    assert_eq!(status, 200);
    assert!(body.contains("locklab_up{target=\"tls\"} 1"), "{body}");
    let ((status, silent_body), silent_took, silent_done) = silent.join().unwrap();
    assert_eq!(status, 200);
    assert!(silent_body.contains("locklab_up{target=\"silent\"} 0"), "{silent_body}");
    assert!(tls_done < silent_done, "the TLS probe waited for the silent one");
    // Within its own timeout (a bound: at least it, and not much more).
    assert!(
        silent_took >= Duration::from_secs_f64(silent_s) && silent_took < Duration::from_secs_f64(silent_s + 3.0),
        "the silent probe took {silent_took:?} for a {silent_s} s timeout"
    );
    // Prometheus's scrape timeout, when shorter, bounds it too.
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let started = Instant::now();
    let mut r = agent
        .get(&format!("http://{addr}/probe?target=silent"))
        .header("X-Prometheus-Scrape-Timeout-Seconds", "1.5")
        .call()
        .unwrap();
    assert!(
        r.body_mut()
            .read_to_string()
            .unwrap()
            .contains("locklab_up{target=\"silent\"} 0")
    );
    assert!(
        started.elapsed() < Duration::from_secs_f64(silent_s),
        "{:?}",
        started.elapsed()
    );
    // Names only from the file: an unknown one, none, or a DSN answer 400.
    for path in [
        "/probe?target=nope",
        "/probe",
        "/probe?dsn=host%3D127.0.0.1",
        "/probe?target=tls&target=silent",
    ] {
        assert_eq!(get(&addr, path).0, 400, "{path}");
    }
    // The exporter's own metrics.
    let (_, own) = get(&addr, "/metrics");
    assert!(own.contains("locklab_exporter_targets 2"), "{own}");
    assert!(
        own.contains("locklab_exporter_probes_total{result=\"success\",target=\"tls\"} 1"),
        "{own}"
    );
    assert!(
        own.contains("locklab_exporter_probes_total{result=\"failure\",target=\"silent\"} 2"),
        "{own}"
    );
    assert_eq!(get(&addr, "/healthz"), (200, "ok\n".to_owned()));
    let health = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(["holders", "health", "--listen", &addr])
        .output()
        .unwrap();
    assert!(health.status.success(), "{}", stderr(&health));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let rest = drain.join().unwrap();
    assert_eq!(status.code(), Some(143), "{rest}");
    assert!(!rest.contains(PASSWORD), "the password was logged: {rest}");
    // With nothing listening, health says so.
    let free = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let health = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(["holders", "health", "--listen", &free.to_string()])
        .output()
        .unwrap();
    assert_eq!(health.status.code(), Some(1));
    let mut buf = String::new();
    let _ = (&health.stderr[..]).read_to_string(&mut buf);
    assert!(buf.contains("unhealthy"), "{buf}");
    let _ = std::io::stdout().flush();
}

fn a_broken_targets_file_is_located() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("targets.yaml");
    for (text, says) in [
        (
            "targets:\n  a:\n    dsn: host=x\n    dsn_env: X\n",
            "targets.yaml:3:5: target 'a': give exactly one",
        ),
        ("targets:\n  a:\n    dsn: host=x\n    colour: red\n", "colour"),
        ("targets:\n  'a b':\n    dsn: host=x\n", "a name is letters"),
        (
            "targets:\n  a:\n    dsn_env: LOCKLAB_TEST_UNSET_VARIABLE\n",
            "LOCKLAB_TEST_UNSET_VARIABLE is not set",
        ),
        (
            "targets:\n  a:\n    dsn: \"host=x password=hunter2 sslmode=verify-full\"\n",
            "needs the CA",
        ),
        ("targets: {}\n", "no targets"),
    ] {
        std::fs::write(&config, text).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_locklab"))
            .args(["holders", "serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .env_remove("LOCKLAB_DSN")
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains(says), "{text}: expected '{says}' in {err}");
        assert!(err.contains("targets.yaml"), "{text}: no file named in {err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}

/// The container image (`just holders-image`): it runs as a non-root user,
/// its health check answers, and it serves `/probe` for two targets from a
/// mounted targets file: one over TLS (verify-full, a mounted CA and
/// password file), one that never answers. Host networking, as the pooler
/// containers use. Built on first use when missing (root and Docker);
/// ignored without Docker, or with LOCKLAB_NO_INSTALL and no image.
fn the_image_serves_two_targets() {
    if !has_image() {
        let built = Command::new("bash")
            .arg(common::root().join("harness/scripts/build-holders-image.sh"))
            .status()
            .unwrap();
        assert!(
            built.success() && has_image(),
            "harness/scripts/build-holders-image.sh failed"
        );
    }
    let t = tls();
    // A directory the container's user (65532) can read, mounted at the same path.
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (config, accepted) = targets_file(dir.path(), t, 3.0);
    let ca = dir.path().join("ca.pem");
    std::fs::copy(t.file("ca.pem"), &ca).unwrap();
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&t.file("ca.pem"), &ca.display().to_string());
    std::fs::write(&config, text).unwrap();
    for f in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::set_permissions(f.unwrap().path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let listen = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let token = locklab::server::unique_token();
    let name = format!("locklab-holders-test-{token}");
    let container = Container(name.clone());
    // The last resort if this process is killed: the harness's container watchdog.
    let host = locklab::server::container::docker_host().unwrap();
    let _watchdog = locklab::server::container::Watchdog::start(&host, &token);
    let mount = format!("{0}:{0}:ro", dir.path().display());
    let run = Command::new("docker")
        .args(["run", "-d", "--name", &name, "--network", "host"])
        .args([
            "--label",
            &format!("{}={token}", locklab::server::container::OWNER_LABEL),
        ])
        .arg("--label")
        .arg(format!(
            "{}={}",
            locklab::server::container::PID_LABEL,
            std::process::id()
        ))
        .args(["-e", &format!("LOCKLAB_LISTEN={listen}")])
        .args(["-e", &format!("LOCKLAB_CONFIG={}", config.display())])
        .args(["-v", &mount, IMAGE])
        .output()
        .unwrap();
    assert!(run.status.success(), "docker run: {}", stderr(&run));
    // Ready when it says where it serves (its stderr, through docker logs).
    let mut logs = Command::new("docker");
    logs.args(["logs", "-f", &name]);
    let (mut follow, _, _) = common::start_until(logs, |line| line.contains("serving http://").then_some(()));
    let _ = follow.kill();
    let _ = follow.wait();
    let silent = {
        let listen = listen.clone();
        std::thread::spawn(move || get(&listen, "/probe?target=silent"))
    };
    accepted
        .recv_timeout(Duration::from_secs(10))
        .expect("the silent probe connects");
    let (status, body) = get(&listen, "/probe?target=tls");
    assert_eq!(status, 200);
    assert!(body.contains("locklab_up{target=\"tls\"} 1"), "{body}");
    assert!(body.contains("locklab_advisory_waiters{target=\"tls\"}"), "{body}");
    let (status, body) = silent.join().unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("locklab_up{target=\"silent\"} 0"), "{body}");
    // Not root; the health check's command answers.
    let id = Command::new("docker")
        .args(["exec", &name, "id", "-u"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&id.stdout).trim(), "65532");
    let health = Command::new("docker")
        .args(["exec", &name, "/usr/local/bin/locklab-holders", "health"])
        .output()
        .unwrap();
    assert!(health.status.success(), "health: {}", stderr(&health));
    let logs = Command::new("docker").args(["logs", &name]).output().unwrap();
    assert!(!stderr(&logs).contains(PASSWORD), "the password was logged");
    drop(container);
}

/// Removes the named container when dropped (a failing test included).
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", "-v", &self.0]).output();
    }
}
