//! The checks of `locklab adapter check`, in the order they run: each a
//! function of a [`Session`] with the adapter, returning what is wrong by
//! name.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{
    BOUND_MS, HELLO_S, KEY_BASE, POOL_S, SLACK_MS, Session, done, error, gave_up, implicit_transaction, ok, one,
    still_answers,
};

pub(super) type Check = fn(&mut Session<'_>) -> Result<(), String>;

/// Every check, in order; later ones build on the `hello` of the first.
pub(super) const CHECKS: &[(&str, Check)] = &[
    ("hello", hello),
    ("open_pool, checkout, return, close_pool", lifecycle),
    ("query: values in PostgreSQL's text format", text_values),
    ("query: several statements", several_statements),
    (
        "query: several statements run as one implicit transaction",
        implicit_transaction::one_transaction,
    ),
    (
        "query: an error in a later statement rolls back the earlier ones",
        implicit_transaction::error_rolls_back,
    ),
    (
        "query: several statements inside begin … commit continue that transaction",
        implicit_transaction::inside_begin,
    ),
    (
        "query: a BEGIN among several statements leaves its transaction block open",
        implicit_transaction::explicit_begin,
    ),
    ("query: a server error (kind db, its SQLSTATE)", server_error),
    ("query: notices (where the library passes them on)", notices),
    ("begin, commit: a transaction-level lock ends at commit", commit),
    ("begin, rollback: a transaction-level lock ends at rollback", rollback),
    ("requests in flight at once: answers in any order", concurrent),
    ("query timeout_ms: gave_up within the bound", query_bound),
    ("drop: the target answers dropped, then drop answers", drop_request),
    ("drop of a request already answered", drop_answered),
    ("cancel: a call in flight ends with 57014 (or unsupported)", cancel),
    ("cancel with no call in flight", cancel_idle),
    ("abandon after drop: the connection goes back", abandon),
    (
        "checkout timeout_ms: gave_up while the pool is exhausted (or at once, an error)",
        checkout_bound,
    ),
    (
        "checkout_timeout_ms: an error while the pool is exhausted",
        checkout_timeout,
    ),
    ("guard: ok, or an unsupported error", guard),
    (
        "guard with acquire try on a taken lock: acquired false, or an unsupported error",
        guard_try_taken,
    ),
    (
        "library: an unknown call is unsupported; rails-migrator runs, or is unsupported",
        library,
    ),
    (
        "bad: a request for a connection that was never checked out",
        unknown_conn,
    ),
    ("bad: a return without a checkout", return_without_checkout),
    ("bad: a request on a returned connection", after_return),
    ("bad: a checkout from a pool that does not exist", unknown_pool),
    ("bad: an unknown op (kind protocol)", unknown_op),
    ("close_pool with a call in flight", close_with_call),
    ("bad: a checkout after close_pool", after_close),
    ("stdin closed: the adapter exits", stdin_closed),
];

fn hello(s: &mut Session<'_>) -> Result<(), String> {
    let v = s
        .raw
        .call(json!({"op": "hello", "protocol": 1}), Duration::from_secs(HELLO_S))?;
    let o = ok(&v, "hello")?;
    s.hello = o.clone();
    if o.get("protocol").and_then(Value::as_u64) != Some(1) {
        return Err(format!("hello: `protocol` must be 1, got {}", o["protocol"]));
    }
    for field in ["library", "version"] {
        if o.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(format!("hello: `{field}` must name the library and its version: {o}"));
        }
    }
    if o.get("cancel").and_then(Value::as_bool) != Some(true)
        && o.get("no_cancel_reason")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        return Err("hello: without `cancel: true`, `no_cancel_reason` must say why (the report shows it)".into());
    }
    Ok(())
}

fn lifecycle(s: &mut Session<'_>) -> Result<(), String> {
    let pool = s.pool(2, 10_000)?;
    let conn = s.checkout(&pool)?;
    let returned = s.give_back(&conn)?;
    if !["to_pool", "closed", "to_pooler"].contains(&returned.as_str()) {
        return Err(format!(
            "return: `returned` must be to_pool, closed or to_pooler, got {returned}"
        ));
    }
    s.ping()?;
    s.close(&pool)
}

