//! The `pg-advisory-lock` crate against a real PostgreSQL server: what its
//! docs promise, observed on the server (`pg_locks`), through
//! deadpool-postgres, sqlx 0.9
//! and a plain tokio-postgres client; and the connection types of each of
//! its client features (bb8, mobc, sqlx 0.8, diesel-async) through the
//! same release, drop and dropped-acquire checks. How it behaves through every other
//! pool and each pooler is the matrix's business: its `pg-advisory-lock`
//! columns run the crate's scenarios (docs/src/lock-crate.md).
//!
//! A libtest-mimic harness (`harness = false`), like `readings.rs`, so that
//! under nextest the processes share one server (`common::init_binary`).
//! Each test locks keys of its own in a database this run creates.

mod common;

use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libtest_mimic::Trial;
use locklab_core::ConnectSpec;
use pg_advisory_lock::{Error, Key, Lock, Pooling, SessionLock, Wait, XactLock, lock_xact};
use rand::RngExt as _;
use tokio_postgres::NoTls;

use common::server;

/// The database the tests lock in, created by `main`.
static DATABASE: OnceLock<String> = OnceLock::new();

/// How many trials a race test runs (the matrix's crate cells run 1,000).
const RACE_TRIALS: usize = 200;

fn main() {
    let args = common::init_binary();
    let tests: Vec<(&str, fn() -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>)> = vec![
        ("xact_lock_ends_with_the_transaction", || {
            Box::pin(xact_lock_ends_with_the_transaction())
        }),
        ("xact_lock_busy_leaves_the_transaction_usable", || {
            Box::pin(xact_lock_busy_leaves_the_transaction_usable())
        }),
        ("xact_lock_outside_a_transaction_is_an_error", || {
            Box::pin(xact_lock_outside_a_transaction_is_an_error())
        }),
        ("session_lock_release_and_drop_unlock_before_reuse::deadpool", || {
            Box::pin(session_lock_release_and_drop::<Deadpool>())
        }),
        ("session_lock_release_and_drop_unlock_before_reuse::sqlx", || {
            Box::pin(session_lock_release_and_drop::<Sqlx>())
        }),
        ("session_lock_release_and_drop_unlock_before_reuse::bb8", || {
            Box::pin(session_lock_release_and_drop::<Bb8>())
        }),
        ("session_lock_release_and_drop_unlock_before_reuse::mobc", || {
            Box::pin(session_lock_release_and_drop::<Mobc>())
        }),
        ("session_lock_release_and_drop_unlock_before_reuse::sqlx-0.8", || {
            Box::pin(session_lock_release_and_drop::<Sqlx08>())
        }),
        (
            "session_lock_release_and_drop_unlock_before_reuse::diesel-async",
            || Box::pin(session_lock_release_and_drop::<Diesel>()),
        ),
        ("dropped_acquire_leaves_no_waiter_and_no_lock::bb8", || {
            Box::pin(dropped_acquire::<Bb8>())
        }),
        ("dropped_acquire_leaves_no_waiter_and_no_lock::mobc", || {
            Box::pin(dropped_acquire::<Mobc>())
        }),
        ("dropped_acquire_leaves_no_waiter_and_no_lock::sqlx-0.8", || {
            Box::pin(dropped_acquire::<Sqlx08>())
        }),
        ("dropped_acquire_leaves_no_waiter_and_no_lock::diesel-async", || {
            Box::pin(dropped_acquire::<Diesel>())
        }),
        ("xact_lock_in_each_clients_transaction", || {
            Box::pin(xact_lock_in_each_clients_transaction())
        }),
        ("session_lock_released_when_its_task_panics::deadpool", || {
            Box::pin(session_lock_released_on_panic::<Deadpool>())
        }),
        ("session_lock_released_when_its_task_panics::sqlx", || {
            Box::pin(session_lock_released_on_panic::<Sqlx>())
        }),
        ("dropped_acquire_leaves_no_waiter_and_no_lock::deadpool", || {
            Box::pin(dropped_acquire::<Deadpool>())
        }),
        ("dropped_acquire_leaves_no_waiter_and_no_lock::sqlx", || {
            Box::pin(dropped_acquire::<Sqlx>())
        }),
        ("lock_timeout_race_busy_means_not_held::deadpool", || {
            Box::pin(lock_timeout_race::<Deadpool>())
        }),
        ("lock_timeout_race_busy_means_not_held::sqlx", || {
            Box::pin(lock_timeout_race::<Sqlx>())
        }),
        ("cancel_race_error_means_not_held", || {
            Box::pin(cancel_race_error_means_not_held())
        }),
        ("statement_timeout_race_error_means_not_held", || {
            Box::pin(statement_timeout_race_error_means_not_held())
        }),
        ("release_ends_every_hold_of_the_key", || {
            Box::pin(release_ends_every_hold_of_the_key())
        }),
        ("session_lock_behind_transaction_pooling_is_refused", || {
            Box::pin(session_lock_behind_transaction_pooling_is_refused())
        }),
        ("lost_connection_is_said_so", || Box::pin(lost_connection_is_said_so())),
        ("keys_lock_what_pg_locks_says", || {
            Box::pin(keys_lock_what_pg_locks_says())
        }),
    ];
    let trials: Vec<Trial> = tests
        .into_iter()
        .map(|(name, f)| {
            common::trial(name, move || {
                ensure_database();
                common::block_on_multi(f())
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    if let Some(db) = DATABASE.get() {
        common::block_on(async {
            if let Ok(admin) = server().admin().await {
                let _ = admin
                    .client()
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
                    .await;
            }
        });
    }
    conclusion.exit();
}

/// Creates this run's database once.
fn ensure_database() {
    DATABASE.get_or_init(|| {
        let name = format!("lock_crate_{}", locklab::server::unique_token().replace('-', "_"));
        common::block_on(async {
            let admin = server().admin().await.expect("the admin connection");
            admin
                .client()
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .expect("CREATE DATABASE");
        });
        name
    });
}

fn spec(app: &str) -> ConnectSpec {
    server().spec(DATABASE.get().expect("the database"), app)
}

/// A tokio-postgres client of its own, its connection task spawned.
async fn client(app: &str) -> tokio_postgres::Client {
    let (client, conn) = spec(app).tokio_postgres_config().connect(NoTls).await.expect("connect");
    tokio::spawn(conn);
    client
}

/// A key of this test's own (tests run at once, in one database).
fn key() -> Key {
    Key::new(rand::rng().random_range(1_000_000..i64::MAX))
}

/// How many backends hold `key`, and how many wait for it, as `pg_locks` says.
async fn on_server(observer: &tokio_postgres::Client, key: Key) -> (i64, i64) {
    let (classid, objid, objsubid) = key.pg_locks_tag();
    let row = observer
        .query_one(
            "SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted) FROM pg_locks \
             WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = $3",
            &[&i64::from(classid), &i64::from(objid), &i16::from(objsubid)],
        )
        .await
        .expect("pg_locks");
    (row.get(0), row.get(1))
}

/// Observes the server until `want` holds of (holders, waiters), at most
/// `within`; panics with the last reading otherwise.
async fn until(
    observer: &tokio_postgres::Client,
    key: Key,
    within: Duration,
    what: &str,
    want: impl Fn((i64, i64)) -> bool,
) {
    let began = Instant::now();
    loop {
        let seen = on_server(observer, key).await;
        if want(seen) {
            return;
        }
        assert!(
            began.elapsed() < within,
            "{what}: not within {within:?}; (holders, waiters) = {seen:?}"
        );
        tokio::task::yield_now().await;
    }
}

/// A pool of one connection, as each client family hands them out.
trait OnePool: Sized + Send + Sync + 'static {
    type Conn: pg_advisory_lock::Session + 'static;
    fn open() -> impl Future<Output = Self> + Send;
    fn checkout(&self) -> impl Future<Output = Self::Conn> + Send;
}

struct Deadpool(deadpool_postgres::Pool);

impl OnePool for Deadpool {
    type Conn = deadpool_postgres::Object;

    async fn open() -> Self {
        let manager = deadpool_postgres::Manager::from_config(
            spec("lock-crate-deadpool").tokio_postgres_config(),
            NoTls,
            deadpool_postgres::ManagerConfig::default(),
        );
        Deadpool(
            deadpool_postgres::Pool::builder(manager)
                .max_size(1)
                .build()
                .expect("pool"),
        )
    }

    async fn checkout(&self) -> Self::Conn {
        self.0.get().await.expect("checkout")
    }
}

struct Sqlx(sqlx::PgPool);

impl OnePool for Sqlx {
    type Conn = sqlx::pool::PoolConnection<sqlx::Postgres>;

    async fn open() -> Self {
        let s = spec("lock-crate-sqlx");
        let mut options = sqlx::postgres::PgConnectOptions::new()
            .host(&s.host)
            .port(s.port)
            .username(&s.user)
            .database(&s.dbname);
        if let Some(p) = &s.password {
            options = options.password(p);
        }
        Sqlx(
            sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect_with(options)
                .await
                .expect("pool"),
        )
    }

    async fn checkout(&self) -> Self::Conn {
        self.0.acquire().await.expect("checkout")
    }
}

struct Bb8(bb8::Pool<bb8_postgres::PostgresConnectionManager<NoTls>>);

impl OnePool for Bb8 {
    type Conn = bb8::PooledConnection<'static, bb8_postgres::PostgresConnectionManager<NoTls>>;

    async fn open() -> Self {
        let manager =
            bb8_postgres::PostgresConnectionManager::new(spec("lock-crate-bb8").tokio_postgres_config(), NoTls);
        Bb8(bb8::Pool::builder().max_size(1).build(manager).await.expect("pool"))
    }

    async fn checkout(&self) -> Self::Conn {
        self.0.get_owned().await.expect("checkout")
    }
}

struct Mobc(mobc::Pool<mobc_postgres::PgConnectionManager<NoTls>>);

impl OnePool for Mobc {
    type Conn = mobc::Connection<mobc_postgres::PgConnectionManager<NoTls>>;

    async fn open() -> Self {
        let manager = mobc_postgres::PgConnectionManager::new(spec("lock-crate-mobc").tokio_postgres_config(), NoTls);
        Mobc(mobc::Pool::builder().max_open(1).build(manager))
    }

    async fn checkout(&self) -> Self::Conn {
        self.0.get().await.expect("checkout")
    }
}

struct Sqlx08(sqlx08::PgPool);

impl OnePool for Sqlx08 {
    type Conn = sqlx08::pool::PoolConnection<sqlx08::Postgres>;

    async fn open() -> Self {
        let s = spec("lock-crate-sqlx08");
        let mut options = sqlx08::postgres::PgConnectOptions::new()
            .host(&s.host)
            .port(s.port)
            .username(&s.user)
            .database(&s.dbname);
        if let Some(p) = &s.password {
            options = options.password(p);
        }
        Sqlx08(
            sqlx08::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect_with(options)
                .await
                .expect("pool"),
        )
    }

    async fn checkout(&self) -> Self::Conn {
        self.0.acquire().await.expect("checkout")
    }
}

type DieselPool = diesel_async::pooled_connection::deadpool::Pool<diesel_async::AsyncPgConnection>;

struct Diesel(DieselPool);

impl OnePool for Diesel {
    type Conn = diesel_async::pooled_connection::deadpool::Object<diesel_async::AsyncPgConnection>;

    async fn open() -> Self {
        use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
        use futures::FutureExt as _;
        let config = spec("lock-crate-diesel").tokio_postgres_config();
        let mut manager_config = ManagerConfig::<diesel_async::AsyncPgConnection>::default();
        manager_config.custom_setup = Box::new(move |_url| {
            let config = config.clone();
            async move {
                let (client, connection) = config
                    .connect(NoTls)
                    .await
                    .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
                diesel_async::AsyncPgConnection::try_from_client_and_connection(client, connection).await
            }
            .boxed()
        });
        let manager =
            AsyncDieselConnectionManager::<diesel_async::AsyncPgConnection>::new_with_config("", manager_config);
        Diesel(
            DieselPool::builder(manager)
                .max_size(1)
                .runtime(deadpool::Runtime::Tokio1)
                .build()
                .expect("pool"),
        )
    }

    async fn checkout(&self) -> Self::Conn {
        self.0.get().await.expect("checkout")
    }
}

/// `lock_xact` in each client's own transaction type (tokio-postgres' and
/// deadpool's `Transaction`, sqlx's `Transaction` of both lines, and a
/// diesel-async connection inside `BEGIN`): held, busy for another session,
/// gone at the end of the transaction.
async fn xact_lock_in_each_clients_transaction() {
    let observer = client("observer").await;
    let other = |k: Key| async move {
        let mut c = client("other").await;
        let mut tx = c.transaction().await.unwrap();
        let r = lock_xact(&mut tx, k, Wait::Try).await.unwrap();
        tx.rollback().await.unwrap();
        r
    };
    let k = key();
    let pool = Sqlx::open().await;
    let mut tx = pool.0.begin().await.unwrap();
    assert_eq!(lock_xact(&mut tx, k, Wait::Try).await.unwrap(), XactLock::Held);
    assert_eq!(other(k).await, XactLock::Busy, "sqlx");
    tx.commit().await.unwrap();
    assert_eq!(on_server(&observer, k).await, (0, 0), "sqlx: ended at COMMIT");
    let pool = Sqlx08::open().await;
    let mut tx = pool.0.begin().await.unwrap();
    assert_eq!(lock_xact(&mut tx, k, Wait::Try).await.unwrap(), XactLock::Held);
    assert_eq!(other(k).await, XactLock::Busy, "sqlx 0.8");
    tx.rollback().await.unwrap();
    assert_eq!(on_server(&observer, k).await, (0, 0), "sqlx 0.8: ended at ROLLBACK");
    let pool = Diesel::open().await;
    let mut conn = pool.checkout().await;
    pg_advisory_lock::Session::execute(&mut *conn, "BEGIN").await.unwrap();
    assert_eq!(
        lock_xact(&mut *conn, k, Wait::Within(Duration::from_millis(100)))
            .await
            .unwrap(),
        XactLock::Held
    );
    assert_eq!(other(k).await, XactLock::Busy, "diesel-async");
    pg_advisory_lock::Session::execute(&mut *conn, "COMMIT").await.unwrap();
    assert_eq!(on_server(&observer, k).await, (0, 0), "diesel-async: ended at COMMIT");
}

async fn held<C: pg_advisory_lock::Session + 'static>(conn: C, key: Key, wait: Wait) -> SessionLock<C> {
    match SessionLock::acquire(conn, key, wait).await.expect("acquire") {
        Lock::Held(g) => g,
        Lock::Busy(_) => panic!("busy: the key is this test's own"),
    }
}

async fn xact_lock_ends_with_the_transaction() {
    let observer = client("observer").await;
    let mut c = client("writer").await;
    let other = client("other").await;
    let k = key();
    let mut tx = c.transaction().await.unwrap();
    assert_eq!(
        lock_xact(&mut tx, k, Wait::Within(Duration::from_secs(5)))
            .await
            .unwrap(),
        XactLock::Held
    );
    assert_eq!(on_server(&observer, k).await, (1, 0));
    let mut other = other;
    let mut otx = other.transaction().await.unwrap();
    assert_eq!(lock_xact(&mut otx, k, Wait::Try).await.unwrap(), XactLock::Busy);
    otx.rollback().await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(on_server(&observer, k).await, (0, 0), "the lock ends at COMMIT");
    // And at ROLLBACK.
    let mut tx = c.transaction().await.unwrap();
    assert_eq!(lock_xact(&mut tx, k, Wait::Try).await.unwrap(), XactLock::Held);
    tx.rollback().await.unwrap();
    assert_eq!(on_server(&observer, k).await, (0, 0), "the lock ends at ROLLBACK");
}

async fn xact_lock_busy_leaves_the_transaction_usable() {
    let observer = client("observer").await;
    let holder = client("holder").await;
    let k = key();
    holder
        .batch_execute(&format!("SELECT pg_advisory_lock({})", lock_arg(k)))
        .await
        .unwrap();
    let pool = Deadpool::open().await;
    let mut conn = pool.checkout().await;
    conn.batch_execute("SET lock_timeout = '7s'").await.unwrap();
    let mut tx = conn.transaction().await.unwrap();
    tx.batch_execute("CREATE TEMP TABLE written (n int); INSERT INTO written VALUES (1)")
        .await
        .unwrap();
    let began = Instant::now();
    let bound = Duration::from_millis(150);
    assert_eq!(
        lock_xact(&mut tx, k, Wait::Within(bound)).await.unwrap(),
        XactLock::Busy
    );
    let waited = began.elapsed();
    assert!(waited >= bound, "busy after {waited:?}, before the bound of {bound:?}");
    assert!(waited < Duration::from_secs(5), "busy only after {waited:?}");
    // The transaction goes on, with its writes and the caller's lock_timeout.
    let row = tx
        .query_one("SELECT count(*), current_setting('lock_timeout') FROM written", &[])
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, String>(1)), (1, "7s".to_owned()));
    tx.commit().await.unwrap();
    assert_eq!(on_server(&observer, k).await, (1, 0), "only the holder holds it");
}

