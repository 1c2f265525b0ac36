//! `locklab adapter check`: drives an adapter program through every request
//! of the driver protocol (docs/src/protocol.md), against a real server,
//! and says by name what it does not do as the protocol says: every request,
//! bad sequences (a request for a connection or pool that does not exist, a
//! return without a checkout, a request after `close_pool`, an unknown op),
//! requests in flight at once, and the give-up requests (`timeout_ms`,
//! `drop`, `cancel`, `abandon`). Every line the adapter writes is validated
//! against the protocol's JSON Schema (`drivers/adapters/protocol.schema.json`,
//! generated from the types), the `ok` of each answer against the shape its
//! request's op gives.
//!
//! What happens on the server is observed on the server (`pg_locks`), never
//! assumed from the adapter's answers. Bounds are upper bounds with slack
//! (and lower bounds where a bound must not end early), never equalities.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use locklab_drivers::ConnectSpec;
use locklab_drivers::{DirectConn, simple_query_rows};
use serde_json::{Value, json};

use crate::server::Server;

/// How long one answer may take unless a check says otherwise, in s.
const ANSWER_S: u64 = 10;
/// How long `hello` may take (the adapter imports its library), in s.
const HELLO_S: u64 = 20;
/// How long `open_pool` and `close_pool` may take, in s.
const POOL_S: u64 = 30;
/// The client-side bound the give-up checks send (`timeout_ms`), in ms.
const BOUND_MS: u64 = 300;
/// Slack on a bound: a bound of `BOUND_MS` must end within `BOUND_MS` + this, in ms.
const SLACK_MS: u64 = 5000;
/// The first advisory lock key the checks take (each check its own, i64).
const KEY_BASE: i64 = 7_700_000;

/// One named check and how it went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The check's name, e.g. `query: several statements`.
    pub check: String,
    /// `None`: it passed; `Some(why)`: what the adapter did instead.
    pub wrong: Option<String>,
}

/// The protocol's schema, split into the validators a line is checked with.
struct Schemas {
    answer: jsonschema::Validator,
    ok: HashMap<&'static str, jsonschema::Validator>,
}

impl Schemas {
    fn new() -> Result<Schemas> {
        let schema = locklab_drivers::external::protocol::schema();
        let part = |def: &str| -> Result<jsonschema::Validator> {
            let mut s = schema.clone();
            if let Some(o) = s.as_object_mut() {
                o.remove("anyOf");
                o.remove("oneOf");
                o.insert("$ref".into(), format!("#/$defs/{def}").into());
            }
            jsonschema::validator_for(&s).map_err(|e| anyhow!("the protocol schema's $defs/{def}: {e}"))
        };
        let mut ok = HashMap::new();
        ok.insert("hello", part("HelloOk")?);
        ok.insert("checkout", part("CheckoutOk")?);
        for op in ["query", "begin", "commit", "rollback"] {
            ok.insert(op, part("QueryOk")?);
        }
        ok.insert("return", part("ReturnOk")?);
        Ok(Schemas {
            answer: part("Answer")?,
            ok,
        })
    }

    /// What is wrong with answer `v` to a request of `op`, if anything.
    fn wrong(&self, op: &str, v: &Value) -> Option<String> {
        let mut errors: Vec<String> = self.answer.iter_errors(v).map(|e| e.to_string()).collect();
        if let (Some(ok), Some(validator)) = (v.get("ok").filter(|o| !o.is_null()), self.ok.get(op)) {
            errors.extend(validator.iter_errors(ok).map(|e| format!("`ok` of {op}: {e}")));
        }
        (!errors.is_empty()).then(|| errors.join("; "))
    }
}

/// What the reader thread hands over: a line of stdout, or its end.
enum Out {
    Line(String, Instant),
    End,
}

/// The adapter under check, spoken to line by line.
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    out: mpsc::Receiver<Out>,
    stderr: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    next_id: u64,
    /// The op of every request sent, by id.
    ops: HashMap<u64, &'static str>,
    /// Answers read and not yet claimed, by id, with when they came.
    answers: HashMap<u64, (Value, Instant)>,
    /// What was wrong with lines read since the last [`Raw::take_wrong`].
    wrong: Vec<String>,
    ended: bool,
    schemas: Schemas,
}

