//! A direct actor's connection in a child process (`process: child`).
//!
//! The child is this project's own `locklab` binary, started as
//! `locklab child-connection` (a hidden command). It reads one JSON line
//! with the connection spec on stdin, connects with tokio-postgres
//! ([`DirectConn`]), answers `{"ok": {}}`, then runs one statement per line
//! (`{"id": N, "sql": "…"}`, simple query protocol) and answers each with
//! `{"id": N, "ok": {columns, rows, notices}}` or `{"id": N, "error": {kind,
//! message, sqlstate}}` (an answer to a request given up on is skipped). At
//! end of input it closes the connection (Terminate) and exits; it asks the
//! kernel for SIGKILL should the harness die first (`PR_SET_PDEATHSIG`), so
//! it never outlives the run. A crash is SIGKILL from the harness
//! ([`ChildProcess::crash`]): the kernel closes the socket without a
//! Terminate message, as for a worker killed by the OOM killer.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use locklab_drivers::{Conn, ConnectSpec, DbError, DirectConn, DriverError, Returned, Rows};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The hidden command that serves a child connection.
pub const COMMAND: &str = "child-connection";

/// How long the child may take to start and connect, in s.
const START_TIMEOUT_S: u64 = 15;

/// The `locklab` binary that serves child connections: `LOCKLAB_BIN` when
/// set; else this program when it is `locklab`; else `locklab` next to it or
/// one directory up (a test binary in `target/debug/deps` finds
/// `target/debug/locklab`, which cargo builds for the package's tests).
///
/// # Errors
/// None of these exists.
pub fn program() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("LOCKLAB_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    if exe.file_stem().is_some_and(|s| s == "locklab") {
        return Ok(exe);
    }
    let dir = exe.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    for d in [Some(dir.as_path()), dir.parent()].into_iter().flatten() {
        let p = d.join("locklab");
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(format!(
        "a 'process: child' actor runs in a child 'locklab {COMMAND}', but no locklab binary is next to {} (build it with `cargo build -p locklab --features internals`, or set LOCKLAB_BIN)",
        exe.display()
    ))
}

/// The child process behind a [`ChildConn`], shared with the run so that a
/// crash can kill it while its connection is busy in a background step.
#[derive(Clone)]
pub struct ChildProcess {
    pid: u32,
    child: Arc<Mutex<Option<Child>>>,
}

impl ChildProcess {
    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Kills the child with SIGKILL and waits until it has exited (and been
    /// reaped). Killing one already gone is not an error.
    ///
    /// # Errors
    /// The signal or the wait failed.
    pub async fn crash(&self) -> Result<(), String> {
        let taken = self.child.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut child) = taken else { return Ok(()) };
        child
            .kill()
            .await
            .map_err(|e| format!("cannot kill child process {}: {e}", self.pid))
    }
}

/// A connection served by a child process ([module docs](self)).
pub struct ChildConn {
    process: ChildProcess,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The id of the last request sent: the child answers each request with
    /// its id, and an answer to an earlier one (a call given up on by a
    /// client-side bound) is skipped.
    last_id: u64,
}

impl ChildConn {
    /// Starts `locklab child-connection` and connects it to `spec`.
    ///
    /// # Errors
    /// No binary ([`program`]), the child cannot start, or its connection
    /// failed (the server's error, with its SQLSTATE), or no answer within 15 s.
    pub async fn connect(spec: &ConnectSpec) -> Result<(ChildConn, ChildProcess), DriverError> {
        let program = program().map_err(DriverError::Client)?;
        let mut child = Command::new(&program)
            .arg(COMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| DriverError::Client(format!("cannot start {} {COMMAND}: {e}", program.display())))?;
        let pid = child.id().unwrap_or_default();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(BufReader::new);
        let process = ChildProcess {
            pid,
            child: Arc::new(Mutex::new(Some(child))),
        };
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            return Err(DriverError::Client("the child's pipes are missing".into()));
        };
        let mut conn = ChildConn {
            process: process.clone(),
            stdin: Some(stdin),
            stdout,
            last_id: 0,
        };
        let hello = serde_json::to_value(spec).map_err(|e| DriverError::Client(e.to_string()))?;
        let answer = tokio::time::timeout(Duration::from_secs(START_TIMEOUT_S), conn.call(&hello))
            .await
            .map_err(|_| {
                DriverError::Client(format!("child process {pid}: no connection within {START_TIMEOUT_S} s"))
            })?;
        answer?;
        Ok((conn, process))
    }

    /// Sends one request line and reads the answer line.
    async fn call(&mut self, request: &Value) -> Result<Value, DriverError> {
        let pid = self.process.pid;
        let gone = |what: &str| DriverError::Client(format!("child process {pid} {what} (it has exited)"));
        self.last_id += 1;
        let id = self.last_id;
        let mut request = request.clone();
        request["id"] = json!(id);
        let stdin = self.stdin.as_mut().ok_or_else(|| gone("has no input"))?;
        let mut line = request.to_string();
        line.push('\n');
        stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|_| gone("took no request"))?;
        stdin.flush().await.map_err(|_| gone("took no request"))?;
        let v = loop {
            let mut answer = String::new();
            let n = self
                .stdout
                .read_line(&mut answer)
                .await
                .map_err(|_| gone("sent no answer"))?;
            if n == 0 {
                return Err(gone("sent no answer"));
            }
            let v: Value = serde_json::from_str(&answer)
                .map_err(|e| DriverError::Client(format!("child process {pid}: unreadable answer ({e})")))?;
            // An answer to an earlier request, given up on: skipped.
            if v["id"].as_u64().is_none_or(|got| got == id) {
                break v;
            }
        };
        if let Some(e) = v.get("error") {
            let message = e["message"].as_str().unwrap_or("?").to_owned();
            return Err(match e["sqlstate"].as_str() {
                Some(code) => DriverError::Db(DbError {
                    sqlstate: code.to_owned(),
                    message,
                }),
                None => DriverError::Client(message),
            });
        }
        Ok(v.get("ok").cloned().unwrap_or(Value::Null))
    }
}

