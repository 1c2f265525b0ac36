//! The connection each actor has as the steps go: a step may only use a
//! connection its actor has (checked out, not busy with a background step).

use super::Validator;
use super::step::{ABANDONED, Kind, Walk};
use crate::scenario::Pos;
use crate::scenario::raw::{Action, Network, Process, Via};

/// What the validator tracks per actor while walking the steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Conn {
    /// No connection (a pool actor before checkout, after return; a
    /// disconnected direct actor).
    None,
    /// A connection, idle.
    Ready,
    /// A background step (index) is in flight.
    Busy(usize),
}

impl Validator<'_> {
    /// Checks that `kind` fits the connection `actor` has, and updates it.
    pub(super) fn connection_rules(&mut self, walk: &mut Walk, n: usize, pos: Pos, kind: &Kind, actor: usize) {
        let an = walk.actors[actor].name.clone();
        let via = walk.actors[actor].via;
        match (kind, walk.state[actor]) {
            (Kind::Await(_), _) => walk.state[actor] = Conn::Ready,
            (Kind::Order(_), _) => {}
            (Kind::Do(Action::Abandon), Conn::Busy(b)) => {
                walk.background.insert(b, Some(ABANDONED));
                walk.state[actor] = Conn::None;
            }
            (Kind::Do(Action::Crash), _) if via == Via::Pool && walk.pool_process != Process::Child => {
                self.err(
                    pos,
                    format!("step {n}: 'crash' on pool actor '{an}' kills the process the pool under test lives in; give the pool 'process: child'"),
                );
            }
            (Kind::Do(Action::Crash), _) if via == Via::Pool && walk.pool_crashed.is_some() => {
                self.err(
                    pos,
                    format!(
                        "step {n}: the pool under test was already crashed at step {}",
                        walk.pool_crashed.unwrap_or_default()
                    ),
                );
            }
            (Kind::Do(Action::Crash), _) if via == Via::Pool => {
                // Every connection of the pool dies with its process, and
                // every background step on one is never awaited.
                for (i, a) in walk.actors.iter().enumerate() {
                    if a.via == Via::Pool {
                        if let Conn::Busy(b) = walk.state[i] {
                            walk.background.insert(b, Some(ABANDONED));
                        }
                        walk.state[i] = Conn::None;
                    }
                }
                walk.pool_crashed.get_or_insert(n);
            }
            (Kind::Do(Action::Crash), _) if walk.actors[actor].process != Process::Child => {
                self.err(
                    pos,
                    format!("step {n}: 'crash' kills the process that holds the connection; give actor '{an}' 'process: child' (a direct actor)"),
                );
            }
            (Kind::Do(Action::Crash), Conn::Busy(b)) => {
                // The background step dies with the process: never awaited.
                walk.background.insert(b, Some(ABANDONED));
                walk.state[actor] = Conn::None;
            }
            (Kind::Do(Action::Crash), Conn::Ready) => walk.state[actor] = Conn::None,
            (Kind::Do(Action::Partition | Action::Heal), _) if walk.actors[actor].network != Network::Namespace => {
                self.err(
                    pos,
                    format!("step {n}: 'partition' and 'heal' cut and restore a connection in the run's network namespace; give actor '{an}' 'network: namespace' (a direct actor)"),
                );
            }
            // A terminated, partitioned or healed connection stays the actor's:
            // what its next statement (or its background step) sees is the finding.
            (Kind::Do(Action::Partition | Action::Heal), Conn::Busy(_) | Conn::Ready) => {}
            (Kind::Do(Action::Terminate), Conn::Busy(_) | Conn::Ready) => {}
            // An actor without a connection (a pool actor after its return, a
            // crashed or disconnected direct actor): the backend it last had.
            (Kind::Do(Action::Terminate), Conn::None) => {}
            (Kind::Do(Action::Abandon), _) => {
                self.err(
                    pos,
                    format!("step {n}: 'abandon' drops a background step in flight, but '{an}' runs none"),
                );
            }
            (_, Conn::Busy(b)) => {
                self.err(
                    pos,
                    format!(
                        "step {n}: actor '{an}' is still running background step {} (await it first)",
                        b + 1
                    ),
                );
            }
            (Kind::Do(Action::Checkout), _) if via == Via::Direct => {
                self.err(
                    pos,
                    format!(
                        "step {n}: '{an}' is a direct actor, connected for the whole run; 'checkout' is for pool actors"
                    ),
                );
            }
            (Kind::Do(Action::Checkout), _) if walk.pool_crashed.is_some() => {
                self.err(
                    pos,
                    format!(
                        "step {n}: the pool under test was crashed at step {}; no checkout can follow",
                        walk.pool_crashed.unwrap_or_default()
                    ),
                );
            }
            (Kind::Do(Action::Checkout), Conn::Ready) => {
                self.err(pos, format!("step {n}: '{an}' already has a connection checked out"));
            }
            (Kind::Do(Action::Checkout), Conn::None) => walk.state[actor] = Conn::Ready,
            (Kind::Do(Action::Return), _) if via == Via::Direct => {
                self.err(
                    pos,
                    format!("step {n}: '{an}' is a direct actor; 'return' is for pool actors ('disconnect' closes a direct actor's connection)"),
                );
            }
            (Kind::Do(Action::Disconnect), _) if via == Via::Pool => {
                self.err(
                    pos,
                    format!("step {n}: '{an}' is a pool actor; 'disconnect' is for direct actors ('return' gives a pooled connection back)"),
                );
            }
            (Kind::Do(Action::Return | Action::Disconnect), Conn::Ready) => walk.state[actor] = Conn::None,
            (_, Conn::None) if via == Via::Pool && walk.pool_crashed.is_some() => {
                self.err(
                    pos,
                    format!(
                        "step {n}: pool actor '{an}' lost its connection when the pool under test was crashed at step {}",
                        walk.pool_crashed.unwrap_or_default()
                    ),
                );
            }
            (_, Conn::None) => {
                let msg = if via == Via::Direct {
                    format!("step {n}: actor '{an}' was disconnected by an earlier step")
                } else {
                    format!("step {n}: actor '{an}' has no connection (add a 'do: checkout' step before it)")
                };
                self.err(pos, msg);
            }
            (_, Conn::Ready) => {}
        }
    }
}