impl Raw {
    fn start(command: &[String], dir: &Path) -> Result<Raw> {
        let (program, args) = command.split_first().context("no adapter command given")?;
        // A relative program with a `/` is the directory's, whatever the
        // child's working directory would make of it.
        let program = if program.contains('/') {
            dir.join(program)
        } else {
            std::path::PathBuf::from(program)
        };
        let mut child = Command::new(&program)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start the adapter ({})", command.join(" ")))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let (tx, out) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(Out::Line(l, Instant::now())).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send(Out::End);
        });
        let tail = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let t = tail.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
                if t.len() == 8 {
                    t.remove(0);
                }
                t.push(line);
            }
        });
        Ok(Raw {
            stdin: child.stdin.take(),
            child,
            out,
            stderr: tail,
            next_id: 1,
            ops: HashMap::new(),
            answers: HashMap::new(),
            wrong: Vec::new(),
            ended: false,
            schemas: Schemas::new()?,
        })
    }

    /// Sends `fields` (an object with `op`) under a new id; returns the id.
    fn send(&mut self, fields: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = fields;
        line["id"] = json!(id);
        let op = match line["op"].as_str() {
            Some(o) => leak_op(o),
            None => "?",
        };
        self.ops.insert(id, op);
        if let Some(stdin) = &mut self.stdin {
            let text = format!("{line}\n");
            if stdin.write_all(text.as_bytes()).and_then(|()| stdin.flush()).is_err() {
                self.ended = true;
            }
        }
        id
    }

    /// Reads what the adapter wrote until `deadline` or until answer `id`
    /// is there; every line is checked as it comes.
    fn pump(&mut self, id: Option<u64>, deadline: Instant) {
        loop {
            if id.is_some_and(|i| self.answers.contains_key(&i)) {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out.recv_timeout(left) {
                Ok(Out::Line(l, at)) => self.read(&l, at),
                Ok(Out::End) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.ended = true;
                    return;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return,
            }
        }
    }

    fn read(&mut self, line: &str, at: Instant) {
        let v: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                self.wrong
                    .push(format!("wrote a line that is not JSON ({e}): {line:.200}"));
                return;
            }
        };
        let Some(id) = v.get("id").and_then(Value::as_u64) else {
            self.wrong
                .push(format!("wrote an answer without a request id: {line:.200}"));
            return;
        };
        let Some(op) = self.ops.get(&id).copied() else {
            self.wrong
                .push(format!("answered request {id}, which was never sent: {line:.200}"));
            return;
        };
        if self.answers.contains_key(&id) {
            self.wrong
                .push(format!("answered request {id} ({op}) twice: {line:.200}"));
            return;
        }
        if let Some(why) = self.schemas.wrong(op, &v) {
            self.wrong.push(format!(
                "its answer to {op} is not valid by the protocol schema: {why}: {line:.300}"
            ));
        }
        self.answers.insert(id, (v, at));
    }

    /// The answer to `id` within `within`.
    fn wait(&mut self, id: u64, within: Duration) -> Result<(Value, Instant), String> {
        self.pump(Some(id), Instant::now() + within);
        match self.answers.remove(&id) {
            Some(a) => Ok(a),
            None if self.ended => Err(format!(
                "the adapter ended before answering request {id} ({}); {}",
                self.ops.get(&id).copied().unwrap_or("?"),
                self.stderr_tail()
            )),
            None => Err(format!(
                "no answer to request {id} ({}) within {} ms",
                self.ops.get(&id).copied().unwrap_or("?"),
                within.as_millis()
            )),
        }
    }

    /// Sends `fields` and waits `within` for its answer.
    fn call(&mut self, fields: Value, within: Duration) -> Result<Value, String> {
        let id = self.send(fields);
        self.wait(id, within).map(|(v, _)| v)
    }

    /// Whether answer `id` has come (reading what is there, not waiting).
    fn answered(&mut self, id: u64) -> bool {
        self.pump(Some(id), Instant::now());
        self.answers.contains_key(&id)
    }

    fn take_wrong(&mut self) -> Vec<String> {
        std::mem::take(&mut self.wrong)
    }

    fn stderr_tail(&self) -> String {
        let t = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        if t.is_empty() {
            "its stderr is empty".into()
        } else {
            format!("its stderr ends with: {}", t.join(" | "))
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn leak_op(op: &str) -> &'static str {
    const OPS: [&str; 14] = [
        "hello",
        "open_pool",
        "checkout",
        "query",
        "begin",
        "commit",
        "rollback",
        "return",
        "cancel",
        "drop",
        "abandon",
        "guard",
        "ping",
        "close_pool",
    ];
    OPS.iter().find(|o| **o == op).copied().unwrap_or("unknown op")
}

/// The `ok` object of answer `v`, or what the answer was instead.
fn ok(v: &Value, what: &str) -> Result<Value, String> {
    match v.get("ok") {
        Some(o) if o.is_object() => Ok(o.clone()),
        _ => Err(format!("{what}: expected `ok`, got {v}")),
    }
}

/// The `error` object of answer `v`, or what the answer was instead.
fn error(v: &Value, what: &str) -> Result<Value, String> {
    match v.get("error") {
        Some(e) if e.is_object() => Ok(e.clone()),
        _ => Err(format!("{what}: expected an `error`, got {v}")),
    }
}

fn gave_up(v: &Value) -> bool {
    v.pointer("/ok/gave_up").and_then(Value::as_bool) == Some(true)
}

/// The session: the adapter, the server, and an observer connection.
struct Session<'a> {
    raw: Raw,
    rt: &'a tokio::runtime::Runtime,
    observer: DirectConn,
    spec: ConnectSpec,
    hello: Value,
    pools: u32,
    conns: u32,
    /// The pool `close_with_call` closed, for `after_close`.
    closed_pool: Option<String>,
    /// Whether each connection has a cancel API: its checkout's `cancel`,
    /// else `hello`'s.
    cancels: HashMap<String, bool>,
}

