//! How `locklab holders`' snapshot grows with the number of advisory locks:
//! 100, 1,000 and 10,000 locks spread over 200 connections (and 10,000 with
//! 20 waiters, which make it call `pg_blocking_pids`), against a reference in
//! the same run: a plain query of the same shape (`pg_locks` joined with
//! `pg_stat_activity`, no decoding, no `pg_blocking_pids`, no transaction).
//!
//! `cargo bench -p locklab --bench holders` (or `just bench-holders`); the
//! server is a local cluster of its own, started with room for the locks
//! (`max_connections=300`, `max_locks_per_transaction=128`), removed at the
//! end. `LOCKLAB_PG` picks the major version (default 17); `ROUNDS` the
//! samples per point (default 40). Prints a Markdown table; timings are of
//! this machine at this moment: read the ratio.
//!
//! Also the whole snapshot (connect + query) over TLS with
//! `sslmode=verify-full` (the server's certificate from a CA of the run's
//! own, `tests/support/tls.rs`), as a ratio to the plain join and to the
//! same snapshot without TLS, in the same run: `holders` connects per
//! snapshot (docs/src/operators.md says why), so the handshake is in every
//! scrape.

#[path = "../tests/support/tls.rs"]
mod tls;

use std::time::{Duration, Instant};

use locklab::server::{BackendChoice, Server, ServerOptions};
use locklab_drivers::DirectConn;
use locklab_holders::conninfo::{RootCert, SslMode, Tls};
use locklab_holders::snapshot::{self, Target};
use locklab_holders::tls::Connector;
use tls::TestCa;

const CONNECTIONS: usize = 200;

fn main() {
    let major = std::env::var("LOCKLAB_PG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(17);
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let mut opts = ServerOptions::new(BackendChoice::Local, major);
    opts.settings = vec!["max_connections=300".into(), "max_locks_per_transaction=128".into()];
    let server = Server::start(&opts).unwrap_or_else(|e| {
        eprintln!("bench holders: no server: {e:#}");
        std::process::exit(2)
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let admin = server.admin().await.unwrap();
        admin.client().simple_query("create database bench").await.unwrap();
        let spec = server.spec("bench", "bench-holder");
        let mut conns = Vec::with_capacity(CONNECTIONS);
        for _ in 0..CONNECTIONS {
            conns.push(DirectConn::connect(&spec).await.unwrap());
        }
        let target = Target {
            spec: server.spec("postgres", ""),
            connector: locklab_holders::tls::Connector::plain(),
            databases: Vec::new(),
            timeout: Duration::from_secs(5),
        };
        // The same snapshot over TLS, sslmode=verify-full: the server's
        // certificate names 127.0.0.1 and is signed by a CA of the run's own.
        let ca = TestCa::new("locklab bench CA").unwrap();
        tls::turn_on(&server, &ca, &["127.0.0.1"]).await.unwrap();
        let ca_dir = tempfile::tempdir().unwrap();
        let ca_file = ca_dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let verify_full = Target {
            connector: Connector::new(Tls {
                mode: SslMode::VerifyFull,
                root_cert: Some(RootCert::File(ca_file)),
                client: None,
            })
            .unwrap(),
            ..target.clone()
        };
        let reference = DirectConn::connect(&server.spec("bench", "bench-reference")).await.unwrap();
        println!("{}; {rounds} samples per point; ms, p50 (p95)\n", server.version());
        println!(
            "| advisory locks | holders snapshot (query) | holders (connect + query) | verify-full (connect + query) | plain join | snapshot ÷ plain | verify-full ÷ plain | verify-full ÷ no TLS |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
        let mut held = 0usize;
        let mut waiters = Vec::new();
        for (n, with_waiters) in [(100usize, false), (1_000, false), (10_000, false), (10_000, true)] {
            // Spread the locks: connection i holds keys i, i + 200, i + 400, …
            if held < n {
                let per = n.div_ceil(CONNECTIONS);
                for (i, c) in conns.iter().enumerate() {
                    let keys: Vec<String> = (0..per)
                        .map(|j| (i + j * CONNECTIONS) as i64)
                        .filter(|k| (*k as usize) >= held && (*k as usize) < n)
                        .map(|k| format!("pg_advisory_lock({k})"))
                        .collect();
                    if !keys.is_empty() {
                        c.client().simple_query(&format!("select {}", keys.join(", "))).await.unwrap();
                    }
                }
                held = n;
            }
            if with_waiters && waiters.is_empty() {
                for k in 0..20i64 {
                    let w = DirectConn::connect(&spec).await.unwrap();
                    waiters.push(tokio::spawn(async move {
                        let _ = w.client().simple_query(&format!("select pg_advisory_lock({k})")).await;
                        w
                    }));
                }
                // Observe the server until all 20 wait.
                loop {
                    let r = reference
                        .client()
                        .query_one("select count(*) from pg_locks where locktype = 'advisory' and not granted", &[])
                        .await
                        .unwrap();
                    if r.get::<_, i64>(0) >= 20 {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            }
            let (mut query, mut whole, mut plain, mut tls) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for _ in 0..rounds {
                let t = Instant::now();
                let s = snapshot::take(&target).await.unwrap();
                whole.push(t.elapsed().as_secs_f64() * 1000.0);
                let t = Instant::now();
                let over_tls = snapshot::take(&verify_full).await.unwrap();
                tls.push(t.elapsed().as_secs_f64() * 1000.0);
                assert!(over_tls.locks.len() >= n);
                query.push(s.query_ms);
                assert!(s.locks.len() >= n, "{} locks seen, {n} held", s.locks.len());
                let t = Instant::now();
                reference
                    .client()
                    .query(
                        "select * from pg_locks l left join pg_stat_activity a using (pid) where l.locktype = 'advisory'",
                        &[],
                    )
                    .await
                    .unwrap();
                plain.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            let (q, w, p, v) = (stats(&mut query), stats(&mut whole), stats(&mut plain), stats(&mut tls));
            let label = if with_waiters { format!("{n} + 20 waiters") } else { n.to_string() };
            println!(
                "| {label} | {:.1} ({:.1}) | {:.1} ({:.1}) | {:.1} ({:.1}) | {:.1} ({:.1}) | {:.2} | {:.2} | {:.2} |",
                q.0,
                q.1,
                w.0,
                w.1,
                v.0,
                v.1,
                p.0,
                p.1,
                q.0 / p.0,
                v.0 / p.0,
                v.0 / w.0
            );
        }
        for c in conns {
            c.client().simple_query("select pg_advisory_unlock_all()").await.unwrap();
            c.close().await;
        }
        for w in waiters {
            w.await.unwrap().close().await;
        }
        reference.close().await;
        admin.close().await;
    });
}

/// (p50, p95) of `v` (ms).
fn stats(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}
