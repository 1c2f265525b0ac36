//! `locklab repro`: one cell written out as a reproduction that runs
//! without locklab, for a maintainer's issue tracker.
//!
//! - For a column without a client-side pool (a direct connection, or one
//!   through a pooler), a bash script over `psql` ([`script`]): each actor
//!   is a `psql` session fed through a FIFO; a step's statement is followed
//!   by `\echo` of a marker, and the script waits for the marker in the
//!   session's output before the next step, as the harness waits for a
//!   call's result. A background statement is not waited for; `blocked:`
//!   polls `pg_stat_activity` for the actor's backend waiting on a lock;
//!   `observe: advisory_locks` reads `pg_locks`. Each recorded step prints
//!   what it read next to what locklab read, and the script ends by saying
//!   whether every reading matched (exit 0) or not (exit 1).
//! - For a pool column, the same sequence as numbered steps in the pool's
//!   API terms ([`pool_steps`]): checkout, the statements, return; not run.
//!
//! Only the step kinds that are a statement, a connection's open or close,
//! or a read of the server have a `psql` form; a scenario with another kind
//! (a crash, a partition, a restart, a lock library's call) has none, and
//! [`script`] says which step.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use locklab_core::keys::AdvisoryKey;
use locklab_drivers::{DriverInfo, DriverKind, PoolerMode};

use crate::scenario::steps::StepKind;
use crate::scenario::steps::sql::Protocol;
use crate::scenario::{Scenario, Via, When};

/// What the header says: where the cell comes from and what it showed.
pub struct Header {
    /// `PostgreSQL 17.11` (and the pooler's version), as locklab ran it.
    pub versions: String,
    /// The column's configuration.
    pub configuration: String,
    /// One line per property the cell decides: `id (severity): verdict here — fact`.
    pub properties: Vec<String>,
    /// Where the readings come from (`reports/matrix.json`).
    pub from: String,
}

/// A step with no `psql` form.
#[derive(Debug)]
pub struct NoPsqlForm(pub String);