impl Session<'_> {
    fn pool(&mut self, max_size: u32, checkout_timeout_ms: u64) -> Result<String, String> {
        self.pools += 1;
        let pool = format!("p{}", self.pools);
        let v = self.raw.call(
            json!({"op": "open_pool", "pool": pool, "spec": self.spec, "max_size": max_size,
                   "checkout_timeout_ms": checkout_timeout_ms}),
            Duration::from_secs(POOL_S),
        )?;
        ok(&v, "open_pool")?;
        Ok(pool)
    }

    fn checkout(&mut self, pool: &str) -> Result<String, String> {
        self.conns += 1;
        let conn = format!("c{}", self.conns);
        let v = self.raw.call(
            json!({"op": "checkout", "pool": pool, "conn": conn, "checkout_timeout_ms": 10_000}),
            Duration::from_secs(ANSWER_S),
        )?;
        let o = ok(&v, "checkout")?;
        if o.get("gave_up").and_then(Value::as_bool) == Some(true) {
            return Err(format!("checkout without a bound answered gave_up: {v}"));
        }
        let cancel = o
            .get("cancel")
            .and_then(Value::as_bool)
            .or_else(|| self.hello.get("cancel").and_then(Value::as_bool))
            .unwrap_or(false);
        self.cancels.insert(conn.clone(), cancel);
        Ok(conn)
    }

    fn query(&mut self, conn: &str, sql: &str) -> Result<Value, String> {
        let v = self.raw.call(
            json!({"op": "query", "conn": conn, "sql": sql}),
            Duration::from_secs(ANSWER_S),
        )?;
        ok(&v, &format!("query `{sql}`"))
    }

    fn give_back(&mut self, conn: &str) -> Result<String, String> {
        let v = self
            .raw
            .call(json!({"op": "return", "conn": conn}), Duration::from_secs(ANSWER_S))?;
        let o = ok(&v, "return")?;
        o.get("returned")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("return: no `returned` in {v}"))
    }

    fn close(&mut self, pool: &str) -> Result<(), String> {
        let v = self
            .raw
            .call(json!({"op": "close_pool", "pool": pool}), Duration::from_secs(POOL_S))?;
        ok(&v, "close_pool").map(|_| ())
    }

    fn ping(&mut self) -> Result<(), String> {
        let v = self.raw.call(json!({"op": "ping"}), Duration::from_secs(ANSWER_S))?;
        ok(&v, "ping").map(|_| ())
    }

    /// Rows of `sql` on the observer connection.
    fn observe(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        self.rt
            .block_on(simple_query_rows(self.observer.client(), sql))
            .map(|r| r.rows)
            .map_err(|e| format!("the observer's query failed: {e}"))
    }

    /// Whether the session-level or transaction-level advisory lock `key`
    /// (a small i64: classid 0) is granted to anyone (`waiting`: awaited).
    fn lock_seen(&self, key: i64, granted: bool) -> Result<bool, String> {
        let rows = self.observe(&format!(
            "select count(*) from pg_locks where locktype = 'advisory' and classid = 0 and objid = {key} \
             and objsubid = 1 and granted = {granted}"
        ))?;
        Ok(rows
            .first()
            .and_then(|r| r.first().cloned().flatten())
            .is_some_and(|c| c != "0"))
    }

    /// Waits (observing the server) until `key` is awaited, at most 10 s.
    fn until_waiting(&self, key: i64) -> Result<(), String> {
        self.until(key, false, true, "a waiter on")
    }

    /// Waits until `key` is held (`held`) or not, at most 10 s.
    fn until_held(&self, key: i64, held: bool) -> Result<(), String> {
        self.until(key, true, held, if held { "a holder of" } else { "no holder of" })
    }

    fn until(&self, key: i64, granted: bool, present: bool, what: &str) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(ANSWER_S);
        loop {
            if self.lock_seen(key, granted)? == present {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the server showed {what} advisory lock {key} not within {ANSWER_S} s"
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Runs every check of the protocol against the adapter `command` (run in
/// `dir`) on `server`, calling `each` with every finding as it is made, and
/// returns them all. A check that cannot start because an earlier one left
/// the adapter unusable fails with that reason.
///
/// # Errors
/// The adapter cannot be started, or the observer connection or the check's
/// database cannot be made.
pub fn check(server: &Server, command: &[String], dir: &Path, each: &mut dyn FnMut(&Finding)) -> Result<Vec<Finding>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let db = format!("ll_adapter_check_{}", std::process::id());
    let admin = rt.block_on(server.admin())?;
    rt.block_on(simple_query_rows(admin.client(), &format!("create database {db}")))
        .map_err(|e| anyhow!("cannot create the check's database: {e}"))?;
    let outcome = (|| {
        let observer = rt.block_on(DirectConn::connect(&server.spec(&db, "locklab-adapter-check-observer")))?;
        let raw = Raw::start(command, dir)?;
        let mut s = Session {
            raw,
            rt: &rt,
            observer,
            spec: server.spec(&db, "locklab-adapter-check"),
            hello: Value::Null,
            pools: 0,
            conns: 0,
            closed_pool: None,
            cancels: HashMap::new(),
        };
        let mut findings = Vec::new();
        for (name, check) in CHECKS {
            let mut wrong = if s.raw.ended && *name != "stdin closed: the adapter exits" {
                Err(format!("the adapter has ended; {}", s.raw.stderr_tail()))
            } else {
                check(&mut s)
            };
            let bad_lines = s.raw.take_wrong();
            if !bad_lines.is_empty() {
                let lines = bad_lines.join("; ");
                wrong = Err(match wrong {
                    Ok(()) => lines,
                    Err(w) => format!("{w}; {lines}"),
                });
            }
            let f = Finding {
                check: (*name).to_owned(),
                wrong: wrong.err(),
            };
            each(&f);
            findings.push(f);
            // A check that failed may leave locks behind: end them for the next.
            let _ = rt.block_on(simple_query_rows(
                s.observer.client(),
                &format!(
                    "select pg_terminate_backend(pid) from pg_stat_activity where datname = '{db}' \
                 and pid <> pg_backend_pid() and application_name = 'locklab-adapter-check' and \
                 pid in (select pid from pg_locks where locktype = 'advisory')"
                ),
            ));
        }
        Ok::<_, anyhow::Error>(findings)
    })();
    let _ = rt.block_on(simple_query_rows(
        admin.client(),
        &format!("drop database if exists {db} with (force)"),
    ));
    outcome
}

type Check = fn(&mut Session<'_>) -> Result<(), String>;

/// Every check, in order; later ones build on the `hello` of the first.
const CHECKS: &[(&str, Check)] = &[
    ("hello", hello),
    ("open_pool, checkout, return, close_pool", lifecycle),
    ("query: values in PostgreSQL's text format", text_values),
    ("query: several statements", several_statements),
    ("query: a server error (kind db, its SQLSTATE)", server_error),
    ("query: notices (where the library passes them on)", notices),
    ("begin, commit: a transaction-level lock ends at commit", commit),
    ("begin, rollback: a transaction-level lock ends at rollback", rollback),
    ("requests in flight at once: answers in any order", concurrent),
    ("query timeout_ms: gave_up within the bound", query_bound),
    ("drop: the target answers dropped, then drop answers", drop_request),
    ("drop of a request already answered", drop_answered),
    ("cancel: a call in flight ends with 57014 (or unsupported)", cancel),
    ("cancel with no call in flight", cancel_idle),
    ("abandon after drop: the connection goes back", abandon),
    (
        "checkout timeout_ms: gave_up while the pool is exhausted (or at once, an error)",
        checkout_bound,
    ),
    (
        "checkout_timeout_ms: an error while the pool is exhausted",
        checkout_timeout,
    ),
    ("guard: ok, or an unsupported error", guard),
    (
        "bad: a request for a connection that was never checked out",
        unknown_conn,
    ),
    ("bad: a return without a checkout", return_without_checkout),
    ("bad: a request on a returned connection", after_return),
    ("bad: a checkout from a pool that does not exist", unknown_pool),
    ("bad: an unknown op (kind protocol)", unknown_op),
    ("close_pool with a call in flight", close_with_call),
    ("bad: a checkout after close_pool", after_close),
    ("stdin closed: the adapter exits", stdin_closed),
];

fn hello(s: &mut Session<'_>) -> Result<(), String> {
    let v = s
        .raw
        .call(json!({"op": "hello", "protocol": 1}), Duration::from_secs(HELLO_S))?;
    let o = ok(&v, "hello")?;
    s.hello = o.clone();
    if o.get("protocol").and_then(Value::as_u64) != Some(1) {
        return Err(format!("hello: `protocol` must be 1, got {}", o["protocol"]));
    }
    for field in ["library", "version"] {
        if o.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(format!("hello: `{field}` must name the library and its version: {o}"));
        }
    }
    if o.get("cancel").and_then(Value::as_bool) != Some(true)
        && o.get("no_cancel_reason")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        return Err("hello: without `cancel: true`, `no_cancel_reason` must say why (the report shows it)".into());
    }
    Ok(())
}

fn lifecycle(s: &mut Session<'_>) -> Result<(), String> {
    let pool = s.pool(2, 10_000)?;
    let conn = s.checkout(&pool)?;
    let returned = s.give_back(&conn)?;
    if !["to_pool", "closed", "to_pooler"].contains(&returned.as_str()) {
        return Err(format!(
            "return: `returned` must be to_pool, closed or to_pooler, got {returned}"
        ));
    }
    s.ping()?;
    s.close(&pool)
}

/// A pool of 1 and its connection.
fn one(s: &mut Session<'_>) -> Result<(String, String), String> {
    let pool = s.pool(1, 10_000)?;
    let c = s.checkout(&pool)?;
    Ok((pool, c))
}

/// A pool of 2 and two connections of it.
fn two(s: &mut Session<'_>) -> Result<(String, String, String), String> {
    let pool = s.pool(2, 10_000)?;
    let a = s.checkout(&pool)?;
    let b = s.checkout(&pool)?;
    Ok((pool, a, b))
}

fn done(s: &mut Session<'_>, pool: &str, conns: &[&str]) -> Result<(), String> {
    for c in conns {
        s.give_back(c)?;
    }
    s.close(pool)
}

fn text_values(s: &mut Session<'_>) -> Result<(), String> {
    let (pool, c) = one(s)?;
    let o = s.query(
        &c,
        "select 1 as one, true as yes, false as no, null::int as nothing, 'x y'::text as words, \
         9223372036854775807::bigint as big",
    )?;
    let want_cols = json!(["one", "yes", "no", "nothing", "words", "big"]);
    let want_rows = json!([["1", "t", "f", null, "x y", "9223372036854775807"]]);
    if o["columns"] != want_cols || o["rows"] != want_rows {
        return Err(format!(
            "expected columns {want_cols} and rows {want_rows} (text format, null for NULL), got {} and {}",
            o["columns"], o["rows"]
        ));
    }
    if o.get("elapsed_ms").and_then(Value::as_f64).is_none_or(|e| e < 0.0) {
        return Err(format!(
            "`elapsed_ms` (≥ 0, measured around the library call) is missing: {o}"
        ));
    }
    done(s, &pool, &[&c])
}

fn several_statements(s: &mut Session<'_>) -> Result<(), String> {
    let (pool, c) = one(s)?;
    let o = s.query(&c, "select 1 as a; select 2 as b")?;
    if o["rows"] != json!([["1"], ["2"]]) {
        return Err(format!(
            "`select 1 as a; select 2 as b` must give the rows of every statement in order, [[\"1\"],[\"2\"]]; got {}",
            o["rows"]
        ));
    }
    done(s, &pool, &[&c])
}

fn server_error(s: &mut Session<'_>) -> Result<(), String> {
    let (pool, c) = one(s)?;
    let v = s.raw.call(
        json!({"op": "query", "conn": c, "sql": "select 1/0"}),
        Duration::from_secs(ANSWER_S),
    )?;
    let e = error(&v, "select 1/0")?;
    if e["kind"] != "db" || e["sqlstate"] != "22012" {
        return Err(format!(
            "select 1/0: expected kind db with sqlstate 22012 (division_by_zero), got {e}"
        ));
    }
    let o = s.query(&c, "select 3")?;
    if o["rows"] != json!([["3"]]) {
        return Err(format!(
            "the connection after a server error: `select 3` gave {}",
            o["rows"]
        ));
    }
    done(s, &pool, &[&c])
}

fn notices(s: &mut Session<'_>) -> Result<(), String> {
    let (pool, c) = one(s)?;
    let o = s.query(&c, &format!("select pg_advisory_unlock({})", KEY_BASE))?;
    if o["rows"] != json!([["f"]]) {
        return Err(format!(
            "pg_advisory_unlock of a lock not held must give [[\"f\"]], got {}",
            o["rows"]
        ));
    }
    // A library that does not expose notices answers `notices: []`
    // (tokio-postgres's pooled connections); one that does must pass on
    // this one as `SEVERITY: message`.
    let notices = o["notices"].as_array().cloned().unwrap_or_default();
    if !notices.is_empty()
        && !notices.iter().any(|n| {
            n.as_str()
                .is_some_and(|n| n.starts_with("WARNING: ") && n.contains("you don't own a lock"))
        })
    {
        return Err(format!(
            "pg_advisory_unlock of a lock not held: the notice must be `WARNING: you don't own a lock of type \
             ExclusiveLock` (SEVERITY: message), got {}",
            o["notices"]
        ));
    }
    done(s, &pool, &[&c])
}

fn transaction(s: &mut Session<'_>, end: &str, key: i64) -> Result<(), String> {
    let (pool, c) = one(s)?;
    let v = s
        .raw
        .call(json!({"op": "begin", "conn": c}), Duration::from_secs(ANSWER_S))?;
    ok(&v, "begin")?;
    s.query(&c, &format!("select pg_advisory_xact_lock({key})"))?;
    if !s.lock_seen(key, true)? {
        return Err(format!(
            "after begin and pg_advisory_xact_lock({key}), the server shows no holder"
        ));
    }
    let v = s
        .raw
        .call(json!({"op": end, "conn": c}), Duration::from_secs(ANSWER_S))?;
    ok(&v, end)?;
    if s.lock_seen(key, true)? {
        return Err(format!(
            "after {end}, the server still shows the transaction-level lock {key} held: {end} did not end the transaction"
        ));
    }
    done(s, &pool, &[&c])
}

fn commit(s: &mut Session<'_>) -> Result<(), String> {
    transaction(s, "commit", KEY_BASE + 1)
}

fn rollback(s: &mut Session<'_>) -> Result<(), String> {
    transaction(s, "rollback", KEY_BASE + 2)
}

/// `a` holds `key`; `b`'s `pg_advisory_lock(key)` waits (seen on the
/// server): its request id.
fn blocked(s: &mut Session<'_>, a: &str, b: &str, key: i64, bound: Option<u64>) -> Result<u64, String> {
    s.query(a, &format!("select pg_advisory_lock({key})"))?;
    let mut req = json!({"op": "query", "conn": b, "sql": format!("select pg_advisory_lock({key})")});
    if let Some(ms) = bound {
        req["timeout_ms"] = json!(ms);
    }
    let id = s.raw.send(req);
    if bound.is_none() {
        s.until_waiting(key)?;
    }
    Ok(id)
}

fn concurrent(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 3;
    let (pool, a, b) = two(s)?;
    let waiting = blocked(s, &a, &b, key, None)?;
    s.ping()
        .map_err(|e| format!("a ping while a query waits on a lock: {e} (requests must be served concurrently)"))?;
    if s.raw.answered(waiting) {
        return Err("the waiting query answered before its lock was released".into());
    }
    s.query(&a, &format!("select pg_advisory_unlock({key})"))?;
    let (v, _) = s.raw.wait(waiting, Duration::from_secs(ANSWER_S))?;
    ok(&v, "the waiting query, once the lock was released")?;
    s.query(&b, &format!("select pg_advisory_unlock({key})"))?;
    done(s, &pool, &[&a, &b])
}

fn query_bound(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 4;
    let (pool, a, b) = two(s)?;
    let began = Instant::now();
    let id = blocked(s, &a, &b, key, Some(BOUND_MS))?;
    let (v, at) = s.raw.wait(id, Duration::from_millis(BOUND_MS + SLACK_MS))?;
    let took = at.duration_since(began);
    if !gave_up(&v) {
        return Err(format!(
            "a query with timeout_ms {BOUND_MS} on a held lock: expected ok.gave_up true, got {v}"
        ));
    }
    if took < Duration::from_millis(BOUND_MS) {
        return Err(format!(
            "gave up after {} ms, before its bound of {BOUND_MS} ms",
            took.as_millis()
        ));
    }
    s.query(&a, &format!("select pg_advisory_unlock({key})"))?;
    // Whatever the library left the connection as (a given-up call may
    // still run on the server and take the lock: a ghost), it must answer.
    s.raw
        .call(
            json!({"op": "query", "conn": b, "sql": "select 1"}),
            Duration::from_secs(ANSWER_S),
        )
        .map_err(|e| format!("the connection after a given-up call: {e}"))?;
    s.raw
        .call(
            json!({"op": "query", "conn": b, "sql": "select pg_advisory_unlock_all()"}),
            Duration::from_secs(ANSWER_S),
        )
        .ok();
    done(s, &pool, &[&a, &b])
}

fn drop_request(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 5;
    let (pool, a, b) = two(s)?;
    let target = blocked(s, &a, &b, key, None)?;
    let d = s.raw.send(json!({"op": "drop", "target": target}));
    let (tv, t_at) = s.raw.wait(target, Duration::from_secs(ANSWER_S))?;
    let (dv, d_at) = s.raw.wait(d, Duration::from_secs(ANSWER_S))?;
    if tv.get("dropped").and_then(Value::as_bool) != Some(true) {
        return Err(format!("the dropped request must answer `dropped: true`, got {tv}"));
    }
    ok(&dv, "drop")?;
    if d_at < t_at {
        return Err("drop answered before its target: answer drop once the target has given up".into());
    }
    s.query(&a, &format!("select pg_advisory_unlock({key})"))?;
    // The given-up call may still be waiting on the server (a library that
    // cannot interrupt a call): that is what the ghost-lock cells measure.
    s.until_held(key, false).ok();
    done(s, &pool, &[&a, &b])
}

fn drop_answered(s: &mut Session<'_>) -> Result<(), String> {
    let v = s.raw.call(json!({"op": "ping"}), Duration::from_secs(ANSWER_S))?;
    ok(&v, "ping")?;
    let pinged = s.raw.next_id - 1;
    let v = s
        .raw
        .call(json!({"op": "drop", "target": pinged}), Duration::from_secs(ANSWER_S))?;
    ok(&v, "drop of an answered request").map(|_| ())
}

fn cancel(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 6;
    let (pool, a, b) = two(s)?;
    let can = s.cancels.get(&b).copied().unwrap_or(false);
    let waiting = blocked(s, &a, &b, key, None)?;
    let v = s
        .raw
        .call(json!({"op": "cancel", "conn": b}), Duration::from_secs(ANSWER_S))?;
    if can {
        ok(&v, "cancel (the connection has a cancel API: `cancel: true`)")?;
        let (w, _) = s.raw.wait(waiting, Duration::from_secs(ANSWER_S))?;
        let e = error(&w, "the cancelled query")?;
        if e["kind"] != "db" || e["sqlstate"] != "57014" {
            return Err(format!(
                "the cancelled query: expected kind db with sqlstate 57014 (query_canceled), got {e}"
            ));
        }
    } else {
        let e = error(&v, "cancel (the connection has no cancel API: `cancel: false`)")?;
        if e["kind"] != "unsupported" {
            return Err(format!(
                "cancel without a cancel API: expected kind unsupported, got {e}"
            ));
        }
        s.query(&a, &format!("select pg_advisory_unlock({key})"))?;
        let (w, _) = s.raw.wait(waiting, Duration::from_secs(ANSWER_S))?;
        ok(&w, "the waiting query, once the lock was released")?;
        s.query(&b, &format!("select pg_advisory_unlock({key})"))?;
        return done(s, &pool, &[&a, &b]);
    }
    s.query(&a, &format!("select pg_advisory_unlock({key})"))?;
    done(s, &pool, &[&a, &b])
}

fn cancel_idle(s: &mut Session<'_>) -> Result<(), String> {
    let (pool, c) = one(s)?;
    let can = s.cancels.get(&c).copied().unwrap_or(false);
    let v = s
        .raw
        .call(json!({"op": "cancel", "conn": c}), Duration::from_secs(ANSWER_S))?;
    if can {
        ok(&v, "cancel with nothing in flight (nothing to cancel: `{}`)")?;
    } else {
        error(&v, "cancel without a cancel API")?;
    }
    let o = s.query(&c, "select 4")?;
    if o["rows"] != json!([["4"]]) {
        return Err(format!(
            "after a cancel with nothing in flight, `select 4` gave {}",
            o["rows"]
        ));
    }
    done(s, &pool, &[&c])
}

fn abandon(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 7;
    let (pool, a, b) = two(s)?;
    let target = blocked(s, &a, &b, key, None)?;
    // As the harness does when a connection's owner goes away mid-call:
    // the call is dropped, then the connection abandoned.
    let d = s.raw.send(json!({"op": "drop", "target": target}));
    let ab = s.raw.send(json!({"op": "abandon", "conn": b}));
    let (tv, _) = s.raw.wait(target, Duration::from_secs(ANSWER_S))?;
    if tv.get("dropped").and_then(Value::as_bool) != Some(true) && tv.get("error").is_none() {
        return Err(format!(
            "the abandoned call must answer `dropped: true` (or an error), got {tv}"
        ));
    }
    let (dv, _) = s.raw.wait(d, Duration::from_secs(ANSWER_S))?;
    ok(&dv, "drop")?;
    let (av, _) = s.raw.wait(ab, Duration::from_secs(ANSWER_S))?;
    ok(&av, "abandon")?;
    s.query(&a, &format!("select pg_advisory_unlock({key})"))?;
    // The abandoned connection went back: the pool of 2 has room for another.
    // A blocking library gives it back when the given-up call ends (as a
    // block's `finally` would), after the unlock above; a pool that never
    // waits (psycopg2's) fails a checkout at once until then (kind client),
    // so such a checkout is tried again, up to the answer bound.
    let deadline = Instant::now() + Duration::from_secs(ANSWER_S);
    let c = loop {
        match s.checkout(&pool) {
            Ok(c) => break c,
            Err(e) if e.contains("\"kind\":\"client\"") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                return Err(format!(
                    "a checkout after abandon (the abandoned connection should be back): {e}"
                ));
            }
        }
    };
    done(s, &pool, &[&a, &c])
}

