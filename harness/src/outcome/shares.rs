//! How the shares of a race cell's outcomes are compared between two runs:
//! the one definition `cargo test`, `locklab check`, `soak` and a folded
//! `--repeat` run use (docs/src/faults-and-races.md, "The race rule").
//!
//! A race's shares depend on the machine's load as much as on the code
//! under test (a cancel that lands 2 ms later is granted instead), so they
//! are compared only between runs made under comparable CPU pressure:
//!
//! - each race cell records the [`Pressure`] it ran under: the share of its
//!   wall time in which some runnable task waited for a CPU
//!   (`/proc/pressure/cpu`, `some total`, Linux ≥ 4.20 with PSI), the 1-min
//!   load average and the CPU count;
//! - two runs of a cell are [`comparable`] when both have a PSI figure, the
//!   same CPU count, and their PSI figures lie within [`PRESSURE_BAND`];
//! - then each reading's count is compared by a two-sided Fisher exact test
//!   ([`fisher_two_sided`]); a change is reported when its p-value is under
//!   [`threshold`]: [`FALSE_ALARM_RATE`] split evenly (Bonferroni) over the
//!   baseline's race rows and, within a row, over its readings, so that a run
//!   of every race cell raises a false alarm with probability at most
//!   [`FALSE_ALARM_RATE`];
//! - otherwise (pressures apart, or unknown) the same test's findings are
//!   printed as information, never as a failure.
//!
//! Which outcomes are possible at all is the scenario's `outcomes:` (checked
//! by the runner on every trial), and a must-hold invariant fails on one
//! violation: neither depends on load, and neither is decided here.

use serde::{Deserialize, Serialize};

/// The probability (1 %) that a run of every race cell, whose cells behave
/// as in the baseline and ran under comparable pressure, reports any share
/// change.
pub const FALSE_ALARM_RATE: f64 = 0.01;

/// How far apart (0.10: 10 percentage points of wall time) two runs' CPU
/// pressure may be for their shares to be compared.
pub const PRESSURE_BAND: f64 = 0.10;

/// The CPU pressure a race cell ran under.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pressure {
    /// The share (0–1) of the cell's wall time in which at least one
    /// runnable task waited for a CPU (`/proc/pressure/cpu`, the `some`
    /// line's `total`, µs); `None` where the kernel has no PSI.
    pub cpu_some: Option<f64>,
    /// The 1-min load average when the cell ended (`/proc/loadavg`).
    pub load1: f64,
    /// CPUs online (`std::thread::available_parallelism`).
    pub cpus: u32,
}

impl Pressure {
    /// `CPU pressure 35 % (load 2.1 on 2 CPUs)`.
    pub fn text(&self) -> String {
        let psi = self.cpu_some.map_or("CPU pressure unknown".to_owned(), |p| {
            format!("CPU pressure {:.0} %", 100.0 * p)
        });
        format!("{psi} (load {:.1} on {} CPUs)", self.load1, self.cpus)
    }

    /// Two cells' pressure as one (a cell's trials spread over runs, as
    /// shards or repeats): the trial-weighted mean; unknown when the two lie
    /// outside [`PRESSURE_BAND`] of each other (the counts then mix regimes
    /// and compare with nothing).
    pub fn merge(self, n: u64, other: Pressure, m: u64) -> Pressure {
        let w = |a: f64, b: f64| (a * n as f64 + b * m as f64) / (n + m).max(1) as f64;
        Pressure {
            cpu_some: match (self.cpu_some, other.cpu_some) {
                (Some(a), Some(b)) if (a - b).abs() <= PRESSURE_BAND => Some(w(a, b)),
                _ => None,
            },
            load1: w(self.load1, other.load1),
            cpus: self.cpus.max(other.cpus),
        }
    }
}

/// Whether two runs' shares may be compared (see the module docs).
pub fn comparable(a: Option<&Pressure>, b: Option<&Pressure>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            a.cpus == b.cpus && matches!((a.cpu_some, b.cpu_some), (Some(x), Some(y)) if (x - y).abs() <= PRESSURE_BAND)
        }
        _ => false,
    }
}

