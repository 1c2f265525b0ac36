//! The adapter end of the driver protocol for a Rust driver: `locklab
//! pool-adapter ID` serves the pools of driver `ID` over stdin/stdout, so
//! that a Rust pool can live in a process of its own, as a Python pool does
//! in its adapter, and a `do: crash` step can kill that process with SIGKILL
//! (README, "Faults and races"). The messages are those of [`super::protocol`];
//! every call goes to the driver's own [`Pool`] and [`Conn`] methods, so a
//! hosted column behaves as the in-process one does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::{AbortHandle, Abortable};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};

use super::protocol::PROTOCOL_VERSION;
use crate::{Canceller, Conn, ConnectSpec, Driver, DriverError, GuardEnd, Pool, PoolOptions, Returned, TxControl};

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

/// Why a request failed: the protocol's `error` object.
struct Failure {
    kind: &'static str,
    message: String,
    sqlstate: Option<String>,
}

impl From<DriverError> for Failure {
    fn from(e: DriverError) -> Failure {
        match e {
            DriverError::Db(db) => Failure {
                kind: "db",
                sqlstate: Some(db.sqlstate).filter(|s| !s.is_empty()),
                message: db.message,
            },
            DriverError::Client(m) => Failure {
                kind: "client",
                message: m,
                sqlstate: None,
            },
            DriverError::Unsupported(m) => Failure {
                kind: "unsupported",
                message: m,
                sqlstate: None,
            },
        }
    }
}

fn protocol(message: String) -> Failure {
    Failure {
        kind: "protocol",
        message,
        sqlstate: None,
    }
}

/// Serves `driver`'s pools until stdin ends; then gives up on every call
/// still running (as the harness's end would drop them), closes every pool
/// (5 s each at most) and returns. Requests run concurrently, each in a task
/// of its own; answers are written in the order they finish. A driver call
/// that panics is answered as a `client` error saying so.
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
        let req: Value = match serde_json::from_str(&line) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                host.send(json!({"id": null, "error": {"kind": "protocol", "message": "not a JSON object"}}));
                continue;
            }
        };
        host.start(req);
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

