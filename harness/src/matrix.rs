//! Runs many scenario × driver pairs concurrently, each in its own database.

use futures::StreamExt;
use locklab_drivers::Driver;

use crate::runner::{self, RunResult};
use crate::scenario::Scenario;
use crate::server::Server;

/// Default number of scenario × driver runs in flight at once.
pub const DEFAULT_JOBS: usize = 8;

/// Runs every scenario with every driver, at most `jobs` at a time, calling
/// `on_done` as each finishes. Results come back in scenario-major,
/// driver-minor order regardless of completion order.
pub async fn run_all(
    server: &Server,
    scenarios: &[Scenario],
    drivers: &[Box<dyn Driver>],
    jobs: usize,
    mut on_done: impl FnMut(&RunResult),
) -> Vec<RunResult> {
    let pairs: Vec<(usize, &Scenario, &dyn Driver)> = scenarios
        .iter()
        .flat_map(|s| drivers.iter().map(move |d| (s, d.as_ref())))
        .enumerate()
        .map(|(i, (s, d))| (i, s, d))
        .collect();
    let mut stream = futures::stream::iter(pairs)
        .map(|(i, s, d)| async move { (i, runner::run(server, s, d).await) })
        .buffer_unordered(jobs.max(1));
    let mut out: Vec<(usize, RunResult)> = Vec::new();
    while let Some((i, r)) = stream.next().await {
        on_done(&r);
        out.push((i, r));
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}
