//! What the harness needs to inject faults into an actor's connection
//! (`do: crash`, `do: partition` / `heal`; docs/src/faults-and-races.md):
//! - [`child`]: a direct actor's connection in a child process of its own
//!   (`process: child`), which a crash kills with SIGKILL, so that the kernel
//!   closes its socket exactly as for a crashed worker;
//! - [`host`]: the pool under test in a process of its own (`pool.process:
//!   child`; `locklab pool-adapter`), which a crash of a pool actor kills;
//! - [`netns`]: a network namespace of the run's own, joined to the host by a
//!   veth pair, from which `network: namespace` actors connect, so that a
//!   partition can drop their packets (no FIN, no RST: a cut cable).

pub mod child;
pub mod host;
pub mod netns;
pub mod server;
