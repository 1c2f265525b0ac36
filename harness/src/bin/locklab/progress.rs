//! The progress bar of a run: drawn on a terminal; on CI or into a pipe or
//! file, a line at most once a minute ([`PIPED_EVERY`]) and one per finished
//! repeat round (the rounds of the two lanes of `matrix::run_shard` overlap:
//! a round is done when both lanes have run it).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use locklab::outcome::RunResult;

/// How often, at most, a run without a bar (CI, a pipe, a file) says how
/// far it got: a report's first round runs for a quarter of an hour.
pub const PIPED_EVERY: Duration = Duration::from_secs(60);

/// Progress over the runs of `repeat` rounds.
pub struct Progress {
    bar: ProgressBar,
    total: u64,
    repeat: usize,
    /// How many runs each round has, and how many of them are done.
    rounds: Vec<(u64, u64)>,
    done: u64,
    began: Instant,
    /// When the last line without a bar was written (or the runs began).
    said: Instant,
}

impl Progress {
    /// A bar on a terminal; hidden when the `CI` variable is set (to anything
    /// but "") or stderr is not a terminal. `per_round[r]` is how many runs
    /// round `r + 1` has (a race cell runs in the first only); `began` is
    /// when the runs started.
    pub fn new(per_round: &[u64], began: Instant) -> Progress {
        let total: u64 = per_round.iter().sum();
        // CI is not an option of ours: it is read here, where it matters.
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty());
        let bar = if ci || !std::io::stderr().is_terminal() {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(total)
        };
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {elapsed} (about {eta} left) {wide_msg}")
                .expect("static template"),
        );
        Progress {
            bar,
            total,
            repeat: per_round.len(),
            rounds: per_round.iter().map(|n| (*n, 0)).collect(),
            done: 0,
            began,
            said: began,
        }
    }

    /// Counts run `r` of repeat round `round` (from 1) as done.
    pub fn step(&mut self, round: usize, r: &RunResult) {
        let (repeat, total) = (self.repeat, self.total);
        let of = if repeat > 1 {
            format!("repeat {round}/{repeat}: ")
        } else {
            String::new()
        };
        self.bar
            .set_message(format!("{of}{} × {} × {}", r.server, r.scenario, r.driver));
        self.bar.inc(1);
        self.done += 1;
        let done = self.done;
        let round_done = self.rounds.get_mut(round - 1).is_some_and(|(n, d)| {
            *d += 1;
            d == n
        });
        // Without a bar, a long run still says how far it got: one line per
        // finished round, and one at most every PIPED_EVERY in between.
        if !self.bar.is_hidden() {
            return;
        }
        let took = self.began.elapsed().as_secs_f64();
        if repeat > 1 && round_done {
            eprintln!("locklab: repeat {round}/{repeat} done ({done} of {total} runs, {took:.0} s)");
            self.said = Instant::now();
        } else if self.said.elapsed() >= PIPED_EVERY && done < total {
            let left = took * (total - done) as f64 / done as f64;
            eprintln!(
                "locklab: {done} of {total} runs done ({:.0} %), {took:.0} s, about {left:.0} s left",
                100.0 * done as f64 / total as f64
            );
            self.said = Instant::now();
        }
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
