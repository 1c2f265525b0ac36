//! Which scenario × driver cells `cargo test` runs, and on which backend
//! (docs/src/testing.md, "The test budget"):
//!
//! - every cell once, on the main backend: a PostgreSQL 17 container when a
//!   Docker engine answers, the local cluster otherwise; except that of the
//!   columns behind one pooler in one mode (`pgbouncer-session` and
//!   `pgbouncer-session+deadpool`), which differ only in the client in
//!   front of the pooler, and of all the columns of a pooler whose readings
//!   vary by nature (pgagroal, Odyssey: their cells compare by status
//!   alone), and of the check-in columns (PgBouncer sending what PgCat,
//!   pg_doorman or `server_reset_query_always` send at check-in), a
//!   scenario runs through one, each in turn ([`turns`]; the
//!   all-driver fault trials too); and a user's report re-enacted
//!   (`report-*`) runs through the poolers and through one other column per
//!   family, in turn;
//! - except cells whose kind fixes their server, on the local cluster: a
//!   scenario that restarts the server (a cluster of its own per cell), one
//!   with a `network: namespace` actor (the fault server), a race (`trials`:
//!   see [`fixed_server`]), and the columns
//!   whose pooler runs in a container (the pooler is the same whatever runs
//!   PostgreSQL behind it);
//! - and a sample on the other backend, so that each backend still runs
//!   every step kind through each driver family (a Rust pool
//!   in this process, a pool through the driver protocol, a pooler): per
//!   family, a greedy cover of the step kinds by scenarios, each through the
//!   family's next driver in turn.
//!
//! Fault scenarios (a `granted` step, or a restart) mostly wait: all drivers
//! of one run as one trial, spread evenly among the single cells.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use locklab::scenario::Scenario;
use locklab::server::Backend;
use locklab_drivers::Driver;

/// One trial of the matrix.
pub struct PlannedCell {
    /// Index into the scenarios.
    pub scenario: usize,
    /// The driver; `None`: every driver of the scenario at once (of the
    /// pooler columns taking turns, the one whose turn `turn` is: [`turns`]).
    pub driver: Option<&'static str>,
    /// Whose turn it is among the pooler columns that take turns, for an
    /// all-driver trial ([`in_turn`]).
    pub turn: usize,
    /// Where it runs.
    pub backend: Backend,
    /// `SCENARIO KIND × COLUMN KIND` (`race × pooler`), for the timing summary.
    pub kind: String,
}

impl PlannedCell {
    /// `local` or `container`, the trial name's last part.
    pub fn backend_label(&self) -> &'static str {
        self.backend.as_str()
    }
}

/// The trials, in the order they start.
pub struct Plan {
    /// Single cells and all-driver fault trials, interleaved.
    pub cells: Vec<PlannedCell>,
}

/// Whether the scenario has a `granted` step (it injects a fault and waits
/// for its effect: seconds, mostly idle), cuts a connection or restarts the
/// server ([`Scenario::mostly_waits`]).
pub fn waits_for_faults(s: &Scenario) -> bool {
    s.mostly_waits()
}

/// Whether the scenario's kind fixes its server (the local cluster): a
/// restart (a cluster per cell), a partition (the fault server), and a race:
/// its bounds are 5–20 ms, and through the container's published port
/// (`docker-proxy`) on a loaded machine a pool's own query at checkout ran
/// into the race's 20 ms `statement_timeout` (diesel-async, 2026-12-03), a
/// failure of the setup, not of the race. Races measure the client and the
/// lock manager, not the backend kind.
fn fixed_server(s: &Scenario) -> bool {
    s.needs_own_cluster() || s.needs_fault_server() || s.trials.is_some()
}

/// The scenario's kind for the timing summary.
fn scenario_kind(s: &Scenario) -> &'static str {
    if s.trials.is_some() {
        "race"
    } else if s.needs_own_cluster() {
        "restart"
    } else if waits_for_faults(s) || s.needs_fault_server() {
        "fault"
    } else {
        "plain"
    }
}

