//! The connection each actor has as the steps go: a step may only use a
//! connection its actor has (checked out, not busy with a background step).
//! What a step does to it is its kind's [`Connection`], declared in
//! [`crate::scenario::steps::declaration`].

use super::Validator;
use super::walk::{ABANDONED, Conn, Walk};
use crate::scenario::Pos;
use crate::scenario::raw::{Network, Process, Via};
use crate::scenario::steps::{Connection, Declaration, Needs, Side};

impl Validator<'_> {
    /// Checks that a step of `kind` fits the connection `actor` has, and
    /// updates it as the kind's [`Connection`] says.
    pub(super) fn connection_rules(
        &mut self,
        walk: &mut Walk,
        n: usize,
        pos: Pos,
        declared: Declaration,
        actor: usize,
    ) {
        let word = declared.word;
        let an = walk.actors[actor].name.clone();
        let state = walk.state[actor];
        match declared.connection {
            Connection::Finishes => walk.state[actor] = Conn::Ready,
            // (A step on the actor's pool, not its connection, still runs on
            // the side its kind says.)
            Connection::Nothing => {
                if let Side::Pool(why) = declared.side
                    && walk.actors[actor].via == Via::Direct
                {
                    self.err(pos, format!("step {n}: {}", why.replace("{actor}", &an)));
                }
            }
            Connection::DropsBackground => match state {
                Conn::Busy(b) => {
                    walk.background.insert(b, Some(ABANDONED));
                    walk.state[actor] = Conn::None;
                }
                Conn::None | Conn::Ready => self.err(
                    pos,
                    format!("step {n}: '{word}' drops a background step in flight, but '{an}' runs none"),
                ),
            },
            Connection::Kills => self.kill(walk, n, pos, word, actor, declared.needs),
            Connection::Cuts
                if declared.needs == Needs::Namespace && walk.actors[actor].network != Network::Namespace =>
            {
                self.err(
                    pos,
                    format!("step {n}: 'partition' and 'heal' cut and restore a connection in the run's network namespace; give actor '{an}' 'network: namespace' (a direct actor)"),
                );
            }
            // A terminated, partitioned or healed connection stays the actor's:
            // what its next statement (or its background step) sees is the finding.
            Connection::Cuts => {
                if state == Conn::None {
                    self.no_connection(walk, n, pos, actor);
                }
            }
            // An actor without a connection (a pool actor after its return, a
            // crashed or disconnected direct actor): the backend it last had.
            Connection::Ends => {}
            Connection::Uses | Connection::Opens | Connection::Closes => {
                self.use_connection(walk, n, pos, declared, actor);
            }
        }
    }

    /// A step that needs the actor's idle connection ([`Connection::Uses`],
    /// `Closes`) or none ([`Connection::Opens`]), on the side its kind runs on.
    fn use_connection(&mut self, walk: &mut Walk, n: usize, pos: Pos, declared: Declaration, actor: usize) {
        let an = walk.actors[actor].name.clone();
        let via = walk.actors[actor].via;
        if let Conn::Busy(b) = walk.state[actor] {
            self.err(
                pos,
                format!(
                    "step {n}: actor '{an}' is still running background step {} (await it first)",
                    b + 1
                ),
            );
            return;
        }
        let wrong_side = match declared.side {
            Side::Pool(why) if via == Via::Direct => Some(why),
            Side::Direct(why) if via == Via::Pool => Some(why),
            // (Observers are checked with the step's other uses.)
            Side::Pool(_) | Side::Direct(_) | Side::Any | Side::Observer | Side::Awaited | Side::Nobody => None,
        };
        if let Some(why) = wrong_side {
            self.err(pos, format!("step {n}: {}", why.replace("{actor}", &an)));
            return;
        }
        match (declared.connection, walk.state[actor]) {
            (Connection::Opens, _) if walk.pool_crashed.is_some() => {
                self.err(
                    pos,
                    format!(
                        "step {n}: the pool under test was crashed at step {}; no {} can follow",
                        walk.pool_crashed.unwrap_or_default(),
                        declared.word
                    ),
                );
            }
            (Connection::Opens, Conn::Ready) => {
                self.err(pos, format!("step {n}: '{an}' already has a connection checked out"));
            }
            (Connection::Opens, _) => walk.state[actor] = Conn::Ready,
            (Connection::Closes, Conn::Ready) => walk.state[actor] = Conn::None,
            (_, Conn::None) => self.no_connection(walk, n, pos, actor),
            _ => {}
        }
    }

    /// A step on an actor that has no connection.
    fn no_connection(&mut self, walk: &Walk, n: usize, pos: Pos, actor: usize) {
        let an = &walk.actors[actor].name;
        let msg = match (walk.actors[actor].via, walk.pool_crashed) {
            (Via::Pool, Some(at)) => format!(
                "step {n}: pool actor '{an}' lost its connection when the pool under test was crashed at step {at}"
            ),
            (Via::Direct, _) => format!("step {n}: actor '{an}' was disconnected by an earlier step"),
            (Via::Pool, None) => {
                format!("step {n}: actor '{an}' has no connection (add a 'do: checkout' step before it)")
            }
        };
        self.err(pos, msg);
    }

    /// A step that kills the process holding the connection
    /// ([`Connection::Kills`]): for a pool actor, the pool's, with every
    /// connection of the pool; for a direct actor, its own child process.
    fn kill(&mut self, walk: &mut Walk, n: usize, pos: Pos, word: &str, actor: usize, needs: Needs) {
        let an = walk.actors[actor].name.clone();
        let child = needs == Needs::ChildProcess;
        if walk.actors[actor].via == Via::Pool {
            if child && walk.pool_process != Process::Child {
                self.err(
                    pos,
                    format!("step {n}: '{word}' on pool actor '{an}' kills the process the pool under test lives in; give the pool 'process: child'"),
                );
            } else if let Some(at) = walk.pool_crashed {
                self.err(
                    pos,
                    format!("step {n}: the pool under test was already crashed at step {at}"),
                );
            } else {
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
            return;
        }
        if child && walk.actors[actor].process != Process::Child {
            self.err(
                pos,
                format!("step {n}: '{word}' kills the process that holds the connection; give actor '{an}' 'process: child' (a direct actor)"),
            );
            return;
        }
        match walk.state[actor] {
            // The background step dies with the process: never awaited.
            Conn::Busy(b) => {
                walk.background.insert(b, Some(ABANDONED));
                walk.state[actor] = Conn::None;
            }
            Conn::Ready => walk.state[actor] = Conn::None,
            Conn::None => self.no_connection(walk, n, pos, actor),
        }
    }
}