fn checkout_bound(s: &mut Session<'_>) -> Result<(), String> {
    let pool = s.pool(1, 10_000)?;
    let a = s.checkout(&pool)?;
    let began = Instant::now();
    let id = s.raw.send(
        json!({"op": "checkout", "pool": pool, "conn": "c-bounded", "checkout_timeout_ms": 10_000,
                               "timeout_ms": BOUND_MS}),
    );
    let (v, at) = s.raw.wait(id, Duration::from_millis(BOUND_MS + SLACK_MS))?;
    // A pool that never waits fails the checkout at once (an error, kind
    // client): the bound is never reached.
    if let Some(e) = v.get("error") {
        if e["kind"] == "client" {
            return done(s, &pool, &[&a]);
        }
        return Err(format!(
            "a checkout from an exhausted pool: an error must be kind client, got {e}"
        ));
    }
    if !gave_up(&v) {
        return Err(format!(
            "a checkout with timeout_ms {BOUND_MS} from an exhausted pool: expected ok.gave_up true (or, from a \
             pool that never waits, a client error), got {v}"
        ));
    }
    if at.duration_since(began) < Duration::from_millis(BOUND_MS) {
        return Err(format!(
            "gave up after {} ms, before its bound of {BOUND_MS} ms",
            at.duration_since(began).as_millis()
        ));
    }
    done(s, &pool, &[&a])
}

