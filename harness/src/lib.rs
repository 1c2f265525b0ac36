//! locklab: a behavioural conformance suite for PostgreSQL advisory locks as
//! Rust services use them through connection pools.
//!
//! Data flows one way: a scenario file ([`scenario`]) is validated into a
//! [`scenario::Scenario`], the [`runner`] executes it through a driver
//! (`locklab-drivers`) against a [`server::Server`], [`observe`] reads the
//! server's view, and [`report`] turns the results into the driver matrix;
//! [`baseline`] compares them with the committed expected matrix, and
//! [`browser`] renders the HTML report in headless Chromium.
//!
//! A program outside this repository uses [`lab`]: load scenarios, choose
//! drivers, start a server, run, read typed outcomes, write a report.

#![deny(missing_docs)]

pub mod baseline;
pub mod browser;
pub mod compare;
pub mod conformance;
pub mod cpu;
pub mod faults;
pub mod floor;
pub mod held_count;
pub mod judge;
pub mod lab;
pub use locklab_core::keys;
pub use locklab_holders as holders;
pub mod load;
pub mod matrix;
pub mod observe;
pub mod outcome;
pub mod properties;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod server;
pub mod shard;