impl std::fmt::Display for NoPsqlForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The bash script reproducing `scenario` on `column` (a column without a
/// client-side pool), with `readings` (record name → what locklab read) to
/// compare with.
///
/// # Errors
/// A step whose kind has no `psql` form (named, with its place in the file).
pub fn script(
    scenario: &Scenario,
    column: &DriverInfo,
    readings: &BTreeMap<String, String>,
    header: &Header,
) -> Result<String, NoPsqlForm> {
    let pooler = column.pooler;
    let mut out = String::new();
    let _ = writeln!(out, "#!/usr/bin/env bash");
    let _ = writeln!(out, "# locklab repro: {} × {}", scenario.name, column.id);
    comment(&mut out, &format!("Scenario: {}", scenario.description));
    if let Some(s) = &scenario.source {
        comment(&mut out, &format!("Source: {s}"));
    }
    let root = crate::server::workspace_root();
    let file = scenario.file.strip_prefix(&root).unwrap_or(&scenario.file);
    comment(&mut out, &format!("File: {} (locklab's repository)", file.display()));
    comment(&mut out, &format!("Column: {} — {}", column.id, header.configuration));
    comment(
        &mut out,
        &format!("As locklab ran it ({}): {}", header.from, header.versions),
    );
    for p in &header.properties {
        comment(&mut out, &format!("Property: {p}"));
    }
    comment(
        &mut out,
        "What to expect: each recorded step prints what it read here next to what locklab read; the last line says whether all matched (exit 0) or not (exit 1).",
    );
    let _ = writeln!(out, "#");
    comment(
        &mut out,
        "Run it against a server: PGHOST, PGPORT, PGUSER, PGPASSWORD (a role that may create databases; the script makes one and drops it).",
    );
    if let Some(p) = pooler {
        comment(
            &mut out,
            &format!(
                "Pool actors connect through the pooler at POOLER_HOST, POOLER_PORT (POOLER_PASSWORD, default PGPASSWORD), configured as above ({} mode), routing the script's database to the server.",
                p.mode.as_str()
            ),
        );
    }
    comment(
        &mut out,
        "psql sends the statements of a step one by one where locklab sends them as one Query message (several statements in one step).",
    );
    out.push_str(PRELUDE);
    if pooler.is_some() {
        out.push_str(": \"${POOLER_HOST:?set POOLER_HOST (and POOLER_PORT) to the pooler in front of the server}\"\n");
        out.push_str(": \"${POOLER_PORT:?set POOLER_PORT}\"\n");
    }
    let _ = writeln!(out, "\nsay \"locklab repro: {} × {}\"", scenario.name, column.id);
    for p in &header.properties {
        let _ = writeln!(out, "say {}", shell_quote(&format!("locklab: {p}")));
    }
    out.push_str("admin -d \"${PGDATABASE:-postgres}\" -c \"create database $DB\" >/dev/null || exit 2\n");
    out.push_str("created=1\n");
    for (name, value) in &scenario.server_settings.list {
        // `$DB` is the shell's: the statement in double quotes.
        let sql = format!("alter database $DB set {name} = '{}'", value.replace('\'', "''"));
        let escaped = sql.replace('\\', "\\\\").replace('"', "\\\"").replace('`', "\\`");
        let _ = writeln!(out, "admin -d \"$DB\" -c \"{escaped}\" >/dev/null || exit 2");
    }
    for (sql, _) in &scenario.setup {
        let _ = writeln!(out, "admin -d \"$DB\" -c {} >/dev/null || exit 2", shell_quote(sql));
    }
    // Behind a pooler that resets a server connection after every
    // transaction, each pool actor's step waits for that reset, as locklab
    // does (`StepCx::wait_pooler_reset`); the direct actors' backends are
    // not the pooler's, so the script keeps their pids to leave them out.
    let resets_each =
        pooler.is_some_and(|p| p.mode == PoolerMode::Transaction && p.check_in.resets_every_transaction());
    // Direct actors connect for the whole run.
    for a in &scenario.actors {
        if a.via == Via::Direct {
            let _ = writeln!(
                out,
                "open_session {} server {}",
                a.name,
                shell_quote(&options(&a.settings.list))
            );
            if resets_each {
                let _ = writeln!(out, "run {} 'select pg_backend_pid()' __locklab_pid", a.name);
                let _ = writeln!(out, "DIRECT_PIDS=\"$DIRECT_PIDS,$(value {} __locklab_pid)\"", a.name);
            }
        }
    }
    let pool_options = shell_quote(&options(&scenario.pool_settings.list));
    let via_pool = if pooler.is_some() { "pooler" } else { "server" };
    let (session_mode, reset) = match pooler {
        Some(p) => (p.mode == PoolerMode::Session, p.check_in.reset_query()),
        None => (false, ""),
    };
    let pooled = column.kind == DriverKind::Pooled;
    let mut background: BTreeMap<usize, (String, String)> = BTreeMap::new();
    for step in &scenario.steps {
        let n = step.index + 1;
        let at = scenario.at(step.pos);
        match step.when() {
            Some(When::Pooled) if !pooled => {
                let _ = writeln!(out, "\n# step {n}: only for pooled columns (skipped)");
                if let Some(r) = &step.record {
                    let _ = writeln!(
                        out,
                        "record {} n/a {}",
                        shell_quote(r),
                        shell_quote(readings.get(r).map_or("", String::as_str))
                    );
                }
                continue;
            }
            Some(When::Direct) if pooled => continue,
            _ => {}
        }
        let label = step.label(&scenario.actors, &scenario.steps);
        let _ = writeln!(out, "\n# step {n}: {}", label.replace('\n', " "));
        let name = |i: usize| scenario.actors[i].name.clone();
        let mark = format!("__locklab_step_{n}");
        match &step.kind {
            StepKind::Sql(s) if s.bound.is_some() => {
                return Err(NoPsqlForm(format!(
                    "step {n} ({label}) at {at}: a call the client gives up on (client_timeout_ms) has no psql form"
                )));
            }
            StepKind::Sql(s) => {
                let actor = name(s.actor);
                let sql = match s.protocol {
                    Protocol::Simple => sql_arg(&s.sql),
                    // psql 16 and later: `\bind` sends the next query with the
                    // extended protocol, its parameters bound.
                    Protocol::Extended => format!("{}{}", sql_arg(&s.sql), shell_quote(&bind(&s.params))),
                };
                let _ = writeln!(out, "run {actor} {sql} {mark}");
                if let Some(var) = &s.save {
                    let _ = writeln!(out, "V_{var}=$(value {actor} {mark})");
                }
                if let Some(r) = &step.record {
                    record(&mut out, r, &format!("$(value {actor} {mark})"), readings);
                }
            }
            StepKind::Background(s) => {
                let actor = name(s.actor);
                let _ = writeln!(out, "send {actor} {} {mark}", sql_arg(&s.sql));
                if let Some(id) = &step.id {
                    background.insert(step.index, (actor, mark.clone()));
                    let _ = writeln!(out, "# (in the background: {id})");
                }
            }
            StepKind::Transaction(t) => {
                let actor = name(t.actor);
                let word = format!("{:?}", t.action).to_lowercase();
                let _ = writeln!(out, "run {actor} '{word}' {mark}");
                if let Some(r) = &step.record {
                    record(&mut out, r, &format!("$(value {actor} {mark})"), readings);
                }
            }
            StepKind::Checkout(c) => {
                let actor = name(c.actor);
                let _ = writeln!(out, "open_session {actor} {via_pool} {pool_options}");
                // Its backend, for the wait after its return (none behind
                // transaction pooling, where no backend is the client's).
                if pooler.is_none() || session_mode {
                    let _ = writeln!(out, "run {actor} 'select pg_backend_pid()' {mark}");
                    let _ = writeln!(out, "P_{actor}=$(value {actor} {mark})");
                }
            }
            StepKind::Return(r) => {
                let actor = name(r.actor);
                let _ = writeln!(out, "close_session {actor}");
                if pooler.is_none() {
                    let _ = writeln!(out, "wait_gone \"$P_{actor}\"");
                } else if session_mode {
                    let _ = writeln!(out, "wait_reset \"$P_{actor}\" {}", shell_quote(reset));
                }
            }
            StepKind::Disconnect(d) => {
                let actor = name(d.actor);
                let _ = writeln!(out, "close_session {actor}");
            }
            StepKind::Observe(o) => {
                let Some(key) = o.key else {
                    return Err(NoPsqlForm(format!(
                        "step {n} ({label}) at {at}: an observe without a key has no psql form here"
                    )));
                };
                let observer = name(o.observer);
                let _ = writeln!(
                    out,
                    "run {observer} \"$(locks_of {})\" {mark}",
                    shell_quote(&key_match(key))
                );
                if let Some(r) = &step.record {
                    record(&mut out, r, &format!("$(value {observer} {mark})"), readings);
                }
            }
            StepKind::Blocked(b) => {
                let Some(&target) = b.targets.first() else {
                    return Err(NoPsqlForm(format!(
                        "step {n} ({label}) at {at}: blocked without an actor"
                    )));
                };
                let target_step = scenario
                    .steps
                    .iter()
                    .rev()
                    .find(|s| s.index < step.index && matches!(&s.kind, StepKind::Background(bg) if bg.actor == target))
                    .map(|s| format!("__locklab_step_{}", s.index + 1))
                    .unwrap_or_default();
                let _ = writeln!(out, "W=$(wait_blocked {} {target_step})", name(target));
                if let Some(r) = &step.record {
                    record(&mut out, r, "$W", readings);
                }
            }
            StepKind::Await(a) => {
                let Some((actor, m)) = background.get(&a.target).cloned() else {
                    return Err(NoPsqlForm(format!(
                        "step {n} ({label}) at {at}: awaits a step the script did not start"
                    )));
                };
                let _ = writeln!(out, "wait_mark {actor} {m}");
                if let Some(r) = &step.record {
                    record(&mut out, r, &format!("$(value {actor} {m})"), readings);
                }
            }
            other => {
                return Err(NoPsqlForm(format!(
                    "step {n} ({label}) at {at}: a '{}' step has no psql form (locklab repro writes statements, connections' opens and closes, and reads of pg_locks and pg_stat_activity)",
                    other.declaration().word
                )));
            }
        }
        let by_pool_actor = step.actor().is_some_and(|a| scenario.actors[a].via == Via::Pool);
        if resets_each && by_pool_actor && !matches!(step.kind, StepKind::Background(_)) {
            let _ = writeln!(out, "wait_resets {}", shell_quote(reset));
        }
    }
    out.push_str("\nfinish\n");
    Ok(out)
}

/// The sequence of `scenario` as numbered steps in a pool's API terms, for a
/// pool column (`column.crate_name` names the pool), with what locklab read
/// at each recorded step. Not run by anything.
pub fn pool_steps(
    scenario: &Scenario,
    column: &DriverInfo,
    readings: &BTreeMap<String, String>,
    header: &Header,
) -> String {
    let (checkout, give_back) = api(pool_crate(column));
    let mut out = String::new();
    let _ = writeln!(out, "# locklab repro: {} × {}\n", scenario.name, column.id);
    let _ = writeln!(out, "{}\n", scenario.description);
    if let Some(s) = &scenario.source {
        let _ = writeln!(out, "Source: {s}\n");
    }
    let _ = writeln!(
        out,
        "Column: `{}` — {} ({})\n",
        column.id, header.configuration, header.versions
    );
    for p in &header.properties {
        let _ = writeln!(out, "- {p}");
    }
    let _ = writeln!(
        out,
        "\nThe steps, in the pool's terms (connections of actors marked *direct* are plain connections, outside the pool):\n"
    );
    let mut n = 0;
    for step in &scenario.steps {
        if step.when() == Some(When::Direct) {
            continue;
        }
        n += 1;
        let actor = step.actor().map(|a| &scenario.actors[a]);
        let who = actor.map_or("—".to_owned(), |a| {
            if a.via == Via::Direct {
                format!("{} (direct)", a.name)
            } else {
                a.name.clone()
            }
        });
        let what = match &step.kind {
            StepKind::Checkout(_) => format!("check a connection out of the pool: {checkout}"),
            StepKind::Return(_) => format!("give the connection back: {give_back}"),
            StepKind::Sql(s) => format!("run `{}`", s.sql.replace('\n', " ")),
            StepKind::Background(s) => format!("start `{}` without waiting for it", s.sql.replace('\n', " ")),
            StepKind::Library(l) if l.library.is_lock_crate() => {
                lock_crate_call(l, checkout, column.pooler_mode() == Some(PoolerMode::Transaction))
            }
            _ => step.label(&scenario.actors, &scenario.steps).replace('\n', " "),
        };
        let read = step
            .record
            .as_ref()
            .map(|r| {
                format!(
                    " — locklab read `{r}`: {}",
                    readings.get(r).map_or("(not in the report)", String::as_str)
                )
            })
            .unwrap_or_default();
        let _ = writeln!(out, "{n}. {who}: {what}{read}");
    }
    out
}

/// The crate whose pool a column's connections come from: for a column of
/// the lock crate, the pool of the column it wraps
/// (`locklab_drivers::lock_crate::COLUMNS`).
fn pool_crate(column: &DriverInfo) -> &'static str {
    if column.crate_name != locklab_drivers::libraries::LOCK_CRATE {
        return column.crate_name;
    }
    locklab_drivers::lock_crate::COLUMNS
        .iter()
        .find(|(id, _)| *id == column.id)
        .and_then(|(_, inner)| locklab_drivers::find(inner).ok())
        .map_or(column.crate_name, |d| d.info().crate_name)
}

