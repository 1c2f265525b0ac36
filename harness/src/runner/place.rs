//! Where a cell runs, decided once before it starts: whether its column can
//! run it at all ([`not_applicable`]), in which process its pool lives
//! ([`host_pool`]), and on which server ([`CellServer`], from the
//! scenario's [`Placement`], which its steps' declarations give).

use locklab_drivers::{Driver, DriverInfo, PoolerKind, PoolerMode};

use crate::scenario::{Placement, Process, Scenario};
use crate::server::Server;

/// Why a cell is not run as written.
pub(super) enum NotRun {
    /// This machine or configuration cannot (the reason); its observations are `n/a`.
    NotApplicable(String),
    /// The pooler (its product) cannot carry the scenario's connection
    /// settings; its observations are `n/a (settings cannot pass PRODUCT)`.
    SettingsCannotPass(&'static str),
    /// Something the cell needs failed (what): the cell fails.
    Fails(String),
}

/// A race bounded by a `statement_timeout` of the pool's connections (tens
/// of ms) through a column whose client runs queries of its own when it
/// connects ([`Driver::queries_at_connect`]: ActiveRecord's SETs and type
/// map): that bound can cancel them before the race starts (seen: the first
/// checkout failed with 57014 under load).
pub(super) fn queries_at_connect(scenario: &Scenario, driver: &dyn Driver) -> Option<NotRun> {
    let what = driver.queries_at_connect()?;
    let bounded = scenario
        .pool_settings
        .list
        .iter()
        .any(|(k, _)| k == "statement_timeout");
    (scenario.trials.is_some() && bounded).then(|| {
        NotRun::NotApplicable(format!(
            "a race bounded by the pool's statement_timeout: the column's client runs queries of its own when it \
             connects ({what}), which that bound can cancel before the race starts"
        ))
    })
}

/// Why `scenario` cannot run through the column `info` here, if it cannot;
/// asked before anything of the cell starts.
pub(super) fn not_applicable(scenario: &Scenario, info: &DriverInfo) -> Option<NotRun> {
    if let Some(pooler) = info.pooler
        && let Some(why) = crate::server::poolers::unavailable(pooler)
    {
        return Some(NotRun::NotApplicable(why));
    }
    // A race of a cancel with a grant (trials) behind transaction pooling,
    // where the cancel request gets through: a session-level lock granted as
    // the cancel landed stays on a server connection the pooler gives to
    // other clients, which the next trial's `pg_advisory_unlock_all()` may
    // not reach, and the next trial's holder then waits on it for good
    // (seen with PgBouncer 1.24, transaction mode, at trial 6).
    if scenario.trials.is_some()
        && info
            .pooler
            .is_some_and(|p| p.mode == PoolerMode::Transaction && p.sends_cancel())
    {
        return Some(NotRun::NotApplicable(
            "trials behind transaction pooling that passes cancel requests: a session-level lock granted \
             as a cancel landed stays on a pooled server connection that the next trial's clean-up may \
             not reach"
                .to_owned(),
        ));
    }
    if let Some(why) = lock_crate(scenario, info) {
        return Some(why);
    }
    if let Some(library) = scenario.steps.iter().find_map(|s| match &s.kind {
        crate::scenario::StepKind::Library(l) if !l.library.applies_to(info) => Some(l.library),
        _ => None,
    }) {
        return Some(NotRun::NotApplicable(library.not_applicable()));
    }
    if scenario.expects_pool_notices()
        && let Some(why) = info.notices.not_passed_on()
    {
        return Some(NotRun::NotApplicable(format!(
            "the scenario expects a pool actor's notices, and {}'s are not passed on: {why}",
            info.crate_name
        )));
    }
    if let Some(pooler) = info.pooler
        && !pooler.kind.settings_pass()
        && scenario.pool_settings.list.iter().any(|(k, _)| k != "application_name")
    {
        return Some(NotRun::SettingsCannotPass(pooler.kind.product()));
    }
    if scenario.placement() == Placement::FaultServer
        && let Some(why) = crate::faults::netns::unavailable()
    {
        return Some(NotRun::NotApplicable(format!(
            "a fault cell with a `network: namespace` actor {why}"
        )));
    }
    None
}

/// A column of the lock crate (`pg-advisory-lock+…`) runs the crate's own
/// scenarios only (those with a `library: pg-advisory-lock…` step): its
/// verdicts are the crate's, and the raw SQL of the others through its
/// pool is the wrapped column's, which the matrix runs there.
fn lock_crate(scenario: &Scenario, info: &DriverInfo) -> Option<NotRun> {
    if info.crate_name != locklab_drivers::libraries::LOCK_CRATE {
        return None;
    }
    if !scenario.uses_lock_crate() {
        return Some(NotRun::NotApplicable(
            "a column of the lock crate runs the crate's own scenarios (library: pg-advisory-lock…); this one's raw \
             SQL through the same pool is the wrapped column's cell"
                .to_owned(),
        ));
    }
    let session_level = scenario.steps.iter().any(|s| {
        matches!(&s.kind, crate::scenario::StepKind::Library(l)
            if l.library == locklab_drivers::libraries::Library::PgAdvisoryLock)
    });
    (session_level
        && info.pooler_mode() == Some(PoolerMode::Transaction)
        && !scenario.tags.iter().any(|t| t == crate::scenario::REFUSAL_TAG))
    .then(|| {
        NotRun::NotApplicable(
            "the lock crate refuses session-level locks behind transaction pooling (Error::TransactionPooling; \
                 lock-crate-refusal proves it on this column)"
                .to_owned(),
        )
    })
}

/// Why a scenario with an `sql` step sent with the extended protocol
/// (`protocol: extended`) cannot run through `driver`, if it cannot: its
/// client sends the simple protocol only ([`Driver::extended_protocol`]).
pub(super) fn protocol(scenario: &Scenario, driver: &dyn Driver) -> Option<NotRun> {
    let extended = scenario.steps.iter().any(|s| {
        matches!(&s.kind, crate::scenario::StepKind::Sql(q) if q.protocol == crate::scenario::steps::sql::Protocol::Extended)
    });
    if !extended {
        return None;
    }
    driver
        .extended_protocol()
        .err()
        .map(|why| NotRun::NotApplicable(format!("a step uses the extended query protocol, and {why}")))
}

/// The environment variable naming the columns (ids, comma-separated; `*`:
/// all) that may miss their toolchain under `CI` ([`missing_toolchain`]).
pub const ALLOW_MISSING_VAR: &str = "LOCKLAB_ALLOW_MISSING";

/// The cell of a column that cannot run on this machine
/// ([`Driver::prepare`]: a toolchain missing, an install that failed): `n/a` with the reason
/// and the command that installs it; under `CI` (the variable set and not
/// empty, as CI services set it) a failure instead, unless
/// `LOCKLAB_ALLOW_MISSING` names the column, so that a CI run cannot pass
/// by leaving a column out unnoticed.
pub(super) async fn missing_toolchain(driver: &dyn Driver, id: &str) -> Option<NotRun> {
    let why = driver.prepare().await?;
    let in_ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    let allowed =
        std::env::var(ALLOW_MISSING_VAR).is_ok_and(|v| v.split(',').map(str::trim).any(|c| c == id || c == "*"));
    Some(if in_ci && !allowed {
        NotRun::Fails(format!(
            "{why} (under CI a column that cannot run fails the run: install what it needs, or set {ALLOW_MISSING_VAR}={id} to \
             allow this column to be n/a)"
        ))
    } else {
        NotRun::NotApplicable(why)
    })
}

/// A user's own pooler ([`PoolerKind::External`]) stands in front of the
/// server they run it for: its column runs on `--backend external` only,
/// where the harness's databases are on that server.
/// A scenario that runs on a cluster of its own (a restart, a network
/// fault) is not routed through it either.
pub(super) fn external_pooler(scenario: &Scenario, info: &DriverInfo, server: &Server) -> Option<NotRun> {
    let pooler = info.pooler.filter(|p| p.kind == PoolerKind::External)?;
    let at = pooler.address.map_or_else(String::new, |(h, p)| format!("{h}:{p}"));
    if server.backend() != crate::server::Backend::External {
        return Some(NotRun::NotApplicable(format!(
            "a pooler of your own ({at}) runs with --backend external only: the server it routes to must be the \
             one locklab runs on (--dsn / LOCKLAB_DSN)"
        )));
    }
    if let Some(cap) = scenario.pooler_server_connections
        && crate::server::poolers::caps(pooler)
    {
        // Without the cap the cell would not show what it is about (a
        // client kept waiting for a server connection), so it is not run.
        return Some(NotRun::NotApplicable(format!(
            "the scenario caps the pooler's server connections at {cap} per database (pooler.server_connections), \
             which locklab sets only on the poolers it starts, not on yours ({at})"
        )));
    }
    (scenario.placement() != Placement::ColumnServer).then(|| {
        NotRun::NotApplicable(format!(
            "the scenario runs on a local cluster of its own, which a pooler of your own ({at}) does not route to"
        ))
    })
}

/// The driver whose pool the cell uses: `driver` itself, or for a scenario
/// whose pool a step crashes (`pool.process: child`), the same driver
/// hosting its pool in a process of its own (`hosted` keeps it).
///
/// # Errors
/// The child program cannot be found ([`NotRun::Fails`]); the driver
/// cannot host its pool in a process of its own ([`NotRun::NotApplicable`]).
pub(super) fn host_pool<'d>(
    scenario: &Scenario,
    driver: &'d dyn Driver,
    hosted: &'d mut Option<Box<dyn Driver>>,
) -> Result<&'d dyn Driver, NotRun> {
    if scenario.pool_process != Process::Child {
        return Ok(driver);
    }
    let program = crate::faults::child::program().map_err(NotRun::Fails)?;
    match driver.in_own_process(&program) {
        Some(d) => Ok(&**hosted.insert(d)),
        None => Err(NotRun::NotApplicable(format!(
            "driver '{}' cannot host its pool in a process of its own",
            driver.info().id
        ))),
    }
}

