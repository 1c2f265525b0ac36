//! One adapter process and the requests in flight to it.
//!
//! The process is started once per driver configuration and server and kept
//! for the life of this process, serving every pool of that column. Its I/O
//! runs on three plain threads (stdin writer, stdout reader, stderr tail), so
//! it does not depend on any one tokio runtime; answers reach the waiting
//! request through a `tokio::sync::oneshot`. The adapter exits when its stdin
//! closes, which the kernel does when this process ends, however it ends.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::protocol::{Answer, HelloOk, Op, PROTOCOL_VERSION, Request};
use crate::DriverError;

/// Lines of the adapter's stderr kept for error messages.
const STDERR_LINES: usize = 12;

/// A request waiting for its answer.
struct Waiting {
    op: &'static str,
    sent: Instant,
    reply: oneshot::Sender<Result<Answer, String>>,
}

struct State {
    waiting: HashMap<u64, Waiting>,
    /// Requests given up on (`drop` sent) that have not been answered yet:
    /// op, when sent, when given up on.
    dropped: HashMap<u64, (&'static str, Instant, Instant)>,
    /// Why the adapter cannot answer any more (exited, printed garbage), once it cannot.
    dead: Option<String>,
}

/// A running adapter: the protocol's client end.
pub(crate) struct Adapter {
    /// The column id, for messages.
    pub name: String,
    /// The adapter's OS pid.
    pub pid: u32,
    next_id: AtomicU64,
    lines: mpsc::Sender<String>,
    state: Arc<Mutex<State>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Set by the stderr thread at end of file.
    stderr_closed: Arc<std::sync::atomic::AtomicBool>,
    /// Answers to [`Adapter::start_tracked`] requests nobody has awaited yet.
    unsettled: Mutex<Vec<oneshot::Receiver<Result<Answer, String>>>>,
    child: Mutex<Child>,
}

impl Adapter {
    /// Starts `command` (program and arguments, run in `dir`).
    ///
    /// # Errors
    /// The program cannot be started.
    pub fn start(name: &str, command: &[String], dir: &std::path::Path) -> Result<Arc<Adapter>, String> {
        let (program, args) = command.split_first().ok_or("the adapter's command is empty")?;
        let mut child = Command::new(program)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start adapter '{name}' ({}): {e}", command.join(" ")))?;
        let (mut stdin, stdout, stderr) = (
            child.stdin.take().ok_or("no stdin")?,
            child.stdout.take().ok_or("no stdout")?,
            child.stderr.take().ok_or("no stderr")?,
        );
        let (lines, to_write) = mpsc::channel::<String>();
        let state = Arc::new(Mutex::new(State {
            waiting: HashMap::new(),
            dropped: HashMap::new(),
            dead: None,
        }));
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let adapter = Arc::new(Adapter {
            name: name.to_owned(),
            pid: child.id(),
            next_id: AtomicU64::new(1),
            lines,
            state: state.clone(),
            stderr: tail.clone(),
            stderr_closed: closed.clone(),
            unsettled: Mutex::new(Vec::new()),
            child: Mutex::new(child),
        });
        std::thread::Builder::new()
            .name(format!("adapter-{name}-in"))
            .spawn(move || {
                for line in to_write {
                    tracing::trace!(target: "locklab_drivers::protocol", "→ {}", redacted(line.trim_end()));
                    record("→", &redacted(line.trim_end()));
                    if stdin.write_all(line.as_bytes()).and_then(|()| stdin.flush()).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        let tail_in = tail.clone();
        std::thread::Builder::new()
            .name(format!("adapter-{name}-err"))
            .spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut t = tail_in.lock().unwrap_or_else(|p| p.into_inner());
                    if t.len() == STDERR_LINES {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
                closed.store(true, Ordering::Release);
            })
            .map_err(|e| e.to_string())?;
        let reader = Arc::downgrade(&adapter);
        std::thread::Builder::new()
            .name(format!("adapter-{name}-out"))
            .spawn(move || read_answers(stdout, &state, &reader))
            .map_err(|e| e.to_string())?;
        Ok(adapter)
    }

    /// Whether the adapter can no longer answer (then a new one is started).
    pub fn is_dead(&self) -> bool {
        self.lock().dead.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last lines the adapter wrote to stderr, for messages.
    pub fn stderr_tail(&self) -> String {
        // What it wrote last may still be in the pipe: read to its end (a
        // dead adapter), or give the stderr thread a moment (a live one,
        // which may have logged just before answering). Error paths only.
        let until = Instant::now() + Duration::from_millis(if self.is_dead() { 500 } else { 100 });
        while !self.stderr_closed.load(Ordering::Acquire) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let t = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        if t.is_empty() {
            "its stderr is empty".to_owned()
        } else {
            format!(
                "its stderr ends with:\n    {}",
                t.iter().cloned().collect::<Vec<_>>().join("\n    ")
            )
        }
    }

    /// Sends request `op` and waits for the answer. Dropping the
    /// returned future before it completes sends `drop` for this request
    /// (the adapter cancels the call, the way its language gives up on one).
    ///
    /// # Errors
    /// [`DriverError::Client`] naming the adapter, the request and its stderr
    /// when the adapter is gone, printed something that is not an answer, or
    /// answered with a protocol error; the error the adapter reported otherwise.
    pub async fn call(self: &Arc<Self>, op: Op) -> Result<Answer, DriverError> {
        let name = op.name();
        let (id, answer) = self.send(op).map_err(|why| {
            DriverError::Client(format!(
                "adapter '{}' (pid {}): request ({name}) not sent: {why}; {}",
                self.name,
                self.pid,
                self.stderr_tail()
            ))
        })?;
        let mut guard = DropGuard {
            adapter: self,
            id,
            armed: true,
        };
        let got = answer.await;
        guard.armed = false;
        let answer = match got {
            Ok(Ok(a)) => a,
            other => {
                let why = match other {
                    Ok(Err(w)) => w,
                    _ => "the answer channel closed".to_owned(),
                };
                return Err(DriverError::Client(format!(
                    "adapter '{}' (pid {}): request {id} ({name}) failed: {why}; {}",
                    self.name,
                    self.pid,
                    self.stderr_tail()
                )));
            }
        };
        if let Some(e) = &answer.error
            && e.kind == super::protocol::ErrorKind::Protocol
        {
            return Err(DriverError::Client(format!(
                "adapter '{}' (pid {}) rejected request {id} ({name}): {}; {}",
                self.name,
                self.pid,
                e.message,
                self.stderr_tail()
            )));
        }
        Ok(answer)
    }

    /// Checks the adapter speaks our protocol version: the `hello` answer.
    pub async fn hello(self: &Arc<Self>, within: Duration) -> Result<HelloOk, DriverError> {
        let hello = Op::Hello {
            protocol: PROTOCOL_VERSION,
        };
        let answer = tokio::time::timeout(within, self.call(hello))
            .await
            .map_err(|_| self.stalled_error("hello", within))??;
        let ok: HelloOk = answer.ok_as(&self.name, "hello")?;
        if ok.protocol != PROTOCOL_VERSION {
            let v = ok.protocol;
            self.kill(format!("speaks protocol {v}, not {PROTOCOL_VERSION}"));
            return Err(DriverError::Client(format!(
                "adapter '{}' speaks protocol version {v}; locklab speaks {PROTOCOL_VERSION}",
                self.name
            )));
        }
        Ok(ok)
    }

    /// The error for a request that got no answer `within`.
    pub fn stalled_error(&self, op: &str, within: Duration) -> DriverError {
        DriverError::Client(format!(
            "adapter '{}' (pid {}) did not answer '{op}' within {} ms; {}",
            self.name,
            self.pid,
            within.as_millis(),
            self.stderr_tail()
        ))
    }

    /// The requests still waiting for an answer, for a deadline message.
    pub fn waiting(&self) -> Option<String> {
        let st = self.lock();
        let mut list: Vec<(u64, String)> = st
            .waiting
            .iter()
            .map(|(id, r)| {
                (
                    *id,
                    format!("request {id} ({}) for {} ms", r.op, r.sent.elapsed().as_millis()),
                )
            })
            .chain(st.dropped.iter().map(|(id, (op, sent, gave_up))| {
                let after = gave_up.saturating_duration_since(*sent).as_millis();
                (*id, format!("request {id} ({op}), given up on after {after} ms"))
            }))
            .collect();
        drop(st);
        if list.is_empty() {
            return None;
        }
        list.sort();
        let list: Vec<String> = list.into_iter().map(|(_, t)| t).collect();
        Some(format!(
            "adapter '{}' (pid {}) has not answered {}; {}",
            self.name,
            self.pid,
            list.join(", "),
            self.stderr_tail()
        ))
    }

    /// Marks the adapter dead (every waiting request fails with `why`) and kills it.
    pub fn kill(&self, why: String) {
        fail_all(&self.state, &why);
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Sends a request from a place that cannot wait (a `Drop`): its answer
    /// is awaited by the next [`Adapter::settle`].
    pub fn start_tracked(&self, op: Op) {
        if let Ok((_, answer)) = self.send(op) {
            let mut unsettled = self.unsettled.lock().unwrap_or_else(|p| p.into_inner());
            // Answers already in need no waiting for: keep the list short.
            unsettled.retain_mut(|r| matches!(r.try_recv(), Err(oneshot::error::TryRecvError::Empty)));
            unsettled.push(answer);
        }
    }

    /// Registers request `op` (an id added) as waiting and writes it to the
    /// adapter: its id and where its answer arrives.
    ///
    /// # Errors
    /// Why the adapter cannot answer any more.
    fn send(&self, op: Op) -> Result<(u64, oneshot::Receiver<Result<Answer, String>>), String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let name = op.name();
        let line = serde_json::to_string(&Request { id, op }).map_err(|e| e.to_string())?;
        let (reply, answer) = oneshot::channel();
        let mut st = self.lock();
        if let Some(why) = st.dead.clone() {
            return Err(why);
        }
        st.waiting.insert(
            id,
            Waiting {
                op: name,
                sent: Instant::now(),
                reply,
            },
        );
        drop(st);
        let _ = self.lines.send(format!("{line}\n"));
        Ok((id, answer))
    }

    /// Waits, at most `within`, for the answers of every
    /// [`Adapter::start_tracked`] request sent so far.
    pub async fn settle(&self, within: Duration) {
        let pending: Vec<_> = std::mem::take(&mut *self.unsettled.lock().unwrap_or_else(|p| p.into_inner()));
        let _ = tokio::time::timeout(within, futures::future::join_all(pending)).await;
    }
}

/// Sends `drop` for a request whose future was dropped before its answer.
struct DropGuard<'a> {
    adapter: &'a Arc<Adapter>,
    id: u64,
    armed: bool,
}

impl Drop for DropGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut st = self.adapter.lock();
            if let Some(w) = st.waiting.remove(&self.id) {
                st.dropped.insert(self.id, (w.op, w.sent, Instant::now()));
            }
            drop(st);
            // Tracked: a later `settle` waits until the call has given up.
            self.adapter.start_tracked(Op::Drop { target: self.id });
        }
    }
}

