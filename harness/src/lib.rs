//! locklab: a behavioural conformance suite for PostgreSQL advisory locks as
//! Rust services use them through connection pools.
//!
//! A program outside this repository uses [`lab`]: load scenarios, choose
//! drivers, start a server, run, read the cells, write a report; or
//! [`lab::Suite`], locklab's scenarios through a pool of its own as tests of
//! its `cargo test`; and [`keys`], advisory-lock keys from strings. That is
//! this crate's API. (Who holds advisory locks on a running server is the
//! `locklab-holders` crate's.)
//!
//! The lab's machinery is private unless the `internals` feature is on (the
//! `locklab` binary, this crate's tests, benchmarks and examples, and the fuzz
//! target turn it on; it has no stability promise). Data flows one way: a
//! scenario file (`scenario`) is validated into a `scenario::Scenario`, the
//! `runner` executes it through a driver (`locklab-drivers`) against a
//! `server::Server`, `observe` reads the server's view, `judge` judges the
//! cells by the properties and `report` writes the driver matrix; `baseline`
//! compares them with the committed expected matrix, `repro` writes a cell
//! out as a reproduction that runs without locklab, and `browser` renders
//! the HTML report in headless Chromium.

#![deny(missing_docs)]
// Without `internals`, the machinery's items that only the binary and the
// tests use are unused in the library itself.
#![cfg_attr(not(feature = "internals"), allow(dead_code, unused_imports))]

pub mod lab;
pub use locklab_core::keys;

#[cfg(feature = "internals")]
pub mod baseline;
#[cfg(not(feature = "internals"))]
mod baseline;
#[cfg(feature = "internals")]
pub mod browser;
#[cfg(not(feature = "internals"))]
mod browser;
#[cfg(feature = "internals")]
pub mod compare;
#[cfg(not(feature = "internals"))]
mod compare;
#[cfg(feature = "internals")]
pub mod conformance;
#[cfg(not(feature = "internals"))]
mod conformance;
#[cfg(feature = "internals")]
pub mod cpu;
#[cfg(not(feature = "internals"))]
mod cpu;
#[cfg(feature = "internals")]
pub mod doctor;
#[cfg(not(feature = "internals"))]
mod doctor;
#[cfg(feature = "internals")]
pub mod faults;
#[cfg(not(feature = "internals"))]
mod faults;
#[cfg(feature = "internals")]
pub mod floor;
#[cfg(not(feature = "internals"))]
mod floor;
#[cfg(feature = "internals")]
pub mod held_count;
#[cfg(not(feature = "internals"))]
mod held_count;
#[cfg(feature = "internals")]
pub mod judge;
#[cfg(not(feature = "internals"))]
mod judge;
#[cfg(feature = "internals")]
pub mod load;
#[cfg(not(feature = "internals"))]
mod load;
#[cfg(feature = "internals")]
pub mod matrix;
#[cfg(not(feature = "internals"))]
mod matrix;
#[cfg(feature = "internals")]
pub mod observe;
#[cfg(not(feature = "internals"))]
mod observe;
#[cfg(feature = "internals")]
pub mod outcome;
#[cfg(not(feature = "internals"))]
mod outcome;
#[cfg(feature = "internals")]
pub mod properties;
#[cfg(not(feature = "internals"))]
mod properties;
#[cfg(feature = "internals")]
pub mod report;
#[cfg(not(feature = "internals"))]
mod report;
#[cfg(feature = "internals")]
pub mod repro;
#[cfg(not(feature = "internals"))]
mod repro;
#[cfg(feature = "internals")]
pub mod runner;
#[cfg(not(feature = "internals"))]
mod runner;
#[cfg(feature = "internals")]
pub mod scenario;
#[cfg(not(feature = "internals"))]
mod scenario;
#[cfg(feature = "internals")]
pub mod server;
#[cfg(not(feature = "internals"))]
mod server;
#[cfg(feature = "internals")]
pub mod shard;
#[cfg(not(feature = "internals"))]
mod shard;
