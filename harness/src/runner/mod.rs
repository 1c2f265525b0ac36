//! Runs one scenario through one driver against the server, in a database of
//! its own, and returns what happened ([`RunResult`]).
//!
//! The cell's life, as the book's "How a run works" (`docs/src/architecture.md`) lists it, one function
//! per phase: [`run`] creates the database (`phases::create_database`), then
//! `Run::execute` builds the pool (`Run::open`), connects the direct actors
//! (`Run::connect_actors`), runs the steps (`Run::run_steps`; each step kind
//! runs in its file under `scenario/steps/`, against the run's
//! `StepCx`, `scenario/steps/context.rs`), verifies (`Run::verify`: every pool actor's
//! connection returned, then `pg_locks`), ends leftover backends
//! (`Run::end_leftovers`) and closes the pool (`Run::close`); then [`run`]
//! has PgBouncer close its server connections, runs the [`leak_guard`] and
//! drops the database (`database::drop_database`).

mod database;
mod phases;
mod place;
pub use place::ALLOW_MISSING_VAR;
mod sharing;
mod state;
mod trials;
mod verify;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use locklab_drivers::{Driver, DriverError, DriverInfo};

pub use crate::scenario::steps::check::check_sql;
pub use crate::scenario::steps::error::{StepError, StepResult};
pub use phases::{drop_own_databases, leak_guard};
pub use sharing::Sharing;
pub use trials::{effective_trials, possible, set_max_trials};

use crate::outcome::{Phase, RunResult};
use crate::scenario::Scenario;
use crate::scenario::steps::context::ms;
use crate::server::Server;
use place::{CellServer, NotRun};
use sharing::Monitor;
use state::Run;

/// How long the leak guard waits for a closed pool's backends to exit.
const LEAK_GUARD_WAIT: Duration = Duration::from_secs(5);

/// Deadline of each clean-up statement after a run (the leak guard's queries
/// on top of [`LEAK_GUARD_WAIT`], the `drop database`).
const CLEANUP_QUERY_TIMEOUT: Duration = Duration::from_secs(30);

/// Checkout wait limit for pools, in s.
const CHECKOUT_TIMEOUT_S: u64 = 10;

/// Runs `scenario` through `driver` on `server`, in a database created for
/// it and dropped after it. Never panics on server or driver behaviour:
/// everything that goes wrong ends up in [`RunResult::failure`].
pub async fn run(server: &Server, scenario: &Scenario, driver: &dyn Driver) -> RunResult {
    run_cell(server, scenario, driver, None).await
}

/// [`run`] as one cell of a matrix run: a cell that may share a database
/// (phase 1) runs in one an earlier cell of the run left clean on `server`,
/// and leaves its own for a later one when it is clean; and admin
/// connections are kept from cell to cell. That saves a `create database`,
/// a `drop database` and a connection per cell (the largest part of a short
/// cell's cost on the server). The caller ends the run with
/// [`Sharing::finish`], on the same runtime.
pub async fn run_sharing_databases(
    server: &Server,
    scenario: &Scenario,
    driver: &dyn Driver,
    sharing: &Sharing,
) -> RunResult {
    run_cell(server, scenario, driver, Some(sharing)).await
}

/// [`run`], or [`run_sharing_databases`] with `sharing`: where the cell
/// runs ([`place`]), then [`run_on`] that server.
async fn run_cell(server: &Server, scenario: &Scenario, driver: &dyn Driver, sharing: Option<&Sharing>) -> RunResult {
    let info = driver.info();
    let began = Instant::now();
    let mut result = RunResult::new(&server.id(), &scenario.name, info.id);
    result.readings_vary = scenario.readings_vary.is_some();
    let mut hosted = None;
    let placed = match place::missing_toolchain(driver, info.id)
        .await
        .or_else(|| place::external_pooler(scenario, &info, server))
        .or_else(|| place::not_applicable(scenario, &info))
        .or_else(|| place::queries_at_connect(scenario, driver))
        .or_else(|| place::protocol(scenario, driver))
    {
        Some(not_run) => Err(not_run),
        None => match place::host_pool(scenario, driver, &mut hosted) {
            Ok(driver) => CellServer::for_cell(server, scenario).await.map(|s| (driver, s)),
            Err(e) => Err(e),
        },
    };
    let (driver, (cell_server, ran_on)) = match placed {
        Ok(placed) => placed,
        Err(NotRun::Fails(what)) => {
            result.failure = Some(cell_error(server, scenario, info.id, &what));
            return result;
        }
        Err(NotRun::NotApplicable(why)) => {
            phases::not_applicable(scenario, &mut result, why);
            return result;
        }
        Err(NotRun::SettingsCannotPass(product)) => {
            phases::settings_cannot_pass(scenario, &mut result, product);
            return result;
        }
    };
    result.ran_on = ran_on;
    // A cell on a server of its own (fault cells, restarts) shares nothing.
    let sharing = sharing.filter(|_| cell_server.is_shared());
    let result = run_on(cell_server.server(), scenario, driver, result, began, sharing).await;
    cell_server.finish().await;
    result
}

