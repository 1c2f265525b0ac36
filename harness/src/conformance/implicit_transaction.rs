//! The checks that a `query` of several statements means what one simple
//! Query message of them means on the server (docs/src/protocol.md, the
//! `query` request): PostgreSQL runs the statements of one Query message as
//! one implicit transaction, unless the session is already in a transaction
//! block (they continue it) or explicit transaction control says otherwise
//! (a `BEGIN` opens a block that lasts past the message); the first error
//! ends the message and rolls the implicit transaction back (PostgreSQL
//! docs, Frontend/Backend Protocol, "Multiple Statements in a Simple
//! Query", §55.2.2.1 in PostgreSQL 17). An adapter that splits the text and
//! runs the statements as separate autocommit statements fails the first
//! two; one that emulates the implicit transaction with a `BEGIN … COMMIT`
//! of its own regardless of the connection's state fails the last two.
//!
//! What the transaction did is read on the server (`pg_locks`,
//! `to_regclass`) and by the statements themselves, never assumed.

use serde_json::{Value, json};

use super::{KEY_BASE, Session, done, error, ok, one, still_answers};

/// The protocol doc's name for the behaviour, quoted in every failure.
const RULE: &str = "the statements of one query run as one implicit transaction, as PostgreSQL runs those of \
                    one simple Query message (PostgreSQL docs §55.2.2.1, \"Multiple Statements in a Simple Query\")";

/// The table the rollback check creates in a statement that must be rolled back.
const TABLE: &str = "ll_check_rolled_back";

/// `count(*)` of granted advisory locks on small key `key` held by the
/// session running the statement.
fn own_lock_count(key: i64) -> String {
    format!(
        "(select count(*) from pg_locks where locktype = 'advisory' and classid = 0 and objid = {key} \
         and objsubid = 1 and granted and pid = pg_backend_pid())"
    )
}

/// `set local` and a transaction-level lock taken by earlier statements are
/// still in force in the last one, and both end with the query.
pub(super) fn one_transaction(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 10;
    let (pool, c) = one(s)?;
    let sql = format!(
        "set local lock_timeout = '1234ms'; select pg_advisory_xact_lock({key}); \
         select current_setting('lock_timeout') as lock_timeout, {} as held",
        own_lock_count(key)
    );
    let o = s.query(&c, &sql)?;
    let last = o["rows"]
        .as_array()
        .and_then(|r| r.last())
        .cloned()
        .unwrap_or(Value::Null);
    if last != json!(["1234ms", "1"]) {
        return Err(format!(
            "`{sql}`: {RULE}, so the last statement must still see the SET LOCAL and hold the lock \
             taken by the one before it: its row must be [\"1234ms\",\"1\"], got {last} (rows {}); \
             [\"0\",\"0\"] is what separate autocommit statements give",
            o["rows"]
        ));
    }
    if s.lock_seen(key, true)? {
        return Err(format!(
            "`{sql}`: once the query has answered, the server still shows its transaction-level lock {key} \
             held: the implicit transaction must end (commit) with the query"
        ));
    }
    done(s, &pool, &[&c])
}

/// An error in the second statement rolls back the first (a `create table`).
pub(super) fn error_rolls_back(s: &mut Session<'_>) -> Result<(), String> {
    let (pool, c) = one(s)?;
    let sql = format!("create table {TABLE} (id int); select 1/0");
    let v = s.raw.call(json!({"op": "query", "conn": c, "sql": sql}), s.answer)?;
    let e = error(&v, &format!("`{sql}`"))?;
    if e["kind"] != "db" || e["sqlstate"] != "22012" {
        return Err(format!(
            "`{sql}`: expected kind db with sqlstate 22012 (division_by_zero) from the second statement, got {e}"
        ));
    }
    let gone = s.observe(&format!("select to_regclass('public.{TABLE}') is null"))?;
    if gone.first().and_then(|r| r.first()).cloned().flatten().as_deref() != Some("t") {
        s.observe(&format!("drop table if exists public.{TABLE}")).ok();
        return Err(format!(
            "`{sql}`: {RULE}, so the error in the second statement rolls the first back; but table {TABLE} \
             exists after it: the create table was committed on its own"
        ));
    }
    still_answers(
        s,
        &c,
        6,
        &format!("after `{sql}` failed (no transaction may be left open)"),
    )?;
    done(s, &pool, &[&c])
}

/// Inside `begin` … `commit`, several statements continue the caller's
/// transaction: nothing commits it before `commit`.
pub(super) fn inside_begin(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 11;
    let (pool, c) = one(s)?;
    let v = s.raw.call(json!({"op": "begin", "conn": c}), s.answer)?;
    ok(&v, "begin")?;
    let sql = format!("select pg_advisory_xact_lock({key}); select 1");
    s.query(&c, &sql)?;
    if !s.lock_seen(key, true)? {
        return Err(format!(
            "after begin and `{sql}`, the server shows no holder of transaction-level lock {key}: the query ended \
             the caller's transaction (statements of a query sent inside a transaction block continue it, \
             PostgreSQL docs §55.2.2.1; an adapter's own BEGIN … COMMIT around them commits the caller's)"
        ));
    }
    let v = s.raw.call(json!({"op": "commit", "conn": c}), s.answer)?;
    ok(&v, "commit")?;
    if s.lock_seen(key, true)? {
        return Err(format!(
            "after commit, the server still shows transaction-level lock {key} held"
        ));
    }
    done(s, &pool, &[&c])
}

/// A `BEGIN` among the statements opens a transaction block that lasts
/// past the query, until a later `commit`.
pub(super) fn explicit_begin(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 12;
    let (pool, c) = one(s)?;
    let sql = format!("begin; select pg_advisory_xact_lock({key})");
    s.query(&c, &sql)?;
    if !s.lock_seen(key, true)? {
        return Err(format!(
            "after `{sql}`, the server shows no holder of transaction-level lock {key}: a BEGIN in a query \
             starts a transaction block that only an explicit COMMIT or ROLLBACK ends (PostgreSQL docs \
             §55.2.2.1), and the query ended it"
        ));
    }
    s.query(&c, "commit")?;
    if s.lock_seen(key, true)? {
        return Err(format!(
            "after `{sql}` and `commit`, the server still shows transaction-level lock {key} held"
        ));
    }
    done(s, &pool, &[&c])
}
