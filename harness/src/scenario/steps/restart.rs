//! `restart: fast | immediate`: restarts the server while connections are
//! open and locks held (a local cluster of the cell's own), then gives the
//! observer, and the harness's monitor, new connections once the server
//! accepts connections again; the other actors keep what they had, to find
//! out.

use std::time::{Duration, Instant};

use locklab_drivers::{DirectConn, Pool};
use schemars::JsonSchema;
use serde::Deserialize;

use super::context::{Slot, StepCx};
use super::declaration::{BASE, Declaration, Placement, Record, Side};
use super::{Checking, Kind, RawStep, Step};
use crate::scenario::steps::error::{StepError, StepResult};
use crate::scenario::Actor;

macro_rules! raw_fields {
    ($next:ident [$($f:tt)*] $($rest:tt)*) => {
        $next! { @collect [$($f)*
            /// Restart the server (`fast` or `immediate`) while connections are open and
            /// locks held; the step's actor (a direct actor, the observer) gets a new
            /// connection once the server accepts connections again. Such a scenario
            /// runs on a local cluster of its own per cell.
            #[serde(default)]
            #[schemars(with = "Option<crate::scenario::raw::step::OrParam<crate::scenario::steps::restart::RestartMode>>")]
            pub(crate) restart: Option<$crate::scenario::steps::restart::RestartMode>,
        ] $($rest)* }
    };
}
pub(crate) use raw_fields;

/// How a `restart` step stops the server (PostgreSQL docs §19.5 Shutting
/// Down the Server).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RestartMode {
    /// SIGINT to the postmaster: backends are ended with SIGTERM (their
    /// clients get 57P01 admin_shutdown), then a clean shutdown.
    Fast,
    /// SIGQUIT: every process quits at once; crash recovery at the next start.
    Immediate,
}

/// Restart the server (a local cluster of the cell's own), then give the
/// observer a new connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartStep {
    /// The direct actor that gets a new connection afterwards.
    pub observer: usize,
    /// `immediate` (SIGQUIT) rather than `fast` (SIGINT).
    pub immediate: bool,
}

impl Kind for RestartStep {
    const KEY: &'static str = "restart";
    const FORMS: &'static [Declaration] = &[Declaration {
        word: "restart",
        side: Side::Observer,
        record: Record::No,
        fault: true,
        placement: Placement::OwnCluster,
        ..BASE
    }];

    fn has_key(raw: &RawStep) -> bool {
        raw.restart.is_some()
    }

    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        Some(RestartStep {
            observer: cx.actor,
            immediate: raw.restart? == RestartMode::Immediate,
        })
    }

    fn actor(&self) -> Option<usize> {
        Some(self.observer)
    }

    fn describe(&self, _: &[Actor], _: &[Step]) -> String {
        format!("restart {}", if self.immediate { "immediate" } else { "fast" })
    }

    /// Restarts the cell's own server, then opens a new connection for the
    /// observer and for the harness's monitor (the old ones died with the
    /// server); the other actors keep what they had, to find out.
    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, _: &dyn Pool, monitor: &mut DirectConn) -> StepResult {
        let (observer, immediate) = (self.observer, self.immediate);
        cx.faults.struck();
        // Bounded inside (30 s to stop, 60 s to start): cutting it short here
        // would drop the postmaster's handle halfway.
        cx.server
            .restart(immediate)
            .await
            .map_err(|e| StepError::Harness(format!("{e:#}")))?;
        // 57P03 (cannot_connect_now: starting up, shutting down) means "not
        // yet": asked again until the step's deadline.
        let until = Instant::now() + Duration::from_millis(step.deadline_ms);
        let name = cx.scenario.actors[observer].name.clone();
        let conn = while_starting(until, async || cx.connect_direct(observer).await)
            .await
            .map_err(|e| StepError::Driver(format!("cannot reconnect '{name}' after the restart: {e}")))?;
        cx.slots[observer] = Slot::Ready(conn);
        cx.learn_pid(observer, Duration::from_millis(step.deadline_ms)).await;
        let spec = cx.server.spec(cx.db, "locklab-monitor");
        *monitor = while_starting(until, async || DirectConn::connect(&spec).await)
            .await
            .map_err(|e| StepError::Driver(format!("cannot reopen the monitor connection after the restart: {e}")))?;
        Ok(())
    }
}

/// `connect`, asked again every 20 ms while the server answers 57P03
/// (cannot_connect_now: starting up, shutting down), until `until`.
///
/// # Errors
/// The last attempt's error.
async fn while_starting<T>(
    until: Instant,
    mut connect: impl AsyncFnMut() -> Result<T, locklab_drivers::DriverError>,
) -> Result<T, locklab_drivers::DriverError> {
    loop {
        match connect().await {
            Err(e) if e.sqlstate() == Some("57P03") && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}