/// A pool of 2 and two connections of it.
fn two(s: &mut Session<'_>) -> Result<(String, String, String), String> {
    let pool = s.pool(2, 10_000)?;
    let a = s.checkout(&pool)?;
    let b = s.checkout(&pool)?;
    Ok((pool, a, b))
}

fn text_values(s: &mut Session<'_>) -> Result<(), String> {
    let (pool, c) = one(s)?;
    let o = s.query(
        &c,
        "select 1 as one, true as yes, false as no, null::int as nothing, 'x y'::text as words, \
         9223372036854775807::bigint as big",
    )?;
    let want_cols = json!(["one", "yes", "no", "nothing", "words", "big"]);
    let want_rows = json!([["1", "t", "f", null, "x y", "9223372036854775807"]]);
    if o["columns"] != want_cols || o["rows"] != want_rows {
        return Err(format!(
            "expected columns {want_cols} and rows {want_rows} (text format, null for NULL), got {} and {}",
            o["columns"], o["rows"]
        ));
    }
    if o.get("elapsed_ms").and_then(Value::as_f64).is_none_or(|e| e < 0.0) {
        return Err(format!(
            "`elapsed_ms` (≥ 0, measured around the library call) is missing: {o}"
        ));
    }
    done(s, &pool, &[&c])
}

fn several_statements(s: &mut Session<'_>) -> Result<(), String> {
    let (pool, c) = one(s)?;
    let o = s.query(&c, "select 1 as a; select 2 as b")?;
    if o["rows"] != json!([["1"], ["2"]]) {
        return Err(format!(
            "`select 1 as a; select 2 as b` must give the rows of every statement in order, [[\"1\"],[\"2\"]]; got {}",
            o["rows"]
        ));
    }
    done(s, &pool, &[&c])
}

fn server_error(s: &mut Session<'_>) -> Result<(), String> {
    let (pool, c) = one(s)?;
    let v = s
        .raw
        .call(json!({"op": "query", "conn": c, "sql": "select 1/0"}), s.answer)?;
    let e = error(&v, "select 1/0")?;
    if e["kind"] != "db" || e["sqlstate"] != "22012" {
        return Err(format!(
            "select 1/0: expected kind db with sqlstate 22012 (division_by_zero), got {e}"
        ));
    }
    still_answers(s, &c, 3, "the connection after a server error")?;
    done(s, &pool, &[&c])
}

fn notices(s: &mut Session<'_>) -> Result<(), String> {
    let (pool, c) = one(s)?;
    let o = s.query(&c, &format!("select pg_advisory_unlock({})", KEY_BASE))?;
    if o["rows"] != json!([["f"]]) {
        return Err(format!(
            "pg_advisory_unlock of a lock not held must give [[\"f\"]], got {}",
            o["rows"]
        ));
    }
    // A library that does not expose notices answers `notices: []` (its
    // column then says `notices: false` in its columns file, which this
    // check does not see); one that does must pass on this one as
    // `SEVERITY: message`.
    let notices = o["notices"].as_array().cloned().unwrap_or_default();
    if !notices.is_empty()
        && !notices.iter().any(|n| {
            n.as_str()
                .is_some_and(|n| n.starts_with("WARNING: ") && n.contains("you don't own a lock"))
        })
    {
        return Err(format!(
            "pg_advisory_unlock of a lock not held: the notice must be `WARNING: you don't own a lock of type \
             ExclusiveLock` (SEVERITY: message), got {}",
            o["notices"]
        ));
    }
    done(s, &pool, &[&c])
}

fn transaction(s: &mut Session<'_>, end: &str, key: i64) -> Result<(), String> {
    let (pool, c) = one(s)?;
    let v = s.raw.call(json!({"op": "begin", "conn": c}), s.answer)?;
    ok(&v, "begin")?;
    s.query(&c, &format!("select pg_advisory_xact_lock({key})"))?;
    if !s.lock_seen(key, true)? {
        return Err(format!(
            "after begin and pg_advisory_xact_lock({key}), the server shows no holder"
        ));
    }
    let v = s.raw.call(json!({"op": end, "conn": c}), s.answer)?;
    ok(&v, end)?;
    if s.lock_seen(key, true)? {
        return Err(format!(
            "after {end}, the server still shows the transaction-level lock {key} held: {end} did not end the transaction"
        ));
    }
    done(s, &pool, &[&c])
}

