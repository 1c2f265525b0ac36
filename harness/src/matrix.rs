//! Runs many server × scenario × driver triples concurrently, each in its own database.

use futures::StreamExt;
use locklab_drivers::Driver;

use crate::runner::{self, RunResult};
use crate::scenario::Scenario;
use crate::server::Server;

/// Default number of runs in flight at once.
pub const DEFAULT_JOBS: usize = 8;

/// Runs every scenario with every driver on every server, at most `jobs` at a
/// time, calling `on_done` as each finishes. Results come back server-major,
/// then scenario, then driver, regardless of completion order.
pub async fn run_all(
    servers: &[Server],
    scenarios: &[Scenario],
    drivers: &[Box<dyn Driver>],
    jobs: usize,
    mut on_done: impl FnMut(&RunResult),
) -> Vec<RunResult> {
    let triples: Vec<(usize, &Server, &Scenario, &dyn Driver)> = servers
        .iter()
        .flat_map(|v| scenarios.iter().map(move |s| (v, s)))
        .flat_map(|(v, s)| drivers.iter().map(move |d| (v, s, d.as_ref())))
        .enumerate()
        .map(|(i, (v, s, d))| (i, v, s, d))
        .collect();
    let mut stream = futures::stream::iter(triples)
        .map(|(i, v, s, d)| async move { (i, runner::run(v, s, d).await) })
        .buffer_unordered(jobs.max(1));
    let mut out: Vec<(usize, RunResult)> = Vec::new();
    while let Some((i, r)) = stream.next().await {
        on_done(&r);
        out.push((i, r));
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}