/// `SERVER: scenario 'S', driver 'D': WHAT`, as every cell failure begins.
fn cell_error(server: &Server, scenario: &Scenario, driver: &str, what: &str) -> String {
    format!(
        "{}: scenario '{}', driver '{driver}': {what}",
        server.id(),
        scenario.name
    )
}

/// [`run`] on `server` (the column's, or the cell's own): phase 1, the
/// phases inside the database ([`run_in_database`]), then the clean-up
/// ([`clean_up`]).
async fn run_on(
    server: &Server,
    scenario: &Scenario,
    driver: &dyn Driver,
    mut result: RunResult,
    began: Instant,
    sharing: Option<&Sharing>,
) -> RunResult {
    let info = driver.info();
    let fail = |what: String| cell_error(server, scenario, info.id, &what);
    // Behind a pooler whose server connections can only be ended from the
    // server, a cell keeps a database of its own.
    let share = sharing.is_some()
        && phases::may_share_database(scenario)
        && info
            .pooler
            .is_none_or(|p| p.kind.closes_server_connections_on_request());

    let t = Instant::now();
    let (admin, db, monitor) =
        match phases::create_database(server, sharing, share, || database_name(&scenario.name, info.id)).await {
            Ok(opened) => opened,
            Err(e) => {
                result.failure = Some(fail(e));
                return result;
            }
        };
    let settings = phases::apply_server_settings(&admin, scenario, &db).await;
    result.phase(Phase::CreateDatabase, t);
    let monitor = if let Err(e) = settings {
        result.failure = Some(fail(e));
        monitor
    } else {
        run_in_database(
            server,
            scenario,
            driver,
            &info,
            &db,
            (monitor, share),
            &mut result,
            &fail,
        )
        .await
    };
    clean_up(
        server,
        scenario,
        &info,
        sharing,
        share,
        admin,
        &db,
        monitor,
        &mut result,
        &fail,
    )
    .await;
    if let Some(failure) = &mut result.failure
        && let Some(gone) = server_gone(server).await
    {
        failure.push_str(&gone);
    }
    result.elapsed_ms = ms(began.elapsed());
    result
}

/// How a run's deviation starts when the pooler closed an actor's client
/// connection ([`locklab_drivers::PoolerKind::closes_client_connections`]).
pub const POOLER_CLOSED: &str = "the pooler closed the client connection";

/// Phases 2 to 7 in database `db` ([`Run::execute`]); a failed expectation
/// behind a pooler that breaks session assumptions is the deviation.
/// `monitor`: the monitor connection an earlier cell kept with the database,
/// and whether this cell may keep its own for a later one (it shares its
/// database); returns the monitor kept (the run passed), if any.
#[allow(clippy::too_many_arguments)]
async fn run_in_database(
    server: &Server,
    scenario: &Scenario,
    driver: &dyn Driver,
    info: &DriverInfo,
    db: &str,
    monitor: (Option<Monitor>, bool),
    result: &mut RunResult,
    fail: &dyn Fn(String) -> String,
) -> Option<Monitor> {
    let mut run = Run::new(server, scenario, info, db, result, monitor);
    // A panic outside the steps (building the pool, the clean-up) fails
    // the cell too; the database is still checked and dropped after.
    let outcome = match std::panic::AssertUnwindSafe(run.execute(driver)).catch_unwind().await {
        Ok(o) => o,
        Err(payload) => Err(StepError::Harness(format!(
            "panicked: {}",
            panic_text(payload.as_ref())
        ))),
    };
    // After a panic, the slots still hold what the run had: background
    // steps stop here (their backends are the leak guard's to end).
    run.heal_all().await;
    run.abort_background();
    let kept = run.kept_monitor.take().filter(|_| outcome.is_ok());
    drop(run);
    if let Err(e) = outcome {
        if e.is_mismatch() && info.pooler.is_some_and(|p| p.breaks_session_assumptions()) {
            // Behind transaction pooling an actor's statements may run on
            // different server connections (and another client's session
            // locks may sit on the one it gets); behind Pgpool-II a new
            // client connection may get another child process's server
            // connection; behind pgagroal, one of those made at start, with
            // pgagroal's application_name: session semantics the scenario
            // assumes do not hold. That is the finding, recorded.
            result.deviation = Some(fail(e.to_string()));
        } else if e.is_connection_closed()
            && info.pooler.is_some_and(|p| p.kind.closes_client_connections())
            && !scenario.steps.iter().any(|s| s.kind.is_fault())
        {
            // pgagroal 1.6.0 closes a client connection when one of its
            // workers crashes: the pooler's behaviour, measured, not a
            // cell that could not run (the variation rule counts it over
            // the repeats). Not in a scenario that ends connections itself
            // (crash, terminate, partition, restart): there a closed
            // connection may be the fault's.
            result.deviation = Some(fail(format!("{POOLER_CLOSED}: {e}")));
        } else {
            result.failure = Some(fail(e.to_string()));
        }
    }
    kept
}