async fn xact_lock_outside_a_transaction_is_an_error() {
    let mut c = client("autocommit").await;
    let k = key();
    match lock_xact(&mut c, k, Wait::Try).await {
        Err(e @ Error::NotInTransaction { .. }) => {
            assert!(e.to_string().contains("needs a transaction block"), "{e}")
        }
        other => panic!("expected NotInTransaction, got {other:?}"),
    }
}

/// `release` frees the key and hands the connection back; a dropped guard
/// frees it before its pool can hand the connection out again (a pool of
/// one: the next checkout waits for the clean-up task to give it back).
async fn session_lock_release_and_drop<P: OnePool>() {
    let observer = client("observer").await;
    let pool = P::open().await;
    let k = key();
    let guard = held(pool.checkout().await, k, Wait::Within(Duration::from_secs(5))).await;
    assert_eq!(on_server(&observer, k).await, (1, 0));
    let other = client("other").await;
    assert!(matches!(
        SessionLock::acquire(other, k, Wait::Try).await.unwrap(),
        Lock::Busy(_)
    ));
    let conn = guard.release().await.expect("release");
    assert_eq!(on_server(&observer, k).await, (0, 0), "released");
    drop(conn);
    let guard = held(pool.checkout().await, k, Wait::Try).await;
    drop(guard);
    let _next = pool.checkout().await;
    assert_eq!(
        on_server(&observer, k).await,
        (0, 0),
        "unlocked before the pool handed the connection out again"
    );
}

