//! Pools that live in another process (another language), behind the same
//! [`Driver`] trait, through locklab's driver protocol (docs/src/protocol.md; messages in [`protocol`]).
//!
//! The columns are declared in `drivers/adapters/adapters.yaml` (an
//! [`AdapterSpec`] each): adding one is an entry there and an adapter
//! program, no Rust. An adapter is started on first use, once per column and
//! server, after its `install` command has run (once per process), and
//! serves every pool of that column for the life of this process; a pool
//! that must live in a process of its own ([`Driver::in_own_process`], for a
//! crash) gets an adapter of its own, ended with it. [`serve`] is the adapter
//! end for a Rust driver (`locklab pool-adapter`).

mod adapter;
mod declarations;
mod host;
pub mod protocol;

pub use adapter::record_to;
use declarations::install;
pub use declarations::{
    AdapterSpec, ColumnKind, PoolerClient, PoolerSpec, Toolchain, add_columns_file, declaration, declarations_file,
    declared, read_declarations, user_column_file, user_columns,
};
pub use host::serve;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use self::adapter::Adapter;
use self::protocol::{CheckoutOk, Op, QueryOk, ReturnOk};
use crate::{
    Canceller, Conn, ConnectSpec, Driver, DriverError, DriverInfo, DriverKind, GuardAcquire, GuardEnd, Pool,
    PoolOptions, Returned, Rows, TxControl,
};

/// How long an adapter may take to answer `hello` (it imports its library), in s.
const HELLO_TIMEOUT_S: u64 = 20;
/// How long `open_pool` and `close_pool` may take (they connect and close
/// up to `max_size` connections), in s; steps have their own deadlines.
const POOL_TIMEOUT_S: u64 = 30;

/// How long `close_pool` may take in an adapter of the pool's own, in s:
/// it is killed afterwards, whatever happened.
const OWN_CLOSE_TIMEOUT_S: u64 = 5;

/// How long an adapter may take to answer `ping` before it is taken for
/// hung and ended, in s.
const PING_TIMEOUT_S: u64 = 3;

pub(crate) fn leak(s: &str) -> &'static str {
    static LEAKED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut all = LEAKED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = all.iter().find(|l| **l == s) {
        return s;
    }
    let l: &'static str = Box::leak(s.to_owned().into_boxed_str());
    all.push(l);
    l
}

/// What an adapter said about itself in `hello`.
#[derive(Clone, Debug, Default)]
struct Described {
    version: Option<String>,
    cancel: bool,
    no_cancel: &'static str,
}

fn described() -> &'static Mutex<HashMap<String, Described>> {
    static D: OnceLock<Mutex<HashMap<String, Described>>> = OnceLock::new();
    D.get_or_init(Default::default)
}

/// An out-of-process column: its adapter serves the pools.
pub struct ExternalDriver {
    spec: AdapterSpec,
    /// Each pool in an adapter started for it alone, which [`Pool::crash`]
    /// kills; otherwise one adapter per column and server serves them all.
    own_process: bool,
    /// The hosted Rust driver's identity ([`ExternalDriver::hosting`]).
    hosted: Option<DriverInfo>,
}

/// The hidden command of the `locklab` binary that serves a Rust driver's
/// pools over the driver protocol ([`serve`]).
pub const HOST_COMMAND: &str = "pool-adapter";

impl ExternalDriver {
    /// The column `spec` declares.
    pub fn new(spec: AdapterSpec) -> ExternalDriver {
        ExternalDriver {
            spec,
            own_process: false,
            hosted: None,
        }
    }

    /// The Rust driver `info` describes, with each pool in a process of its
    /// own: `host pool-adapter ID` ([`HOST_COMMAND`], served by [`serve`]),
    /// which [`Pool::crash`] kills with SIGKILL. The column keeps its
    /// identity, PgBouncer mode included.
    pub fn hosting(info: DriverInfo, host: &Path) -> ExternalDriver {
        ExternalDriver {
            spec: AdapterSpec {
                id: info.id.to_owned(),
                package: info.crate_name.to_owned(),
                version: info.crate_version.clone(),
                configuration: info.configuration.to_owned(),
                install: Vec::new(),
                command: vec![
                    host.to_string_lossy().into_owned(),
                    HOST_COMMAND.to_owned(),
                    info.id.to_owned(),
                ],
                toolchain: None,
                base: None,
                kind: ColumnKind::Adapter,
                pooler: None,
                notices: info.notices == crate::Notices::PassedOn,
                queries_at_connect: None,
            },
            own_process: true,
            hosted: Some(info),
        }
    }

