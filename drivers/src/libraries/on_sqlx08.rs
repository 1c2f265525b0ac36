//! The lock libraries on a sqlx 0.8 `PgPool` (feature `columns`): what
//! [`super`] describes, calling the crates.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use distributed_lock_core::error::LockError;
use distributed_lock_core::traits::{DistributedLock, LockHandle, LockProvider};
use distributed_lock_postgres::PostgresLockProvider;
use distributed_lock_postgres::handle::PostgresLockHandle;
use sqlx08::postgres::PgPoolOptions;
use sqlx08::{PgPool, Row};

use super::sqlx08_conn::{connect_options, sqlx_error};
use super::{Library, LibraryCall, MigrateRun};
use crate::{ConnectSpec, DriverError, PoolOptions};

/// A held `distributed-lock-postgres` handle.
enum Held {
    Handle(PostgresLockHandle),
}

/// The libraries of a pool: the lock libraries on a sqlx 0.8 pool (the
/// column's own, or one of their own through a pooler; none on a sqlx 0.9
/// column), and the job queues, whose processes make pools of their own
/// for the column's server or pooler (`spec`).
pub struct LibraryPool {
    spec: ConnectSpec,
    on08: Option<Sqlx08Libraries>,
}

/// A sqlx 0.8 pool the lock libraries run on, the handles they hold, and
/// what the migrator needs to make pools of its own.
struct Sqlx08Libraries {
    pool: PgPool,
    spec: ConnectSpec,
    held: Mutex<HashMap<(Library, i64), Held>>,
}

impl LibraryPool {
    /// The libraries on a column's own sqlx 0.8 pool.
    pub fn on(pool: PgPool, spec: &ConnectSpec) -> LibraryPool {
        LibraryPool {
            spec: spec.clone(),
            on08: Some(Sqlx08Libraries::on(pool, spec)),
        }
    }

    /// The libraries through a pooler at `spec`: the lock libraries on a
    /// sqlx 0.8 pool of their own sized by `opts` (it connects lazily), and
    /// the job queues.
    pub fn connecting(spec: &ConnectSpec, opts: PoolOptions) -> Option<LibraryPool> {
        Some(LibraryPool {
            spec: spec.clone(),
            on08: Some(Sqlx08Libraries::connecting(spec, opts)),
        })
    }

    /// Runs `call` through `library` (see [`Sqlx08Libraries::call`], and
    /// `queues/mod.rs` for a job queue's `Queue` call).
    ///
    /// # Errors
    /// [`DriverError::Unsupported`] for a call the library has no API for,
    /// or a lock library on a column without a sqlx 0.8 pool; the server's
    /// or the client's error otherwise.
    pub async fn call(&self, library: Library, call: &LibraryCall) -> Result<String, DriverError> {
        // (Boxed as `Send` here, where the lifetimes are concrete: rustc
        // cannot prove the nested futures `Send` for every lifetime.)
        type Call<'a> = std::pin::Pin<Box<dyn Future<Output = Result<String, DriverError>> + Send + 'a>>;
        match (call, &self.on08) {
            (LibraryCall::Queue(run), _) => {
                let f: Call<'_> = Box::pin(super::queues::run(library, &self.spec, run));
                f.await
            }
            (_, _) if library.is_queue() => Err(DriverError::Unsupported(format!(
                "{} takes a 'queue:' run",
                library.as_str()
            ))),
            (_, Some(l)) => {
                let f: Call<'_> = Box::pin(l.call(library, call));
                f.await
            }
            (_, None) => Err(DriverError::Unsupported(library.not_applicable())),
        }
    }

    /// Drops the lock libraries' handles still held (their connections go
    /// back to the pool) and, for a pool of the libraries' own, closes it.
    pub async fn close(&self, own_pool: bool) {
        if let Some(l) = &self.on08 {
            l.close(own_pool).await;
        }
    }
}

/// prax-sqlx's error: sqlx's, as [`sqlx_error`], or its own.
fn prax_error(e: prax_sqlx::SqlxError) -> DriverError {
    match e {
        prax_sqlx::SqlxError::Sqlx(e) => sqlx_error(e),
        other => DriverError::Client(other.to_string()),
    }
}

fn lock_error(e: LockError) -> DriverError {
    DriverError::Client(e.to_string())
}

impl Sqlx08Libraries {
    fn on(pool: PgPool, spec: &ConnectSpec) -> Sqlx08Libraries {
        Sqlx08Libraries {
            pool,
            spec: spec.clone(),
            held: Mutex::new(HashMap::new()),
        }
    }

