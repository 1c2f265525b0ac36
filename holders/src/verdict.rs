//! A verdict per lock, from its session's state and how long it has been in it.

use std::time::Duration;

use serde::Serialize;

use super::names::KeyNames;
use super::{Lock, Snapshot, age_text};

/// How long is too long.
#[derive(Clone, Copy, Debug)]
pub struct Thresholds {
    /// A holder `idle` (leaked) or `idle in transaction` (stuck) at least this long
    /// (`--idle-after`, default 60 s: the guide's "longer than a minute").
    pub idle_after: Duration,
    /// A waiter waiting at least this long (`--wait-after`, default 10 s).
    pub wait_after: Duration,
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        Thresholds {
            idle_after: Duration::from_secs(60),
            wait_after: Duration::from_secs(10),
        }
    }
}

/// What a lock's row means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Held by a session that is `idle`, outside any transaction, for at least
    /// `idle_after`: a session-level lock nobody will release until the
    /// connection closes — the guide's pooled-connection leak (a transaction-level
    /// lock cannot be held outside a transaction).
    Leaked,
    /// Held by a session `idle in transaction` (or aborted) for at least
    /// `idle_after`: the transaction, and every lock in it, waits for a client
    /// that has stopped talking. Also a prepared transaction that old: it
    /// waits for a `COMMIT PREPARED` or `ROLLBACK PREPARED`.
    Stuck,
    /// A waiter that has waited at least `wait_after`.
    Waiting,
    /// Would be leaked, but the allow-list says this holder keeps it on purpose.
    Expected,
    /// Held by a session this role may not see (no `pg_read_all_stats`): no verdict.
    Unknown,
    /// Nothing wrong: held by an active session, held briefly, or a short wait.
    Ok,
}

impl Verdict {
    /// The lowercase name used in tables, JSON, metrics and `--fail-on`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Leaked => "leaked",
            Verdict::Stuck => "stuck",
            Verdict::Waiting => "waiting",
            Verdict::Expected => "expected",
            Verdict::Unknown => "unknown",
            Verdict::Ok => "ok",
        }
    }

    /// Every verdict, worst first.
    pub const ALL: [Verdict; 6] = [
        Verdict::Leaked,
        Verdict::Stuck,
        Verdict::Waiting,
        Verdict::Expected,
        Verdict::Unknown,
        Verdict::Ok,
    ];
}

/// A lock with its verdict and name.
#[derive(Clone, Debug, Serialize)]
pub struct JudgedLock {
    /// The `pg_locks` row and its session.
    #[serde(flatten)]
    pub lock: Lock,
    /// The verdict.
    pub verdict: Verdict,
    /// The key's name from `--keys`, e.g. `rollup:42`.
    pub name: Option<String>,
    /// Why: one sentence (and for a leaked lock, what an operator could do).
    pub why: String,
    /// For a leaked or stuck lock: the statement that would end its session.
    /// locklab never runs it.
    pub terminate: Option<String>,
}

/// A judged snapshot.
#[derive(Clone, Debug, Serialize)]
pub struct Judged {
    /// The snapshot, locks moved into [`Judged::judged`].
    #[serde(flatten)]
    pub snapshot: Snapshot,
    /// `idle_after` in s.
    pub idle_after_s: f64,
    /// `wait_after` in s.
    pub wait_after_s: f64,
    /// The locks with their verdicts, worst verdict first, then by database,
    /// key, holders before waiters, pid.
    #[serde(rename = "locks")]
    pub judged: Vec<JudgedLock>,
    /// Locks whose session this role could not see, when there are any: what
    /// the output could not show and how to fix it.
    pub not_visible: Option<String>,
}

impl Judged {
    /// How many locks have `verdict`.
    pub fn count(&self, verdict: Verdict) -> usize {
        self.judged.iter().filter(|l| l.verdict == verdict).count()
    }

    /// The oldest `idle` holder's time in that state (s), if any holder is idle.
    pub fn oldest_idle_holder_s(&self) -> Option<f64> {
        self.judged
            .iter()
            .filter(|l| l.lock.granted && l.lock.state.as_deref() == Some("idle"))
            .filter_map(|l| l.lock.state_s)
            .reduce(f64::max)
    }

    /// The oldest waiter's wait (s, `pg_locks.waitstart`), if any lock is awaited.
    pub fn oldest_waiter_s(&self) -> Option<f64> {
        self.judged
            .iter()
            .filter(|l| !l.lock.granted)
            .filter_map(|l| l.lock.wait_s)
            .reduce(f64::max)
    }
}