fn checkout_timeout(s: &mut Session<'_>) -> Result<(), String> {
    let pool = s.pool(1, BOUND_MS)?;
    let a = s.checkout(&pool)?;
    let id = s
        .raw
        .send(json!({"op": "checkout", "pool": pool, "conn": "c-timeout", "checkout_timeout_ms": BOUND_MS}));
    let (v, _) = s.raw.wait(id, Duration::from_millis(BOUND_MS + SLACK_MS))?;
    let e = error(
        &v,
        &format!("a checkout from an exhausted pool with checkout_timeout_ms {BOUND_MS}"),
    )?;
    if e["kind"] == "protocol" {
        return Err(format!("a pool timeout is kind client, not protocol: {e}"));
    }
    done(s, &pool, &[&a])
}

fn guard(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 8;
    let (pool, c) = one(s)?;
    let v = s.raw.call(
        json!({"op": "guard", "conn": c, "key": key, "end": "release_now"}),
        Duration::from_secs(ANSWER_S),
    )?;
    if v.get("ok").is_some() {
        if s.lock_seen(key, true)? {
            return Err(format!(
                "guard with end release_now answered, but lock {key} is still held"
            ));
        }
    } else {
        let e = error(&v, "guard")?;
        if e["kind"] != "unsupported" {
            return Err(format!(
                "guard: expected ok, or kind unsupported where the library has no guard API; got {e}"
            ));
        }
    }
    done(s, &pool, &[&c])
}

