//! The lab's public API, for a program outside this repository: load
//! scenarios, choose drivers, start a server, run, read the typed outcomes,
//! write a report. The other modules of this crate are the lab's own
//! machinery (public for the `locklab` binary and the tests); this one, and
//! the types it re-exports, are what later versions build on.
//!
//! Each scenario × driver cell runs in a database of its own on the server,
//! which the run drops; the server (a local cluster, a container, or an
//! existing server given by DSN) stops when the [`Lab`] is dropped.
//!
//! One scenario through one pool on a local PostgreSQL 17 cluster (installed
//! into `.cache/` on first use). The program is
//! `harness/tests/examples/lab_api.rs`, which `cargo test` runs
//! (`harness/tests/docs.rs`; a doc test would be compiled anew on every
//! run, about two minutes of the test budget):
//!
#![doc = concat!("```text\n", include_str!("../../tests/examples/lab_api.rs"), "```")]

mod run;
mod suite;

pub use crate::outcome::{Observation, Outcome, RunResult, Status, Value};
pub use crate::report::{Format, Report};
pub use crate::scenario::Scenario;
pub use crate::server::{BackendChoice, Server, ServerOptions};
pub use locklab_drivers::{Driver, SqlxPgPool};
pub use run::{Lab, drivers, load_scenarios, shipped_scenarios};
pub use suite::{Checked, SUITE_PG_MAJOR, Suite, SuiteError, Unmet, columns_file};
