//! Load runs: many workers contending for advisory locks through the pool
//! under test, every critical section recorded on the server, and checkers
//! over that history afterwards ([`history`]).

pub mod history;
