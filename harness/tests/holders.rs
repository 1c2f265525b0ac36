//! `locklab holders` against a real server with real leaks, made by the pools
//! themselves: each test works in a database of its own (`--database`), so
//! the locks other tests take on the shared server do not count; every
//! verdict is checked against what `pg_locks` and `pg_stat_activity` show.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use locklab::keys::namespaced_key;
use locklab::server::Server;
use locklab_drivers::{ConnectSpec, DirectConn, PoolOptions};
use serde_json::Value;
use tokio::runtime::Runtime;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A database of this test's own, dropped (its sessions ended) at the end.
struct Db {
    server: &'static Server,
    name: String,
}

impl Db {
    fn new(rt: &Runtime, test: &str) -> Db {
        let server = common::server();
        let name = format!("holders_{test}_{}", std::process::id());
        rt.block_on(async {
            let admin = server.admin().await.unwrap();
            admin
                .client()
                .simple_query(&format!("drop database if exists {name} with (force)"))
                .await
                .unwrap();
            admin
                .client()
                .simple_query(&format!("create database {name}"))
                .await
                .unwrap();
            admin.close().await;
        });
        Db { server, name }
    }

    fn spec(&self, application_name: &str) -> ConnectSpec {
        self.server.spec(&self.name, application_name)
    }

    async fn conn(&self, application_name: &str) -> DirectConn {
        DirectConn::connect(&self.spec(application_name)).await.unwrap()
    }

    /// `holders --database THIS --format json ARGS`, parsed.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--database", self.name.as_str(), "--format", "json"];
        all.extend_from_slice(args);
        json_of(&holders(&self.dsn(), &all))
    }

    /// A libpq DSN for the server's administration role (its password quoted).
    fn dsn(&self) -> String {
        dsn_of(&self.server.spec("postgres", ""))
    }

    /// `(key text, granted, pid, state)` of every advisory lock in this
    /// database, straight from `pg_locks` and `pg_stat_activity`.
    async fn pg_locks(&self) -> Vec<(String, bool, i32, Option<String>)> {
        let c = self.conn("observer").await;
        let rows = c
            .client()
            .query(
                "select case l.objsubid when 1 then ((l.classid::int8 << 32) | l.objid::int8)::text \
                 else format('(%s, %s)', ((l.classid::int8 << 32) >> 32), ((l.objid::int8 << 32) >> 32)) end, \
                 l.granted, l.pid, a.state from pg_locks l join pg_database d on d.oid = l.database \
                 left join pg_stat_activity a on a.pid = l.pid \
                 where l.locktype = 'advisory' and d.datname = current_database() order by 1, 3",
                &[],
            )
            .await
            .unwrap();
        c.close().await;
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect()
    }

    /// Waits (observing `pg_locks`, never sleeping as synchronisation) until
    /// this database has `n` advisory waiters.
    async fn await_waiters(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let waiting = self.pg_locks().await.iter().filter(|l| !l.1).count();
            if waiting >= n {
                return;
            }
            assert!(Instant::now() < deadline, "{n} waiter(s) never showed in pg_locks");
            tokio::task::yield_now().await;
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        clean_up(
            self.server,
            format!("drop database if exists {} with (force)", self.name),
        );
    }
}

/// Runs `sql` as the administrator, on a thread of its own (a drop may run
/// inside a runtime, or while a test panics), ignoring errors.
fn clean_up(server: &'static Server, sql: String) {
    let _ = std::thread::spawn(move || {
        common::block_on(async {
            if let Ok(admin) = server.admin().await {
                let _ = admin.client().simple_query(&sql).await;
                admin.close().await;
            }
        })
    })
    .join();
}

fn dsn_of(spec: &ConnectSpec) -> String {
    let mut dsn = format!(
        "host={} port={} user={} dbname={}",
        spec.host, spec.port, spec.user, spec.dbname
    );
    if let Some(p) = &spec.password {
        dsn.push_str(&format!(" password='{}'", p.replace('\\', "\\\\").replace('\'', "\\'")));
    }
    dsn
}

