//! Makes the guide's pooled-connection leak on purpose, to see what
//! `locklab holders` shows for it: a deadpool-postgres pool (the
//! `deadpool-fast` column: `RecyclingMethod::Fast`) checks out a connection,
//! takes a session-level advisory lock on it, and returns it without
//! unlocking. The pool keeps the connection open and idle, so the lock stays
//! held until this program ends (Ctrl-C).
//!
//! `cargo run -p locklab --example leak -- 'postgresql://user@host/db' [KEY]`
//! (KEY: a bigint, default 4242; application_name `leaky-worker`).

use std::time::Duration;

use locklab_drivers::PoolOptions;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dsn = args.next().ok_or_else(|| anyhow::anyhow!("usage: leak DSN [KEY]"))?;
    let key: i64 = args.next().map_or(Ok(4242), |k| k.parse())?;
    let mut spec = locklab::server::parse_dsn(&dsn)?;
    spec.application_name = "leaky-worker".into();
    tokio::runtime::Runtime::new()?.block_on(async {
        let driver = locklab_drivers::find("deadpool-fast")?;
        let opts = PoolOptions {
            max_size: 2,
            checkout_timeout: Duration::from_secs(5),
        };
        let pool = driver.pool(&spec, opts).await?;
        let mut conn = pool.checkout().await?;
        conn.simple_query(&format!("select pg_advisory_lock({key})")).await?;
        let _ = conn.give_back().await; // returned to the pool, still locked
        eprintln!(
            "leak: session-level lock {key} left on a pooled connection of {}; Ctrl-C to end",
            spec.redacted()
        );
        tokio::signal::ctrl_c().await?;
        pool.close().await;
        anyhow::Ok(())
    })
}