fn fail_all(state: &Mutex<State>, why: &str) {
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    st.dead.get_or_insert_with(|| why.to_owned());
    for (_, w) in st.waiting.drain() {
        let _ = w.reply.send(Err(why.to_owned()));
    }
}

/// The stdout thread: each line is an answer for a waiting request; anything
/// else makes the adapter unusable (it is killed, every waiting request fails).
fn read_answers(stdout: std::process::ChildStdout, state: &Mutex<State>, adapter: &std::sync::Weak<Adapter>) {
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        tracing::trace!(target: "locklab_drivers::protocol", "← {}", line.trim_end());
        record("←", line.trim_end());
        let parsed: Result<Answer, _> = serde_json::from_str(line.trim_end());
        match parsed {
            Ok(answer) => {
                let Some(id) = answer.id else {
                    let why = format!(
                        "it answered a request it could not read: {}",
                        answer.error.map(|e| e.message).unwrap_or_default()
                    );
                    fail_all(state, &why);
                    continue;
                };
                let sent = adapter
                    .upgrade()
                    .map_or(u64::MAX, |a| a.next_id.load(Ordering::Relaxed));
                if id >= sent {
                    let why = format!("it answered request {id}, which was never sent");
                    if let Some(a) = adapter.upgrade() {
                        a.kill(why);
                    }
                    return;
                }
                // No one waiting: a request given up on (`drop`) or already failed.
                let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
                st.dropped.remove(&id);
                let w = st.waiting.remove(&id);
                drop(st);
                if let Some(w) = w {
                    let _ = w.reply.send(Ok(answer));
                }
            }
            Err(e) => {
                let shown: String = line.trim_end().chars().take(200).collect();
                let why = format!("it printed a line that is not a protocol answer ({e}): {shown:?}");
                if let Some(a) = adapter.upgrade() {
                    a.kill(why);
                } else {
                    fail_all(state, &why);
                }
                return;
            }
        }
    }
    let status = adapter.upgrade().map(|a| {
        let mut child = a.child.lock().unwrap_or_else(|p| p.into_inner());
        let grace = Instant::now() + Duration::from_millis(500);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < grace {
            std::thread::sleep(Duration::from_millis(5));
        }
        // Its stdout closed but it runs on: of no use any more.
        let _ = child.kill();
        match child.wait() {
            Ok(s) => s.to_string(),
            Err(e) => e.to_string(),
        }
    });
    fail_all(
        state,
        &format!("it exited ({})", status.unwrap_or_else(|| "status unknown".into())),
    );
}