fn commit(s: &mut Session<'_>) -> Result<(), String> {
    transaction(s, "commit", KEY_BASE + 1)
}

fn rollback(s: &mut Session<'_>) -> Result<(), String> {
    transaction(s, "rollback", KEY_BASE + 2)
}

/// `a` holds `key`; `b`'s `pg_advisory_lock(key)` waits (seen on the
/// server): its request id.
fn blocked(s: &mut Session<'_>, a: &str, b: &str, key: i64, bound: Option<u64>) -> Result<u64, String> {
    s.query(a, &format!("select pg_advisory_lock({key})"))?;
    let mut req = json!({"op": "query", "conn": b, "sql": format!("select pg_advisory_lock({key})")});
    if let Some(ms) = bound {
        req["timeout_ms"] = json!(ms);
    }
    let id = s.raw.send(req);
    if bound.is_none() {
        s.until_waiting(key)?;
    }
    Ok(id)
}

fn concurrent(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 3;
    let (pool, a, b) = two(s)?;
    let waiting = blocked(s, &a, &b, key, None)?;
    s.ping()
        .map_err(|e| format!("a ping while a query waits on a lock: {e} (requests must be served concurrently)"))?;
    if s.raw.answered(waiting) {
        return Err("the waiting query answered before its lock was released".into());
    }
    s.query(&a, &format!("select pg_advisory_unlock({key})"))?;
    let (v, _) = s.raw.wait(waiting, s.answer)?;
    ok(&v, "the waiting query, once the lock was released")?;
    s.query(&b, &format!("select pg_advisory_unlock({key})"))?;
    done(s, &pool, &[&a, &b])
}

fn query_bound(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 4;
    let (pool, a, b) = two(s)?;
    let began = Instant::now();
    let id = blocked(s, &a, &b, key, Some(BOUND_MS))?;
    let (v, at) = s.raw.wait(id, Duration::from_millis(BOUND_MS + SLACK_MS))?;
    let took = at.duration_since(began);
    if !gave_up(&v) {
        return Err(format!(
            "a query with timeout_ms {BOUND_MS} on a held lock: expected ok.gave_up true, got {v}"
        ));
    }
    if took < Duration::from_millis(BOUND_MS) {
        return Err(format!(
            "gave up after {} ms, before its bound of {BOUND_MS} ms",
            took.as_millis()
        ));
    }
    s.query(&a, &format!("select pg_advisory_unlock({key})"))?;
    // Whatever the library left the connection as (a given-up call may
    // still run on the server and take the lock: a ghost), it must answer.
    s.raw
        .call(json!({"op": "query", "conn": b, "sql": "select 1"}), s.answer)
        .map_err(|e| format!("the connection after a given-up call: {e}"))?;
    s.raw
        .call(
            json!({"op": "query", "conn": b, "sql": "select pg_advisory_unlock_all()"}),
            s.answer,
        )
        .ok();
    done(s, &pool, &[&a, &b])
}

fn drop_request(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 5;
    let (pool, a, b) = two(s)?;
    let target = blocked(s, &a, &b, key, None)?;
    let d = s.raw.send(json!({"op": "drop", "target": target}));
    let (tv, t_at) = s.raw.wait(target, s.answer)?;
    let (dv, d_at) = s.raw.wait(d, s.answer)?;
    if tv.get("dropped").and_then(Value::as_bool) != Some(true) {
        return Err(format!("the dropped request must answer `dropped: true`, got {tv}"));
    }
    ok(&dv, "drop")?;
    if d_at < t_at {
        return Err("drop answered before its target: answer drop once the target has given up".into());
    }
    s.query(&a, &format!("select pg_advisory_unlock({key})"))?;
    // The given-up call may still be waiting on the server (a library that
    // cannot interrupt a call): that is what the ghost-lock cells measure.
    s.until_held(key, false).ok();
    done(s, &pool, &[&a, &b])
}

fn drop_answered(s: &mut Session<'_>) -> Result<(), String> {
    let v = s.raw.call(json!({"op": "ping"}), s.answer)?;
    ok(&v, "ping")?;
    let pinged = s.raw.next_id - 1;
    let v = s.raw.call(json!({"op": "drop", "target": pinged}), s.answer)?;
    ok(&v, "drop of an answered request").map(|_| ())
}