/// The server a cell runs on.
pub(super) enum CellServer<'s> {
    /// The column's, shared by the run's cells.
    Column(&'s Server),
    /// A local cluster of the cell's own, removed once the cell is over: a
    /// restart must not hit other cells.
    Own(Server),
    /// The fault cells' local cluster, reached from the run's network namespace.
    Fault(&'static Server),
}

impl<'s> CellServer<'s> {
    /// The server for `scenario`'s cell of the column on `column`, started
    /// if it is the cell's own, and the `ran_on` text of a cell that does
    /// not run on its column's server.
    ///
    /// # Errors
    /// The server cannot start ([`NotRun::Fails`]); the machine cannot make
    /// the fault cells' namespace ([`NotRun::NotApplicable`]).
    pub(super) async fn for_cell(
        column: &'s Server,
        scenario: &Scenario,
    ) -> Result<(CellServer<'s>, Option<String>), NotRun> {
        let version = |s: &Server| s.version().split_whitespace().nth(1).unwrap_or("?").to_owned();
        match scenario.placement() {
            Placement::ColumnServer => Ok((CellServer::Column(column), None)),
            Placement::OwnCluster => {
                let mut opts = crate::server::ServerOptions::new(crate::server::BackendChoice::Local, column.major());
                opts.from_template = true;
                let own = match tokio::task::spawn_blocking(move || Server::start(&opts)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        return Err(NotRun::Fails(format!(
                            "cannot start the cell's own local cluster: {e:#}"
                        )));
                    }
                    Err(e) => {
                        return Err(NotRun::Fails(format!(
                            "the cell's own cluster's start-up panicked: {e}"
                        )));
                    }
                };
                let ran_on = format!(
                    "a local cluster of its own (PostgreSQL {}), restarted by the scenario",
                    version(&own)
                );
                Ok((CellServer::Own(own), Some(ran_on)))
            }
            Placement::FaultServer => match crate::faults::server::for_major(column.major()).await {
                Ok(fault) => {
                    let ran_on = format!(
                        "a local cluster of its own (PostgreSQL {}), reached from the run's network namespace",
                        version(fault)
                    );
                    Ok((CellServer::Fault(fault), Some(ran_on)))
                }
                Err(e) if e.starts_with(crate::faults::server::NO_NAMESPACE) => Err(NotRun::NotApplicable(format!(
                    "a fault cell with a `network: namespace` actor: {e}"
                ))),
                Err(e) => Err(NotRun::Fails(e)),
            },
        }
    }

    /// The server.
    pub(super) fn server(&self) -> &Server {
        match self {
            CellServer::Column(s) => s,
            CellServer::Own(s) => s,
            CellServer::Fault(s) => s,
        }
    }

    /// Whether the cell's server is the column's, shared with other cells.
    pub(super) fn is_shared(&self) -> bool {
        matches!(self, CellServer::Column(_))
    }

    /// Stops a server of the cell's own (blocking for a moment: not on a
    /// runtime thread).
    pub(super) async fn finish(self) {
        if let CellServer::Own(own) = self {
            let _ = tokio::task::spawn_blocking(move || drop(own)).await;
        }
    }
}
