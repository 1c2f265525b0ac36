//! `locklab::lab`'s helper per Rust pool family, as a user outside locklab
//! calls it: each wraps the user's own constructor, which is called, and
//! the pool it makes runs a scenario's cells through `Suite` with no failed
//! cell. What the scenario reads is the pool's
//! behaviour and is not asserted here (the example projects require it).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use locklab::lab::{
    Bb8Postgres, Deadpool, DieselAsyncDeadpool, Driver, MobcPostgres, R2d2Postgres, Suite, TokioPostgresFactory,
};

/// Runs `session-lock-pool-return` through `driver`: every cell ran.
fn runs(driver: impl Driver + 'static) {
    let id = driver.info().id;
    if let Err(e) = Suite::new(driver).only(&["session-lock-pool-return"]).check() {
        panic!("{id}: {e}");
    }
}

/// A counter the user's constructor bumps, and a closure-friendly handle to it.
fn counter() -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let c = Arc::new(AtomicUsize::new(0));
    (c.clone(), c)
}

#[test]
fn deadpool_builds_the_users_pool_builder() {
    let (calls, seen) = counter();
    runs(Deadpool::configured(
        "own-deadpool-test",
        "RecyclingMethod::Verified",
        move |config| {
            calls.fetch_add(1, Ordering::Relaxed);
            let manager = deadpool_postgres::Manager::from_config(
                config,
                tokio_postgres::NoTls,
                deadpool_postgres::ManagerConfig {
                    recycling_method: deadpool_postgres::RecyclingMethod::Verified,
                },
            );
            deadpool_postgres::Pool::builder(manager)
        },
    ));
    assert!(seen.load(Ordering::Relaxed) > 0, "the user's builder was never called");
}

#[test]
fn bb8_mobc_and_r2d2_take_the_users_builder() {
    let (calls, seen) = counter();
    runs(Bb8Postgres::configured(
        "own-bb8-test",
        "test_on_check_out = false",
        move |b| {
            calls.fetch_add(1, Ordering::Relaxed);
            b.test_on_check_out(false)
        },
    ));
    assert!(
        seen.load(Ordering::Relaxed) > 0,
        "bb8: the user's configuration was never called"
    );

    let (calls, seen) = counter();
    runs(MobcPostgres::configured("own-mobc-test", "max_idle = 1", move |b| {
        calls.fetch_add(1, Ordering::Relaxed);
        b.max_idle(1)
    }));
    assert!(
        seen.load(Ordering::Relaxed) > 0,
        "mobc: the user's configuration was never called"
    );

    let (calls, seen) = counter();
    runs(R2d2Postgres::configured(
        "own-r2d2-test",
        "test_on_check_out(false)",
        move |b| {
            calls.fetch_add(1, Ordering::Relaxed);
            b.test_on_check_out(false)
        },
    ));
    assert!(
        seen.load(Ordering::Relaxed) > 0,
        "r2d2: the user's configuration was never called"
    );
}

#[test]
fn diesel_async_takes_the_users_manager_config() {
    let (calls, seen) = counter();
    runs(DieselAsyncDeadpool::configured(
        "own-diesel-test",
        "RecyclingMethod::Fast",
        move |mut m| {
            calls.fetch_add(1, Ordering::Relaxed);
            m.recycling_method = diesel_async::pooled_connection::RecyclingMethod::Fast;
            m
        },
    ));
    assert!(
        seen.load(Ordering::Relaxed) > 0,
        "the user's ManagerConfig was never asked for"
    );
}

#[test]
fn tokio_postgres_connects_with_the_users_config() {
    let (calls, seen) = counter();
    runs(TokioPostgresFactory::configured(
        "own-factory-test",
        "keepalives_idle 30 s",
        move |config| {
            calls.fetch_add(1, Ordering::Relaxed);
            config.keepalives_idle(std::time::Duration::from_secs(30));
        },
    ));
    // A connection per checkout: called for each of them.
    assert!(
        seen.load(Ordering::Relaxed) >= 2,
        "the user's configuration was not applied per connection"
    );
}
