//! The Prometheus text format (version 0.0.4) of a judged snapshot, written
//! by the `prometheus` crate's `TextEncoder`. The names and labels are stable:
//! the book's "Operating `holders`" (`docs/src/holders.md`) documents them.
//!
//! | metric | type | labels | value |
//! |---|---|---|---|
//! | `locklab_up` | gauge | | 1 when the snapshot was taken, 0 when the server could not be read |
//! | `locklab_snapshot_duration_seconds` | gauge | | time to connect and take the snapshot (s) |
//! | `locklab_advisory_locks` | gauge | `database`, `state`, `mode`, `granted`, `application_name` | advisory locks (held and awaited) |
//! | `locklab_advisory_verdict_locks` | gauge | `verdict` | locks per verdict (every verdict, 0 included) |
//! | `locklab_advisory_leaked_locks` | gauge | | locks with verdict leaked |
//! | `locklab_advisory_stuck_locks` | gauge | | locks with verdict stuck |
//! | `locklab_advisory_waiters` | gauge | | awaited locks (every waiter, however young) |
//! | `locklab_advisory_oldest_idle_holder_seconds` | gauge | | longest time an `idle` session has held an advisory lock (s); 0 when none |
//! | `locklab_advisory_oldest_waiter_seconds` | gauge | | longest time a waiter has waited (s, `pg_locks.waitstart`); 0 when none |
//!
//! A probe of a named target (`holders serve --config`, `/probe?target=NAME`)
//! adds the label `target` to every one of them ([`encode_for`]); the
//! exporter's own `/metrics` then serves [`EXPORTER_FAMILIES`].
//!
//! `state` is `pg_stat_activity.state`, `unknown` when this role may not see
//! it, `prepared` for a prepared transaction.

use std::collections::BTreeMap;
use std::time::Duration;

use prometheus::{Encoder, Gauge, GaugeVec, Opts, Registry, TextEncoder};

use super::verdict::{Judged, Verdict};

/// The `Content-Type` of [`encode`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The metrics of a snapshot (`Ok`) or of a failed one (`Err`: only
/// `locklab_up 0` and the duration), taking `took` to connect and query.
pub fn encode(result: Result<&Judged, ()>, took: Duration) -> String {
    encode_for(result, took, None)
}

/// The metric families of the exporter's own `/metrics` when it serves named
/// targets (`holders serve --config`): its health, not a server's locks.
///
/// | metric | type | labels | value |
/// |---|---|---|---|
/// | `locklab_exporter_build_info` | gauge | `version` | 1 |
/// | `locklab_exporter_targets` | gauge | | targets in the config file |
/// | `locklab_exporter_probes_total` | counter | `target`, `result` (`success`, `failure`) | probes answered since start |
/// | `locklab_exporter_last_probe_duration_seconds` | gauge | `target` | the last probe's time to connect and take the snapshot (s) |
pub const EXPORTER_FAMILIES: &[&str] = &[
    "locklab_exporter_build_info",
    "locklab_exporter_targets",
    "locklab_exporter_probes_total",
    "locklab_exporter_last_probe_duration_seconds",
];

/// [`encode`], with the label `target` on every metric when `target` is given
/// (a probe of a named target).
pub fn encode_for(result: Result<&Judged, ()>, took: Duration, target: Option<&str>) -> String {
    let registry = match target {
        Some(t) => {
            Registry::new_custom(None, Some([("target".to_owned(), t.to_owned())].into())).expect("a valid label")
        }
        None => Registry::new(),
    };
    let gauge = |name: &str, help: &str| {
        let g = Gauge::with_opts(Opts::new(name, help)).expect("valid metric name");
        registry.register(Box::new(g.clone())).expect("registered once");
        g
    };
    let vec = |name: &str, help: &str, labels: &[&str]| {
        let g = GaugeVec::new(Opts::new(name, help), labels).expect("valid metric name");
        registry.register(Box::new(g.clone())).expect("registered once");
        g
    };
    gauge(
        "locklab_up",
        "1 when the snapshot of pg_locks was taken, 0 when the server could not be read",
    )
    .set(f64::from(u8::from(result.is_ok())));
    gauge(
        "locklab_snapshot_duration_seconds",
        "Seconds to connect and take the snapshot of pg_locks and pg_stat_activity",
    )
    .set(took.as_secs_f64());
    if let Ok(judged) = result {
        let locks = vec(
            "locklab_advisory_locks",
            "Advisory locks, held (granted=true) and awaited, by database, session state, mode and application_name",
            &["database", "state", "mode", "granted", "application_name"],
        );
        let mut counts: BTreeMap<[String; 5], u64> = BTreeMap::new();
        for l in &judged.judged {
            let l = &l.lock;
            let state = match (&l.state, l.pid, l.visible) {
                (_, None, _) => "prepared".to_owned(),
                (Some(s), _, true) => s.clone(),
                _ => "unknown".to_owned(),
            };
            let labels = [
                l.database.clone().unwrap_or_default(),
                state,
                l.mode.as_str().to_owned(),
                l.granted.to_string(),
                l.application_name.clone().unwrap_or_default(),
            ];
            *counts.entry(labels).or_default() += 1;
        }
        for (labels, n) in counts {
            let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
            locks.with_label_values(&labels).set(n as f64);
        }
        let verdicts = vec(
            "locklab_advisory_verdict_locks",
            "Advisory locks per verdict of locklab holders (leaked, stuck, waiting, expected, unknown, ok)",
            &["verdict"],
        );
        for v in Verdict::ALL {
            verdicts.with_label_values(&[v.as_str()]).set(judged.count(v) as f64);
        }
        gauge(
            "locklab_advisory_leaked_locks",
            "Advisory locks held by sessions idle outside a transaction for at least --idle-after (not allow-listed)",
        )
        .set(judged.count(Verdict::Leaked) as f64);
        gauge(
            "locklab_advisory_stuck_locks",
            "Advisory locks held by sessions idle in transaction for at least --idle-after",
        )
        .set(judged.count(Verdict::Stuck) as f64);
        gauge(
            "locklab_advisory_waiters",
            "Awaited advisory locks (not granted), however young",
        )
        .set(judged.judged.iter().filter(|l| !l.lock.granted).count() as f64);
        gauge(
            "locklab_advisory_oldest_idle_holder_seconds",
            "Longest time a session in state idle has held an advisory lock, in seconds (0: none)",
        )
        .set(judged.oldest_idle_holder_s().unwrap_or(0.0));
        gauge(
            "locklab_advisory_oldest_waiter_seconds",
            "Longest time a waiter has waited for an advisory lock, in seconds (0: none)",
        )
        .set(judged.oldest_waiter_s().unwrap_or(0.0));
    }
    let mut out = Vec::new();
    // Writing into a Vec fails only on invalid metric families, which the
    // registrations above rule out.
    let _ = TextEncoder::new().encode(&registry.gather(), &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Writes `text` to `path` atomically: a temporary file in the same
/// directory, renamed over `path` (node_exporter's textfile collector must
/// never read half a file).
///
/// # Errors
/// The directory is not writable, or the rename failed.
pub fn write_textfile(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".locklab-holders")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| anyhow::anyhow!("cannot write a file in {}: {e}", dir.display()))?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    // tempfile creates files 0600; the collector may run as another user.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.persist(path)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {}", path.display(), e.error))?;
    Ok(())
}