/// A `library: pg-advisory-lock…` step as the application's code with the
/// lock crate: its call, on a connection checked out with `checkout`
/// (behind transaction pooling, with `Pooling::Transaction` declared).
fn lock_crate_call(l: &crate::scenario::LibraryStep, checkout: &str, transaction_pooling: bool) -> String {
    let session = |key: i64, wait: String| {
        if transaction_pooling {
            format!("`SessionLock::acquire_with(conn, Key::new({key}), {wait}, Pooling::Transaction)`")
        } else {
            format!("`SessionLock::acquire(conn, Key::new({key}), {wait})`")
        }
    };
    use locklab_drivers::libraries::{Library, LibraryCall};
    let xact = l.library == Library::PgAdvisoryLockXact;
    let wait = |timeout_ms: Option<u64>| {
        format!(
            "Wait::Within({} ms)",
            timeout_ms.unwrap_or(locklab_drivers::lock_crate::DEFAULT_WAIT_MS)
        )
    };
    let mut text = match (&l.call, xact) {
        (LibraryCall::Acquire { key, timeout_ms }, false) => {
            format!("{} on a connection from {checkout}", session(*key, wait(*timeout_ms)))
        }
        (LibraryCall::TryAcquire { key }, false) => {
            format!("{} on a connection from {checkout}", session(*key, "Wait::Try".into()))
        }
        (LibraryCall::Acquire { key, timeout_ms }, true) => format!(
            "`BEGIN`, then `lock_xact(&mut tx, Key::new({key}), {})` on a connection from {checkout}",
            wait(*timeout_ms)
        ),
        (LibraryCall::TryAcquire { key }, true) => {
            format!("`BEGIN`, then `lock_xact(&mut tx, Key::new({key}), Wait::Try)` on a connection from {checkout}")
        }
        (LibraryCall::Release { key }, false) => format!("`guard.release()` (key {key})"),
        (LibraryCall::Release { key }, true) => format!("`COMMIT` (key {key})"),
        (LibraryCall::DropHandle { key }, false) => format!("drop the guard (key {key})"),
        (LibraryCall::DropHandle { key }, true) => format!("drop the transaction: `ROLLBACK` (key {key})"),
        (other, _) => format!("{other:?}"),
    };
    if let Some(ms) = l.client_timeout_ms {
        text.push_str(&format!(", its future dropped after {ms} ms"));
    }
    text
}

