//! The service's jobs against a real PostgreSQL server, started by
//! locklab's lab (a local cluster, removed at the end).

use std::sync::OnceLock;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool};
use lock_crate_service::{Ran, invoice_key, lead, run_invoices};
use pg_advisory_lock::{Wait, XactLock, lock_xact};
use locklab::lab::{BackendChoice, Lab, ServerOptions};
use tokio_postgres::NoTls;

fn lab() -> &'static Lab {
    static LAB: OnceLock<Lab> = OnceLock::new();
    LAB.get_or_init(|| Lab::start(&ServerOptions::new(BackendChoice::Local, 17)).expect("a server"))
}

fn pool(size: usize) -> Pool {
    let config: tokio_postgres::Config = lab().connection_string().parse().expect("a connection string");
    Pool::builder(Manager::from_config(config, NoTls, ManagerConfig::default()))
        .max_size(size)
        .build()
        .expect("a pool")
}

#[test]
fn two_instances_run_the_invoices_once() {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let pool = pool(4);
        let c = pool.get().await.unwrap();
        c.batch_execute("CREATE TABLE IF NOT EXISTS invoices (billed boolean NOT NULL DEFAULT false); INSERT INTO invoices DEFAULT VALUES")
            .await
            .unwrap();
        // The other instance is mid-run: its transaction holds the lock.
        let mut other = pool.get().await.unwrap();
        let tx = other.transaction().await.unwrap();
        let mut tx = tx;
        assert_eq!(lock_xact(&mut tx, invoice_key(), Wait::Try).await.unwrap(), XactLock::Held);
        assert_eq!(run_invoices(&pool).await.unwrap(), Ran::Skipped);
        tx.rollback().await.unwrap();
        assert_eq!(run_invoices(&pool).await.unwrap(), Ran::Done);
        let unbilled: i64 = c.query_one("SELECT count(*) FROM invoices WHERE NOT billed", &[]).await.unwrap().get(0);
        assert_eq!(unbilled, 0);
    });
}

#[test]
fn a_failed_leader_leaves_no_lock_on_the_pool() {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        // A pool of one connection: the next checkout gets the leader's.
        let pool = pool(1);
        let failed = lead(&pool, Duration::from_secs(1), || async { Err("the work failed".into()) }).await;
        assert!(failed.is_err());
        let c = pool.get().await.unwrap();
        let held: i64 = c
            .query_one("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(held, 0, "the pooled connection still holds the leader's lock");
        drop(c);
        assert_eq!(lead(&pool, Duration::from_secs(1), || async { Ok(()) }).await.unwrap(), Ran::Done);
    });
}