    /// On a sqlx 0.8 pool of their own for `spec` (behind a pooler:
    /// `spec` points at it), sized by `opts`; it connects lazily.
    fn connecting(spec: &ConnectSpec, opts: PoolOptions) -> Sqlx08Libraries {
        let pool = PgPoolOptions::new()
            .max_connections(opts.max_size)
            .acquire_timeout(opts.checkout_timeout)
            .connect_lazy_with(connect_options(spec, &spec.application_name));
        Sqlx08Libraries::on(pool, spec)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<(Library, i64), Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one `prax-sqlx` call on the pool, then waits (at most 10 s)
    /// until the connection it took is idle in the pool again: sqlx finishes
    /// a return in a task of its own (a ping first), and the next step must
    /// find the pool as the call left it, as [`crate::Conn::give_back`] does.
    async fn on_pool<T>(&self, call: impl Future<Output = Result<T, DriverError>>) -> Result<T, DriverError> {
        let (idle, size) = (self.pool.num_idle(), self.pool.size());
        let r = call.await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.pool.num_idle() < idle + (self.pool.size() as usize).saturating_sub(size as usize)
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        r
    }

    /// Waits (at most 10 s) until a connection a handle gave back is in
    /// the pool again (idle), or closed: the pool had `idle` idle
    /// connections and `size` in all before.
    async fn returned(&self, idle: usize, size: u32) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.pool.num_idle() <= idle && self.pool.size() >= size && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    async fn provider(&self, library: Library) -> Result<PostgresLockProvider, DriverError> {
        PostgresLockProvider::builder()
            .pool(self.pool.clone())
            .use_transaction(library == Library::DistributedLockPostgresXact)
            .build()
            .await
            .map_err(lock_error)
    }

    /// Runs `call` through `library`. The text says what the library
    /// reported: `acquired`, `not acquired` (a `try_acquire` that found the
    /// lock taken), `timed out` (the library's own bound), `released` (the
    /// library returned without an error: neither library reports an unlock
    /// that returned false), `dropped`; for `migrate`, one word per migrator
    /// and how many times the migration ran (see [`MigrateRun`]).
    ///
    /// # Errors
    /// [`DriverError::Unsupported`] for a call the library has no API for;
    /// the server's or the client's error otherwise.
    async fn call(&self, library: Library, call: &LibraryCall) -> Result<String, DriverError> {
        match (library, call) {
            (Library::SqlxMigrator, LibraryCall::Migrate(run)) => migrate(&self.spec, run).await,
            (Library::SqlxMigrator, _) | (_, LibraryCall::Migrate(_) | LibraryCall::Queue(_)) => Err(
                DriverError::Unsupported(format!("{} has no such call", library.as_str())),
            ),
            (Library::PraxSqlx, LibraryCall::Acquire { key, .. }) => {
                self.on_pool(async {
                    prax_sqlx::postgres::AdvisoryLock::acquire(&self.pool, *key)
                        .await
                        .map_err(prax_error)
                })
                .await?;
                Ok("acquired".into())
            }
            (Library::PraxSqlx, LibraryCall::TryAcquire { key }) => {
                let got = self
                    .on_pool(async {
                        prax_sqlx::postgres::AdvisoryLock::try_acquire(&self.pool, *key)
                            .await
                            .map_err(prax_error)
                    })
                    .await?;
                Ok(if got { "acquired" } else { "not acquired" }.into())
            }
            (Library::PraxSqlx, LibraryCall::Release { key }) => {
                self.on_pool(async {
                    prax_sqlx::postgres::AdvisoryLock::release(&self.pool, *key)
                        .await
                        .map_err(prax_error)
                })
                .await?;
                Ok("released".into())
            }
            (Library::PraxSqlx, LibraryCall::DropHandle { .. }) => {
                Err(DriverError::Unsupported("prax-sqlx has no lock handle".into()))
            }
            (_, LibraryCall::Acquire { key, timeout_ms }) => {
                let lock = self.provider(library).await?.create_lock(&format!("{key:016x}"));
                match lock.acquire(timeout_ms.map(Duration::from_millis)).await {
                    Ok(handle) => {
                        self.held().insert((library, *key), Held::Handle(handle));
                        Ok("acquired".into())
                    }
                    Err(LockError::Timeout(_)) => Ok("timed out".into()),
                    Err(e) => Err(lock_error(e)),
                }
            }
            (_, LibraryCall::TryAcquire { key }) => {
                let lock = self.provider(library).await?.create_lock(&format!("{key:016x}"));
                match lock.try_acquire().await.map_err(lock_error)? {
                    Some(handle) => {
                        self.held().insert((library, *key), Held::Handle(handle));
                        Ok("acquired".into())
                    }
                    None => Ok("not acquired".into()),
                }
            }
            (_, LibraryCall::Release { key }) => {
                let Some(Held::Handle(handle)) = self.held().remove(&(library, *key)) else {
                    return Err(DriverError::Client(format!(
                        "no {} handle for key {key} to release",
                        library.as_str()
                    )));
                };
                let (idle, size) = (self.pool.num_idle(), self.pool.size());
                handle.release().await.map_err(lock_error)?;
                self.returned(idle, size).await;
                Ok("released".into())
            }
            (_, LibraryCall::DropHandle { key }) => {
                let Some(held) = self.held().remove(&(library, *key)) else {
                    return Err(DriverError::Client(format!(
                        "no {} handle for key {key} to drop",
                        library.as_str()
                    )));
                };
                let (idle, size) = (self.pool.num_idle(), self.pool.size());
                drop(held);
                self.returned(idle, size).await;
                Ok("dropped".into())
            }
        }
    }

    async fn close(&self, own_pool: bool) {
        let held: Vec<Held> = self.held().drain().map(|(_, h)| h).collect();
        drop(held);
        if own_pool {
            self.pool.close().await;
        }
    }
}

/// The lock libraries on a sqlx 0.8 column's own pool, and the job queues.
pub(crate) fn on_sqlx08(pool: &PgPool, spec: &ConnectSpec) -> Option<LibraryPool> {
    Some(LibraryPool::on(pool.clone(), spec))
}

/// On a sqlx 0.9 column: the job queues (whose processes make sqlx 0.9
/// pools of their own), no lock library.
pub(crate) fn on_sqlx09(_: &sqlx::PgPool, spec: &ConnectSpec) -> Option<LibraryPool> {
    Some(LibraryPool {
        spec: spec.clone(),
        on08: None,
    })
}

/// The migration every migrator runs: it sleeps `migration_ms`, then makes
/// a table and counts itself in it (so a migration run twice shows).
fn migration(ms: u64) -> sqlx08::migrate::Migration {
    let sql = format!(
        "select pg_sleep({}) /* locklab-migration */; \
         create table if not exists locklab_migration_runs (n int); \
         insert into locklab_migration_runs values (1);",
        ms as f64 / 1000.0
    );
    sqlx08::migrate::Migration::new(
        1,
        Cow::Borrowed("locklab"),
        sqlx08::migrate::MigrationType::Simple,
        Cow::Owned(sql),
        false,
    )
}

/// How one migrator ended.
#[derive(Debug)]
enum Ended {
    Ok,
    GaveUp(u64),
    Killed,
    Failed(String),
}

impl Ended {
    fn word(&self) -> String {
        match self {
            Ended::Ok => "ok".into(),
            Ended::GaveUp(ms) => format!("gave up after {ms} ms"),
            Ended::Killed => "killed".into(),
            Ended::Failed(e) => format!("failed ({e})"),
        }
    }
}

/// The `application_name` of migrator `n`'s connections.
fn migrator_name(n: u32) -> String {
    format!("locklab-migrator-{n}")
}

/// One migrator on a thread and runtime of its own: a process of its own
/// as far as the server and a pooler can tell. `kill` drops its runtime
/// with the migration in flight.
fn spawn_migrator(
    spec: &ConnectSpec,
    n: u32,
    run: &MigrateRun,
    kill: Option<tokio::sync::oneshot::Receiver<()>>,
) -> std::thread::JoinHandle<(Ended, Duration)> {
    // (A short name: `application_name` is cut at 63 bytes, and the run's
    // own name can be long; the run's database tells its migrators apart.)
    let options = connect_options(spec, &migrator_name(n));
    let give_up = Duration::from_millis(run.give_up_ms);
    let ms = run.migration_ms;
    std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => return (Ended::Failed(format!("runtime: {e}")), Duration::ZERO),
        };
        let t0 = Instant::now();
        let ended = rt.block_on(async move {
            let pool = PgPoolOptions::new().max_connections(1).connect_lazy_with(options);
            let migrator = sqlx08::migrate::Migrator {
                migrations: Cow::Owned(vec![migration(ms)]),
                ignore_missing: false,
                locking: true,
                no_tx: false,
            };
            let killed = async {
                match kill {
                    Some(rx) => {
                        let _ = rx.await;
                    }
                    None => std::future::pending().await,
                }
            };
            let ended = tokio::select! {
                r = tokio::time::timeout(give_up, migrator.run(&pool)) => match r {
                    Ok(Ok(())) => Ended::Ok,
                    Ok(Err(e)) => Ended::Failed(short(&e.to_string())),
                    Err(_) => Ended::GaveUp(give_up.as_millis() as u64),
                },
                () = killed => {
                    // The process dies: nothing more is sent; the runtime
                    // is dropped below with the pool and its connections.
                    std::mem::forget(pool);
                    return Ended::Killed;
                }
            };
            if !matches!(ended, Ended::GaveUp(_)) {
                pool.close().await;
            }
            ended
        });
        let took = t0.elapsed();
        // Dropping the runtime drops every task still holding a connection:
        // their sockets close with nothing more sent.
        rt.shutdown_background();
        (ended, took)
    })
}

