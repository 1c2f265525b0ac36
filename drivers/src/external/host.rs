//! The adapter end of the driver protocol for a Rust driver: `locklab
//! pool-adapter ID` serves the pools of driver `ID` over stdin/stdout, so
//! that a Rust pool can live in a process of its own, as a Python pool does
//! in its adapter, and a `do: crash` step can kill that process with SIGKILL
//! (docs/src/faults-and-races.md). The messages are those of [`super::protocol`];
//! every call goes to the driver's own [`Pool`] and [`Conn`] methods, so a
//! hosted column behaves as the in-process one does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::{AbortHandle, Abortable};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};

use super::protocol::{
    Answer, AnswerError, CheckoutOk, ErrorKind, HelloOk, Op, PROTOCOL_VERSION, QueryOk, Request, ReturnOk,
};
use crate::{Canceller, Conn, ConnectSpec, Driver, DriverError, GuardAcquire, GuardEnd, Pool, PoolOptions, TxControl};

/// A checked-out connection, locked by the call that uses it.
type Shared = Arc<tokio::sync::Mutex<Option<Box<dyn Conn>>>>;

/// A request in flight: how to give up on it, and when it has finished.
struct InFlight {
    abort: AbortHandle,
    done: watch::Receiver<bool>,
}

#[derive(Default)]
struct State {
    pools: HashMap<String, Arc<dyn Pool>>,
    /// conn id → (pool id, connection).
    conns: HashMap<String, (String, Shared)>,
    /// conn id → a cancel request for its statement in flight (taken before it started).
    cancellers: HashMap<String, Canceller>,
    /// The conn ids whose connection has a cancel API (told at checkout).
    cancellable: std::collections::HashSet<String>,
    /// request id → the request's task.
    inflight: HashMap<u64, InFlight>,
    /// conn id → the request id of its call in flight.
    conn_call: HashMap<String, u64>,
}

struct Host {
    driver: Box<dyn Driver>,
    state: Mutex<State>,
    out: mpsc::UnboundedSender<String>,
}

impl From<DriverError> for AnswerError {
    fn from(e: DriverError) -> AnswerError {
        match e {
            DriverError::Db(db) => AnswerError {
                kind: ErrorKind::Db,
                sqlstate: Some(db.sqlstate).filter(|s| !s.is_empty()),
                message: db.message,
            },
            DriverError::Client(m) => failure(ErrorKind::Client, m),
            DriverError::Unsupported(m) => failure(ErrorKind::Unsupported, m),
        }
    }
}

fn failure(kind: ErrorKind, message: String) -> AnswerError {
    AnswerError {
        kind,
        message,
        sqlstate: None,
    }
}

fn protocol(message: String) -> AnswerError {
    failure(ErrorKind::Protocol, message)
}

/// A driver's error, with no time.
fn plain(e: DriverError) -> (AnswerError, Option<f64>) {
    (e.into(), None)
}