/// Measures the pressure over a stretch of wall time (a race cell's trials).
#[derive(Debug)]
pub struct PressureMeter {
    started: std::time::Instant,
    some_us: Option<u64>,
}

impl PressureMeter {
    /// Starts measuring now.
    pub fn start() -> PressureMeter {
        PressureMeter {
            started: std::time::Instant::now(),
            some_us: psi_some_total_us(),
        }
    }

    /// The pressure since [`PressureMeter::start`].
    pub fn finish(self) -> Pressure {
        let wall_us = self.started.elapsed().as_micros() as f64;
        let cpu_some = match (self.some_us, psi_some_total_us()) {
            (Some(a), Some(b)) if wall_us > 0.0 => Some((b.saturating_sub(a) as f64 / wall_us).clamp(0.0, 1.0)),
            _ => None,
        };
        let load1 = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        Pressure { cpu_some, load1, cpus }
    }
}

/// `some ... total=N` of `/proc/pressure/cpu` (µs), if the kernel has PSI.
fn psi_some_total_us() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/pressure/cpu").ok()?;
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

/// The p-value under which a reading's change of share is reported: the
/// [`FALSE_ALARM_RATE`] over `race_rows` rows (all race rows of the
/// baseline: [`crate::baseline::Baseline::race_rows`]) and the `readings`
/// compared in this row.
pub fn threshold(race_rows: u64, readings: usize) -> f64 {
    FALSE_ALARM_RATE / race_rows.max(1) as f64 / readings.max(1) as f64
}

/// The two-sided p-value of Fisher's exact test that a reading seen `a` times
/// in `n` trials and `b` times in `m` trials has one share in both: the
/// probability, given the `a + b` sightings in `n + m` trials, of a split at
/// most as likely as this one (hypergeometric, summed over the support with a
/// relative tolerance of 1e-7 for ties, as R's `fisher.test` does).
///
/// # Panics
/// When `a > n` or `b > m`.
pub fn fisher_two_sided(a: u64, n: u64, b: u64, m: u64) -> f64 {
    assert!(a <= n && b <= m, "counts over their trials: {a}/{n}, {b}/{m}");
    let k = a + b;
    let total = n + m;
    let ln_fact = LnFactorial::up_to(total);
    // P(X = x): x of the k sightings in the first run's n trials.
    let ln_p = |x: u64| {
        ln_fact.of(k) + ln_fact.of(total - k) + ln_fact.of(n) + ln_fact.of(m)
            - ln_fact.of(total)
            - ln_fact.of(x)
            - ln_fact.of(k - x)
            - ln_fact.of(n - x)
            - ln_fact.of(m + x - k)
    };
    let lo = k.saturating_sub(m);
    let hi = k.min(n);
    let observed = ln_p(a);
    let limit = observed + 1e-7f64.ln_1p();
    let p: f64 = (lo..=hi).map(ln_p).filter(|l| *l <= limit).map(f64::exp).sum();
    p.min(1.0)
}

/// `ln k!` for k up to a bound, by summing logarithms (exact enough: the sum
/// of ln i for i ≤ 20,000 carries a relative error near 1e-12).
struct LnFactorial(Vec<f64>);

impl LnFactorial {
    fn up_to(n: u64) -> LnFactorial {
        let mut v = Vec::with_capacity(n as usize + 1);
        let mut acc = 0.0;
        v.push(0.0);
        for i in 1..=n {
            acc += (i as f64).ln();
            v.push(acc);
        }
        LnFactorial(v)
    }

    fn of(&self, k: u64) -> f64 {
        self.0[k as usize]
    }
}