async fn session_lock_released_on_panic<P: OnePool>() {
    let observer = client("observer").await;
    let pool = std::sync::Arc::new(P::open().await);
    let k = key();
    let p = pool.clone();
    let task = tokio::spawn(async move {
        let _guard = held(p.checkout().await, k, Wait::Try).await;
        panic!("the work under the lock failed");
    });
    assert!(task.await.unwrap_err().is_panic());
    let _next = pool.checkout().await;
    assert_eq!(on_server(&observer, k).await, (0, 0));
}

/// The acquire future dropped while it waits: the crate sends no cancel
/// request, so the waiter goes at the wait's bound, and nothing is left
/// holding the key once the holder lets go, also on the pool's next checkout.
async fn dropped_acquire<P: OnePool>() {
    let observer = client("observer").await;
    let holder = client("holder").await;
    let k = key();
    holder
        .batch_execute(&format!("SELECT pg_advisory_lock({})", lock_arg(k)))
        .await
        .unwrap();
    let pool = P::open().await;
    let bound = Duration::from_millis(500);
    let conn = pool.checkout().await;
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        SessionLock::acquire(conn, k, Wait::Within(bound)),
    )
    .await;
    assert!(gave_up.is_err(), "the acquire should still wait");
    until(
        &observer,
        k,
        bound + Duration::from_secs(5),
        "the waiter gone",
        |(_, w)| w == 0,
    )
    .await;
    holder
        .batch_execute(&format!("SELECT pg_advisory_unlock({})", lock_arg(k)))
        .await
        .unwrap();
    let _next = pool.checkout().await;
    assert_eq!(on_server(&observer, k).await, (0, 0), "no ghost lock");
}