/// How a pool's user checks a connection out and gives it back, by the
/// column's crate (or package).
fn api(crate_name: &str) -> (&'static str, &'static str) {
    match crate_name {
        c if c.starts_with("deadpool") => ("`pool.get().await`", "drop the `Object`"),
        c if c.starts_with("bb8") => ("`pool.get().await`", "drop the `PooledConnection`"),
        c if c.starts_with("sqlx") => ("`pool.acquire().await`", "drop the `PoolConnection`"),
        c if c.starts_with("mobc") => ("`pool.get().await`", "drop the `Connection`"),
        c if c.starts_with("r2d2") => ("`pool.get()`", "drop the `PooledConnection`"),
        c if c.starts_with("diesel") => ("`pool.get().await`", "drop the `Object`"),
        c if c.starts_with("asyncpg") => ("`await pool.acquire()`", "`await pool.release(conn)`"),
        c if c.starts_with("psycopg2") => ("`pool.getconn()`", "`pool.putconn(conn)`"),
        c if c.starts_with("psycopg") => ("`await pool.getconn()`", "`await pool.putconn(conn)`"),
        c if c.starts_with("SQLAlchemy") || c.starts_with("sqlalchemy") => ("`engine.connect()`", "`conn.close()`"),
        c if c.starts_with("HikariCP") || c.starts_with("hikari") => ("`ds.getConnection()`", "`conn.close()`"),
        c if c.starts_with("pgx") => ("`pool.Acquire(ctx)`", "`conn.Release()`"),
        c if c.starts_with("pg") || c.starts_with("node") => ("`await pool.connect()`", "`client.release()`"),
        _ => ("the pool's checkout", "the pool's return"),
    }
}