    /// A new adapter, installed first if it needs to be, its `hello` read.
    async fn start_adapter(&self) -> Result<Arc<Adapter>, DriverError> {
        let spec = self.spec.clone();
        let command = tokio::task::spawn_blocking(move || install(&spec))
            .await
            .map_err(|e| DriverError::Client(e.to_string()))?
            .map_err(DriverError::Client)?;
        let a = Adapter::start(&self.spec.id, &command, &self.spec.base_dir()).map_err(DriverError::Client)?;
        let hello = match a.hello(Duration::from_secs(HELLO_TIMEOUT_S)).await {
            Ok(hello) => hello,
            Err(e) => {
                // Of no use: killed and reaped now, not left running (or a
                // zombie) until this process exits.
                a.kill(format!("it did not answer hello: {e}"));
                return Err(e);
            }
        };
        let version = match (hello.version.unwrap_or_default(), hello.details.unwrap_or_default()) {
            (v, _) if v.is_empty() => None,
            (v, d) if d.is_empty() => Some(v),
            (v, d) => Some(format!("{v} ({d})")),
        };
        if self.hosted.is_none() {
            described().lock().unwrap_or_else(|p| p.into_inner()).insert(
                self.spec.id.clone(),
                Described {
                    version,
                    cancel: hello.cancel,
                    no_cancel: leak(hello.no_cancel_reason.as_deref().unwrap_or_default()),
                },
            );
        }
        Ok(a)
    }

    /// The running adapter for `server` (`host:port`), started (and
    /// installed) if there is none or the last one died.
    async fn adapter(&self, server: &str) -> Result<Arc<Adapter>, DriverError> {
        static RUNNING: OnceLock<Mutex<HashMap<String, Arc<Adapter>>>> = OnceLock::new();
        let running = RUNNING.get_or_init(Default::default);
        let key = format!("{} {server}", self.spec.id);
        if let Some(a) = running.lock().unwrap_or_else(|p| p.into_inner()).get(&key)
            && !a.is_dead()
        {
            return Ok(a.clone());
        }
        let a = self.start_adapter().await?;
        let mut map = running.lock().unwrap_or_else(|p| p.into_inner());
        // Two cells may have started one at once: keep the first, end ours.
        if let Some(first) = map.get(&key)
            && !first.is_dead()
        {
            a.kill("a second adapter for the same column and server".into());
            return Ok(first.clone());
        }
        map.insert(key, a.clone());
        Ok(a)
    }
}

