//! pgbench running a load run's SQL ([`super::sql::pgbench_script`]) with as
//! many clients as the run has workers, against the same server, in the
//! same run: the reference the drivers' throughput is a ratio of.
//!
//! `pgbench -n -M simple -c W -j min(W, cores) -T S` (or `-t ⌈count/W⌉`),
//! the script's keys as `-D keys=K`, `lock_timeout` through `PGOPTIONS`,
//! every transaction's latency from its log (`-l`, PostgreSQL docs,
//! pgbench "Per-Transaction Logging": the third field is the latency in
//! µs). A client that hits an error other than a serialization failure or
//! deadlock is aborted by pgbench (its exit status is then 2); the count
//! of aborted clients becomes the tally's errors.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use locklab_drivers::ConnectSpec;
use tokio::process::Command;

use super::{LoadSpec, Tally, sql};

/// Runs pgbench from `bin` against `spec` as `load` says and returns what it
/// counted.
///
/// # Errors
/// The pattern has no pgbench script (it needs a pool), pgbench is not in
/// `bin` or cannot start, or its output has no transaction count.
pub async fn run(bin: &Path, spec: &ConnectSpec, load: &LoadSpec) -> Result<Tally> {
    let script = sql::pgbench_script(load.pattern, load.hold_us).ok_or_else(|| {
        anyhow!(
            "pgbench cannot run {}: it keeps one connection per client",
            load.pattern.name()
        )
    })?;
    let program = bin.join("pgbench");
    if !program.is_file() {
        bail!("no pgbench in {}", bin.display());
    }
    let dir = tempfile::Builder::new()
        .prefix("locklab-pgbench-")
        .tempdir()
        .context("cannot make a temporary directory for pgbench")?;
    let file = dir.path().join("script.sql");
    std::fs::write(&file, script).context("cannot write the pgbench script")?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let mut cmd = Command::new(&program);
    cmd.args(["-n", "-M", "simple", "-l", "--log-prefix"])
        .arg(dir.path().join("tx"))
        .arg("-c")
        .arg(load.workers.to_string())
        .arg("-j")
        .arg(load.workers.min(cores).to_string())
        .arg("-f")
        .arg(&file)
        .arg("-D")
        .arg(format!("keys={}", load.keys))
        .args(["-h", &spec.host, "-p", &spec.port.to_string(), "-U", &spec.user])
        .arg(&spec.dbname)
        .env("PGOPTIONS", format!("-c lock_timeout={}ms", load.lock_timeout_ms))
        .env("PGAPPNAME", "locklab-pgbench")
        .kill_on_drop(true);
    match load.count {
        Some(n) => cmd.arg("-t").arg(n.div_ceil(u64::from(load.workers)).to_string()),
        None => cmd.arg("-T").arg(load.seconds.to_string()),
    };
    if let Some(p) = &spec.password {
        cmd.env("PGPASSWORD", p);
    }
    let out = cmd
        .output()
        .await
        .with_context(|| format!("cannot run {}", program.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let (processed, tps) = parse_summary(&stdout).ok_or_else(|| {
        anyhow!(
            "pgbench exited with {} and no transaction count: {}",
            out.status,
            stderr.lines().last().unwrap_or_default()
        )
    })?;
    let mut tally = Tally {
        attempts: processed,
        elapsed_s: if tps > 0.0 { processed as f64 / tps } else { 0.0 },
        ..Tally::default()
    };
    for entry in std::fs::read_dir(dir.path()).context("cannot read pgbench's logs")? {
        let path = entry?.path();
        if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("tx.")) {
            let text = std::fs::read_to_string(&path).context("cannot read a pgbench log")?;
            tally.latencies_us.extend(parse_log(&text));
        }
    }
    let aborted = stderr.lines().filter(|l| l.contains("aborted in command")).count() as u64;
    if aborted > 0 {
        tally.counts.errors = aborted;
        tally.counts.first_error = stderr
            .lines()
            .find(|l| l.contains("ERROR") || l.contains("aborted"))
            .map(str::to_owned);
    }
    Ok(tally)
}

/// (transactions processed, tps without the initial connection time) from
/// pgbench's summary.
pub fn parse_summary(stdout: &str) -> Option<(u64, f64)> {
    let processed = stdout.lines().find_map(|l| {
        let rest = l.strip_prefix("number of transactions actually processed: ")?;
        rest.split('/').next()?.trim().parse().ok()
    })?;
    let tps = stdout.lines().find_map(|l| {
        let rest = l.strip_prefix("tps = ")?;
        rest.split_whitespace().next()?.parse().ok()
    })?;
    Some((processed, tps))
}

/// Each transaction's latency (µs) from a per-transaction log: `client_id
/// transaction_no time script_no time_epoch time_us …`; a skipped or failed
/// transaction (`skipped`, `failed`) has no latency.
pub fn parse_log(text: &str) -> impl Iterator<Item = u64> + '_ {
    text.lines().filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_log_are_read() {
        let out = "transaction type: script.sql\nnumber of clients: 2\n\
                   number of transactions actually processed: 2500/2500\n\
                   latency average = 0.4 ms\ntps = 4810.123 (without initial connection time)\n";
        assert_eq!(parse_summary(out), Some((2500, 4810.123)));
        let log = "0 1 412 0 1764670000 123\n1 1 failed 0 1764670000 124\n";
        assert_eq!(parse_log(log).collect::<Vec<_>>(), vec![412]);
    }
}