/// The `pg_locks` condition for `key` (PostgreSQL docs §54.12, `pg_locks`:
/// a bigint key in `classid` (high half) and `objid` with `objsubid` 1; two
/// int keys in `classid`, `objid` with `objsubid` 2).
fn key_match(key: AdvisoryKey) -> String {
    match key {
        AdvisoryKey::Big(k) => format!("((classid::bigint << 32) | objid::bigint) = {k} and objsubid = 1"),
        AdvisoryKey::Pair(a, b) => format!(
            "classid::bigint = ({a})::bigint & 4294967295 and objid::bigint = ({b})::bigint & 4294967295 and objsubid = 2"
        ),
    }
}

/// A `record` line: the reading here next to locklab's.
fn record(out: &mut String, name: &str, value: &str, readings: &BTreeMap<String, String>) {
    let _ = writeln!(
        out,
        "record {} \"{value}\" {}",
        shell_quote(name),
        shell_quote(readings.get(name).map_or("", String::as_str))
    );
}

/// psql's `\bind` line for `params` (psql 16 and later), after a newline.
fn bind(params: &[locklab_drivers::Param]) -> String {
    let values: Vec<String> = params
        .iter()
        .map(|p| match p {
            locklab_drivers::Param::Int(i) => i.to_string(),
            locklab_drivers::Param::Text(t) => format!("'{}'", t.replace('\'', "''")),
        })
        .collect();
    format!("\n\\bind {}", values.join(" "))
}

