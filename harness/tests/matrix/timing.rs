//! Where the matrix test's time goes: each trial's wall time by scenario
//! kind × column kind and backend, and the CPU the machine spent meanwhile
//! (this process, its children, and everything else: the servers, poolers
//! and containers), printed after the trials. With `LOCKLAB_TEST_TIMES=FILE`,
//! also one line per trial (`name<TAB>kind<TAB>backend<TAB>seconds`), the
//! figures docs/src/testing.md's budget is computed from.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

/// (name, kind, backend, wall seconds) per trial that ran.
static TIMES: Mutex<Vec<(String, String, &'static str, f64)>> = Mutex::new(Vec::new());

/// Records one trial's wall time.
pub fn record(name: &str, kind: &str, backend: &'static str, seconds: f64) {
    if let Ok(mut t) = TIMES.lock() {
        t.push((name.to_owned(), kind.to_owned(), backend, seconds));
    }
}

/// CPU time so far, in seconds: this process, its reaped children (the
/// adapters, pool processes, `pg_ctl`), and the whole machine's busy time.
pub struct Usage {
    at: Instant,
    own: f64,
    children: f64,
    machine_busy: f64,
    /// Per live process: (command name, its CPU and that of the children
    /// it reaped, s). A postmaster reaps its backends, so `postgres` covers
    /// the server's work; `docker-proxy` the container's published port.
    processes: BTreeMap<u32, (String, f64)>,
}

/// Every live process's command name and CPU seconds (utime + stime +
/// cutime + cstime of /proc/PID/stat).
fn processes(ticks: f64) -> BTreeMap<u32, (String, f64)> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_owned();
        let f: Vec<f64> = stat[close + 1..]
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0.0))
            .collect();
        let cpu = (11..15).map(|i| f.get(i).copied().unwrap_or(0.0)).sum::<f64>() / ticks;
        out.insert(pid, (comm, cpu));
    }
    out
}

impl Usage {
    /// Now.
    pub fn now() -> Usage {
        // USER_HZ: what Linux counts these in, 100 on every architecture it
        // exposes to user space (proc(5)).
        let ticks = 100.0;
        // /proc/self/stat fields 14–17: utime, stime, cutime, cstime (ticks).
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let f: Vec<f64> = after_name
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0.0))
            .collect();
        let field = |n: usize| f.get(n - 3).copied().unwrap_or(0.0) / ticks;
        // /proc/stat's cpu line: user nice system idle iowait irq softirq steal.
        let machine = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let cpu: Vec<f64> = machine
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap_or(0.0))
            .collect();
        let busy = cpu
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 3 && *i != 4)
            .map(|(_, v)| v)
            .sum::<f64>()
            / ticks;
        Usage {
            at: Instant::now(),
            own: field(14) + field(15),
            children: field(16) + field(17),
            machine_busy: busy,
            processes: processes(ticks),
        }
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
            .map(|(n, k, b, s)| format!("{n}\t{k}\t{b}\t{s:.3}\n"))
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
    let mut by_comm: BTreeMap<String, f64> = BTreeMap::new();
    for (pid, (comm, cpu)) in &end.processes {
        let before = start
            .processes
            .get(pid)
            .filter(|(c, _)| c == comm)
            .map_or(0.0, |(_, b)| *b);
        let comm = if comm.starts_with("matrix-") {
            "this test"
        } else {
            comm.as_str()
        };
        *by_comm.entry(comm.to_owned()).or_default() += cpu - before;
    }
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
    for (_, k, b, s) in &times {
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
