//! What the fault steps (`fault.rs`: crash, terminate, partition, heal;
//! `restart.rs`, `granted.rs`) keep from step to step, owned apart from the run's
//! other state so that the other steps see none of it.

use std::collections::HashMap;
use std::time::Instant;

/// What the fault steps keep from step to step, and what the steps that
/// time a fault tell each other: owned here, out of the other steps' way.
#[derive(Default)]
pub(crate) struct Faults {
    /// The child process of each `process: child` actor.
    pub(crate) children: HashMap<usize, crate::faults::child::ChildProcess>,
    /// The local port of each `network: namespace` actor's connection.
    pub(crate) ns_ports: HashMap<usize, u16>,
    /// When the last fault step (crash, terminate, partition, restart) struck.
    pub(crate) at: Option<Instant>,
    /// Per actor, the background step (by when it started) that a `blocked`
    /// step saw blocked on the server: a later `granted` knows it reached
    /// the server.
    pub(crate) seen_blocked: HashMap<usize, Instant>,
    /// Per actor, the background step (by when it started) that a `granted`
    /// step timed: its `await` records the value alone, since the time from
    /// its start spans the harness's own steps (seeing it blocked, killing a
    /// child process) and the time that matters is the `granted` step's.
    pub(crate) timed_by_granted: HashMap<usize, Instant>,
}

impl Faults {
    /// A fault strikes now.
    pub(crate) fn struck(&mut self) {
        self.at = Some(Instant::now());
    }

    /// A new trial begins: no fault has struck in it yet.
    pub(crate) fn forget_the_last(&mut self) {
        self.at = None;
    }

    /// A `blocked` step saw `actor`'s background step (started at `started`)
    /// blocked on the server.
    pub(crate) fn saw_blocked(&mut self, actor: usize, started: Instant) {
        self.seen_blocked.insert(actor, started);
    }

    /// Whether a `granted` step timed `actor`'s background step started at
    /// `started` (its `await` then records no time of its own).
    pub(crate) fn timed_by_granted(&self, actor: usize, started: Instant) -> bool {
        self.timed_by_granted.get(&actor) == Some(&started)
    }
}
