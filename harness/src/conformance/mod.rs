//! `locklab adapter check`: drives an adapter program through every request
//! of the driver protocol (docs/src/protocol.md), against a real server,
//! and says by name what it does not do as the protocol says: every request,
//! a query of several statements as one implicit transaction
//! (`implicit_transaction`), bad sequences (a request for a connection or pool that does not exist, a
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

mod checks;
mod implicit_transaction;
use checks::CHECKS;

/// How long one answer may take unless a check says otherwise (`adapter
/// check --answer-timeout` sets another bound).
pub const DEFAULT_ANSWER: Duration = Duration::from_secs(10);
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
        ok.insert("library", part("LibraryOk")?);
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

/// A pool of 1 and its connection.
fn one(s: &mut Session<'_>) -> Result<(String, String), String> {
    let pool = s.pool(1, 10_000)?;
    let c = s.checkout(&pool)?;
    Ok((pool, c))
}

/// Returns `conns` and closes `pool`.
fn done(s: &mut Session<'_>, pool: &str, conns: &[&str]) -> Result<(), String> {
    for c in conns {
        s.give_back(c)?;
    }
    s.close(pool)
}

/// `select N` on `conn` answers N: the connection is still usable after
/// what `after` names.
fn still_answers(s: &mut Session<'_>, conn: &str, n: u32, after: &str) -> Result<(), String> {
    let o = s.query(conn, &format!("select {n}"))?;
    if o["rows"] != json!([[n.to_string()]]) {
        return Err(format!("{after}: `select {n}` gave {}", o["rows"]));
    }
    Ok(())
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
    /// How long one answer may take unless a check says otherwise.
    answer: Duration,
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
            self.answer,
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
        let v = self
            .raw
            .call(json!({"op": "query", "conn": conn, "sql": sql}), self.answer)?;
        ok(&v, &format!("query `{sql}`"))
    }

    fn give_back(&mut self, conn: &str) -> Result<String, String> {
        let v = self.raw.call(json!({"op": "return", "conn": conn}), self.answer)?;
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
        let v = self.raw.call(json!({"op": "ping"}), self.answer)?;
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
        let deadline = Instant::now() + self.answer;
        loop {
            if self.lock_seen(key, granted)? == present {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the server showed {what} advisory lock {key} not within {:.1} s",
                    self.answer.as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Runs every check of the protocol against the adapter `command` (run in
/// `dir`) on `server`, calling `each` with every finding as it is made, and
/// returns them all. A check that cannot start because an earlier one left
/// the adapter unusable fails with that reason. `answer`: how long one
/// answer may take unless a check says otherwise ([`DEFAULT_ANSWER`]; a
/// check of an adapter that does not answer waits it out).
///
/// # Errors
/// The adapter cannot be started, or the observer connection or the check's
/// database cannot be made.
pub fn check(
    server: &Server,
    command: &[String],
    dir: &Path,
    answer: Duration,
    each: &mut dyn FnMut(&Finding),
) -> Result<Vec<Finding>> {
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
            answer,
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