/// `fields` must answer an error, and the adapter must answer a ping after.
fn refused(s: &mut Session<'_>, fields: Value, what: &str) -> Result<Value, String> {
    let v = s.raw.call(fields, Duration::from_secs(ANSWER_S))?;
    let e = error(&v, what)?;
    s.ping().map_err(|e| format!("after {what}: {e}"))?;
    Ok(e)
}

fn unknown_conn(s: &mut Session<'_>) -> Result<(), String> {
    refused(
        s,
        json!({"op": "query", "conn": "c-never", "sql": "select 1"}),
        "a query on an unknown connection",
    )
    .map(|_| ())
}

fn return_without_checkout(s: &mut Session<'_>) -> Result<(), String> {
    refused(
        s,
        json!({"op": "return", "conn": "c-never-out"}),
        "a return without a checkout",
    )
    .map(|_| ())
}

fn after_return(s: &mut Session<'_>) -> Result<(), String> {
    let (pool, c) = one(s)?;
    s.give_back(&c)?;
    refused(
        s,
        json!({"op": "query", "conn": c, "sql": "select 1"}),
        "a query on a returned connection",
    )?;
    s.close(&pool)
}

fn unknown_pool(s: &mut Session<'_>) -> Result<(), String> {
    refused(
        s,
        json!({"op": "checkout", "pool": "p-never", "conn": "c-nowhere", "checkout_timeout_ms": 1000}),
        "a checkout from an unknown pool",
    )
    .map(|_| ())
}

