//! Runs many server × scenario × driver triples concurrently, each in its own
//! database, `repeat` times over, and folds the repeats of each cell into one
//! result with timing statistics and, where the repeats read differently,
//! each way they read (the variation rule: docs/src/faults-and-races.md).

use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use locklab_drivers::Driver;

use crate::compare;
use crate::outcome::{Outcome, RunResult, Stats, Variant};
use crate::runner;
use crate::scenario::Scenario;
use crate::server::Server;
use crate::shard::Shard;

/// Matrix runs in flight in this process ([`run_shard`]).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Default number of runs in flight at once.
pub const DEFAULT_JOBS: usize = 8;

/// Runs every scenario with every driver on every server, at most `jobs` at a
/// time (and as many again of the cells that mostly wait: [`Lane`]),
/// `repeat` times over (round after round: the whole matrix, then again),
/// calling `on_done(round, result)` (round 1-based) as each run finishes.
/// Returns one result per cell, server-major, then scenario, then driver,
/// regardless of completion order: the repeats folded by [`fold_repeats`].
pub async fn run_all(
    servers: &[Server],
    scenarios: &[Scenario],
    drivers: &[Box<dyn Driver>],
    jobs: usize,
    repeat: usize,
    on_done: impl FnMut(usize, &RunResult),
) -> Vec<RunResult> {
    run_shard(servers, scenarios, drivers, Shard::ALL, jobs, repeat, on_done).await
}

/// The cells of `shard` (see [`crate::shard`]) of servers × scenarios ×
/// drivers, in run order: server-major, then scenario, then driver.
pub fn cells<'a>(
    servers: &'a [Server],
    scenarios: &'a [Scenario],
    drivers: &'a [Box<dyn Driver>],
    shard: Shard,
) -> Vec<(&'a Server, &'a Scenario, &'a dyn Driver)> {
    servers
        .iter()
        .flat_map(|v| scenarios.iter().map(move |s| (v, s)))
        .flat_map(|(v, s)| drivers.iter().map(move |d| (v, s, d.as_ref())))
        .enumerate()
        .filter(|(p, _)| shard.contains(*p))
        .map(|(_, cell)| cell)
        .collect()
}

/// Whether a cell of `scenario` runs in repeat round `round` (1-based): a
/// cell with `trials` runs in the first only, its trials being its repeats.
pub fn runs_in_round(scenario: &Scenario, round: usize) -> bool {
    round == 1 || scenario.trials.is_none()
}

/// Which of two queues a cell waits in: each runs up to `jobs` cells at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Cells whose time is mostly spent waiting for the server's timers
    /// ([`Scenario::mostly_waits`]: a restart, a partition, a fault whose
    /// effect a `granted` step waits for): seconds of a slot each with
    /// little CPU. In a lane of their own they no longer hold the other
    /// cells' slots (in `report --repeat 3` they took about a quarter of the
    /// slot time: docs/src/speed.md), and they run as many at once as before.
    Waits,
    /// Every other cell, races included, in the order [`cells`] gives.
    Works,
}

impl Lane {
    /// The lane of a cell of `scenario`.
    pub fn of(scenario: &Scenario) -> Lane {
        if scenario.mostly_waits() {
            Lane::Waits
        } else {
            Lane::Works
        }
    }
}

/// [`run_all`] for the cells of one `shard` only ([`cells`]); returns their
/// results in run order. The two lanes run side by side, each round after
/// round, so a lane's next round does not wait for the other lane's.
pub async fn run_shard(
    servers: &[Server],
    scenarios: &[Scenario],
    drivers: &[Box<dyn Driver>],
    shard: Shard,
    jobs: usize,
    repeat: usize,
    mut on_done: impl FnMut(usize, &RunResult),
) -> Vec<RunResult> {
    let triples = cells(servers, scenarios, drivers, shard);
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    let sharing = runner::Sharing::new();
    let mut cells: Vec<Vec<(usize, RunResult)>> = triples.iter().map(|_| Vec::new()).collect();
    // Round after round in each lane (a cell's repeats never overlap).
    let runs = |lane: Lane| {
        let triples = &triples;
        let sharing = &sharing;
        futures::stream::iter(1..=repeat.max(1))
            .map(move |round| {
                futures::stream::iter(
                    triples
                        .iter()
                        .enumerate()
                        .filter(move |(_, (_, s, _))| Lane::of(s) == lane && runs_in_round(s, round)),
                )
                .map(move |(i, (v, s, d))| async move {
                    (round, i, runner::run_sharing_databases(v, s, *d, sharing).await)
                })
                .buffer_unordered(jobs.max(1))
            })
            .flatten()
    };
    let mut stream = futures::stream::select(runs(Lane::Works), runs(Lane::Waits));
    while let Some((round, i, r)) = stream.next().await {
        on_done(round, &r);
        cells[i].push((round, r));
    }
    drop(stream);
    // The databases and connections the cells left for each other go with the run.
    if let Err(e) = sharing.finish(servers).await {
        tracing::warn!("the run's spare databases were not all dropped: {e}");
    }
    // The restart cells' template data directories go with the last run in
    // flight (in a test binary, runs overlap).
    if IN_FLIGHT.fetch_sub(1, Ordering::SeqCst) == 1 {
        crate::server::local::remove_templates();
    }
    cells
        .into_iter()
        .map(|mut runs| {
            // In the order of their rounds, whatever order they ended in.
            runs.sort_by_key(|(round, _)| *round);
            fold_repeats(runs.into_iter().map(|(_, r)| r).collect())
        })
        .collect()
}

