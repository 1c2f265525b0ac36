//! Where the matrix test's time goes: each trial's wall time by scenario
//! kind × column kind and backend, and the CPU the machine spent meanwhile
//! (this process, its children, and everything else: the servers, poolers
//! and containers), printed after the trials. With `LOCKLAB_TEST_TIMES=FILE`,
//! also one line per trial (`name<TAB>kind<TAB>backend<TAB>seconds<TAB>ended`,
//! `ended` in seconds since the trials began: which trials make the run's
//! tail), the figures docs/src/tests.md's budget is computed from.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

pub use locklab::cpu::Usage;

/// (name, kind, backend, wall seconds, when it ended) per trial that ran.
static TIMES: Mutex<Vec<(String, String, &'static str, f64, Instant)>> = Mutex::new(Vec::new());

/// Records one trial's wall time.
pub fn record(name: &str, kind: &str, backend: &'static str, seconds: f64) {
    if let Ok(mut t) = TIMES.lock() {
        t.push((name.to_owned(), kind.to_owned(), backend, seconds, Instant::now()));
    }
}

/// Prints the summary of the trials that ran since `start` (nothing when
/// fewer than 20 did: a selection, not the matrix); writes the per-trial
/// lines to `LOCKLAB_TEST_TIMES` when set.
pub fn summary(start: Usage) {
    let end = Usage::now();
    let times = TIMES.lock().map(|t| t.clone()).unwrap_or_default();
    if let Ok(path) = std::env::var("LOCKLAB_TEST_TIMES") {
        let lines: String = times
            .iter()
            .map(|(n, k, b, s, ended)| {
                let ended = ended.saturating_duration_since(start.at).as_secs_f64();
                format!("{n}\t{k}\t{b}\t{s:.3}\t{ended:.3}\n")
            })
            .collect();
        if let Err(e) = std::fs::write(&path, lines) {
            eprintln!("LOCKLAB_TEST_TIMES: cannot write {path}: {e}");
        }
    }
    if times.len() < 20 {
        return;
    }
    let wall = end.at.duration_since(start.at).as_secs_f64();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let own = end.own - start.own;
    let children = end.children - start.children;
    let busy = end.machine_busy - start.machine_busy;
    eprintln!(
        "\nmatrix time: {wall:.0} s wall on {cpus:.0} CPUs; CPU busy {busy:.0} s ({:.0} % of {:.0} CPU-s): \
         this process {own:.0} s, its children (adapters, pool processes) {children:.0} s, \
         the rest (servers, poolers, containers, other load) {:.0} s",
        100.0 * busy / (wall * cpus).max(1.0),
        wall * cpus,
        (busy - own - children).max(0.0)
    );
    // The CPU of the processes alive at the end, by command name (those
    // that ended before, unless reaped by one of these, are not seen).
    let by_comm = start.by_command(&end, |comm| comm.starts_with("matrix-").then_some("this test"));
    let mut by_comm: Vec<(String, f64)> = by_comm.into_iter().filter(|(_, s)| *s >= 1.0).collect();
    by_comm.sort_by(|a, b| b.1.total_cmp(&a.1));
    eprintln!(
        "CPU by process (live at the end, with the children they reaped): {}",
        by_comm
            .iter()
            .take(8)
            .map(|(c, s)| format!("{c} {s:.0} s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut by: BTreeMap<(String, &str), (usize, f64)> = BTreeMap::new();
    for (_, k, b, s, _) in &times {
        let e = by.entry((k.clone(), *b)).or_default();
        e.0 += 1;
        e.1 += s;
    }
    let total: f64 = times.iter().map(|t| t.3).sum();
    eprintln!("summed trial time {total:.0} s; by scenario kind × column kind, backend:");
    for ((k, b), (n, s)) in by {
        eprintln!(
            "  {k:<24} {b:<9} {n:>5} trials {s:>7.1} s  {:>6.2} s/trial  {:>4.1} %",
            s / n as f64,
            100.0 * s / total.max(1e-9)
        );
    }
}
