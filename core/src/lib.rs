//! What every part of locklab speaks, and nothing else: advisory lock keys
//! ([`keys`]: an i64 or (i32, i32), decoded from `pg_locks`), where and as
//! whom to connect ([`connect`]: [`ConnectSpec`], DSNs), errors located in
//! a YAML file ([`located`]), and what every binary's commands share: stdout
//! that tolerates a closed pipe ([`output`]) and SIGINT/SIGTERM ([`signals`]).
//!
//! For the crates built on it: `locklab-drivers` (the pools under test),
//! `locklab-holders` (the production diagnostic, which must not pull in the
//! pool crates) and `locklab` (the lab). It depends on tokio-postgres for the
//! connection configuration and on nothing of the lab.

#![deny(missing_docs)]

pub mod connect;
pub mod home;
pub mod keys;
pub mod located;
pub mod output;
pub mod signals;

pub use connect::{ConnectSpec, parse_config, parse_dsn, with_sources};
pub use home::home;
pub use keys::AdvisoryKey;
pub use located::{FileError, Pos};