/// Folds the repeats of one cell (at least one, in the order they ran) into
/// one result: the first failing repeat's result if any failed, else the
/// first's; `repeats` and the timing statistics over all of them; and, when
/// their [`Outcome`]s disagree, `varied` listing what they disagreed on
/// ([`compare::disagreements`]) and `variants` each distinct outcome with
/// its count. Repeats that read differently do not fail the cell (the
/// variation rule, docs/src/faults-and-races.md): a pooler's hand-out order
/// or a race is a reading, judged over every repeat by the properties.
///
/// # Panics
/// When `runs` is empty.
pub fn fold_repeats(runs: Vec<RunResult>) -> RunResult {
    assert!(!runs.is_empty(), "a cell without runs");
    let outcomes: Vec<Outcome> = runs.iter().map(RunResult::outcome).collect();
    let varied: Vec<String> = compare::disagreements(&outcomes)
        .iter()
        .map(ToString::to_string)
        .collect();
    let pick = runs.iter().position(|r| !r.passed()).unwrap_or(0);
    let elapsed: Vec<f64> = runs.iter().map(|r| r.elapsed_ms).collect();
    let n = runs.len();
    let mut cell = runs[pick].clone();
    for o in &mut cell.observations {
        let same = |r: &RunResult| {
            r.observations
                .iter()
                .find(|x| x.name == o.name && x.step == o.step)
                .cloned()
        };
        let took: Vec<f64> = runs.iter().filter_map(same).filter_map(|x| x.elapsed_ms).collect();
        let waited: Vec<f64> = runs.iter().filter_map(same).filter_map(|x| x.waited_ms).collect();
        o.elapsed_stats = Stats::of(&took);
        o.waited_stats = Stats::of(&waited);
    }
    cell.repeats = n;
    cell.elapsed_stats = Stats::of(&elapsed);
    cell.variants = if varied.is_empty() {
        Vec::new()
    } else {
        variants(outcomes)
    };
    cell.varied = varied;
    cell
}

/// The distinct outcomes of a cell's repeats, each with how many repeats
/// had it, in the order first seen.
fn variants(outcomes: Vec<Outcome>) -> Vec<Variant> {
    let mut out: Vec<Variant> = Vec::new();
    for o in outcomes {
        match out.iter_mut().find(|v| v.outcome == o) {
            Some(v) => v.repeats += 1,
            None => out.push(Variant { repeats: 1, outcome: o }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(deviation: Option<&str>, held: &str, ms: f64) -> RunResult {
        RunResult {
            observations: vec![crate::outcome::Observation {
                name: "held".into(),
                step: 1,
                value: crate::outcome::Value::of_text(held),
                sqlstate: None,
                elapsed_ms: Some(ms),
                waited_ms: None,
                notices: Vec::new(),
                notices_read: Default::default(),
                elapsed_stats: None,
                waited_stats: None,
                distribution: None,
                time_varies: false,
            }],
            deviation: deviation.map(str::to_owned),
            elapsed_ms: ms,
            ..RunResult::new("pg17", "s", "d")
        }
    }

    #[test]
    fn folded_repeats_carry_timing_statistics() {
        let cell = fold_repeats((1..=20).map(|i| run(None, "true", f64::from(i))).collect());
        assert!(cell.passed() && cell.varied.is_empty() && cell.variants.is_empty());
        assert_eq!(cell.repeats, 20);
        let s = cell.observations[0].elapsed_stats.unwrap();
        assert_eq!((s.n, s.min, s.p50, s.p95, s.max), (20, 1.0, 10.0, 19.0, 20.0));
    }

    #[test]
    fn a_cell_that_deviates_in_one_repeat_only_varies_and_does_not_fail() {
        let cell = fold_repeats(vec![
            run(Some("expected true"), "true", 1.0),
            run(None, "true", 1.0),
            run(None, "true", 2.0),
        ]);
        assert!(cell.passed());
        assert_eq!(cell.outcome().status, crate::outcome::Status::Varies);
        assert_eq!(cell.varied, vec!["outcome: deviates ×1, pass ×2".to_owned()]);
        let counts: Vec<(usize, crate::outcome::Status)> =
            cell.variants.iter().map(|v| (v.repeats, v.outcome.status)).collect();
        assert_eq!(
            counts,
            vec![(1, crate::outcome::Status::Deviates), (2, crate::outcome::Status::Pass)]
        );
    }

    #[test]
    fn a_repeat_that_failed_fails_the_cell() {
        let mut failed = run(None, "true", 1.0);
        failed.failure = Some("step 1: expected true".into());
        let cell = fold_repeats(vec![run(None, "true", 1.0), failed]);
        assert!(!cell.passed());
        assert_eq!(cell.outcome().status, crate::outcome::Status::Fail);
    }
}