fn lock_arg(k: Key) -> String {
    match k {
        Key::Single(n) => n.to_string(),
        Key::Pair(a, b) => format!("{a}, {b}"),
    }
}

/// The bound (10 ms) races the holder's release (5–15 ms after it starts):
/// `Busy` must mean the waiter holds nothing, also when the server granted
/// the lock as the timeout fired. Counts each outcome; 0 violations.
async fn lock_timeout_race<P: OnePool>() {
    let observer = client("observer").await;
    let holder = client("holder").await;
    let pool = P::open().await;
    let k = key();
    let (mut held_n, mut busy_n) = (0, 0);
    for _ in 0..RACE_TRIALS {
        holder
            .batch_execute(&format!("SELECT pg_advisory_lock({})", lock_arg(k)))
            .await
            .unwrap();
        let release_ms: u64 = rand::rng().random_range(5..=15);
        let release_sql = format!(
            "SELECT pg_sleep({release_ms} / 1000.0), pg_advisory_unlock({})",
            lock_arg(k)
        );
        let release = holder.batch_execute(&release_sql);
        let conn = pool.checkout().await;
        let (outcome, released) = tokio::join!(
            SessionLock::acquire(conn, k, Wait::Within(Duration::from_millis(10))),
            release
        );
        released.unwrap();
        match outcome.expect("no error but busy in this race") {
            Lock::Held(g) => {
                held_n += 1;
                drop(g.release().await.unwrap());
            }
            Lock::Busy(conn) => {
                busy_n += 1;
                drop(conn);
                assert_eq!(on_server(&observer, k).await, (0, 0), "busy, and yet held");
            }
        }
    }
    eprintln!("lock_timeout race: {held_n} held, {busy_n} busy, 0 busy-and-held in {RACE_TRIALS}");
}