/// One reading whose share changed beyond [`threshold`].
#[derive(Clone, Debug, PartialEq)]
pub struct ShareChange {
    /// Its count and trials before.
    pub before: (u64, u64),
    /// Its count and trials now.
    pub after: (u64, u64),
    /// Fisher's two-sided p-value.
    pub p: f64,
    /// The threshold it fell under.
    pub threshold: f64,
}

impl ShareChange {
    /// `14 % of 1000 → 67 % of 12 (Fisher p = 2.1e-7 < 1.1e-6)`.
    pub fn text(&self) -> String {
        let pct = |(k, n): (u64, u64)| 100.0 * k as f64 / n.max(1) as f64;
        format!(
            "{:.0} % of {} → {:.0} % of {} (Fisher p = {:.1e} < {:.1e})",
            pct(self.before),
            self.before.1,
            pct(self.after),
            self.after.1,
            self.p,
            self.threshold
        )
    }
}

/// The readings of one race row whose counts changed: `rows` pairs each
/// reading with its count before and now (0 when a run did not see it), of
/// `n` and `m` trials; `race_rows` as for [`threshold`].
pub fn changes<R: Clone>(rows: &[(R, u64, u64)], n: u64, m: u64, race_rows: u64) -> Vec<(R, ShareChange)> {
    if n == 0 || m == 0 {
        return Vec::new();
    }
    let t = threshold(race_rows, rows.len());
    rows.iter()
        .filter_map(|(r, a, b)| {
            let p = fisher_two_sided((*a).min(n), n, (*b).min(m), m);
            (p < t).then(|| {
                (
                    r.clone(),
                    ShareChange {
                        before: (*a, n),
                        after: (*b, m),
                        p,
                        threshold: t,
                    },
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! The rule tested by simulation: counts drawn from known distributions
    //! with a seeded generator (so each run of the test sees the same draws),
    //! then judged as a run of the committed baseline's size would be.

    use super::*;
    use rand::{RngExt, SeedableRng, rngs::StdRng};

    /// Race rows in the baseline this rule was sized for (186 race cells,
    /// about five rows each); the tests use it for the Bonferroni split.
    const ROWS: u64 = 711;

    fn draw(rng: &mut StdRng, shares: &[f64], n: u64) -> Vec<u64> {
        let mut counts = vec![0; shares.len()];
        for _ in 0..n {
            let mut u: f64 = rng.random();
            let mut i = 0;
            while i + 1 < shares.len() && u >= shares[i] {
                u -= shares[i];
                i += 1;
            }
            counts[i] += 1;
        }
        counts
    }

    /// Whether one row, drawn from `before` (n trials) and `after` (m
    /// trials), raises an alarm.
    fn alarm(rng: &mut StdRng, before: &[f64], n: u64, after: &[f64], m: u64) -> bool {
        let a = draw(rng, before, n);
        let b = draw(rng, after, m);
        let rows: Vec<(usize, u64, u64)> = (0..before.len()).map(|i| (i, a[i], b[i])).collect();
        !changes(&rows, n, m, ROWS).is_empty()
    }

    #[test]
    fn fisher_matches_known_values() {
        // R: fisher.test(matrix(c(3, 1, 1, 3), 2))$p.value = 0.4857143
        assert!((fisher_two_sided(3, 4, 1, 4) - 0.485_714_3).abs() < 1e-6);
        // fisher.test(matrix(c(10, 990, 30, 970), 2))$p.value = 0.002008
        let p = fisher_two_sided(10, 1000, 30, 1000);
        assert!((p - 0.002_008).abs() < 1e-5, "{p}");
        // Same counts: nothing to see.
        assert!((fisher_two_sided(5, 10, 5, 10) - 1.0).abs() < 1e-9);
    }

    /// Under equal distributions, the share of rows that raise an alarm,
    /// times the rows of a run, stays at or under the false-alarm rate: a
    /// row's rate is measured on 4,000 simulated rows at a threshold 50 times
    /// the real one (the real one is too small to observe), which bounds the
    /// real rate since Fisher's test is conservative at every level.
    #[test]
    fn equal_distributions_raise_alarms_at_the_documented_rate_or_less() {
        let mut rng = StdRng::seed_from_u64(32);
        let shares = [0.86, 0.10, 0.04];
        let rows = 4000;
        let mut alarms = 0;
        for _ in 0..rows {
            let a = draw(&mut rng, &shares, 1000);
            let b = draw(&mut rng, &shares, 1000);
            let t = 50.0 * threshold(ROWS, 3);
            if (0..3).any(|i| fisher_two_sided(a[i], 1000, b[i], 1000) < t) {
                alarms += 1;
            }
        }
        // Expected at most rows × 50 × FALSE_ALARM_RATE / ROWS ≈ 2.2 alarms;
        // more than 8 (a Poisson tail under 1e-3) would show a level the
        // test does not keep.
        let per_row = alarms as f64 / rows as f64;
        assert!(alarms <= 8, "{alarms} alarms in {rows} rows");
        assert!(per_row / 50.0 * ROWS as f64 <= FALSE_ALARM_RATE * 4.0, "{per_row}");
    }

    /// A reading going from 10 % to 30 % of 1,000 trials is caught in every
    /// one of 200 simulated runs.
    #[test]
    fn a_shift_from_10_to_30_percent_is_caught_at_1000_trials() {
        let mut rng = StdRng::seed_from_u64(1030);
        let caught = (0..200)
            .filter(|_| alarm(&mut rng, &[0.9, 0.1], 1000, &[0.7, 0.3], 1000))
            .count();
        assert!(caught >= 198, "caught {caught} of 200");
    }

    /// What a 12-trial run (`cargo test`) detects with at least 90 %
    /// probability against a 1,000-trial baseline, by simulation (500 runs
    /// each): a reading the baseline saw in 5 % of its trials that now comes
    /// up in 90 % of them, one it saw in 1 % that comes up in 70 %, or one it
    /// saw in 95 % that is gone; not a change from 50 % to 90 %, nor 10 % to
    /// 30 % (the docs give the table).
    #[test]
    fn what_a_12_trial_run_detects() {
        let mut rng = StdRng::seed_from_u64(12);
        let mut power = |before: f64, after: f64| {
            (0..500)
                .filter(|_| alarm(&mut rng, &[before, 1.0 - before], 1000, &[after, 1.0 - after], 12))
                .count() as f64
                / 500.0
        };
        assert!(power(0.05, 0.9) >= 0.9, "5 % → 90 %");
        assert!(power(0.01, 0.7) >= 0.9, "1 % → 70 %");
        assert!(power(0.95, 0.0) >= 0.9, "95 % → 0 %");
        assert!(power(0.5, 0.9) < 0.9, "50 % → 90 %");
        assert!(power(0.1, 0.3) < 0.9, "10 % → 30 %");
        // And it does not fire without a change.
        assert!(power(0.3, 0.3) < 0.01, "30 % → 30 %");
    }

    #[test]
    fn pressures_compare_within_the_band_only() {
        let p = |x: Option<f64>| Pressure {
            cpu_some: x,
            load1: 1.0,
            cpus: 2,
        };
        assert!(comparable(Some(&p(Some(0.30))), Some(&p(Some(0.38)))));
        assert!(!comparable(Some(&p(Some(0.30))), Some(&p(Some(0.45)))));
        assert!(!comparable(Some(&p(None)), Some(&p(Some(0.3)))));
        assert!(!comparable(None, Some(&p(Some(0.3)))));
        let four = Pressure {
            cpus: 4,
            ..p(Some(0.3))
        };
        assert!(!comparable(Some(&four), Some(&p(Some(0.3)))));
        // Merged: weighted within the band, unknown across it.
        let m = p(Some(0.2)).merge(100, p(Some(0.3)), 300);
        assert!((m.cpu_some.unwrap() - 0.275).abs() < 1e-9);
        assert_eq!(p(Some(0.1)).merge(1, p(Some(0.5)), 1).cpu_some, None);
    }
}