fn holders(dsn: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_locklab"))
        .arg("holders")
        .args(args)
        .env("LOCKLAB_DSN", dsn)
        .env_remove("LOCKLAB_LOG")
        .output()
        .unwrap()
}

fn json_of(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "holders failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

fn key_text(v: &Value) -> String {
    match v {
        Value::Array(a) => format!("({}, {})", a[0], a[1]),
        other => other.to_string(),
    }
}

/// `(key, pid) → verdict` of a `--format json` snapshot.
fn verdicts(j: &Value) -> BTreeMap<(String, i64), String> {
    j["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                (key_text(&l["key"]), l["pid"].as_i64().unwrap()),
                l["verdict"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn leaks_made_through_pools_get_their_verdicts() {
    let rt = runtime();
    let db = Db::new(&rt, "verdicts");
    let big = (1i64 << 32) + 17; // a key whose high half is not zero
    let held = rt.block_on(async {
        // A session-level lock left on a connection deadpool keeps idle in the pool.
        let driver = locklab_drivers::find("deadpool-fast").unwrap();
        let pool = driver
            .pool(
                &db.spec("app-deadpool"),
                PoolOptions {
                    max_size: 1,
                    checkout_timeout: Duration::from_secs(5),
                },
            )
            .await
            .unwrap();
        let mut conn = pool.checkout().await.unwrap();
        conn.simple_query(&format!("select pg_advisory_lock({big})"))
            .await
            .unwrap();
        let _ = conn.give_back().await;
        // An xact lock held by an idle-in-transaction session, and a waiter it blocks.
        let stuck = db.conn("app-stuck").await;
        stuck
            .client()
            .batch_execute("begin; select pg_advisory_xact_lock(42)")
            .await
            .unwrap();
        let waiter = db.conn("app-waiter").await;
        let waiting = tokio::spawn(async move {
            let _ = waiter.client().simple_query("select pg_advisory_xact_lock(42)").await;
            waiter
        });
        db.await_waiters(1).await;
        // A two-integer key, held by an active-then-idle session (young: ok with the default threshold).
        let pair = db.conn("app-pair").await;
        pair.client()
            .simple_query("select pg_advisory_lock(7, -3)")
            .await
            .unwrap();
        // A shared lock with two holders.
        let (s1, s2) = (db.conn("app-shared").await, db.conn("app-shared").await);
        for s in [&s1, &s2] {
            s.client()
                .simple_query("select pg_advisory_lock_shared(99)")
                .await
                .unwrap();
        }
        (pool, stuck, waiting, pair, s1, s2)
    });

    let now = rt.block_on(db.pg_locks());
    let j = db.json(&["--idle-after", "0", "--wait-after", "0"]);
    let got = verdicts(&j);
    // The snapshot shows exactly the locks pg_locks shows, keys decoded the same way.
    let expected_rows: Vec<(String, i64)> = now.iter().map(|l| (l.0.clone(), i64::from(l.2))).collect();
    assert_eq!(got.keys().cloned().collect::<Vec<_>>(), {
        let mut e = expected_rows.clone();
        e.sort();
        e
    });
    assert_eq!(now.len(), 6, "{now:?}");
    for (key, granted, pid, state) in &now {
        let verdict = &got[&(key.clone(), i64::from(*pid))];
        let want = match (granted, state.as_deref()) {
            (false, _) => "waiting",
            (true, Some("idle")) => "leaked",
            (true, Some(s)) if s.starts_with("idle in transaction") => "stuck",
            _ => "ok",
        };
        assert_eq!(verdict, want, "key {key} pid {pid} ({state:?}, granted {granted})");
    }
    assert!(got.contains_key(&(
        big.to_string(),
        now.iter().find(|l| l.0 == big.to_string()).unwrap().2.into()
    )));
    assert!(got.keys().any(|(k, _)| k == "(7, -3)"));
    assert_eq!(got.keys().filter(|(k, _)| k == "99").count(), 2, "two shared holders");
    // Who blocks whom, as pg_blocking_pids says.
    let locks = j["locks"].as_array().unwrap();
    let stuck = locks.iter().find(|l| l["verdict"] == "stuck").unwrap();
    let waiter = locks.iter().find(|l| l["verdict"] == "waiting").unwrap();
    assert_eq!(waiter["blocked_by"], serde_json::json!([stuck["pid"]]));
    assert_eq!(stuck["blocks"], serde_json::json!([waiter["pid"]]));
    assert_eq!(
        j["summary"]["leaked"].as_u64().unwrap() as usize,
        now.iter().filter(|l| l.1 && l.3.as_deref() == Some("idle")).count()
    );

    // The table says what an operator could run, and --fail-on exits 1.
    let t = holders(
        &db.dsn(),
        &["--database", &db.name, "--idle-after", "0", "--fail-on", "leaked"],
    );
    let text = String::from_utf8_lossy(&t.stdout);
    assert_eq!(t.status.code(), Some(1), "{text}");
    let leaked_pid = locks
        .iter()
        .find(|l| l["verdict"] == "leaked" && key_text(&l["key"]) == big.to_string())
        .unwrap()["pid"]
        .clone();
    assert!(text.contains(&format!("pg_terminate_backend({leaked_pid})")), "{text}");
    // With the default thresholds (60 s, 10 s) these young holders are not leaked.
    let d = db.json(&[]);
    assert_eq!(d["summary"]["leaked"], 0);
    assert_eq!(d["summary"]["stuck"], 0);
    assert_eq!(d["summary"]["waiting"], 0);
    // Nothing was ended: every lock is still there.
    assert_eq!(rt.block_on(db.pg_locks()).len(), 6);

    rt.block_on(async move {
        let (pool, stuck, waiting, pair, s1, s2) = held;
        stuck.client().batch_execute("rollback").await.unwrap();
        let waiter = waiting.await.unwrap();
        for c in [stuck, waiter, pair, s1, s2] {
            c.close().await;
        }
        pool.close().await;
    });
}

#[test]
fn names_and_the_allow_list() {
    let rt = runtime();
    let db = Db::new(&rt, "names");
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.yaml");
    std::fs::write(
        &keys,
        "keys:\n  - { key: 5, name: nightly }\n\
         rules:\n  - { namespace: rollup, hash: sha256, ids: { from: 1, to: 1000 } }\n  \
         - { namespace: tenant, hash: hashtext, ids: [acme, globex] }\n  \
         - { namespace: job, hash: hashtextextended, seed: 3, ids: { from: 1, to: 50 } }\n\
         expected:\n  - { rule: rollup, application_name: 'leader*', reason: leader election }\n",
    )
    .unwrap();
    let conns = rt.block_on(async {
        let leader = db.conn("leader-1").await;
        let rollup = namespaced_key("rollup", "42");
        leader.client().simple_query(&format!("select pg_advisory_lock({rollup})")).await.unwrap();
        let other = db.conn("worker").await;
        other
            .client()
            .simple_query("select pg_advisory_lock(hashtext('tenant:globex')), pg_advisory_lock(hashtextextended('job:7', 3)), pg_advisory_lock(5)")
            .await
            .unwrap();
        (leader, other)
    });
    let j = db.json(&["--idle-after", "0", "--keys", keys.to_str().unwrap()]);
    let by_name: BTreeMap<String, String> = j["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap_or("-").to_owned(),
                l["verdict"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        by_name.get("rollup:42").map(String::as_str),
        Some("expected"),
        "{by_name:?}"
    );
    assert_eq!(
        by_name.get("tenant:globex").map(String::as_str),
        Some("leaked"),
        "{by_name:?}"
    );
    assert_eq!(by_name.get("job:7").map(String::as_str), Some("leaked"), "{by_name:?}");
    assert_eq!(
        by_name.get("nightly").map(String::as_str),
        Some("leaked"),
        "{by_name:?}"
    );
    rt.block_on(async move {
        conns.0.close().await;
        conns.1.close().await;
    });
}

#[test]
fn a_clean_database_passes_fail_on() {
    let rt = runtime();
    let db = Db::new(&rt, "clean");
    let o = holders(
        &db.dsn(),
        &[
            "--database",
            &db.name,
            "--idle-after",
            "0",
            "--fail-on",
            "leaked,stuck,waiting",
            "--format",
            "prometheus",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("locklab_up 1") && text.contains("locklab_advisory_leaked_locks 0"),
        "{text}"
    );
    let j = db.json(&[]);
    assert_eq!(j["locks"], serde_json::json!([]));
    // The textfile form, written atomically where node_exporter would read it.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("locklab.prom");
    let o = holders(
        &db.dsn(),
        &["--database", &db.name, "--textfile", file.to_str().unwrap()],
    );
    assert!(
        o.status.success() && o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let scraped = prometheus_parse::Scrape::parse(
        std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .map(|l| Ok(l.to_owned())),
    )
    .unwrap();
    assert_eq!(value(&scraped, "locklab_up", &[]), Some(1.0));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary file is left"
    );
}

fn value(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    s.samples
        .iter()
        .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match x.value {
            prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
        .reduce(|a, b| a + b)
}

/// `holders serve`, stopped with SIGTERM when dropped.
struct Served {
    child: std::process::Child,
    url: String,
    /// Its stderr lines after the first (log lines of failed scrapes).
    log: std::sync::mpsc::Receiver<String>,
}

impl Served {
    fn start(dsn: &str, args: &[&str]) -> Served {
        let mut child = Command::new(env!("CARGO_BIN_EXE_locklab"))
            .args(["holders", "serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("LOCKLAB_DSN", dsn)
            .env_remove("LOCKLAB_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .trim_end_matches("/metrics")
            .to_owned();
        // Keep reading stderr (log lines of failed scrapes) so the child never blocks on it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in stderr.lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Served { child, url, log: rx }
    }

    fn get(&self, path: &str) -> (u16, String) {
        let mut r = ureq::get(&format!("{}{path}", self.url)).call().unwrap();
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

#[test]
fn the_endpoint_serves_what_the_snapshot_shows() {
    let rt = runtime();
    let db = Db::new(&rt, "endpoint");
    let conns = rt.block_on(async {
        let a = db.conn("app-a").await;
        a.client()
            .simple_query("select pg_advisory_lock(1), pg_advisory_lock(2)")
            .await
            .unwrap();
        let b = db.conn("app-b").await;
        b.client()
            .batch_execute("begin; select pg_advisory_xact_lock(3)")
            .await
            .unwrap();
        let c = db.conn("app-c").await;
        let waiting = tokio::spawn(async move {
            let _ = c.client().simple_query("select pg_advisory_lock(1)").await;
            c
        });
        db.await_waiters(1).await;
        (a, b, waiting)
    });
    let served = Served::start(
        &db.dsn(),
        &["--database", &db.name, "--idle-after", "0", "--wait-after", "0"],
    );
    assert_eq!(served.get("/healthz"), (200, "ok\n".to_owned()));
    let (status, body) = served.get("/metrics");
    assert_eq!(status, 200);
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let j = db.json(&["--idle-after", "0", "--wait-after", "0"]);
    let count = |v: &str| j["summary"][v].as_f64().unwrap();
    assert_eq!(value(&scrape, "locklab_up", &[]), Some(1.0));
    assert_eq!(
        value(&scrape, "locklab_advisory_leaked_locks", &[]),
        Some(count("leaked"))
    );
    assert_eq!(
        value(&scrape, "locklab_advisory_stuck_locks", &[]),
        Some(count("stuck"))
    );
    assert_eq!(
        value(&scrape, "locklab_advisory_verdict_locks", &[("verdict", "waiting")]),
        Some(count("waiting"))
    );
    let locks = j["locks"].as_array().unwrap();
    assert_eq!(value(&scrape, "locklab_advisory_locks", &[]), Some(locks.len() as f64));
    assert_eq!(
        value(&scrape, "locklab_advisory_waiters", &[]),
        Some(locks.iter().filter(|l| l["granted"] == false).count() as f64)
    );
    assert_eq!(
        value(
            &scrape,
            "locklab_advisory_locks",
            &[("application_name", "app-a"), ("state", "idle"), ("granted", "true")]
        ),
        Some(2.0)
    );
    // The oldest idle holder, as old in the scrape as in the (later) JSON snapshot, give or take the time between.
    let oldest = value(&scrape, "locklab_advisory_oldest_idle_holder_seconds", &[]).unwrap();
    let idle_max = locks
        .iter()
        .filter(|l| l["granted"] == true && l["state"] == "idle")
        .filter_map(|l| l["state_s"].as_f64())
        .fold(0.0, f64::max);
    assert!(
        oldest <= idle_max && oldest >= idle_max - 10.0,
        "scrape {oldest} s, snapshot {idle_max} s"
    );
    assert_eq!(
        (count("leaked"), count("stuck"), count("waiting")),
        (2.0, 1.0, 1.0),
        "{j}"
    );
    drop(served);

    // A server that cannot be read is a metric and a log line, not a crash.
    let free = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let down = Served::start(&format!("host=127.0.0.1 port={free} user=nobody"), &["--timeout", "2"]);
    let (status, body) = down.get("/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("locklab_up 0"), "{body}");
    assert_eq!(down.get("/healthz").0, 200, "still serving after a failed scrape");
    let line = down.log.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(line.contains("cannot connect to PostgreSQL"), "{line}");
    drop(down);

    rt.block_on(async move {
        let (a, b, waiting) = conns;
        a.close().await;
        b.close().await;
        waiting.await.unwrap().close().await;
    });
}

#[test]
fn a_role_without_pg_monitor_sees_a_partial_snapshot() {
    let rt = runtime();
    let db = Db::new(&rt, "partial");
    let role = format!("holders_nomon_{}", std::process::id());
    let conns = rt.block_on(async {
        let admin = db.conn("admin").await;
        admin
            .client()
            .batch_execute(&format!(
                "drop role if exists {role}; create role {role} login password 'nomon-pw'"
            ))
            .await
            .unwrap();
        admin
            .client()
            .simple_query("select pg_advisory_lock(11)")
            .await
            .unwrap();
        let mut own = db.spec("mine");
        own.user = role.clone();
        own.password = Some("nomon-pw".into());
        let mine = DirectConn::connect(&own).await.unwrap();
        mine.client().simple_query("select pg_advisory_lock(12)").await.unwrap();
        (admin, mine)
    });
    let _drop_role = DropRole {
        server: db.server,
        role: role.clone(),
    };
    let mut spec = db.server.spec("postgres", "");
    spec.user = role.clone();
    spec.password = Some("nomon-pw".into());
    let o = holders(
        &dsn_of(&spec),
        &["--database", &db.name, "--format", "json", "--idle-after", "0"],
    );
    let j = json_of(&o);
    assert_eq!(j["sees_all_sessions"], false);
    let locks = j["locks"].as_array().unwrap();
    let other = locks.iter().find(|l| l["key"] == 11).unwrap();
    let own = locks.iter().find(|l| l["key"] == 12).unwrap();
    assert_eq!(
        (
            other["verdict"].as_str(),
            other["query"].is_null(),
            other["state"].is_null()
        ),
        (Some("unknown"), true, true)
    );
    assert_eq!(own["verdict"], "leaked", "its own session is visible");
    assert!(j["not_visible"].as_str().unwrap().contains("grant pg_monitor"), "{j}");
    let t = holders(&dsn_of(&spec), &["--database", &db.name]);
    assert!(t.status.success());
    assert!(String::from_utf8_lossy(&t.stdout).contains("Not visible: 1 lock(s)"));
    rt.block_on(async move {
        let (admin, mine) = conns;
        mine.close().await;
        admin
            .client()
            .simple_query("select pg_advisory_unlock_all()")
            .await
            .unwrap();
        let _ = admin
            .client()
            .simple_query(&format!("drop role if exists {role}"))
            .await;
        admin.close().await;
    });
}

fn one_line_exit_2(o: &Output, says: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(says), "{err}");
    assert!(o.stdout.is_empty());
}

#[test]
fn bad_input_gets_one_line_and_exit_2() {
    let free = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    one_line_exit_2(
        &holders(&format!("host=127.0.0.1 port={free}"), &[]),
        "cannot connect to PostgreSQL at postgres@127.0.0.1",
    );
    // A port that answers, but not as PostgreSQL.
    let http = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = http.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in http.incoming().flatten() {
            let mut s = s;
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        }
    });
    one_line_exit_2(
        &holders(
            &format!("host=127.0.0.1 port={port} connect_timeout=2"),
            &["--timeout", "2"],
        ),
        "does a PostgreSQL server listen there?",
    );
    // With --format prometheus, the failure is also a metric on stdout (as in --textfile).
    let o = holders(&format!("host=127.0.0.1 port={free}"), &["--format", "prometheus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stdout).contains("locklab_up 0"));
    // A broken keys file: its place.
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.yaml");
    std::fs::write(&keys, "rules:\n  - { namespace: a, hash: md5, ids: [1] }\n").unwrap();
    let o = holders("host=127.0.0.1", &["--keys", keys.to_str().unwrap()]);
    one_line_exit_2(&o, &format!("{}:2:", keys.display()));
    // A database that does not exist (a typo in a cron line must not pass --fail-on).
    let db_dsn = dsn_of(&common::server().spec("postgres", ""));
    one_line_exit_2(
        &holders(&db_dsn, &["--database", "no_such_db_here", "--fail-on", "leaked"]),
        "no database named 'no_such_db_here'",
    );
    // A DSN that asks for TLS, which locklab does not do: refused, not downgraded.
    one_line_exit_2(&holders(&format!("{db_dsn} sslmode=require"), &[]), "sslmode=require");
    // No server at all.
    let o = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .arg("holders")
        .env_remove("LOCKLAB_DSN")
        .output()
        .unwrap();
    one_line_exit_2(&o, "give --dsn or set LOCKLAB_DSN");
}

/// Drops a role at the end of a test, however it ends.
struct DropRole {
    server: &'static Server,
    role: String,
}

impl Drop for DropRole {
    fn drop(&mut self) {
        clean_up(self.server, format!("drop role if exists {}", self.role));
    }
}

/// A TCP proxy to the test server that forwards until the client sends the
/// snapshot query, then stops forwarding in both directions and keeps the
/// sockets open: a server that stops answering mid-query (no FIN, no RST).
fn black_hole_after_query(to: (String, u16)) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let server = std::net::TcpStream::connect((to.0.as_str(), to.1)).unwrap();
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let pipe = |mut from: std::net::TcpStream,
                        mut to: std::net::TcpStream,
                        watch: bool,
                        stop: std::sync::Arc<std::sync::atomic::AtomicBool>| {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    let mut kept = Vec::new();
                    loop {
                        let n = match std::io::Read::read(&mut from, &mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if watch && String::from_utf8_lossy(&buf[..n]).contains("pg_locks") {
                            stop.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        if stop.load(std::sync::atomic::Ordering::SeqCst) {
                            kept.extend_from_slice(&buf[..n]); // swallowed, socket kept open
                            continue;
                        }
                        if to.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            };
            pipe(
                client.try_clone().unwrap(),
                server.try_clone().unwrap(),
                true,
                stop.clone(),
            );
            pipe(server, client, false, stop);
        }
    });
    port
}

#[test]
fn a_server_that_stops_answering_is_bounded_by_the_timeout() {
    let spec = common::server().spec("postgres", "");
    let port = black_hole_after_query((spec.host.clone(), spec.port));
    let mut through = spec.clone();
    through.host = "127.0.0.1".into();
    through.port = port;
    let started = Instant::now();
    let o = holders(&dsn_of(&through), &["--timeout", "1"]);
    let took = started.elapsed();
    one_line_exit_2(&o, "took longer than 1 s");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // Served: the scrape answers, with locklab_up 0, and the next one too.
    let served = Served::start(&dsn_of(&through), &["--timeout", "1"]);
    for _ in 0..2 {
        let started = Instant::now();
        let (status, body) = served.get("/metrics");
        assert_eq!(status, 200);
        assert!(body.contains("locklab_up 0"), "{body}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "scrape took {:?}",
            started.elapsed()
        );
    }
    let line = served.log.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(line.contains("took longer than 1 s"), "{line}");
}

#[test]
fn ctrl_c_stops_a_snapshot_in_progress() {
    // A port that accepts and never answers: the snapshot waits (up to --timeout 60).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (accepted_tx, accepted) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut keep = Vec::new();
        for s in listener.incoming().flatten() {
            keep.push(s);
            let _ = accepted_tx.send(());
        }
    });
    for args in [&["--timeout", "60"][..], &["--timeout", "60", "--watch", "1"][..]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_locklab"))
            .arg("holders")
            .args(args)
            .env("LOCKLAB_DSN", format!("host=127.0.0.1 port={port} user=nobody"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        accepted
            .recv_timeout(Duration::from_secs(10))
            .expect("holders connected");
        let started = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(130), "{args:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{args:?}: {:?}",
            started.elapsed()
        );
    }
}

/// The two ends of the supported versions, each a local cluster of its own
/// with room for prepared transactions: a prepared transaction holding a
/// transaction-level lock, and a waiter it blocks (`pg_blocking_pids` names
/// it 0), as well as the usual leak, on PostgreSQL 14 and 18.
#[test]
fn postgresql_14_and_18_and_prepared_transactions() {
    for major in [14, 18] {
        let mut opts = locklab::server::ServerOptions::new(locklab::server::BackendChoice::Local, major);
        opts.settings = vec!["max_prepared_transactions=4".into()];
        let server = Server::start(&opts).unwrap_or_else(|e| panic!("PostgreSQL {major}: {e:#}"));
        let rt = runtime();
        let spec = server.spec("postgres", "pg-ends");
        let (leaker, waiting) = rt.block_on(async {
            let p = DirectConn::connect(&spec).await.unwrap();
            p.client()
                .batch_execute("begin; select pg_advisory_xact_lock(31); prepare transaction 'holders-31'")
                .await
                .unwrap();
            p.close().await;
            let leaker = DirectConn::connect(&spec).await.unwrap();
            leaker
                .client()
                .simple_query("select pg_advisory_lock(32)")
                .await
                .unwrap();
            let waiter = DirectConn::connect(&spec).await.unwrap();
            let waiting = tokio::spawn(async move {
                let _ = waiter.client().simple_query("select pg_advisory_xact_lock(31)").await;
                waiter
            });
            let observer = DirectConn::connect(&spec).await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while observer
                .client()
                .query_one(
                    "select count(*) from pg_locks where locktype = 'advisory' and not granted",
                    &[],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
                == 0
            {
                assert!(Instant::now() < deadline, "the waiter never waited");
                tokio::task::yield_now().await;
            }
            observer.close().await;
            (leaker, waiting)
        });
        let j = json_of(&holders(
            &dsn_of(&server.spec("postgres", "")),
            &["--format", "json", "--idle-after", "0", "--wait-after", "0"],
        ));
        assert!(
            j["server_version"].as_str().unwrap().starts_with(&format!("{major}.")),
            "{}",
            j["server_version"]
        );
        let locks = j["locks"].as_array().unwrap();
        let find = |key: i64, granted: bool| {
            locks
                .iter()
                .find(|l| l["key"] == key && l["granted"] == granted)
                .unwrap_or_else(|| panic!("PG {major}: no lock {key} (granted {granted}) in {j}"))
        };
        let prepared = find(31, true);
        let waiter = find(31, false);
        assert_eq!(
            (prepared["pid"].clone(), prepared["prepared"].as_str()),
            (Value::Null, Some("holders-31")),
            "PG {major}"
        );
        assert_eq!(prepared["verdict"], "stuck", "PG {major}");
        assert!(
            prepared["terminate"]
                .as_str()
                .unwrap()
                .contains("commit prepared 'holders-31'"),
            "PG {major}"
        );
        assert_eq!(prepared["blocks"], serde_json::json!([waiter["pid"]]), "PG {major}");
        assert_eq!(waiter["blocked_by"], serde_json::json!([0]), "PG {major}");
        assert_eq!(waiter["verdict"], "waiting", "PG {major}");
        assert_eq!(find(32, true)["verdict"], "leaked", "PG {major}");
        rt.block_on(async move {
            let admin = server.admin().await.unwrap();
            admin
                .client()
                .simple_query("rollback prepared 'holders-31'")
                .await
                .unwrap();
            waiting.await.unwrap().close().await;
            leaker.close().await;
            admin.close().await;
        });
    }
}