/// The pooler columns that take turns in `cargo test`, each with its
/// place in its group and the group's size: the columns behind one pooler
/// in one mode, which differ only in the client in front of it
/// (tokio-postgres without a pool, or deadpool-postgres; the client layer
/// is measured by its own columns); and for a pooler whose readings vary by
/// nature (pgagroal, Odyssey: `PoolerKind::readings_vary`, whose cells
/// compare with the baseline by status alone), all its columns, both modes,
/// as one group. A scenario runs through one column of a group, each in turn.
pub fn turns() -> BTreeMap<&'static str, (usize, usize)> {
    let mut groups: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
    for d in locklab_drivers::registry() {
        let i = d.info();
        if let Some(p) = i.pooler {
            // The columns of a pooler whose readings vary take turns
            // across modes; so do the check-in columns (PgBouncer sending
            // what another pooler sends at check-in: `CheckIn`), which
            // stand for other products, not for PgBouncer's own modes.
            let key = if p.kind.readings_vary() {
                format!("{:?}", p.kind)
            } else if p.check_in != locklab_drivers::CheckIn::Default {
                "check-in".to_owned()
            } else {
                format!("{p:?}")
            };
            groups.entry(key).or_default().push(i.id);
        }
    }
    groups
        .values()
        .flat_map(|ids| ids.iter().enumerate().map(|(n, id)| (*id, (n, ids.len()))))
        .collect()
}

/// Whether column `id` runs in an all-driver trial of turn `turn`: a
/// column that takes turns ([`turns`]) only on its own.
pub fn in_turn(turns: &BTreeMap<&'static str, (usize, usize)>, id: &str, turn: usize) -> bool {
    turns.get(id).is_none_or(|(n, of)| turn % of == *n)
}

/// A driver's family: `pooler`, `protocol` (a pool in an adapter process)
/// or `in-process` (a Rust pool in the test process).
pub fn family(id: &str) -> &'static str {
    let pooled = locklab_drivers::find(id).is_ok_and(|d| d.info().pooler.is_some());
    if pooled {
        "pooler"
    } else if locklab_drivers::external::declared().iter().any(|d| d.info().id == id) {
        "protocol"
    } else {
        "in-process"
    }
}

/// What a scenario exercises, for the other backend's cover: its step kinds
/// (as the file names them). (Race scenarios, those with `trials`, have a
/// fixed server and are never in the cover.)
fn features(s: &Scenario) -> BTreeSet<String> {
    s.steps.iter().map(|st| st.kind.declaration().word.to_owned()).collect()
}