#[async_trait::async_trait]
impl Driver for ExternalDriver {
    fn info(&self) -> DriverInfo {
        if let Some(info) = &self.hosted {
            return info.clone();
        }
        let seen = described()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&self.spec.id)
            .and_then(|d| d.version.clone());
        DriverInfo {
            id: leak(&self.spec.id),
            crate_name: leak(&self.spec.package),
            crate_version: seen.unwrap_or_else(|| self.spec.version.clone()),
            configuration: leak(&self.spec.configuration),
            kind: DriverKind::Pooled,
            pooler: None,
            notices: if self.spec.notices {
                crate::Notices::PassedOn
            } else {
                crate::Notices::NotPassedOn(
                    "its columns file says the library does not pass notices on (notices: false)",
                )
            },
        }
    }

    async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
        static POOLS: AtomicU64 = AtomicU64::new(1);
        let adapter = if self.own_process {
            self.start_adapter().await?
        } else {
            self.adapter(&format!("{}:{}", spec.host, spec.port)).await?
        };
        let id = format!("p{}", POOLS.fetch_add(1, Ordering::Relaxed));
        let within = Duration::from_secs(POOL_TIMEOUT_S);
        let request = Op::OpenPool {
            pool: id.clone(),
            spec: spec.clone(),
            max_size: opts.max_size,
            checkout_timeout_ms: opts.checkout_timeout.as_millis() as u64,
        };
        let opened = tokio::time::timeout(within, adapter.call(request))
            .await
            .map_err(|_| adapter.stalled_error("open_pool", within))
            .and_then(|r| r?.ok_value());
        if let Err(e) = opened {
            if self.own_process {
                adapter.kill("its pool could not be opened".into());
            }
            return Err(e);
        }
        Ok(Box::new(ExternalPool {
            adapter,
            id,
            checkout_timeout_ms: opts.checkout_timeout.as_millis() as u64,
            driver: self.spec.id.clone(),
            own_process: self.own_process,
        }))
    }

    fn queries_at_connect(&self) -> Option<&str> {
        self.spec.queries_at_connect.as_deref()
    }

    fn unavailable(&self) -> Option<String> {
        static SEEN: OnceLock<Mutex<HashMap<String, Option<String>>>> = OnceLock::new();
        if self.hosted.is_some() {
            return None;
        }
        let mut seen = SEEN
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        seen.entry(self.spec.id.clone())
            .or_insert_with(|| self.spec.unavailable())
            .clone()
    }

    async fn prepare(&self) -> Option<String> {
        if let Some(why) = self.unavailable() {
            return Some(why);
        }
        if self.hosted.is_some() || self.spec.install.is_empty() {
            return None;
        }
        let spec = self.spec.clone();
        let installed = tokio::task::spawn_blocking(move || install(&spec)).await;
        match installed {
            Ok(Ok(_)) => None,
            Ok(Err(why)) => Some(match &self.spec.toolchain {
                Some(t) => format!(
                    "{why} (it needs `{}`: {}; and the network for its packages)",
                    t.program, t.install
                ),
                None => why,
            }),
            Err(e) => Some(format!("driver '{}': its install did not finish: {e}", self.spec.id)),
        }
    }

    fn in_own_process(&self, _host: &Path) -> Option<Box<dyn Driver>> {
        Some(Box::new(ExternalDriver {
            spec: self.spec.clone(),
            own_process: true,
            hosted: self.hosted.clone(),
        }))
    }
}

/// A pool inside an adapter.
struct ExternalPool {
    adapter: Arc<Adapter>,
    id: String,
    checkout_timeout_ms: u64,
    driver: String,
    /// The adapter serves this pool alone: closing the pool ends it, and
    /// [`Pool::crash`] kills it.
    own_process: bool,
}

impl ExternalPool {
    async fn checkout_bounded(&self, bound: Option<Duration>) -> Result<Option<Box<dyn Conn>>, DriverError> {
        static CONNS: AtomicU64 = AtomicU64::new(1);
        let conn = format!("c{}", CONNS.fetch_add(1, Ordering::Relaxed));
        let request = Op::Checkout {
            pool: self.id.clone(),
            conn: conn.clone(),
            checkout_timeout_ms: self.checkout_timeout_ms,
            timeout_ms: bound.map(|b| b.as_millis() as u64),
        };
        let ok: CheckoutOk = self
            .adapter
            .call(request)
            .await?
            .ok_as(&self.adapter.name, "checkout")?;
        if ok.gave_up {
            return Ok(None);
        }
        let d = described()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&self.driver)
            .cloned()
            .unwrap_or_default();
        // A hosted Rust driver says per connection (sqlx has no cancel API).
        let cancel = ok.cancel.unwrap_or(d.cancel);
        let no_cancel = ok.no_cancel_reason.as_deref().map_or(d.no_cancel, leak);
        Ok(Some(Box::new(ExternalConn {
            adapter: self.adapter.clone(),
            id: conn,
            last_elapsed: None,
            given_back: false,
            cancel,
            no_cancel,
        })))
    }
}

#[async_trait::async_trait]
impl Pool for ExternalPool {
    async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError> {
        self.checkout_bounded(None)
            .await?
            .ok_or_else(|| DriverError::Client("the adapter gave up a checkout that had no bound".into()))
    }

