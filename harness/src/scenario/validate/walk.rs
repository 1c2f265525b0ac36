//! What the validator knows while it walks a scenario's steps in order:
//! each actor's connection ([`Conn`]), ids, background steps, saved and
//! recorded names, faults. The rules that read and change it are in
//! `step.rs`, `conn.rs` and `refs.rs`.

use std::collections::HashMap;

use crate::scenario::Process;
use crate::scenario::{Actor, Pos};

/// Marks a background step in [`Walk::background`] as dropped by `do: abandon`
/// (it is never awaited and never completes).
pub(crate) const ABANDONED: usize = usize::MAX;

/// What the validator tracks per actor while walking the steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Conn {
    /// No connection (a pool actor before checkout, after return; a
    /// disconnected direct actor).
    None,
    /// A connection, idle.
    Ready,
    /// A background step (index) is in flight.
    Busy(usize),
}

/// What the validator knows while it walks the steps in order.
pub(crate) struct Walk<'s> {
    /// The scenario's actors.
    pub(crate) actors: &'s [Actor],
    /// Actor name → index.
    pub(crate) index_of: HashMap<&'s str, usize>,
    /// Each actor's connection after the steps so far.
    pub(crate) state: Vec<Conn>,
    /// Step id → step index.
    pub(crate) ids: HashMap<String, usize>,
    /// Background step index → the step that awaited it (`None`: in flight,
    /// [`ABANDONED`]: abandoned).
    pub(crate) background: HashMap<usize, Option<usize>>,
    /// Names saved by earlier steps.
    pub(crate) saved: Vec<String>,
    /// Record names used so far, with where.
    pub(crate) records: HashMap<String, Pos>,
    /// The scenario's default step deadline, ms.
    pub(crate) step_deadline: u64,
    /// Whether a fault step (crash, terminate, partition, restart) came before.
    pub(crate) faulted: bool,
    /// `partition` steps (indices) not healed since.
    pub(crate) partitioned: Vec<usize>,
    /// Where the pool under test lives (`pool.process`).
    pub(crate) pool_process: Process,
    /// The step (1-based) that crashed the pool under test, if one did.
    pub(crate) pool_crashed: Option<usize>,
}