/// The first line of a message, at most 120 characters.
fn short(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    line.chars().take(120).collect()
}

/// Whether the migrator whose backends carry `application_name` `name`
/// has reached the lock (seen from a connection of `side`): its migration
/// statement runs, or (unless `migrating` is asked for) it waits on a lock.
/// Behind a pooler that does not pass `application_name` on (pgagroal), the
/// answer stays false and the caller's bound applies.
async fn reached_lock(side: &PgPool, name: &str, migrating: bool) -> Result<bool, DriverError> {
    let name = name.replace('\'', "''");
    let waiting = if migrating {
        "false"
    } else {
        "a.wait_event_type = 'Lock'"
    };
    // (Simple query protocol: behind transaction pooling an unnamed
    // prepared statement does not outlive its Sync.)
    let sql = format!(
        "select count(*) from pg_stat_activity a where a.application_name = '{name}' \
         and a.datname = current_database() and ({waiting} or (a.state = 'active' and a.query like 'select pg_sleep(%) /* locklab-migration */%'))"
    );
    let row = sqlx08::raw_sql(&sql).fetch_one(side).await.map_err(sqlx_error)?;
    Ok(row.try_get::<i64, _>(0).map_err(sqlx_error)? > 0)
}

/// Runs `run`: the migrators, then how many times the migration ran and
/// how many advisory locks of the database are still held, e.g. `1: ok, 2:
/// ok, 3: ok; the migration ran 1×; advisory locks left: 0`.
async fn migrate(spec: &ConnectSpec, run: &MigrateRun) -> Result<String, DriverError> {
    let side = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with(connect_options(spec, &format!("{}-observer", spec.application_name)));
    let mut words = Vec::new();
    let mut threads = Vec::new();
    // Each migrator starts once the one before it has reached the lock:
    // it waits on it or runs the migration (seen from the server), or has
    // finished, or 2 s have passed. So their order, and which server
    // connection each statement meets behind a pooler, is the same from
    // run to run. They overlap: the others start while the first migrates.
    for n in 1..=run.runners {
        let kill = (n == 1 && run.kill_first).then(tokio::sync::oneshot::channel);
        let (tx, rx) = match kill {
            Some((tx, rx)) => (Some(tx), Some(rx)),
            None => (None, None),
        };
        let t = spawn_migrator(spec, n, run, rx);
        let name = migrator_name(n);
        let bound = if tx.is_some() {
            Duration::from_millis(run.give_up_ms.max(10_000))
        } else {
            Duration::from_secs(2)
        };
        let deadline = Instant::now() + bound;
        let mut seen = false;
        while Instant::now() < deadline && !t.is_finished() && n < run.runners + u32::from(tx.is_some()) {
            if reached_lock(&side, &name, tx.is_some()).await? {
                seen = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        match tx {
            Some(tx) => {
                let _ = tx.send(());
                let (ended, _) = tokio::task::spawn_blocking(move || t.join())
                    .await
                    .map_err(|e| DriverError::Client(e.to_string()))?
                    .map_err(|_| DriverError::Client("migrator 1 panicked".into()))?;
                let word = match ended {
                    Ended::Killed if seen => "killed mid-migration".to_owned(),
                    Ended::Killed => "killed before its migration ran".to_owned(),
                    other => other.word(),
                };
                words.push(format!("1: {word}"));
            }
            None => threads.push((n, t)),
        }
    }
    for (n, t) in threads {
        let (ended, _) = tokio::task::spawn_blocking(move || t.join())
            .await
            .map_err(|e| DriverError::Client(e.to_string()))?
            .map_err(|_| DriverError::Client(format!("migrator {n} panicked")))?;
        words.push(format!("{n}: {}", ended.word()));
    }
    let applied = match sqlx08::raw_sql("select count(*) from locklab_migration_runs")
        .fetch_one(&side)
        .await
    {
        Ok(row) => row.try_get::<i64, _>(0).map_err(sqlx_error)?,
        Err(sqlx08::Error::Database(db)) if db.code().as_deref() == Some("42P01") => 0,
        Err(e) => return Err(sqlx_error(e)),
    };
    // What the migrators left locked in the database, whoever holds it
    // (behind a pooler: a server connection the pooler keeps).
    let left = sqlx08::raw_sql(
        "select count(*) from pg_locks where locktype = 'advisory' and granted \
         and database = (select oid from pg_database where datname = current_database())",
    )
    .fetch_one(&side)
    .await
    .map_err(sqlx_error)?
    .try_get::<i64, _>(0)
    .map_err(sqlx_error)?;
    side.close().await;
    Ok(format!(
        "{}; the migration ran {applied}×; advisory locks left: {left}",
        words.join(", ")
    ))
}
