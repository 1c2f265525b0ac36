//! The phases of a cell's life around its steps: the database, the clean-up,
//! the leak guard.

use std::time::{Duration, Instant};

use locklab_drivers::{DirectConn, DriverError};

use super::database::drop_database;
use super::sharing::{Monitor, SharedDatabase, Sharing};
use super::{CLEANUP_QUERY_TIMEOUT, LEAK_GUARD_WAIT, driver_text};
use crate::observe::{self, Polled, poll_from, poll_until};
use crate::outcome::{Observation, RunResult, Value};
use crate::scenario::Scenario;
use crate::server::Server;

/// Records a cell that cannot run behind the pooler `product`: it does not
/// pass the `options` startup parameter that carries connection settings
/// (`locklab_drivers::PoolerFacts::settings_pass`), so a scenario with
/// `pool.settings` (other than `application_name`) cannot be run as
/// written. Its observations are [`Value::SettingsCannotPass`].
pub(super) fn settings_cannot_pass(scenario: &Scenario, result: &mut RunResult, product: &str) {
    result.skipped = Some(format!(
        "{product} does not pass connection settings (the `options` startup parameter) to the server; \
         the pool settings at {} cannot apply",
        scenario.at(scenario.pool_settings.pos)
    ));
    for step in &scenario.steps {
        if let Some(name) = &step.record {
            let value = Value::SettingsCannotPass;
            let mut observation = Observation::new(name, step.index + 1, value, Vec::new(), None, None);
            observation.time_varies = step.time_varies;
            result.observations.push(observation);
        }
    }
}

/// A cell this machine cannot run (`why`): skipped, its observations `n/a`.
pub(super) fn not_applicable(scenario: &Scenario, result: &mut RunResult, why: String) {
    result.skipped = Some(why);
    for step in &scenario.steps {
        if let Some(name) = &step.record {
            let mut observation = Observation::new(name, step.index + 1, Value::NotApplicable, Vec::new(), None, None);
            observation.time_varies = step.time_varies;
            result.observations.push(observation);
        }
    }
}

/// Whether a cell of `scenario` may run in a database an earlier cell left
/// clean, and leave its own for a later one: not on a server of its own
/// (restart, fault cells), no `server_settings` (`alter database … set` stays
/// with the database), and nothing in its SQL that may change the database
/// ([`Scenario::may_change_the_database`]). Behind PgBouncer too: the leak
/// guard runs after PgBouncer has closed its connections to the database
/// (`KILL`), and it is told to take clients for it again (`RESUME`).
pub(super) fn may_share_database(scenario: &Scenario) -> bool {
    !scenario.needs_own_cluster()
        && !scenario.needs_fault_server()
        && scenario.server_settings.list.is_empty()
        && !scenario.may_change_the_database()
}

/// Phase 1: the run's database, and an admin connection (to the
/// administration database) that the later phases reuse. With `sharing` (a
/// matrix run): an admin connection an earlier cell gave back, if any; and
/// with `share_database` too (the cell [`may_share_database`]), a clean
/// database an earlier cell of the run left, when there is one, with its
/// monitor connection if that cell kept it. Else `create database` with the
/// name `fresh` gives. Returns the connection, the database's name and the
/// kept monitor.
///
/// # Errors
/// No connection, or the database could not be created (the text says which).
pub(super) async fn create_database(
    server: &Server,
    sharing: Option<&Sharing>,
    share_database: bool,
    fresh: impl FnOnce() -> String,
) -> Result<(DirectConn, String, Option<Monitor>), String> {
    let admin = match sharing {
        Some(sharing) => sharing.lease_admin(server).await,
        None => server.admin().await,
    }
    .map_err(|e| format!("cannot connect to the server: {e:#}"))?;
    if let Some(db) = sharing.filter(|_| share_database).and_then(|s| s.take_database(server)) {
        return Ok((admin, db.name, db.monitor));
    }
    let db = fresh();
    if let Err(e) = admin.client().simple_query(&format!("create database \"{db}\"")).await {
        admin.close().await;
        return Err(format!("cannot create database {db}: {}", driver_text(e)));
    }
    Ok((admin, db, None))
}

/// `alter database … set` for the scenario's `server_settings`.
///
/// # Errors
/// The first setting the server refused.
pub(super) async fn apply_server_settings(admin: &DirectConn, scenario: &Scenario, db: &str) -> Result<(), String> {
    for (name, value) in &scenario.server_settings.list {
        let sql = format!("alter database \"{db}\" set {name} = '{}'", value.replace('\'', "''"));
        if let Err(e) = admin.client().simple_query(&sql).await {
            return Err(format!(
                "cannot apply server setting {name} = {value} at {} (some settings need a superuser): {}",
                scenario.at(scenario.server_settings.pos),
                driver_text(e)
            ));
        }
    }
    Ok(())
}