fn cancel(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 6;
    let (pool, a, b) = two(s)?;
    let can = s.cancels.get(&b).copied().unwrap_or(false);
    let waiting = blocked(s, &a, &b, key, None)?;
    let v = s.raw.call(json!({"op": "cancel", "conn": b}), s.answer)?;
    if can {
        ok(&v, "cancel (the connection has a cancel API: `cancel: true`)")?;
        let (w, _) = s.raw.wait(waiting, s.answer)?;
        let e = error(&w, "the cancelled query")?;
        if e["kind"] != "db" || e["sqlstate"] != "57014" {
            return Err(format!(
                "the cancelled query: expected kind db with sqlstate 57014 (query_canceled), got {e}"
            ));
        }
    } else {
        let e = error(&v, "cancel (the connection has no cancel API: `cancel: false`)")?;
        if e["kind"] != "unsupported" {
            return Err(format!(
                "cancel without a cancel API: expected kind unsupported, got {e}"
            ));
        }
        s.query(&a, &format!("select pg_advisory_unlock({key})"))?;
        let (w, _) = s.raw.wait(waiting, s.answer)?;
        ok(&w, "the waiting query, once the lock was released")?;
        s.query(&b, &format!("select pg_advisory_unlock({key})"))?;
        return done(s, &pool, &[&a, &b]);
    }
    s.query(&a, &format!("select pg_advisory_unlock({key})"))?;
    done(s, &pool, &[&a, &b])
}

fn cancel_idle(s: &mut Session<'_>) -> Result<(), String> {
    let (pool, c) = one(s)?;
    let can = s.cancels.get(&c).copied().unwrap_or(false);
    let v = s.raw.call(json!({"op": "cancel", "conn": c}), s.answer)?;
    if can {
        ok(&v, "cancel with nothing in flight (nothing to cancel: `{}`)")?;
    } else {
        error(&v, "cancel without a cancel API")?;
    }
    still_answers(s, &c, 4, "after a cancel with nothing in flight")?;
    done(s, &pool, &[&c])
}

fn abandon(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 7;
    let (pool, a, b) = two(s)?;
    let target = blocked(s, &a, &b, key, None)?;
    // As the harness does when a connection's owner goes away mid-call:
    // the call is dropped, then the connection abandoned.
    let d = s.raw.send(json!({"op": "drop", "target": target}));
    let ab = s.raw.send(json!({"op": "abandon", "conn": b}));
    let (tv, _) = s.raw.wait(target, s.answer)?;
    if tv.get("dropped").and_then(Value::as_bool) != Some(true) && tv.get("error").is_none() {
        return Err(format!(
            "the abandoned call must answer `dropped: true` (or an error), got {tv}"
        ));
    }
    let (dv, _) = s.raw.wait(d, s.answer)?;
    ok(&dv, "drop")?;
    let (av, _) = s.raw.wait(ab, s.answer)?;
    ok(&av, "abandon")?;
    s.query(&a, &format!("select pg_advisory_unlock({key})"))?;
    // The abandoned connection went back: the pool of 2 has room for another.
    // A blocking library gives it back when the given-up call ends (as a
    // block's `finally` would), after the unlock above; a pool that never
    // waits (psycopg2's) fails a checkout at once until then (kind client),
    // so such a checkout is tried again, up to the answer bound.
    let deadline = Instant::now() + s.answer;
    let c = loop {
        match s.checkout(&pool) {
            Ok(c) => break c,
            Err(e) if e.contains("\"kind\":\"client\"") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                return Err(format!(
                    "a checkout after abandon (the abandoned connection should be back): {e}"
                ));
            }
        }
    };
    done(s, &pool, &[&a, &c])
}

fn checkout_bound(s: &mut Session<'_>) -> Result<(), String> {
    let pool = s.pool(1, 10_000)?;
    let a = s.checkout(&pool)?;
    let began = Instant::now();
    let id = s.raw.send(
        json!({"op": "checkout", "pool": pool, "conn": "c-bounded", "checkout_timeout_ms": 10_000,
                               "timeout_ms": BOUND_MS}),
    );
    let (v, at) = s.raw.wait(id, Duration::from_millis(BOUND_MS + SLACK_MS))?;
    // A pool that never waits fails the checkout at once (an error, kind
    // client): the bound is never reached.
    if let Some(e) = v.get("error") {
        if e["kind"] == "client" {
            return done(s, &pool, &[&a]);
        }
        return Err(format!(
            "a checkout from an exhausted pool: an error must be kind client, got {e}"
        ));
    }
    if !gave_up(&v) {
        return Err(format!(
            "a checkout with timeout_ms {BOUND_MS} from an exhausted pool: expected ok.gave_up true (or, from a \
             pool that never waits, a client error), got {v}"
        ));
    }
    if at.duration_since(began) < Duration::from_millis(BOUND_MS) {
        return Err(format!(
            "gave up after {} ms, before its bound of {BOUND_MS} ms",
            at.duration_since(began).as_millis()
        ));
    }
    done(s, &pool, &[&a])
}