/// Phases 8 and 9: the pooler told to close its server connections to
/// `db`, the leak guard, and the database kept for a later cell (`share`,
/// when the cell passed and left nothing) or dropped.
#[allow(clippy::too_many_arguments)]
async fn clean_up(
    server: &Server,
    scenario: &Scenario,
    info: &DriverInfo,
    sharing: Option<&Sharing>,
    share: bool,
    admin: locklab_drivers::DirectConn,
    db: &str,
    monitor: Option<Monitor>,
    result: &mut RunResult,
    fail: &dyn Fn(String) -> String,
) {
    // After a restart the admin connection died with the server.
    let admin = if scenario.needs_own_cluster() {
        admin.close().await;
        match server.admin().await {
            Ok(a) => a,
            Err(e) => {
                result
                    .failure
                    .get_or_insert_with(|| fail(format!("cannot reconnect after the restart: {e:#}")));
                return;
            }
        }
    } else {
        admin
    };
    let t = Instant::now();
    if let Some(mode) = info.pooler
        && let Err(e) = server
            .pooler_close_database(mode, db, share, monitor.as_ref().map(|m| m.pid))
            .await
    {
        result.failure.get_or_insert_with(|| fail(format!("{e:#}")));
    }
    phases::guard_leaks(&admin, db, monitor.as_ref().map(|m| m.pid), result, fail).await;
    let t = result.phase(Phase::LeakGuard, t);
    let passed = result.failure.is_none();
    let keep = share && passed && result.backends_left.is_empty();
    let dropped = phases::keep_or_drop_database(server, sharing, admin, db, monitor, keep, passed).await;
    result.phase(Phase::DropDatabase, t);
    if let Err(e) = dropped {
        result.failure.get_or_insert_with(|| fail(e));
    }
}

/// After a failed cell: ` (the server does not answer any more: …)` when a
/// new connection to it fails within 3 s (it died, was killed or restarted
/// under the run), so that a cell that failed for that reason says so, and
/// the cells after it, which fail to connect, read the same.
async fn server_gone(server: &Server) -> Option<String> {
    let probe = tokio::time::timeout(Duration::from_secs(3), server.admin()).await;
    let why = match probe {
        Ok(Ok(admin)) => {
            admin.close().await;
            return None;
        }
        // A server that refuses with an SQLSTATE (53300 too_many_connections,
        // 57P03 cannot_connect_now) still answers.
        Ok(Err(e))
            if e.chain().any(|c| {
                c.downcast_ref::<locklab_drivers::DriverError>()
                    .is_some_and(|d| d.sqlstate().is_some())
            }) =>
        {
            return None;
        }
        Ok(Err(e)) => format!("{e:#}"),
        Err(_) => "no answer within 3 s".to_owned(),
    };
    Some(format!(
        " [the server does not answer any more: {why}; it died or was stopped under the run, and the cells after this one fail too]"
    ))
}

/// `ll_<scenario>_<driver>_<pid>_<n>`: a database name unique in this process
/// (n counts up) that an interrupted process can find again by its pid
/// ([`drop_own_databases`]).
fn database_name(scenario: &str, driver: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let clean = |s: &str| {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect::<String>()
    };
    let mut name = format!("ll_{}_{}", clean(scenario), clean(driver));
    name.truncate(40);
    format!("{name}_{}_{n}", std::process::id())
}

/// `LOCKLAB_TEST_PANIC_AT_STEP=N`: panic at the start of step N (1-based) of
/// every run. A test hook: the harness's own tests use it to check that a
/// panic inside a step fails the cell and leaves nothing behind.
fn injected_panic_step() -> Option<usize> {
    static STEP: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *STEP.get_or_init(|| std::env::var("LOCKLAB_TEST_PANIC_AT_STEP").ok()?.trim().parse().ok())
}

/// The text of a panic payload.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// A driver error as the text a failure shows.
fn driver_text(e: impl Into<DriverError>) -> String {
    e.into().to_string()
}
