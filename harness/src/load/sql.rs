//! The SQL of a load run: its tables, each pattern's critical section, and
//! the same statements as a pgbench script.
//!
//! Every critical section is one read-modify-write on the key's counter row,
//! made so that it breaks without the lock: the counter is read by a CTE
//! (`r`) whose snapshot the `update` does not re-read, so two sections that
//! overlap write the same value and one increment is lost (PostgreSQL docs
//! §13.2.1: in READ COMMITTED the `update` re-checks the target row, not
//! the other relations of the statement). The same statement appends the
//! section to `locklab_section` with the server's clock at entry (when the
//! counter was read: after the lock call returned, which was an earlier
//! statement, so the snapshot is newer than the previous holder's commit)
//! and at exit (before the `commit` or unlock that releases the lock), and
//! the transaction's start (`now()`, before the lock call) for the lock wait.

use super::Pattern;

/// The run's tables, for `keys` keys and `jobs` queue jobs. Unlogged: the
/// load measures locks, not WAL.
pub fn schema(keys: u32, jobs: u64) -> String {
    format!(
        "create unlogged table locklab_counter (key bigint primary key, n bigint not null); \
         insert into locklab_counter select g, 0 from generate_series(1, {keys}) g; \
         create unlogged table locklab_section (worker int not null, key bigint not null, \
           pid int not null, began timestamptz not null, t0 timestamptz not null, \
           t1 timestamptz not null, read bigint not null); \
         create unlogged table locklab_job (id bigint primary key, done boolean not null default false); \
         insert into locklab_job (id) select generate_series(1, {jobs}); \
         create index on locklab_job (id) where not done; \
         create unlogged table locklab_claim (job bigint not null, worker int not null, \
           pid int not null, at timestamptz not null); \
         analyze locklab_counter, locklab_job"
    )
}

/// The critical section on key `k` by worker `w` (one statement). `k` and
/// `w` are SQL text: numbers, or pgbench's `:k` and `:client_id`. With
/// `hold_us` > 0 the section does that much work between its read and its
/// write (`pg_sleep`, on the server: the work a real section does while it
/// holds the lock).
pub fn section(w: &str, k: &str, hold_us: u32) -> String {
    let (hold, from) = if hold_us > 0 {
        (
            format!("h as (select r.*, pg_sleep({hold_us} / 1e6) from r), "),
            "h as r",
        )
    } else {
        (String::new(), "r")
    };
    format!(
        "with r as (select n, clock_timestamp() as t0 from locklab_counter where key = {k}), {hold}\
         u as (update locklab_counter c set n = r.n + 1 from {from} where c.key = {k} returning r.n, r.t0) \
         insert into locklab_section select {w}, {k}, pg_backend_pid(), now(), u.t0, clock_timestamp(), u.n from u"
    )
}

/// One job claim by worker `w` (one statement, autocommit): the first job
/// not done that no other transaction has locked (`FOR UPDATE SKIP
/// LOCKED`), marked done and appended to `locklab_claim`. Returns the job's
/// id, or no row once every job is done.
pub fn claim(w: &str) -> String {
    format!(
        "with j as (select id from locklab_job where not done order by id limit 1 for update skip locked), \
         u as (update locklab_job set done = true where id = (select id from j) returning id) \
         insert into locklab_claim select u.id, {w}, pg_backend_pid(), clock_timestamp() from u returning job"
    )
}

/// The statements one attempt sends, as the harness's workers send them
/// (simple query protocol, one round trip per entry). `Try` sends its
/// second entry only when the first returned 1, else [`TRY_BUSY`].
pub fn attempt(pattern: Pattern, w: u32, k: i64, hold_us: u32) -> Vec<String> {
    let (w, k) = (w.to_string(), k.to_string());
    let section = section(&w, &k, hold_us);
    match pattern {
        Pattern::XactTry => vec![
            format!("begin; select pg_try_advisory_xact_lock({k})::int"),
            format!("{section}; commit"),
        ],
        Pattern::XactWait => vec![format!("begin; select pg_advisory_xact_lock({k}); {section}; commit")],
        Pattern::SessionDedicated => vec![format!(
            "begin; select pg_advisory_lock({k}); {section}; commit; select pg_advisory_unlock({k})"
        )],
        Pattern::SkipLocked => vec![claim(&w)],
        Pattern::SessionAcrossCheckouts => vec![
            format!("select pg_advisory_lock({k})"),
            format!("begin; {section}; commit"),
            format!("select pg_advisory_unlock({k})"),
        ],
    }
}

/// What `Try` sends when the lock was not available.
pub const TRY_BUSY: &str = "commit";

/// The pgbench script of `pattern` (`-M simple`; `\;` joins statements into
/// one round trip, as the harness's workers send them), with `keys` given
/// as `-D keys=K`. `None`: the pattern needs a pool (pgbench keeps one
/// connection per client).
pub fn pgbench_script(pattern: Pattern, hold_us: u32) -> Option<String> {
    let section = section(":client_id", ":k", hold_us);
    let pick = "\\set k random(1, :keys)\n";
    Some(match pattern {
        Pattern::XactTry => format!(
            "{pick}begin \\; select pg_try_advisory_xact_lock(:k)::int as got \\gset\n\
             \\if :got\n{section} \\; commit;\n\\else\n{TRY_BUSY};\n\\endif\n"
        ),
        Pattern::XactWait => format!("{pick}begin \\; select pg_advisory_xact_lock(:k) \\; {section} \\; commit;\n"),
        Pattern::SessionDedicated => format!(
            "{pick}begin \\; select pg_advisory_lock(:k) \\; {section} \\; commit \\; select pg_advisory_unlock(:k);\n"
        ),
        Pattern::SkipLocked => format!("{};\n", claim(":client_id")),
        Pattern::SessionAcrossCheckouts => return None,
    })
}

/// The history: every section as (worker, key, pid, began µs, t0 µs, t1 µs,
/// read), server clock, µs since the Unix epoch.
pub const SECTIONS: &str = "select worker, key, pid, \
     (extract(epoch from began) * 1000000)::bigint, (extract(epoch from t0) * 1000000)::bigint, \
     (extract(epoch from t1) * 1000000)::bigint, read from locklab_section";

/// Every key's counter that moved: (key, n).
pub const COUNTERS: &str = "select key, n from locklab_counter where n <> 0";

/// Every claim: (job, worker, pid, at µs).
pub const CLAIMS: &str = "select job, worker, pid, (extract(epoch from at) * 1000000)::bigint from locklab_claim";