/// Serves `driver`'s pools until stdin ends; then gives up on every call
/// still running (as the harness's end would drop them), closes every pool
/// (5 s each at most) and returns. Requests run concurrently, each in a task
/// of its own; answers are written in the order they finish. A line that is
/// not a [`Request`] is answered with a `protocol` error (with its `id` when
/// it has one). A driver call that panics is answered as a `client` error
/// saying so.
pub async fn serve(driver: Box<dyn Driver>) {
    let (out, mut lines_out) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = lines_out.recv().await {
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let host = Arc::new(Host {
        driver,
        state: Mutex::new(State::default()),
        out,
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        match serde_json::from_str::<Request>(&line) {
            Ok(req) => host.start(req),
            Err(e) => {
                let id = serde_json::from_str::<serde_json::Value>(&line)
                    .ok()
                    .and_then(|v| v.get("id").and_then(serde_json::Value::as_u64));
                host.send(&Answer {
                    id,
                    ok: None,
                    error: Some(protocol(format!("cannot read the request: {e}"))),
                    dropped: false,
                    elapsed_ms: None,
                });
            }
        }
    }
    let running: Vec<u64> = host.lock().inflight.keys().copied().collect();
    for id in running {
        host.give_up(id).await;
    }
    let pools: Vec<Arc<dyn Pool>> = host.lock().pools.drain().map(|(_, p)| p).collect();
    for p in pools {
        let _ = tokio::time::timeout(Duration::from_secs(5), p.close()).await;
    }
    drop(host);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
}

/// What a request's call ended with: its `ok` object, or why it failed
/// (with the call's time in ms, for a statement).
type Handled = Result<serde_json::Value, (AnswerError, Option<f64>)>;

/// `value`'s JSON; the protocol's types always serialise.
fn ok<T: serde::Serialize>(value: &T) -> Handled {
    Ok(serde_json::to_value(value).unwrap_or_default())
}

impl Host {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&self, answer: &Answer) {
        if let Ok(line) = serde_json::to_string(answer) {
            let _ = self.out.send(format!("{line}\n"));
        }
    }

    /// Runs request `req` in a task of its own, which a `drop` can abort.
    fn start(self: &Arc<Self>, req: Request) {
        let id = req.id;
        let conn = req.op.call_on().map(str::to_owned);
        let (abort, registration) = AbortHandle::new_pair();
        let (finished, done) = watch::channel(false);
        {
            let mut st = self.lock();
            st.inflight.insert(id, InFlight { abort, done });
            if let Some(c) = &conn {
                st.conn_call.insert(c.clone(), id);
            }
        }
        let host = self.clone();
        tokio::spawn(async move {
            let call = std::panic::AssertUnwindSafe(host.handle(req.op)).catch_unwind();
            let mut answer = Answer {
                id: Some(id),
                ok: None,
                error: None,
                dropped: false,
                elapsed_ms: None,
            };
            match Abortable::new(call, registration).await {
                Ok(Err(panic)) => {
                    let why = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic".into());
                    answer.error = Some(failure(ErrorKind::Client, format!("the driver panicked: {why}")));
                }
                Ok(Ok(Ok(ok))) => answer.ok = Some(ok),
                Ok(Ok(Err((error, elapsed)))) => {
                    answer.error = Some(error);
                    answer.elapsed_ms = elapsed;
                }
                Err(_aborted) => answer.dropped = true,
            }
            {
                let mut st = host.lock();
                st.inflight.remove(&id);
                if let Some(c) = &conn
                    && st.conn_call.get(c) == Some(&id)
                {
                    st.conn_call.remove(c);
                }
            }
            host.send(&answer);
            let _ = finished.send(true);
        });
    }

    /// Aborts request `id` and waits until its task has finished.
    async fn give_up(&self, id: u64) {
        let flight = self.lock().inflight.get(&id).map(|f| (f.abort.clone(), f.done.clone()));
        if let Some((abort, mut done)) = flight {
            abort.abort();
            let _ = done.wait_for(|d| *d).await;
        }
    }

    fn conn(&self, id: &str) -> Result<Shared, AnswerError> {
        self.lock()
            .conns
            .get(id)
            .map(|(_, c)| c.clone())
            .ok_or_else(|| protocol(format!("no checked-out connection '{id}'")))
    }

    fn pool(&self, id: &str) -> Result<Arc<dyn Pool>, AnswerError> {
        self.lock()
            .pools
            .get(id)
            .cloned()
            .ok_or_else(|| protocol(format!("no pool '{id}'")))
    }

    /// `open_pool`: the driver's pool under id `pool`.
    async fn open_pool(&self, pool: String, spec: ConnectSpec, max_size: u32, checkout_timeout_ms: u64) -> Handled {
        let opts = PoolOptions {
            max_size,
            checkout_timeout: Duration::from_millis(checkout_timeout_ms),
        };
        let opened = self.driver.pool(&spec, opts).await.map_err(plain)?;
        self.lock().pools.insert(pool, Arc::from(opened));
        ok(&serde_json::json!({}))
    }

    /// `checkout` (within `bound`, if given): a connection of pool `pool` under id `conn`.
    async fn checkout(&self, pool: String, conn: String, bound: Option<Duration>) -> Handled {
        let p = self.pool(&pool).map_err(|e| (e, None))?;
        let c = match bound {
            Some(b) => match p.checkout_within(b).await {
                None => {
                    return ok(&CheckoutOk {
                        gave_up: true,
                        ..CheckoutOk::default()
                    });
                }
                Some(c) => c,
            },
            None => p.checkout().await,
        }
        .map_err(plain)?;
        let answer = CheckoutOk {
            gave_up: false,
            pid: None,
            cancel: Some(c.canceller().is_some()),
            no_cancel_reason: Some(c.no_cancel_reason().to_owned()),
        };
        let mut state = self.lock();
        if answer.cancel == Some(true) {
            state.cancellable.insert(conn.clone());
        }
        state
            .conns
            .insert(conn, (pool, Arc::new(tokio::sync::Mutex::new(Some(c)))));
        drop(state);
        ok(&answer)
    }

    /// `query` (`sql`, within `bound` if given) or a transaction statement
    /// (`tx`) on connection `id`, with the time it took (ms).
    async fn statement(&self, id: &str, call: Result<(&str, Option<Duration>), TxControl>) -> Handled {
        let shared = self.conn(id).map_err(|e| (e, None))?;
        let mut guard = shared.lock().await;
        let conn = guard
            .as_mut()
            .ok_or_else(|| (protocol("the connection was abandoned".into()), None))?;
        if let Some(c) = conn.canceller() {
            self.lock().cancellers.insert(id.to_owned(), c);
        }
        let t0 = Instant::now();
        let outcome = match call {
            Ok((sql, Some(b))) => conn.simple_query_within(sql, b).await,
            Ok((sql, None)) => Some(conn.simple_query(sql).await),
            Err(tx) => Some(conn.transaction(tx).await),
        };
        let elapsed_ms = conn.last_elapsed().unwrap_or_else(|| t0.elapsed()).as_secs_f64() * 1e3;
        self.lock().cancellers.remove(id);
        match outcome {
            None => ok(&QueryOk {
                gave_up: true,
                elapsed_ms: Some(elapsed_ms),
                ..QueryOk::default()
            }),
            Some(Ok(rows)) => ok(&QueryOk {
                columns: rows.columns,
                rows: rows.rows,
                notices: rows.notices,
                elapsed_ms: Some(elapsed_ms),
                gave_up: false,
            }),
            Some(Err(e)) => Err((e.into(), Some(elapsed_ms))),
        }
    }

    /// `return` (within `bound`, if given): connection `id` given back.
    async fn give_back(&self, id: &str, bound: Option<Duration>) -> Handled {
        let shared = self.conn(id).map_err(|e| (e, None))?;
        {
            let mut state = self.lock();
            state.conns.remove(id);
            state.cancellable.remove(id);
        }
        let Some(conn) = shared.lock().await.take() else {
            return Err((protocol(format!("connection '{id}' was abandoned")), None));
        };
        let returned = match bound {
            Some(b) => match conn.give_back_within(b).await {
                None => {
                    return ok(&ReturnOk {
                        returned: None,
                        gave_up: true,
                    });
                }
                Some(r) => r,
            },
            None => conn.give_back().await,
        };
        ok(&ReturnOk {
            returned: Some(returned),
            gave_up: false,
        })
    }

    /// `cancel`: the cancel request for connection `id`'s statement in flight.
    async fn cancel(&self, id: &str) -> Handled {
        let canceller = self.lock().cancellers.remove(id);
        match canceller {
            Some(c) => c().await.map_err(plain)?,
            None => {
                // Nothing in flight (the statement has not started, or has
                // just ended: a race the harness means to run): nothing to
                // cancel (docs/src/protocol.md, `cancel`), where the
                // connection has a cancel API at all. Told at checkout: the
                // connection itself may be busy with the call's end.
                self.conn(id).map_err(|e| (e, None))?;
                if !self.lock().cancellable.contains(id) {
                    let why = format!("no statement with a cancel key is running on connection '{id}'");
                    return Err((failure(ErrorKind::Unsupported, why), None));
                }
            }
        }
        ok(&serde_json::json!({}))
    }

    /// `abandon`: connection `id`'s owner went away mid-call. The call's
    /// future and the connection are dropped, as a Rust task that is aborted
    /// drops what it holds.
    async fn abandon(&self, id: &str) -> Handled {
        let call = self.lock().conn_call.get(id).copied();
        if let Some(call) = call {
            self.give_up(call).await;
        }
        let entry = {
            let mut state = self.lock();
            state.cancellable.remove(id);
            state.conns.remove(id)
        };
        if let Some((_, shared)) = entry {
            drop(shared.lock().await.take());
        }
        ok(&serde_json::json!({}))
    }

    /// `guard`: the driver's advisory-lock guard API on connection `id`.
    async fn guard(&self, id: &str, key: i64, acquire: GuardAcquire, end: GuardEnd) -> Handled {
        let shared = self.conn(id).map_err(|e| (e, None))?;
        let mut guard = shared.lock().await;
        let conn = guard
            .as_mut()
            .ok_or_else(|| (protocol("the connection was abandoned".into()), None))?;
        if conn.advisory_lock_guard(key, acquire, end).await.map_err(plain)? {
            ok(&serde_json::json!({}))
        } else {
            ok(&serde_json::json!({ "acquired": false }))
        }
    }

    /// One request: its `ok` object, or why it failed.
    async fn handle(&self, op: Op) -> Handled {
        let bound = |ms: Option<u64>| ms.map(Duration::from_millis);
        match op {
            Op::Hello { .. } => ok(&HelloOk {
                protocol: PROTOCOL_VERSION,
                pid: Some(std::process::id()),
                library: Some(self.driver.info().crate_name.to_owned()),
                version: Some(self.driver.info().crate_version),
                cancel: true,
                ..HelloOk::default()
            }),
            Op::Ping => ok(&serde_json::json!({})),
            Op::OpenPool {
                pool,
                spec,
                max_size,
                checkout_timeout_ms,
            } => self.open_pool(pool, spec, max_size, checkout_timeout_ms).await,
            Op::ClosePool { pool } => {
                // Its connections still checked out are abandoned first (a
                // call in flight given up, the connection dropped), so that
                // a pool whose close waits for them (sqlx) closes.
                let out: Vec<String> = {
                    let st = self.lock();
                    st.conns
                        .iter()
                        .filter(|(_, (p, _))| *p == pool)
                        .map(|(c, _)| c.clone())
                        .collect()
                };
                for conn in out {
                    let _ = self.abandon(&conn).await;
                }
                let closing = self.lock().pools.remove(&pool);
                if let Some(p) = closing {
                    p.close().await;
                }
                ok(&serde_json::json!({}))
            }
            Op::Checkout {
                pool, conn, timeout_ms, ..
            } => self.checkout(pool, conn, bound(timeout_ms)).await,
            Op::Query { conn, sql, timeout_ms } => self.statement(&conn, Ok((&sql, bound(timeout_ms)))).await,
            Op::Begin { conn } => self.statement(&conn, Err(TxControl::Begin)).await,
            Op::Commit { conn } => self.statement(&conn, Err(TxControl::Commit)).await,
            Op::Rollback { conn } => self.statement(&conn, Err(TxControl::Rollback)).await,
            Op::Return { conn, timeout_ms } => self.give_back(&conn, bound(timeout_ms)).await,
            Op::Cancel { conn } => self.cancel(&conn).await,
            Op::Drop { target } => {
                self.give_up(target).await;
                ok(&serde_json::json!({}))
            }
            Op::Abandon { conn } => self.abandon(&conn).await,
            Op::Guard {
                conn,
                key,
                acquire,
                end,
            } => self.guard(&conn, key, acquire, end).await,
            Op::Library { name, .. } => Err(plain(DriverError::Unsupported(format!(
                "no library call '{name}' in a hosted Rust pool (its libraries run through the column's own steps)"
            )))),
        }
    }
}
