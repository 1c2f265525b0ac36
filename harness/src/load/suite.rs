//! The load report's runs (`locklab load-report`, `just load`): the
//! headline (xact-wait, 1 and 8 workers, 1,000 keys, each driver next to
//! pgbench), every pattern once (8 workers, 10 keys; the wrong one on 1 key
//! with 1 ms of work in each section), and the contention
//! curves (1…64 workers × 1 / 10 / 1,000 keys), all on one server of their
//! own, pgbench run right after the drivers of each point.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::{Client, LoadResult, LoadSpec, Pattern};
use crate::server::Server;

/// The drivers of the load report, in its order (pgbench comes last).
pub const DRIVERS: [&str; 4] = ["tokio-postgres", "deadpool-fast", "bb8", "sqlx"];
/// The workers of the curves.
pub const CURVE_WORKERS: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];
/// The key counts of the curves.
pub const CURVE_KEYS: [u32; 3] = [1, 10, 1000];

/// Everything the load report shows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadReport {
    /// The server's `version()` and where it ran.
    pub server: String,
    /// When the runs ended (UTC, RFC 3339).
    pub written_at: String,
    /// The commit the harness was built from (`git rev-parse --short HEAD`), if known.
    pub commit: Option<String>,
    /// The headline: xact-wait at 1 and 8 workers, 1,000 keys.
    pub headline: Vec<LoadResult>,
    /// Each pattern at 8 workers and 10 keys.
    pub patterns: Vec<LoadResult>,
    /// The contention curves' points.
    pub curves: Vec<LoadResult>,
}

/// How long each kind of run lasts, s.
#[derive(Clone, Copy, Debug)]
pub struct Durations {
    /// A headline run.
    pub headline: u32,
    /// A pattern run.
    pub pattern: u32,
    /// A point of a curve.
    pub curve: u32,
}

impl Durations {
    /// How many runs the suite makes, and how many seconds they last in all
    /// (not counting start-up and the checks).
    pub fn plan(&self) -> (usize, u64) {
        let headline = 2 * (DRIVERS.len() + 2);
        let patterns = 4 * (3 + 2) + 4;
        let curves = CURVE_WORKERS.len() * CURVE_KEYS.len() * (DRIVERS.len() + 2);
        let secs = headline as u64 * u64::from(self.headline)
            + patterns as u64 * u64::from(self.pattern)
            + curves as u64 * u64::from(self.curve);
        (headline + patterns + curves, secs)
    }
}

/// Runs the suite on `server` (which must take 64 workers: [`super::start_server`]
/// with 64), with pgbench from `bin`; `progress` is told of each result.
///
/// # Errors
/// The first run that cannot be made ([`super::run`]).
pub async fn run(
    server: &Server,
    bin: &std::path::Path,
    d: Durations,
    mut progress: impl FnMut(&LoadResult),
) -> Result<(Vec<LoadResult>, Vec<LoadResult>, Vec<LoadResult>)> {
    let drivers: Vec<Box<dyn locklab_drivers::Driver>> = DRIVERS
        .iter()
        .map(|id| locklab_drivers::find(id).map_err(|e| anyhow::anyhow!("{e}")))
        .collect::<Result<_>>()?;
    let spec = |pattern, workers, keys, seconds| LoadSpec {
        pattern,
        workers,
        keys,
        seconds,
        count: None,
        lock_timeout_ms: if pattern == Pattern::SessionAcrossCheckouts {
            100
        } else {
            1000
        },
        hold_us: 0,
    };
    // pgbench (where the pattern allows it) before and after the drivers of
    // a point: the ratio is to the mean of the two, and their difference
    // shows how much the shared machine moved meanwhile.
    let point = async |s: LoadSpec, with: &[usize], progress: &mut dyn FnMut(&LoadResult)| -> Result<Vec<LoadResult>> {
        let pgbench = super::sql::pgbench_script(s.pattern, s.hold_us).is_some();
        let mut out = Vec::new();
        let mut clients: Vec<Option<usize>> = with.iter().copied().map(Some).collect();
        if pgbench {
            clients.insert(0, None);
            clients.push(None);
        }
        for c in clients {
            let client = match c {
                Some(i) => Client::Driver(drivers[i].as_ref()),
                None => Client::Pgbench(bin.to_owned()),
            };
            let r = super::run(server, client, &s).await?;
            progress(&r);
            out.push(r);
        }
        Ok(out)
    };
    let all: Vec<usize> = (0..drivers.len()).collect();
    let mut headline = Vec::new();
    for workers in [1, 8] {
        headline.extend(point(spec(Pattern::XactWait, workers, 1000, d.headline), &all, &mut progress).await?);
    }
    let mut patterns = Vec::new();
    for pattern in [
        Pattern::XactWait,
        Pattern::XactTry,
        Pattern::SessionDedicated,
        Pattern::SkipLocked,
        Pattern::SessionAcrossCheckouts,
    ] {
        // tokio-postgres, deadpool-fast, bb8; the wrong pattern also through sqlx
        // (pgbench cannot run it).
        // The wrong pattern on one key, with 1 ms of work in each section: the
        // window in which a second worker can be granted the key again.
        let (with, s): (&[usize], LoadSpec) = if pattern == Pattern::SessionAcrossCheckouts {
            (
                &[0, 1, 2, 3],
                LoadSpec {
                    hold_us: 1000,
                    ..spec(pattern, 8, 1, d.pattern)
                },
            )
        } else {
            (&[0, 1, 2], spec(pattern, 8, 10, d.pattern))
        };
        patterns.extend(point(s, with, &mut progress).await?);
    }
    let mut curves = Vec::new();
    for keys in CURVE_KEYS {
        for workers in CURVE_WORKERS {
            curves.extend(point(spec(Pattern::XactWait, workers, keys, d.curve), &all, &mut progress).await?);
        }
    }
    Ok((headline, patterns, curves))
}