/// `line` with the value of a `"password"` field replaced by `***`, for the trace.
fn redacted(line: &str) -> String {
    const KEY: &str = "\"password\":\"";
    match line.find(KEY) {
        Some(at) => {
            let start = at + KEY.len();
            let mut end = start;
            let bytes = line.as_bytes();
            while end < bytes.len() && bytes[end] != b'"' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            format!("{}***{}", &line[..start], &line[end.min(line.len())..])
        }
        None => line.to_owned(),
    }
}

/// Where [`record_to`] appends every protocol line, once set.
static RECORD: OnceLock<Mutex<std::fs::File>> = OnceLock::new();

/// From now on, appends every line this process sends to an adapter and
/// every line it reads from one to `path`, each prefixed `→ ` or `← `: the
/// raw protocol of a run, which `harness/tests/matrix.rs` validates against
/// `drivers/adapters/protocol.schema.json`. A second call is ignored.
///
/// # Errors
/// The file cannot be created.
pub fn record_to(path: &std::path::Path) -> std::io::Result<()> {
    let file = std::fs::File::create(path)?;
    let _ = RECORD.set(Mutex::new(file));
    Ok(())
}

fn record(direction: &str, line: &str) {
    if let Some(file) = RECORD.get() {
        let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(f, "{direction} {line}");
    }
}