    async fn checkout_within(&self, bound: Duration) -> Option<Result<Box<dyn Conn>, DriverError>> {
        self.checkout_bounded(Some(bound)).await.transpose()
    }

    /// A library call the adapter runs itself (the driver protocol's
    /// `library` request): Rails' migrator on the activerecord column.
    async fn library(
        &self,
        library: crate::libraries::Library,
        call: &crate::libraries::LibraryCall,
    ) -> Result<String, DriverError> {
        let crate::libraries::LibraryCall::Migrate(run) = call else {
            return Err(DriverError::Unsupported(format!(
                "{} has no such call through an adapter",
                library.as_str()
            )));
        };
        let request = Op::Library {
            pool: self.id.clone(),
            name: library.as_str().to_owned(),
            args: serde_json::json!({
                "runners": run.runners,
                "migration_ms": run.migration_ms,
                "kill_first": run.kill_first,
                "give_up_ms": run.give_up_ms,
            }),
        };
        let ok: protocol::LibraryOk = self.adapter.call(request).await?.ok_as(&self.adapter.name, "library")?;
        Ok(ok.text)
    }

    async fn crash(&self) -> Result<(), DriverError> {
        if !self.own_process {
            return Err(DriverError::Unsupported(format!(
                "adapter '{}' serves other pools too: a crash needs a pool in a process of its own",
                self.adapter.name
            )));
        }
        let adapter = self.adapter.clone();
        tokio::task::spawn_blocking(move || adapter.kill("the scenario crashed it (SIGKILL)".into()))
            .await
            .map_err(|e| DriverError::Client(e.to_string()))
    }

    async fn close(&self) {
        if self.own_process && self.adapter.is_dead() {
            return;
        }
        // An adapter whose event loop no longer answers is ended here, so that
        // a hung one does not outlive the cell that found it.
        let ping = Duration::from_secs(PING_TIMEOUT_S);
        if !matches!(tokio::time::timeout(ping, self.adapter.call(Op::Ping)).await, Ok(Ok(_))) {
            self.adapter
                .kill(format!("it did not answer a ping within {} s", PING_TIMEOUT_S));
            return;
        }
        // An adapter of the pool's own is killed after it, within the
        // runner's bound on the close (10 s).
        let within = Duration::from_secs(if self.own_process {
            OWN_CLOSE_TIMEOUT_S
        } else {
            POOL_TIMEOUT_S
        });
        let close = Op::ClosePool { pool: self.id.clone() };
        let closed = tokio::time::timeout(within, self.adapter.call(close)).await;
        if !matches!(closed, Ok(Ok(_))) {
            tracing::warn!(adapter = %self.adapter.name, "close_pool did not finish: {}", self.adapter.stderr_tail());
        }
        if self.own_process {
            let adapter = self.adapter.clone();
            let _ = tokio::task::spawn_blocking(move || adapter.kill("its pool is closed".into())).await;
        }
    }

    fn stalled(&self) -> Option<String> {
        self.adapter.waiting()
    }

    async fn settle(&self, within: Duration) {
        self.adapter.settle(within).await;
    }
}

/// A connection checked out of a pool inside an adapter. Dropped without
/// [`Conn::give_back`] (its owner aborted mid-call), it is `abandon`ed.
struct ExternalConn {
    adapter: Arc<Adapter>,
    id: String,
    last_elapsed: Option<Duration>,
    given_back: bool,
    cancel: bool,
    no_cancel: &'static str,
}

impl ExternalConn {
    /// `query`, `begin`, `commit` or `rollback`: the rows, or `None` when
    /// the call's bound elapsed.
    async fn run(&mut self, request: Op) -> Result<Option<Rows>, DriverError> {
        let op = request.name();
        self.last_elapsed = None;
        let answer = self.adapter.call(request).await?;
        self.last_elapsed = answer.elapsed_ms.map(ms);
        let ok: QueryOk = answer.ok_as(&self.adapter.name, op)?;
        self.last_elapsed = ok.elapsed_ms.map(ms).or(self.last_elapsed);
        Ok((!ok.gave_up).then(|| ok.rows()))
    }
}

fn ms(v: f64) -> Duration {
    Duration::from_secs_f64(v.max(0.0) / 1e3)
}