/// Phase 7: the leak guard, with its deadline, into `result`: what it found
/// fails the cell (`backends_left`). `monitor`: the pid of the cell's
/// monitor connection, kept open for the next cell, which is not a leftover.
pub(super) async fn guard_leaks(
    admin: &DirectConn,
    db: &str,
    monitor: Option<i32>,
    result: &mut RunResult,
    fail: &dyn Fn(String) -> String,
) {
    let within = LEAK_GUARD_WAIT + CLEANUP_QUERY_TIMEOUT;
    let guard = tokio::time::timeout(within, leak_guard_except(admin.client(), db, monitor))
        .await
        .unwrap_or_else(|_| Err(DriverError::Client(format!("no answer within {} s", within.as_secs()))));
    match guard {
        Ok(left) => {
            if !left.is_empty() {
                result.failure.get_or_insert_with(|| {
                    fail(format!(
                        "leak guard: still in the run's database 5 s after the run was over (pool closed): {}; \
                         the harness ended them",
                        left.join(", ")
                    ))
                });
            }
            result.backends_left = left;
        }
        Err(e) => {
            result
                .failure
                .get_or_insert_with(|| fail(format!("leak guard: cannot read pg_stat_activity: {e}")));
        }
    }
}

/// Phase 8 and the end of the cell. With `sharing` (a matrix run): when
/// `keep` (the cell may share its database, passed, and the leak guard found
/// nothing in it) the database is left for a later cell of the run, with
/// `monitor` when the cell kept it open, else `monitor` is closed and the
/// database dropped ([`drop_database`]); and when the cell `passed` (every statement
/// on `admin` has answered) `admin` is left for a later cell too. Without
/// `sharing` the database is dropped and `admin` closed.
///
/// # Errors
/// As [`drop_database`].
pub(super) async fn keep_or_drop_database(
    server: &Server,
    sharing: Option<&Sharing>,
    admin: DirectConn,
    db: &str,
    monitor: Option<Monitor>,
    keep: bool,
    passed: bool,
) -> Result<(), String> {
    let outcome = match sharing {
        Some(sharing) if keep => {
            sharing.put_database(
                server,
                SharedDatabase {
                    name: db.to_owned(),
                    monitor,
                },
            );
            Ok(())
        }
        _ => {
            if let Some(m) = monitor {
                m.conn.close().await;
            }
            drop_database(&admin, db).await
        }
    };
    match sharing {
        Some(sharing) if passed && outcome.is_ok() => sharing.give_back_admin(server, admin),
        _ => admin.close().await,
    }
    outcome
}

/// The leak guard, run after every scenario × driver run: waits up to
/// [`LEAK_GUARD_WAIT`] (5 s) until database `db` has no backend
/// (`pg_stat_activity`) and no advisory lock (`pg_locks`), polling from
/// `admin`, a connection to another database; then ends whatever backend is
/// still there. Returns what was left, `pid N (application_name, state)` and
/// `lock KEY (pid N)` (KEY an i64, or (i32, i32) for two-key locks), sorted;
/// empty when nothing was.
///
/// # Errors
/// A failed query.
pub async fn leak_guard(admin: &tokio_postgres::Client, db: &str) -> Result<Vec<String>, DriverError> {
    leak_guard_except(admin, db, None).await
}

/// [`leak_guard`], leaving backend `monitor` (the harness's monitor
/// connection, kept for the next cell) out of what is left; when it
/// times out, that backend is ended too, with the others.
async fn leak_guard_except(
    admin: &tokio_postgres::Client,
    db: &str,
    monitor: Option<i32>,
) -> Result<Vec<String>, DriverError> {
    let sql = observe::leftovers_sql(db, monitor);
    let until = Instant::now() + LEAK_GUARD_WAIT;
    let mut left = Vec::new();
    let polled = poll_from(until, observe::EXIT_FIRST_PAUSE, async || {
        let rows = locklab_drivers::simple_query_rows(admin, &sql).await?;
        left = rows
            .rows
            .into_iter()
            .filter_map(|r| r.into_iter().next().flatten())
            .collect();
        Ok::<_, DriverError>(left.is_empty().then_some(()))
    })
    .await?;
    if let Polled::TimedOut = polled {
        left.sort();
        admin
            .simple_query(&observe::terminate_database_sql(db))
            .await
            .map_err(DriverError::from)?;
        return Ok(left);
    }
    Ok(Vec::new())
}

/// Drops every database this process created for its runs (`ll_…_<pid>_<n>`),
/// with `(force)`; used when a run is interrupted before its own cleanup.
/// Returns how many were dropped.
///
/// # Errors
/// Connecting to the server or listing databases failed.
pub async fn drop_own_databases(server: &Server) -> Result<usize, DriverError> {
    let admin = server
        .admin()
        .await
        .map_err(|e| DriverError::Client(format!("{e:#}")))?;
    let pattern = format!("ll\\_%\\_{}\\_%", std::process::id());
    // A `create database` of a run that was cancelled mid-way still completes
    // on the server: wait (up to 15 s) until none of ours is running, or its
    // database would appear after the listing below.
    let creating = observe::creating_databases_sql(&pattern);
    let _ = poll_until(Instant::now() + Duration::from_secs(15), async || {
        let rows = locklab_drivers::simple_query_rows(admin.client(), &creating).await?;
        Ok::<_, DriverError>((rows.first_value().flatten() == Some("0")).then_some(()))
    })
    .await?;
    let rows = locklab_drivers::simple_query_rows(admin.client(), &observe::databases_like_sql(&pattern)).await?;
    let mut dropped = 0;
    for name in rows.rows.iter().filter_map(|r| r.first().cloned().flatten()) {
        if admin
            .client()
            .simple_query(&format!("drop database if exists \"{name}\" with (force)"))
            .await
            .is_ok()
        {
            dropped += 1;
        }
    }
    admin.close().await;
    Ok(dropped)
}