#[async_trait::async_trait]
impl Conn for ChildConn {
    async fn simple_query(&mut self, sql: &str) -> Result<Rows, DriverError> {
        let ok = self.call(&json!({ "sql": sql })).await?;
        let texts = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
                .unwrap_or_default()
        };
        let rows = ok["rows"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .map(|r| {
                        r.as_array()
                            .map(|cells| cells.iter().map(|c| c.as_str().map(str::to_owned)).collect())
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Rows {
            columns: texts(&ok["columns"]),
            rows,
            notices: texts(&ok["notices"]),
        })
    }

    /// Closes the child's input: it closes its connection (Terminate) and exits.
    async fn give_back(mut self: Box<Self>) -> Returned {
        drop(self.stdin.take());
        let taken = self.process.child.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut child) = taken {
            let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        }
        Returned::Closed
    }

    fn no_cancel_reason(&self) -> &'static str {
        "a 'process: child' actor's cancel key is in the child process"
    }
}

/// `locklab child-connection`: serves one connection over stdin/stdout
/// ([module docs](self)) and returns the exit code (0 at end of input, 2 when
/// the first line is not a spec).
pub fn serve_main() -> std::process::ExitCode {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("locklab {COMMAND}: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    runtime.block_on(serve())
}

async fn serve() -> std::process::ExitCode {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut out = tokio::io::stdout();
    let mut answer = async |v: Value| {
        let mut line = v.to_string();
        line.push('\n');
        let _ = out.write_all(line.as_bytes()).await;
        let _ = out.flush().await;
    };
    let error = |e: &DriverError| match e {
        DriverError::Db(db) => json!({"error": {"kind": "db", "message": db.message, "sqlstate": db.sqlstate}}),
        e => json!({"error": {"kind": "client", "message": e.to_string()}}),
    };
    let Ok(Some(first)) = lines.next_line().await else {
        return std::process::ExitCode::from(2);
    };
    // The spec, with the request `id` every line carries.
    let spec = serde_json::from_str::<Value>(&first).and_then(|mut v| {
        if let Some(o) = v.as_object_mut() {
            o.remove("id");
        }
        serde_json::from_value::<ConnectSpec>(v)
    });
    let spec = match spec {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("locklab {COMMAND}: the first line is not a connection spec: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut conn = match DirectConn::connect(&spec).await {
        Ok(c) => c,
        Err(e) => {
            answer(error(&e)).await;
            return std::process::ExitCode::SUCCESS;
        }
    };
    answer(json!({"ok": {}})).await;
    while let Ok(Some(line)) = lines.next_line().await {
        let req = serde_json::from_str::<Value>(&line).unwrap_or_default();
        let sql = req["sql"].as_str().unwrap_or_default().to_owned();
        let mut out = match conn.simple_query(&sql).await {
            Ok(rows) => json!({"ok": {"columns": rows.columns, "rows": rows.rows, "notices": rows.notices}}),
            Err(e) => error(&e),
        };
        out["id"] = req["id"].clone();
        answer(out).await;
    }
    conn.close().await;
    std::process::ExitCode::SUCCESS
}
