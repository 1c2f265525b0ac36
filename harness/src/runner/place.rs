//! Where a cell runs, decided once before it starts: whether its column can
//! run it at all ([`not_applicable`]), in which process its pool lives
//! ([`host_pool`]), and on which server ([`CellServer`], from the
//! scenario's [`Placement`], which its steps' declarations give).

use locklab_drivers::{Driver, DriverInfo, PoolerMode};

use crate::scenario::{Placement, Process, Scenario};
use crate::server::Server;

/// Why a column cannot run a cell as written.
pub(super) enum Skip {
    /// This machine or configuration cannot (the reason); its observations are `n/a`.
    Because(String),
    /// The pooler cannot carry the scenario's connection settings; its
    /// observations are `n/a (settings cannot pass PgBouncer)`.
    SettingsCannotPass,
}

/// Why `scenario` cannot run through the column `info` here, if it cannot;
/// asked before anything of the cell starts.
pub(super) fn not_applicable(scenario: &Scenario, info: &DriverInfo) -> Option<Skip> {
    if let Some(pooler) = info.pooler
        && let Some(why) = crate::server::poolers::unavailable(pooler)
    {
        return Some(Skip::Because(why));
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
            .is_some_and(|p| p.mode == PoolerMode::Transaction && p.kind.sends_cancel())
    {
        return Some(Skip::Because(
            "trials behind transaction pooling that passes cancel requests: a session-level lock granted \
             as a cancel landed stays on a pooled server connection that the next trial's clean-up may \
             not reach"
                .to_owned(),
        ));
    }
    if info.pooler.is_some() && scenario.pool_settings.list.iter().any(|(k, _)| k != "application_name") {
        return Some(Skip::SettingsCannotPass);
    }
    if scenario.placement() == Placement::FaultServer
        && let Some(why) = crate::faults::netns::unavailable()
    {
        return Some(Skip::Because(format!(
            "a fault cell with a `network: namespace` actor {why}"
        )));
    }
    None
}

/// The driver whose pool the cell uses: `driver` itself, or for a scenario
/// whose pool a step crashes (`pool.process: child`), the same driver
/// hosting its pool in a process of its own (`hosted` keeps it).
///
/// # Errors
/// `Err(Ok(why))`: the cell fails (the child program cannot be found);
/// `Err(Err(skip))`: the driver cannot host its pool in a process of its own.
pub(super) fn host_pool<'d>(
    scenario: &Scenario,
    driver: &'d dyn Driver,
    hosted: &'d mut Option<Box<dyn Driver>>,
) -> Result<&'d dyn Driver, Result<String, Skip>> {
    if scenario.pool_process != Process::Child {
        return Ok(driver);
    }
    let program = crate::faults::child::program().map_err(Ok)?;
    match driver.in_own_process(&program) {
        Some(d) => Ok(&**hosted.insert(d)),
        None => Err(Err(Skip::Because(format!(
            "driver '{}' cannot host its pool in a process of its own",
            driver.info().id
        )))),
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
    /// `Err(Ok(why))`: the cell fails (the server cannot start);
    /// `Err(Err(skip))`: the machine cannot make the fault cells' namespace.
    pub(super) async fn for_cell(
        column: &'s Server,
        scenario: &Scenario,
    ) -> Result<(CellServer<'s>, Option<String>), Result<String, Skip>> {
        let version = |s: &Server| s.version().split_whitespace().nth(1).unwrap_or("?").to_owned();
        match scenario.placement() {
            Placement::ColumnServer => Ok((CellServer::Column(column), None)),
            Placement::OwnCluster => {
                let opts = crate::server::ServerOptions::new(crate::server::BackendChoice::Local, column.major());
                let own = match tokio::task::spawn_blocking(move || Server::start(&opts)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => return Err(Ok(format!("cannot start the cell's own local cluster: {e:#}"))),
                    Err(e) => return Err(Ok(format!("the cell's own cluster's start-up panicked: {e}"))),
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
                Err(e) if e.starts_with(crate::faults::server::NO_NAMESPACE) => Err(Err(Skip::Because(format!(
                    "a fault cell with a `network: namespace` actor: {e}"
                )))),
                Err(e) => Err(Ok(e)),
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
