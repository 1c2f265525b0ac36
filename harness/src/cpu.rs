//! CPU time as Linux counts it: this process, its reaped children, every live
//! process by command name, and the whole machine's busy time. Read from
//! `/proc` (proc(5)); on a system without it every figure reads 0.
//!
//! Used by `locklab bench` (CPU per cell: locklab, its children, the server)
//! and by the matrix test's summary of where its time went.

use std::collections::BTreeMap;
use std::time::Instant;

/// USER_HZ: what Linux counts CPU time in, 100 on every architecture it
/// exposes to user space (proc(5), "clock ticks").
const TICKS_PER_S: f64 = 100.0;

/// CPU time up to one moment, in seconds.
#[derive(Clone, Debug)]
pub struct Usage {
    /// When it was read.
    pub at: Instant,
    /// This process: utime + stime (fields 14 and 15 of `/proc/self/stat`).
    pub own: f64,
    /// The children this process reaped (adapters, pool processes,
    /// `pg_ctl`): cutime + cstime (fields 16 and 17).
    pub children: f64,
    /// The machine's busy time, all CPUs: `/proc/stat`'s first line without
    /// idle and iowait.
    pub machine_busy: f64,
    /// Per live process: (command name, its CPU and that of the children it
    /// reaped, s). A postmaster reaps its backends, so `postgres` covers the
    /// server's work, in a container too (its processes are the host's).
    pub processes: BTreeMap<u32, (String, f64)>,
}

impl Usage {
    /// Reads the figures now.
    pub fn now() -> Usage {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let f = stat_fields(&stat).map(|(_, f)| f).unwrap_or_default();
        // Fields 14–17 of proc(5) (1-based; `stat_fields` starts at field 3).
        let field = |n: usize| f.get(n - 3).copied().unwrap_or(0.0) / TICKS_PER_S;
        Usage {
            at: Instant::now(),
            own: field(14) + field(15),
            children: field(16) + field(17),
            machine_busy: machine_busy(),
            processes: processes(),
        }
    }

    /// CPU seconds per command name between `self` (earlier) and `later`,
    /// over the processes live at `later` (one that started and ended in
    /// between counts only when a live one reaped it). Names `rename` maps
    /// (e.g. this test binary's) are merged under what it returns.
    pub fn by_command(&self, later: &Usage, rename: impl Fn(&str) -> Option<&'static str>) -> BTreeMap<String, f64> {
        let mut out: BTreeMap<String, f64> = BTreeMap::new();
        for (pid, (comm, cpu)) in &later.processes {
            let before = self
                .processes
                .get(pid)
                .filter(|(c, _)| c == comm)
                .map_or(0.0, |(_, b)| *b);
            let name = rename(comm).map_or_else(|| comm.clone(), str::to_owned);
            *out.entry(name).or_default() += cpu - before;
        }
        out
    }
}

/// The command name and the numeric fields from the third on of a
/// `/proc/PID/stat` line (the name may hold spaces and parentheses: it ends
/// at the last `)`).
fn stat_fields(stat: &str) -> Option<(String, Vec<f64>)> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let fields = stat
        .get(close + 1..)?
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    Some((stat.get(open + 1..close)?.to_owned(), fields))
}

/// `/proc/stat`'s cpu line (user nice system idle iowait irq softirq steal)
/// without idle and iowait, in s.
fn machine_busy() -> f64 {
    let machine = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    machine
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v.parse::<f64>().unwrap_or(0.0))
        .sum::<f64>()
        / TICKS_PER_S
}

/// Every live process's command name and CPU seconds (utime + stime +
/// cutime + cstime of `/proc/PID/stat`).
fn processes() -> BTreeMap<u32, (String, f64)> {
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
        let Some((comm, f)) = stat_fields(&stat) else {
            continue;
        };
        // Fields 14–17, at 11–14 from the third.
        let cpu = (11..15).map(|i| f.get(i).copied().unwrap_or(0.0)).sum::<f64>() / TICKS_PER_S;
        out.insert(pid, (comm, cpu));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_spaces_and_parentheses_ends_at_the_last_parenthesis() {
        // pid, name, state (field 3), fields 4–13 (ppid … cmajflt), then
        // utime, stime, cutime, cstime (fields 14–17), priority.
        let (name, f) = stat_fields("42 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 7 3 20").unwrap();
        assert_eq!(name, "a (b) c");
        assert_eq!(f[0], 0.0, "the state letter is not a number");
        assert_eq!(&f[11..15], &[250.0, 50.0, 7.0, 3.0]);
    }

    #[test]
    fn this_process_spends_cpu_that_the_figures_see() {
        let before = Usage::now();
        let mut x = 0u64;
        let t = Instant::now();
        while t.elapsed().as_millis() < 300 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = Usage::now();
        assert!(after.own > before.own, "{} then {}", before.own, after.own);
        assert!(after.machine_busy > before.machine_busy);
        let me = std::process::id();
        assert!(after.processes.contains_key(&me));
    }
}