fn checkout_timeout(s: &mut Session<'_>) -> Result<(), String> {
    let pool = s.pool(1, BOUND_MS)?;
    let a = s.checkout(&pool)?;
    let id = s
        .raw
        .send(json!({"op": "checkout", "pool": pool, "conn": "c-timeout", "checkout_timeout_ms": BOUND_MS}));
    let (v, _) = s.raw.wait(id, Duration::from_millis(BOUND_MS + SLACK_MS))?;
    let e = error(
        &v,
        &format!("a checkout from an exhausted pool with checkout_timeout_ms {BOUND_MS}"),
    )?;
    if e["kind"] == "protocol" {
        return Err(format!("a pool timeout is kind client, not protocol: {e}"));
    }
    done(s, &pool, &[&a])
}

fn guard(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 8;
    let (pool, c) = one(s)?;
    let v = s.raw.call(
        json!({"op": "guard", "conn": c, "key": key, "end": "release_now"}),
        s.answer,
    )?;
    if v.get("ok").is_some() {
        if s.lock_seen(key, true)? {
            return Err(format!(
                "guard with end release_now answered, but lock {key} is still held"
            ));
        }
    } else {
        guard_unsupported(&v)?;
    }
    done(s, &pool, &[&c])
}

/// A `guard` answer that is not `ok` must be an `unsupported` error.
fn guard_unsupported(v: &Value) -> Result<(), String> {
    let e = error(v, "guard")?;
    if e["kind"] != "unsupported" {
        return Err(format!(
            "guard: expected ok, or kind unsupported where the library has no guard API; got {e}"
        ));
    }
    Ok(())
}

/// With the lock taken by another connection of the pool, `guard` with
/// `acquire: try` answers `{"acquired": false}` (no guard: the lock stays
/// the other's), or `unsupported`.
fn guard_try_taken(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 13;
    let pool = s.pool(2, 10_000)?;
    let holder = s.checkout(&pool)?;
    let c = s.checkout(&pool)?;
    s.query(&holder, &format!("select pg_advisory_lock({key})"))?;
    let v = s.raw.call(
        json!({"op": "guard", "conn": c, "key": key, "acquire": "try", "end": "release_now"}),
        s.answer,
    )?;
    if let Some(ok) = v.get("ok") {
        if ok.get("acquired") != Some(&json!(false)) {
            return Err(format!(
                "guard with acquire try on lock {key}, held by another connection, answered {ok}: expected {{\"acquired\": false}}"
            ));
        }
    } else {
        guard_unsupported(&v)?;
    }
    s.query(&holder, &format!("select pg_advisory_unlock({key})"))?;
    done(s, &pool, &[&holder, &c])
}

/// The `library` request: a call of a name no adapter has answers an
/// `unsupported` error; `rails-migrator` with one migrator either runs it
/// (`{"text": …}` saying `1: ok`, the migration ran once, no lock left) or
/// is `unsupported`. A migrator's process loads its library first: the
/// call may take a minute.
fn library(s: &mut Session<'_>) -> Result<(), String> {
    let pool = s.pool(1, 10_000)?;
    let v = s.raw.call(
        json!({"op": "library", "pool": pool, "name": "locklab-check-no-such-call", "args": {}}),
        s.answer,
    )?;
    let e = error(&v, "library")?;
    if e["kind"] != "unsupported" {
        return Err(format!(
            "library with an unknown name: expected kind unsupported, got {e}"
        ));
    }
    let v = s.raw.call(
        json!({"op": "library", "pool": pool, "name": "rails-migrator",
               "args": {"runners": 1, "migration_ms": 0, "kill_first": false, "give_up_ms": 30000}}),
        s.answer.max(Duration::from_secs(90)),
    )?;
    if let Some(ok) = v.get("ok") {
        let text = ok.get("text").and_then(Value::as_str).unwrap_or_default();
        if !(text.starts_with("1: ok;")
            && text.contains("the migration ran 1×")
            && text.ends_with("advisory locks left: 0"))
        {
            return Err(format!(
                "library rails-migrator with one migrator answered {ok}: expected {{\"text\": \"1: ok; the migration ran 1×; advisory locks left: 0\"}}"
            ));
        }
    } else {
        let e = error(&v, "library")?;
        if e["kind"] != "unsupported" {
            return Err(format!(
                "library rails-migrator: expected ok, or kind unsupported; got {e}"
            ));
        }
    }
    s.ping()?;
    s.close(&pool)
}