/// Gives every lock of `snapshot` its verdict.
pub fn judge(mut snapshot: Snapshot, thresholds: Thresholds, names: &KeyNames) -> Judged {
    let locks = std::mem::take(&mut snapshot.locks);
    let idle_after = thresholds.idle_after.as_secs_f64();
    let wait_after = thresholds.wait_after.as_secs_f64();
    let mut judged: Vec<JudgedLock> = locks
        .into_iter()
        .map(|lock| {
            let (verdict, why, terminate) = verdict_of(&lock, idle_after, wait_after, names);
            JudgedLock {
                name: names.name(&lock.key).map(str::to_owned),
                lock,
                verdict,
                why,
                terminate,
            }
        })
        .collect();
    // Worst first; then by database, key, holders before waiters, pid.
    judged.sort_by(|a, b| {
        (a.verdict, &a.lock.database, a.lock.key, !a.lock.granted, a.lock.pid).cmp(&(
            b.verdict,
            &b.lock.database,
            b.lock.key,
            !b.lock.granted,
            b.lock.pid,
        ))
    });
    let hidden = judged
        .iter()
        .filter(|l| !l.lock.visible && l.lock.pid.is_some())
        .count();
    let not_visible = (hidden > 0).then(|| {
        format!(
            "{hidden} lock(s) belong to sessions of other roles; role '{}' may not see those sessions' \
             state, how long they have been in it, their transaction's age, client address and query text (PostgreSQL shows them only to superusers, \
             the session's own role and members of pg_read_all_stats): their verdict is 'unknown'. \
             To see them: grant pg_monitor to \"{}\";",
            snapshot.role, snapshot.role
        )
    });
    Judged {
        snapshot,
        idle_after_s: idle_after,
        wait_after_s: wait_after,
        judged,
        not_visible,
    }
}

fn verdict_of(lock: &Lock, idle_after: f64, wait_after: f64, names: &KeyNames) -> (Verdict, String, Option<String>) {
    let blocking = if lock.blocks.is_empty() {
        String::new()
    } else {
        format!("; it blocks {}", join(&lock.blocks))
    };
    let Some(pid) = lock.pid else {
        // A prepared transaction outlives every session, and a restart too.
        let gid = lock.prepared.as_deref().unwrap_or("?");
        let age = lock.state_s.unwrap_or(0.0);
        let why = format!(
            "held by prepared transaction '{gid}', prepared {} ago{blocking}",
            age_text(age)
        );
        if age < idle_after {
            return (Verdict::Ok, why, None);
        }
        let gid = gid.replace('\'', "''");
        let terminate = format!(
            "commit prepared '{gid}'; -- or: rollback prepared '{gid}'; only one of these releases its locks \
             (there is no session to end: it outlives connections and restarts); as its owner or a superuser"
        );
        return (Verdict::Stuck, why, Some(terminate));
    };
    if !lock.granted {
        let waited = lock.wait_s.or(lock.state_s).unwrap_or(0.0);
        let by = if lock.blocked_by.is_empty() {
            String::new()
        } else {
            format!(", blocked by {}", join(&lock.blocked_by))
        };
        let why = format!("waiting for {}{by}", age_text(waited));
        let verdict = if waited >= wait_after {
            Verdict::Waiting
        } else {
            Verdict::Ok
        };
        return (verdict, why, None);
    }
    if !lock.visible {
        let why = "held by a session of another role this role may not see".into();
        return (Verdict::Unknown, why, None);
    }
    let Some(state) = lock.state.as_deref() else {
        // The session ended between reading pg_locks and pg_stat_activity.
        return (
            Verdict::Ok,
            format!("its session (pid {pid}) had ended when pg_stat_activity was read"),
            None,
        );
    };
    let age = lock.state_s.unwrap_or(0.0);
    match state {
        "idle" if age >= idle_after => {
            if let Some(e) = names.expected(&lock.key, lock.application_name.as_deref()) {
                return (
                    Verdict::Expected,
                    format!("idle for {}: {}", age_text(age), e.reason),
                    None,
                );
            }
            let why = format!(
                "session-level lock on a connection idle for {}, outside any transaction: nothing releases it \
                 until that connection closes or its code unlocks it (a pool keeps the connection open){blocking}",
                age_text(age)
            );
            let terminate = format!(
                "select pg_terminate_backend({pid}); -- ends the session and with it every lock it holds \
                 (any it holds on purpose too); a pool replaces the connection. Fix the code path that locked \
                 without unlocking (its last query is shown)."
            );
            (Verdict::Leaked, why, Some(terminate))
        }
        "idle in transaction" | "idle in transaction (aborted)" if age >= idle_after => {
            let why = format!(
                "held by a transaction whose client has sent nothing for {}{blocking}; \
                 idle_in_transaction_session_timeout would end such sessions",
                age_text(age)
            );
            let terminate = format!(
                "select pg_terminate_backend({pid}); -- rolls back its transaction and ends the session, \
                 releasing every lock it holds"
            );
            (Verdict::Stuck, why, Some(terminate))
        }
        _ => (Verdict::Ok, format!("{state} for {}{blocking}", age_text(age)), None),
    }
}

/// `pid 12, 13`; a 0 (a prepared transaction, in `pg_blocking_pids`) as `a prepared transaction`.
pub fn join(pids: &[i32]) -> String {
    let (prepared, pids): (Vec<i32>, Vec<i32>) = pids.iter().partition(|p| **p == 0);
    let mut parts = Vec::new();
    if !pids.is_empty() {
        parts.push(format!(
            "pid {}",
            pids.iter().map(i32::to_string).collect::<Vec<_>>().join(", ")
        ));
    }
    if !prepared.is_empty() {
        parts.push("a prepared transaction".to_owned());
    }
    parts.join(" and ")
}