/// A cancel request races the grant: an error must mean not held.
async fn cancel_race_error_means_not_held() {
    let observer = client("observer").await;
    let holder = client("holder").await;
    let k = key();
    let (mut held_n, mut failed_n) = (0, 0);
    for _ in 0..RACE_TRIALS {
        let waiter = client("waiter").await;
        holder
            .batch_execute(&format!("SELECT pg_advisory_lock({})", lock_arg(k)))
            .await
            .unwrap();
        let token = waiter.cancel_token();
        let at_ms: u64 = rand::rng().random_range(5..=15);
        let release_sql = format!("SELECT pg_sleep(0.01), pg_advisory_unlock({})", lock_arg(k));
        let release = holder.batch_execute(&release_sql);
        let cancel = async {
            tokio::time::sleep(Duration::from_millis(at_ms)).await;
            let _ = token.cancel_query(NoTls).await;
        };
        let (outcome, released, ()) = tokio::join!(
            SessionLock::acquire(waiter, k, Wait::Within(Duration::from_secs(5))),
            release,
            cancel
        );
        released.unwrap();
        match outcome {
            Ok(Lock::Held(g)) => {
                held_n += 1;
                drop(g.release().await.unwrap());
            }
            Ok(Lock::Busy(_)) => panic!("busy within a 5 s bound"),
            Err(Error::Failed { source, .. }) => {
                failed_n += 1;
                assert_eq!(source.sqlstate.as_deref(), Some("57014"), "{source}");
                assert_eq!(on_server(&observer, k).await, (0, 0), "an error, and yet held");
            }
            Err(e) => panic!("{e}"),
        }
    }
    eprintln!("cancel race: {held_n} held, {failed_n} failed (57014), 0 failed-and-held in {RACE_TRIALS}");
}

