//! The lab's public API, for a program outside this repository: load
//! scenarios, choose drivers, start a server, run, read the cells, write a
//! report; or [`Suite`], the scenarios through a pool of yours as tests.
//! The crate's other modules are the lab's machinery, public only with the
//! `internals` feature (for the `locklab` binary and the tests); this
//! module is what later versions build on.
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

mod cell;
mod options;
mod report;
mod run;
mod scenario;
mod suite;

pub use crate::outcome::Status;
pub use crate::report::Format;
pub use crate::server::BackendChoice;
pub use cell::{Cell, Observation};
pub use locklab_drivers::{
    Bb8Postgres, BeforeReturn, Deadpool, DieselAsyncDeadpool, Driver, MobcPostgres, R2d2Postgres, SqlxPgPool,
    TokioPostgresFactory,
};
pub use options::ServerOptions;
pub use report::Report;
pub use run::{Lab, drivers, load_scenarios, shipped_scenarios};
pub use scenario::Scenario;
pub use suite::{Checked, SUITE_PG_MAJOR, Suite, SuiteError, Unmet, columns_file};