impl Plan {
    /// The plan for these scenarios with (`docker`) or without a Docker engine.
    pub fn new(scenarios: &[Arc<Scenario>], docker: bool) -> Plan {
        let (main, other) = if docker {
            (Backend::Container, Backend::Local)
        } else {
            (Backend::Local, Backend::Container)
        };
        let ids = locklab_drivers::ids();
        let in_container: BTreeMap<&str, bool> = locklab_drivers::registry()
            .iter()
            .map(|d| {
                let i = d.info();
                (i.id, i.pooler.is_some_and(|p| p.kind.in_container()))
            })
            .collect();
        let families: BTreeMap<&str, &str> = ids.iter().map(|id| (*id, family(id))).collect();
        let turn_of = turns();
        let kind = |s: &Scenario, driver: Option<&str>| {
            format!("{} × {}", scenario_kind(s), driver.map_or("all", |d| families[d]))
        };
        // A user's report re-enacted (`report-*`): through the poolers (the
        // report is about them; twins in turn) and one other column of
        // each family in turn.
        let others: BTreeMap<&str, Vec<&'static str>> = ["in-process", "protocol"]
            .into_iter()
            .map(|fam| (fam, ids.iter().copied().filter(|id| families[id] == fam).collect()))
            .collect();
        let report_sample = |i: usize, s: &Scenario, id: &str| {
            if !s.family.starts_with("report-") || families[id] == "pooler" {
                return true;
            }
            let fam = &others[families[id]];
            fam.iter().position(|x| *x == id) == Some(i % fam.len())
        };
        let mut singles = Vec::new();
        // Diagonal order: the trials that run at the same time are different
        // scenarios through different drivers, so that neither the cells of a
        // scenario whose server-side work is heavy nor those of one pooler
        // compete with each other for the CPU.
        for offset in 0..ids.len() {
            for (i, s) in scenarios.iter().enumerate() {
                if waits_for_faults(s) {
                    continue;
                }
                let id = ids[(i + offset) % ids.len()];
                if let Some((n, of)) = turn_of.get(id)
                    && i % of != *n
                {
                    continue;
                }
                if !report_sample(i, s, id) {
                    continue;
                }
                let backend = if fixed_server(s) || in_container[id] {
                    Backend::Local
                } else {
                    main
                };
                singles.push(PlannedCell {
                    scenario: i,
                    driver: Some(id),
                    turn: i,
                    backend,
                    kind: kind(s, Some(id)),
                });
            }
        }
        // The other backend: per family, scenarios chosen greedily until
        // they cover every feature the movable scenarios have; each through
        // the family's next driver in turn.
        let movable: Vec<usize> = (0..scenarios.len()).filter(|i| !fixed_server(&scenarios[*i])).collect();
        let wanted: BTreeSet<String> = movable.iter().flat_map(|i| features(&scenarios[*i])).collect();
        for fam in ["in-process", "protocol", "pooler"] {
            let drivers: Vec<&'static str> = ids
                .iter()
                .copied()
                .filter(|id| families[id] == fam && !in_container[id])
                .collect();
            if drivers.is_empty() {
                continue;
            }
            let mut left = wanted.clone();
            let mut turn = 0;
            while !left.is_empty() {
                let Some(best) = movable
                    .iter()
                    .copied()
                    .max_by_key(|i| (features(&scenarios[*i]).intersection(&left).count(), usize::MAX - i))
                else {
                    break;
                };
                let covers = features(&scenarios[best]);
                if covers.intersection(&left).count() == 0 {
                    break;
                }
                left.retain(|f| !covers.contains(f));
                let id = drivers[turn % drivers.len()];
                turn += 1;
                singles.push(PlannedCell {
                    scenario: best,
                    driver: Some(id),
                    turn: best,
                    backend: other,
                    kind: kind(&scenarios[best], Some(id)),
                });
            }
        }
        // Fault scenarios: all drivers of one together, in one trial, on
        // the main backend (the local cluster when the kind fixes it).
        // Spread evenly among the single cells, not after them: at the end,
        // six of these at once (each running four to six cells, with child
        // processes, adapters and clusters of their own) loaded the machine
        // so that a crash cell's time to release grew past a second.
        // The longest first, so that none of them makes the run's tail: a
        // partition's trial waits for TCP's and the pools' timers (20–50 s),
        // a restart's for a cluster of its own to stop and start (about
        // 20 s), a crash's for the server and the pools to notice (4–23 s;
        // 2026-12-06, `LOCKLAB_TEST_TIMES`: the last trial to end was a
        // restart's, started 18 s before the end).
        let mut waiting: Vec<_> = scenarios
            .iter()
            .enumerate()
            .filter(|(_, s)| waits_for_faults(s))
            .collect();
        waiting.sort_by_key(|(i, s)| (!s.needs_fault_server(), !s.needs_own_cluster(), *i));
        let faults: Vec<PlannedCell> = waiting
            .into_iter()
            .map(|(i, s)| PlannedCell {
                scenario: i,
                driver: None,
                turn: i,
                backend: if fixed_server(s) { Backend::Local } else { main },
                kind: kind(s, None),
            })
            .collect();
        let every = singles.len() / (faults.len() + 1) + 1;
        for (n, t) in faults.into_iter().enumerate() {
            let at = ((n + 1) * every).min(singles.len());
            singles.insert(at, t);
        }
        Plan { cells: singles }
    }
}