impl Host {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&self, answer: Value) {
        let _ = self.out.send(format!("{answer}\n"));
    }

    /// Runs request `req` in a task of its own, which a `drop` can abort.
    fn start(self: &Arc<Self>, req: Value) {
        let id = req["id"].as_u64().unwrap_or(u64::MAX);
        let op = req["op"].as_str().unwrap_or_default().to_owned();
        let conn = req["conn"].as_str().map(str::to_owned);
        let (abort, registration) = AbortHandle::new_pair();
        let (finished, done) = watch::channel(false);
        {
            let mut st = self.lock();
            st.inflight.insert(id, InFlight { abort, done });
            if let Some(c) = &conn
                && matches!(op.as_str(), "query" | "begin" | "commit" | "rollback" | "guard")
            {
                st.conn_call.insert(c.clone(), id);
            }
        }
        let host = self.clone();
        tokio::spawn(async move {
            let call = std::panic::AssertUnwindSafe(host.handle(&op, &req)).catch_unwind();
            let answer = match Abortable::new(call, registration).await {
                Ok(Err(panic)) => {
                    let why = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic".into());
                    json!({"id": id, "error": {"kind": "client", "message": format!("the driver panicked: {why}")}})
                }
                Ok(Ok(Ok(ok))) => {
                    let elapsed = ok.get("elapsed_ms").cloned();
                    let mut a = json!({"id": id, "ok": ok});
                    if let Some(e) = elapsed {
                        a["elapsed_ms"] = e;
                    }
                    a
                }
                Ok(Ok(Err((f, elapsed)))) => {
                    let mut a = json!({"id": id, "error": {"kind": f.kind, "message": f.message}});
                    if let Some(s) = f.sqlstate {
                        a["error"]["sqlstate"] = json!(s);
                    }
                    if let Some(e) = elapsed {
                        a["elapsed_ms"] = json!(e);
                    }
                    a
                }
                Err(_aborted) => json!({"id": id, "dropped": true}),
            };
            {
                let mut st = host.lock();
                st.inflight.remove(&id);
                if let Some(c) = &conn
                    && st.conn_call.get(c) == Some(&id)
                {
                    st.conn_call.remove(c);
                }
            }
            host.send(answer);
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

    fn conn(&self, req: &Value) -> Result<Shared, Failure> {
        let id = req["conn"].as_str().unwrap_or_default();
        self.lock()
            .conns
            .get(id)
            .map(|(_, c)| c.clone())
            .ok_or_else(|| protocol(format!("no checked-out connection '{id}'")))
    }

    fn pool(&self, req: &Value) -> Result<Arc<dyn Pool>, Failure> {
        let id = req["pool"].as_str().unwrap_or_default();
        self.lock()
            .pools
            .get(id)
            .cloned()
            .ok_or_else(|| protocol(format!("no pool '{id}'")))
    }

    /// `open_pool`: the driver's pool under the request's id.
    async fn open_pool(&self, req: &Value) -> Result<Value, (Failure, Option<f64>)> {
        let plain = |f: Failure| (f, None);
        let spec = ConnectSpec::from_json(&req["spec"]);
        let opts = PoolOptions {
            max_size: req["max_size"]
                .as_u64()
                .and_then(|m| u32::try_from(m).ok())
                .unwrap_or(1),
            checkout_timeout: Duration::from_millis(req["checkout_timeout_ms"].as_u64().unwrap_or(10_000)),
        };
        let pool = self.driver.pool(&spec, opts).await.map_err(|e| plain(e.into()))?;
        let id = req["pool"].as_str().unwrap_or_default().to_owned();
        self.lock().pools.insert(id, Arc::from(pool));
        Ok(json!({}))
    }

    /// `checkout` (within `bound`, if given): a connection under the request's id.
    async fn checkout(&self, req: &Value, bound: Option<Duration>) -> Result<Value, (Failure, Option<f64>)> {
        let plain = |f: Failure| (f, None);
        let pool = self.pool(req).map_err(plain)?;
        let conn = match bound {
            Some(b) => match pool.checkout_within(b).await {
                None => return Ok(json!({"gave_up": true})),
                Some(c) => c,
            },
            None => pool.checkout().await,
        }
        .map_err(|e| plain(e.into()))?;
        let answer = json!({
            "cancel": conn.canceller().is_some(),
            "no_cancel_reason": conn.no_cancel_reason(),
        });
        let id = req["conn"].as_str().unwrap_or_default().to_owned();
        let pool_id = req["pool"].as_str().unwrap_or_default().to_owned();
        self.lock()
            .conns
            .insert(id, (pool_id, Arc::new(tokio::sync::Mutex::new(Some(conn)))));
        Ok(answer)
    }

    /// `query` (within `bound`, if given), `begin`, `commit` or `rollback`
    /// on a checked-out connection, with the time it took (ms).
    async fn statement(&self, op: &str, req: &Value, bound: Option<Duration>) -> Result<Value, (Failure, Option<f64>)> {
        let plain = |f: Failure| (f, None);
        let shared = self.conn(req).map_err(plain)?;
        let mut guard = shared.lock().await;
        let conn = guard
            .as_mut()
            .ok_or_else(|| plain(protocol("the connection was abandoned".into())))?;
        let id = req["conn"].as_str().unwrap_or_default().to_owned();
        if let Some(c) = conn.canceller() {
            self.lock().cancellers.insert(id.clone(), c);
        }
        let t0 = Instant::now();
        let sql = req["sql"].as_str().unwrap_or_default();
        let outcome = match (op, bound) {
            ("query", Some(b)) => conn.simple_query_within(sql, b).await,
            ("query", None) => Some(conn.simple_query(sql).await),
            (action, _) => Some(conn.transaction(tx_control(action)).await),
        };
        let elapsed_ms = conn.last_elapsed().unwrap_or_else(|| t0.elapsed()).as_secs_f64() * 1e3;
        self.lock().cancellers.remove(&id);
        match outcome {
            None => Ok(json!({"gave_up": true, "elapsed_ms": elapsed_ms})),
            Some(Ok(rows)) => Ok(json!({
                "columns": rows.columns, "rows": rows.rows, "notices": rows.notices, "elapsed_ms": elapsed_ms,
            })),
            Some(Err(e)) => Err((e.into(), Some(elapsed_ms))),
        }
    }

    /// `return` (within `bound`, if given): the connection given back.
    async fn give_back(&self, req: &Value, bound: Option<Duration>) -> Result<Value, (Failure, Option<f64>)> {
        let plain = |f: Failure| (f, None);
        let id = req["conn"].as_str().unwrap_or_default();
        let shared = self.conn(req).map_err(plain)?;
        self.lock().conns.remove(id);
        let Some(conn) = shared.lock().await.take() else {
            return Err(plain(protocol(format!("connection '{id}' was abandoned"))));
        };
        let returned = match bound {
            Some(b) => match conn.give_back_within(b).await {
                None => return Ok(json!({"gave_up": true})),
                Some(r) => r,
            },
            None => conn.give_back().await,
        };
        let returned = match returned {
            Returned::ToPool => "to_pool",
            Returned::Closed => "closed",
            Returned::ToPooler => "to_pooler",
        };
        Ok(json!({"returned": returned}))
    }

    /// One request: its `ok` object, or why it failed (with the call's time in ms, for a `query`).
    async fn handle(&self, op: &str, req: &Value) -> Result<Value, (Failure, Option<f64>)> {
        let bound = req["timeout_ms"].as_u64().map(Duration::from_millis);
        let plain = |f: Failure| (f, None);
        match op {
            "hello" => Ok(json!({
                "protocol": PROTOCOL_VERSION,
                "pid": std::process::id(),
                "version": self.driver.info().crate_version,
                "cancel": true,
            })),
            "ping" => Ok(json!({})),
            "open_pool" => self.open_pool(req).await,
            "close_pool" => {
                let id = req["pool"].as_str().unwrap_or_default();
                let pool = {
                    let mut st = self.lock();
                    st.conns.retain(|_, (p, _)| p != id);
                    st.pools.remove(id)
                };
                if let Some(p) = pool {
                    p.close().await;
                }
                Ok(json!({}))
            }
            "checkout" => self.checkout(req, bound).await,
            "query" | "begin" | "commit" | "rollback" => self.statement(op, req, bound).await,
            "return" => self.give_back(req, bound).await,
            "cancel" => {
                let id = req["conn"].as_str().unwrap_or_default();
                let canceller = self.lock().cancellers.remove(id);
                match canceller {
                    Some(c) => c().await.map(|()| json!({})).map_err(|e| plain(e.into())),
                    None => Err(plain(Failure {
                        kind: "unsupported",
                        message: format!("no statement with a cancel key is running on connection '{id}'"),
                        sqlstate: None,
                    })),
                }
            }
            "drop" => {
                if let Some(target) = req["target"].as_u64() {
                    self.give_up(target).await;
                }
                Ok(json!({}))
            }
            "abandon" => {
                // The connection's owner went away mid-call: the call's
                // future and the connection are dropped, as a Rust task
                // that is aborted drops what it holds.
                let id = req["conn"].as_str().unwrap_or_default();
                let call = self.lock().conn_call.get(id).copied();
                if let Some(call) = call {
                    self.give_up(call).await;
                }
                let entry = self.lock().conns.remove(id);
                if let Some((_, shared)) = entry {
                    drop(shared.lock().await.take());
                }
                Ok(json!({}))
            }
            "guard" => {
                let shared = self.conn(req).map_err(plain)?;
                let mut guard = shared.lock().await;
                let conn = guard
                    .as_mut()
                    .ok_or_else(|| plain(protocol("the connection was abandoned".into())))?;
                let end = match req["end"].as_str() {
                    Some("release_now") => GuardEnd::ReleaseNow,
                    Some("drop") => GuardEnd::Drop,
                    _ => GuardEnd::Leak,
                };
                conn.advisory_lock_guard(req["key"].as_i64().unwrap_or_default(), end)
                    .await
                    .map(|()| json!({}))
                    .map_err(|e| plain(e.into()))
            }
            other => Err(plain(protocol(format!("unknown request '{other}'")))),
        }
    }
}

fn tx_control(op: &str) -> TxControl {
    match op {
        "begin" => TxControl::Begin,
        "commit" => TxControl::Commit,
        _ => TxControl::Rollback,
    }
}