/// `statement_timeout` (10 ms, the connection's) races the release.
async fn statement_timeout_race_error_means_not_held() {
    let observer = client("observer").await;
    let holder = client("holder").await;
    let k = key();
    let (mut held_n, mut failed_n) = (0, 0);
    // A pool of one connection whose session has the bound.
    let pool = Deadpool::open().await;
    pool.checkout()
        .await
        .batch_execute("SET statement_timeout = '10ms'")
        .await
        .unwrap();
    for _ in 0..RACE_TRIALS {
        holder
            .batch_execute(&format!("SELECT pg_advisory_lock({})", lock_arg(k)))
            .await
            .unwrap();
        let release_ms: u64 = rand::rng().random_range(5..=15);
        let release_sql = format!(
            "SELECT pg_sleep({release_ms} / 1000.0), pg_advisory_unlock({})",
            lock_arg(k)
        );
        let release = holder.batch_execute(&release_sql);
        let (outcome, released) = tokio::join!(
            async { SessionLock::acquire(pool.checkout().await, k, Wait::Within(Duration::from_secs(5))).await },
            release
        );
        released.unwrap();
        match outcome {
            Ok(Lock::Held(g)) => {
                held_n += 1;
                let _ = g.release().await.unwrap();
            }
            Ok(Lock::Busy(_)) => panic!("busy within a 5 s bound"),
            Err(Error::Failed { source, .. }) => {
                failed_n += 1;
                assert_eq!(source.sqlstate.as_deref(), Some("57014"), "{source}");
                assert_eq!(on_server(&observer, k).await, (0, 0), "an error, and yet held");
            }
            Err(e) => panic!("{e}"),
        }
    }
    eprintln!("statement_timeout race: {held_n} held, {failed_n} failed (57014), 0 failed-and-held in {RACE_TRIALS}");
}