/// `fields` must answer an error, and the adapter must answer a ping after.
fn refused(s: &mut Session<'_>, fields: Value, what: &str) -> Result<Value, String> {
    let v = s.raw.call(fields, s.answer)?;
    let e = error(&v, what)?;
    s.ping().map_err(|e| format!("after {what}: {e}"))?;
    Ok(e)
}

fn unknown_conn(s: &mut Session<'_>) -> Result<(), String> {
    refused(
        s,
        json!({"op": "query", "conn": "c-never", "sql": "select 1"}),
        "a query on an unknown connection",
    )
    .map(|_| ())
}

fn return_without_checkout(s: &mut Session<'_>) -> Result<(), String> {
    refused(
        s,
        json!({"op": "return", "conn": "c-never-out"}),
        "a return without a checkout",
    )
    .map(|_| ())
}

fn after_return(s: &mut Session<'_>) -> Result<(), String> {
    let (pool, c) = one(s)?;
    s.give_back(&c)?;
    refused(
        s,
        json!({"op": "query", "conn": c, "sql": "select 1"}),
        "a query on a returned connection",
    )?;
    s.close(&pool)
}

fn unknown_pool(s: &mut Session<'_>) -> Result<(), String> {
    refused(
        s,
        json!({"op": "checkout", "pool": "p-never", "conn": "c-nowhere", "checkout_timeout_ms": 1000}),
        "a checkout from an unknown pool",
    )
    .map(|_| ())
}

fn unknown_op(s: &mut Session<'_>) -> Result<(), String> {
    let e = refused(s, json!({"op": "frobnicate"}), "an unknown op")?;
    if e["kind"] != "protocol" {
        return Err(format!("an unknown op: expected kind protocol, got {e}"));
    }
    Ok(())
}

fn close_with_call(s: &mut Session<'_>) -> Result<(), String> {
    let key = KEY_BASE + 9;
    let holder_pool = s.pool(1, 10_000)?;
    let a = s.checkout(&holder_pool)?;
    let pool = s.pool(1, 10_000)?;
    let b = s.checkout(&pool)?;
    let waiting = blocked(s, &a, &b, key, None)?;
    s.close(&pool)
        .map_err(|e| format!("close_pool while a call waits: {e}"))?;
    s.query(&a, &format!("select pg_advisory_unlock({key})"))?;
    s.raw
        .wait(waiting, Duration::from_secs(POOL_S))
        .map_err(|e| format!("the call in flight on a closed pool must still be answered: {e}"))?;
    s.ping()?;
    // Kept for the next check: a checkout from this closed pool.
    s.closed_pool = Some(pool);
    done(s, &holder_pool, &[&a])
}

fn after_close(s: &mut Session<'_>) -> Result<(), String> {
    let pool = s.closed_pool.clone().unwrap_or_else(|| "p-closed".to_owned());
    refused(
        s,
        json!({"op": "checkout", "pool": pool, "conn": "c-after-close", "checkout_timeout_ms": 1000}),
        "a checkout from a closed pool",
    )
    .map(|_| ())
}

fn stdin_closed(s: &mut Session<'_>) -> Result<(), String> {
    drop(s.raw.stdin.take());
    let deadline = Instant::now() + s.answer;
    loop {
        match s.raw.child.try_wait() {
            Ok(Some(_)) => return Ok(()),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                return Err(format!(
                    "still running {:.1} s after its stdin closed",
                    s.answer.as_secs_f64()
                ));
            }
            Err(e) => return Err(format!("cannot wait for it: {e}")),
        }
    }
}