/// Connection settings as `PGOPTIONS` (`-c name=value …`; PostgreSQL docs
/// §20.1.4, the `options` connection parameter), or nothing.
fn options(settings: &[(String, String)]) -> String {
    settings
        .iter()
        .map(|(k, v)| format!("-c {k}={}", v.replace(' ', "\\ ")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `# text` lines, wrapped at about 100 columns.
fn comment(out: &mut String, text: &str) {
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() + word.len() > 98 && line.len() > 1 {
            let _ = writeln!(out, "{line}");
            line = String::from("#  ");
        }
        line.push(' ');
        line.push_str(word);
    }
    let _ = writeln!(out, "{line}");
}

/// `s` in single quotes for bash.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A statement as the script's argument: single-quoted, with each saved
/// value (`${name}`) spliced in from the shell variable `V_name` the script
/// set when the step that saved it ran.
fn sql_arg(sql: &str) -> String {
    let mut out = String::new();
    let mut rest = sql.trim().trim_end_matches(';');
    while let Some(i) = rest.find("${") {
        let Some(j) = rest[i..].find('}') else { break };
        out.push_str(&shell_quote(&rest[..i]));
        let _ = write!(out, "\"${{V_{}}}\"", &rest[i + 2..i + j]);
        rest = &rest[i + j + 1..];
    }
    out.push_str(&shell_quote(rest));
    out
}

/// The script's helpers (bash): the sessions, the waits, the records.
const PRELUDE: &str = r#"
set -u
: "${PGHOST:?set PGHOST, PGPORT, PGUSER and PGPASSWORD to the server}"
export PGPORT="${PGPORT:-5432}"
here=$(mktemp -d "${TMPDIR:-/tmp}/locklab-repro.XXXXXX")
DB="locklab_repro_$$"
created=0
compared=0
differ=0
say() { printf '%s\n' "$*"; }
admin() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
cleanup() {
  for f in "$here"/*.in; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .in)
    fd_var="fd_$n"
    [ -n "${!fd_var:-}" ] && eval "exec ${!fd_var}>&-"
  done
  kill $(jobs -p) 2>/dev/null
  wait 2>/dev/null
  [ "$created" = 1 ] && admin -d "${PGDATABASE:-postgres}" -c "drop database if exists $DB with (force)" >/dev/null 2>&1
  rm -rf "$here"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# A session: psql reading from a FIFO, its output (and notices) in a file.
# $1 the actor, $2 server or pooler, $3 its connection settings (PGOPTIONS).
open_session() {
  local name=$1 host=$PGHOST port=$PGPORT pw=${PGPASSWORD:-}
  if [ "$2" = pooler ]; then host=$POOLER_HOST; port=$POOLER_PORT; pw=${POOLER_PASSWORD:-${PGPASSWORD:-}}; fi
  rm -f "$here/$name.in"; mkfifo "$here/$name.in"; : > "$here/$name.out"
  PGPASSWORD=$pw PGAPPNAME="locklab-repro-$name" PGOPTIONS=${3:-} psql -X -q -At -h "$host" -p "$port" -d "$DB" \
    < "$here/$name.in" > "$here/$name.out" 2>&1 &
  eval "exec {fd_$name}>\"\$here/\$name.in\""
}
close_session() {
  local fd_var="fd_$1"
  printf '\\q\n' >&"${!fd_var}"
  eval "exec ${!fd_var}>&-"
  unset "fd_$1"
}
# Send a statement and the marker that follows it in the session's output.
send() {
  local fd_var="fd_$1"
  printf '%s\n\\g\n\\echo %s\n' "$2" "$3" >&"${!fd_var}"
}
wait_mark() {
  local i=0
  until grep -qx "$2" "$here/$1.out"; do
    i=$((i + 1)); [ $i -gt 1500 ] && { say "$1: no answer within 30 s to the step before $2"; exit 2; }
    sleep 0.02
  done
}
run() { send "$1" "$2" "$3"; wait_mark "$1" "$3"; }
# What the statement before marker $2 printed last (notices left out).
value() {
  awk -v m="$2" '$0 == m { print last; exit } /^__locklab_step_/ { last = ""; next }
    !/^(WARNING|NOTICE|DETAIL|HINT|CONTEXT):/ { last = $0 }' "$here/$1.out"
}
# pg_locks for one key (the condition, $1) in this database, as one line:
# "not held", or "held by PID MODE, …" (and the waiters).
locks_of() {
  printf '%s' "select case when bool_or(granted) then 'held by ' || string_agg(case when granted then pid || ' ' || mode end, ', ') || coalesce('; waiting: ' || string_agg(case when not granted then pid::text end, ', '), '') else 'not held' end from pg_locks where locktype = 'advisory' and database = (select oid from pg_database where datname = current_database()) and $1"
}
# A backend gone from pg_stat_activity (a closed connection's).
wait_gone() {
  local i=0
  until [ "$(admin -d "$DB" -c "select count(*) from pg_stat_activity where pid = $1")" = 0 ]; do
    i=$((i + 1)); [ $i -gt 1500 ] && { say "backend $1 still there 30 s after its connection closed"; exit 2; }
    sleep 0.02
  done
}
# A pooler's reset of backend $1 after its client closed (or the backend gone).
wait_reset() {
  local i=0 q=${2//\'/\'\'}
  until [ "$(admin -d "$DB" -c "select count(*) from pg_stat_activity where pid = $1 and not (state = 'idle' and query in ('DISCARD ALL', 'DISCARD ALL;', '$q'))")" = 0 ]; do
    i=$((i + 1)); [ $i -gt 1500 ] && { say "the pooler did not reset backend $1 within 30 s"; exit 2; }
    sleep 0.02
  done
}
# Behind a pooler that resets after every transaction: until no server
# connection of this database (the direct actors' backends, DIRECT_PIDS, left
# out) is released and not yet reset with DISCARD ALL or $1, or still
# running that reset.
DIRECT_PIDS=0
wait_resets() {
  local i=0 q=${1//\'/\'\'}
  local resets="('DISCARD ALL', 'DISCARD ALL;', '$q')"
  until [ "$(admin -d "$DB" -c "select count(*) from pg_stat_activity where datname = current_database() and backend_type = 'client backend' and pid <> pg_backend_pid() and pid not in ($DIRECT_PIDS) and ((state = 'idle' and query <> '' and query not in $resets) or (state = 'active' and query in $resets))")" = 0 ]; do
    i=$((i + 1)); [ $i -gt 1500 ] && { say "the pooler did not reset a released server connection within 30 s"; exit 2; }
    sleep 0.02
  done
}
# Whether session $1's statement (marker $2) waits on a lock, or finished first.
wait_blocked() {
  local i=0
  while :; do
    if [ "$(admin -d "$DB" -c "select count(*) from pg_stat_activity where application_name = 'locklab-repro-$1' and wait_event_type = 'Lock'")" != 0 ]; then
      echo "waiting for a lock"; return
    fi
    if grep -qx "$2" "$here/$1.out"; then echo "finished first (value $(value "$1" "$2"))"; return; fi
    i=$((i + 1)); [ $i -gt 500 ] && { echo "neither within 10 s (queued in the pooler?)"; return; }
    sleep 0.02
  done
}
# The reading here, next to locklab's; compared where both read alike.
norm() {
  case "$1" in
    t|true*) echo true ;;
    f|false*) echo false ;;
    "not held"*) echo "not held" ;;
    held*) echo held ;;
    ERROR:*|error*) echo error ;;
    "waiting for a lock"*|"blocked on a lock"*) echo blocked ;;
    "queued in the pooler"*|"neither within"*) echo queued ;;
    "finished first"*) echo finished ;;
    *) echo "$1" ;;
  esac
}
record() {
  local here_read=$2 theirs=$3
  say "record $1: $here_read    (locklab read: ${theirs:-?})"
  [ -z "$theirs" ] || [ "$here_read" = n/a ] && return
  compared=$((compared + 1))
  if [ "$(norm "$here_read")" != "$(norm "$theirs")" ]; then
    differ=$((differ + 1)); say "  ^ differs from locklab's reading"
  fi
}
finish() {
  if [ "$differ" = 0 ]; then
    say "reproduced: $compared of $compared recorded reading(s) as locklab read them"; exit 0
  fi
  say "not reproduced: $differ of $compared recorded reading(s) differ from locklab's"; exit 1
}
"#;