/// A pooled connection that an earlier user left holding the key twice
/// (re-entrant): the guard takes it at once, and its release ends every hold.
async fn release_ends_every_hold_of_the_key() {
    let observer = client("observer").await;
    let c = client("leaky").await;
    let k = key();
    c.batch_execute(&format!(
        "SELECT pg_advisory_lock({0}), pg_advisory_lock({0})",
        lock_arg(k)
    ))
    .await
    .unwrap();
    let g = held(c, k, Wait::Try).await;
    let c = g.release().await.unwrap();
    assert_eq!(on_server(&observer, k).await, (0, 0));
    drop(c);
}

async fn session_lock_behind_transaction_pooling_is_refused() {
    let c = client("pooled").await;
    let k = key();
    match SessionLock::acquire_with(c, k, Wait::Try, Pooling::Transaction).await {
        Err(e @ Error::TransactionPooling { .. }) => {
            assert!(e.to_string().contains("take a transaction-level lock"), "{e}")
        }
        Ok(_) => panic!("a session-level lock behind transaction pooling was taken"),
        Err(e) => panic!("{e}"),
    }
}

/// The waiter's backend is terminated while it waits: the error says the
/// connection (and with it the lock) is gone.
async fn lost_connection_is_said_so() {
    let observer = client("observer").await;
    let holder = client("holder").await;
    let k = key();
    holder
        .batch_execute(&format!("SELECT pg_advisory_lock({})", lock_arg(k)))
        .await
        .unwrap();
    let waiter = client("lost-waiter").await;
    let acquire = SessionLock::acquire(waiter, k, Wait::Within(Duration::from_secs(10)));
    let kill = async {
        until(&observer, k, Duration::from_secs(5), "the waiter queued", |(_, w)| {
            w == 1
        })
        .await;
        observer
            .batch_execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'lost-waiter'",
            )
            .await
            .unwrap();
    };
    let (outcome, ()) = tokio::join!(acquire, kill);
    match outcome {
        Err(e @ Error::ConnectionLost { .. }) => assert!(e.to_string().contains("connection is lost"), "{e}"),
        Err(e) => panic!("expected ConnectionLost, got {e}"),
        Ok(_) => panic!("expected ConnectionLost, got a lock"),
    }
    holder
        .batch_execute(&format!("SELECT pg_advisory_unlock({})", lock_arg(k)))
        .await
        .unwrap();
}

async fn keys_lock_what_pg_locks_says() {
    let observer = client("observer").await;
    let n: i32 = rand::rng().random_range(1_000_000..i32::MAX);
    for k in [
        Key::pair(n, -7),
        Key::named("lock-crate-tests", &n.to_string()).unwrap(),
        Key::new(-(n as i64)),
    ] {
        let g = held(client("keys").await, k, Wait::Try).await;
        assert_eq!(on_server(&observer, k).await, (1, 0), "{k:?}");
        drop(g.release().await.unwrap());
        assert_eq!(on_server(&observer, k).await, (0, 0), "{k:?}");
    }
    // The two key spaces do not overlap.
    let a = held(client("keys").await, Key::new(i64::from(n)), Wait::Try).await;
    let b = held(client("keys").await, Key::pair(0, n), Wait::Try).await;
    drop((a.release().await.unwrap(), b.release().await.unwrap()));
}