fn unknown_op(s: &mut Session<'_>) -> Result<(), String> {
    let e = refused(s, json!({"op": "frobnicate"}), "an unknown op")?;
    if e["kind"] != "protocol" {
        return Err(format!("an unknown op: expected kind protocol, got {e}"));
    }
    Ok(())
}

fn close_with_call(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 9;
    let holder_pool = s.pool(1, 10_000)?;
    let a = s.checkout(&holder_pool)?;
    let pool = s.pool(1, 10_000)?;
    let b = s.checkout(&pool)?;
    let waiting = blocked(s, &a, &b, key, None)?;
    s.close(&pool)
        .map_err(|e| format!("close_pool while a call waits: {e}"))?;
    s.query(&a, &format!("select pg_advisory_unlock({key})"))?;
    s.raw
        .wait(waiting, Duration::from_secs(POOL_S))
        .map_err(|e| format!("the call in flight on a closed pool must still be answered: {e}"))?;
    s.ping()?;
    // Kept for the next check: a checkout from this closed pool.
    s.closed_pool = Some(pool);
    done(s, &holder_pool, &[&a])
}

fn after_close(s: &mut Session<'_>) -> Result<(), String> {
    let pool = s.closed_pool.clone().unwrap_or_else(|| "p-closed".to_owned());
    refused(
        s,
        json!({"op": "checkout", "pool": pool, "conn": "c-after-close", "checkout_timeout_ms": 1000}),
        "a checkout from a closed pool",
    )
    .map(|_| ())
}

fn stdin_closed(s: &mut Session<'_>) -> Result<(), String> {
    drop(s.raw.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(ANSWER_S);
    loop {
        match s.raw.child.try_wait() {
            Ok(Some(_)) => return Ok(()),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => return Err(format!("still running {ANSWER_S} s after its stdin closed")),
            Err(e) => return Err(format!("cannot wait for it: {e}")),
        }
    }
}