#[async_trait::async_trait]
impl Conn for ExternalConn {
    async fn simple_query(&mut self, sql: &str) -> Result<Rows, DriverError> {
        let conn = self.id.clone();
        self.run(Op::Query {
            conn,
            sql: sql.to_owned(),
            timeout_ms: None,
        })
        .await?
        .ok_or_else(|| DriverError::Client("the adapter gave up a call that had no bound".into()))
    }

    async fn simple_query_within(&mut self, sql: &str, bound: Duration) -> Option<Result<Rows, DriverError>> {
        let conn = self.id.clone();
        self.run(Op::Query {
            conn,
            sql: sql.to_owned(),
            timeout_ms: Some(bound.as_millis() as u64),
        })
        .await
        .transpose()
    }

    async fn transaction(&mut self, action: TxControl) -> Result<Rows, DriverError> {
        let conn = self.id.clone();
        let request = match action {
            TxControl::Begin => Op::Begin { conn },
            TxControl::Commit => Op::Commit { conn },
            TxControl::Rollback => Op::Rollback { conn },
        };
        self.run(request)
            .await?
            .ok_or_else(|| DriverError::Client("the adapter gave up a call that had no bound".into()))
    }

    fn last_elapsed(&self) -> Option<Duration> {
        self.last_elapsed
    }

    async fn give_back(mut self: Box<Self>) -> Returned {
        self.given_back = true;
        let request = Op::Return {
            conn: self.id.clone(),
            timeout_ms: None,
        };
        let name = self.adapter.name.clone();
        let answer = self.adapter.call(request).await;
        returned(answer.and_then(|a| a.ok_as(&name, "return")))
    }

    async fn give_back_within(mut self: Box<Self>, bound: Duration) -> Option<Returned> {
        self.given_back = true;
        let request = Op::Return {
            conn: self.id.clone(),
            timeout_ms: Some(bound.as_millis() as u64),
        };
        let name = self.adapter.name.clone();
        let ok = self.adapter.call(request).await.and_then(|a| a.ok_as(&name, "return"));
        if let Ok(ReturnOk { gave_up: true, .. }) = &ok {
            return None;
        }
        Some(returned(ok))
    }

    fn canceller(&self) -> Option<Canceller> {
        if !self.cancel {
            return None;
        }
        let (adapter, id) = (self.adapter.clone(), self.id.clone());
        Some(Box::new(move || {
            Box::pin(async move { adapter.call(Op::Cancel { conn: id }).await?.ok_value().map(|_| ()) })
        }))
    }

    fn no_cancel_reason(&self) -> &'static str {
        if self.no_cancel.is_empty() {
            "the adapter offers no cancel"
        } else {
            self.no_cancel
        }
    }

    async fn advisory_lock_guard(
        &mut self,
        key: i64,
        acquire: GuardAcquire,
        end: GuardEnd,
    ) -> Result<bool, DriverError> {
        let request = Op::Guard {
            conn: self.id.clone(),
            key,
            acquire,
            end,
        };
        let ok = self.adapter.call(request).await?.ok_value()?;
        Ok(ok.get("acquired").and_then(serde_json::Value::as_bool).unwrap_or(true))
    }
}

/// How a `return` answer says the connection went back; a failed return
/// counts as closed (the adapter dropped it, or is gone with it).
fn returned(ok: Result<ReturnOk, DriverError>) -> Returned {
    match ok {
        Ok(r) => r.returned.unwrap_or(Returned::Closed),
        Err(e) => {
            tracing::warn!("return through the adapter failed: {e}");
            Returned::Closed
        }
    }
}

impl Drop for ExternalPool {
    fn drop(&mut self) {
        // An adapter of this pool's own ends with it, however the close went
        // (cut short by the runner's bound, or never reached).
        if self.own_process && !self.adapter.is_dead() {
            self.adapter.kill("its pool is gone".into());
        }
    }
}

impl Drop for ExternalConn {
    fn drop(&mut self) {
        if !self.given_back {
            self.adapter.start_tracked(Op::Abandon { conn: self.id.clone() });
        }
    }
}
