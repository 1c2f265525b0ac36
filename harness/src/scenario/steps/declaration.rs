//! What each step kind declares about itself ([`Declaration`]): which actor
//! runs it, whether it can be recorded, bounded (`client_timeout_ms`) or run
//! in the background, what it does to its actor's connection, what it needs
//! of the actor and where a cell containing it must run. The validator
//! (`validate/`) and the runner's placement of a cell
//! ([`crate::scenario::Scenario::placement`]) read declarations instead of
//! lists of kinds; each kind states its own in its file
//! (`Kind::FORMS`).

/// Which actor runs a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The actor it names, pool or direct.
    Any,
    /// A pool actor (the step goes through the driver under test); the
    /// sentence for a direct actor, `{actor}` standing for its name.
    Pool(&'static str),
    /// A direct actor's own connection; the sentence for a pool actor.
    Direct(&'static str),
    /// A direct actor, the observer that asks the server.
    Observer,
    /// The awaited background step's actor (the step names none).
    Awaited,
    /// No actor.
    Nobody,
}

/// Whether a step's outcome can be a row of the matrix (`record:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// Always.
    Yes,
    /// Only with `client_timeout_ms` (whose expiry is the outcome).
    WhenBounded,
    /// Never: the step has no outcome of its own.
    No,
}

/// The expectations (`expect:`) a step takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expects {
    /// Those of a statement: `value`, `rows`, `error`, `message`, `notices`, `elapsed_ms`.
    Sql,
    /// Those of a lock snapshot: `held`, `holders`.
    Locks,
    /// None.
    Nothing,
}

/// What a step does to its actor's connection, as the validator tracks it
/// (none, idle, busy with a background step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connection {
    /// Runs on the actor's idle connection and leaves it idle (busy, for a
    /// background step).
    Uses,
    /// Gets the actor a connection: it must have none.
    Opens,
    /// Gives the actor's idle connection up.
    Closes,
    /// Waits for the actor's background step: its connection is idle after.
    Finishes,
    /// Drops the actor's background step in flight with its connection.
    DropsBackground,
    /// Kills the process that holds the connection (and a background step
    /// on it); for a pool actor, every connection of the pool.
    Kills,
    /// Cuts or restores the connection's packets; the connection stays the
    /// actor's, idle or busy.
    Cuts,
    /// Ends the actor's backend from the server, whatever the actor has (a
    /// pool actor without a connection: the backend it last had).
    Ends,
    /// Touches no connection.
    Nothing,
}

/// What a step needs of its actor beyond a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Nothing.
    Nothing,
    /// `process: child` (for a pool actor: `pool.process: child`).
    ChildProcess,
    /// `network: namespace`.
    Namespace,
}

/// Where a cell whose scenario has the step must run, in precedence order
/// (a scenario runs where its most demanding step says: the greatest).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Placement {
    /// On the column's server (shared by the run's cells).
    ColumnServer,
    /// On the fault cells' local cluster, reached from the run's network
    /// namespace (the step acts on a `network: namespace` actor).
    FaultServer,
    /// On a local cluster of the cell's own, removed after it (the step
    /// restarts the server).
    OwnCluster,
}

/// Everything the validator and the runner's placement need to know of a
/// step kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Declaration {
    /// The word a file uses for it (`sql`, `checkout`, `observe`, …).
    pub word: &'static str,
    /// Which actor runs it.
    pub side: Side,
    /// Whether `record:` may name its outcome.
    pub record: Record,
    /// Whether it takes `client_timeout_ms` (in the foreground).
    pub bounded: bool,
    /// Whether it takes `on_timeout` with `client_timeout_ms`.
    pub on_timeout: bool,
    /// Whether it may run in the background (`background: true`).
    pub background: bool,
    /// Whether it takes `save:` (in the foreground).
    pub save: bool,
    /// Whether it takes `key:` (an advisory lock key).
    pub key: bool,
    /// Whether `when:` applies to it (in the foreground).
    pub when: bool,
    /// Its `expect:`.
    pub expects: Expects,
    /// Whether it may set its own `deadline_ms` (`await` and `order` run
    /// within the background step's).
    pub own_deadline: bool,
    /// What it does to its actor's connection.
    pub connection: Connection,
    /// What it needs of its actor.
    pub needs: Needs,
    /// Whether it is a fault a later `granted` step times the release from.
    pub fault: bool,
    /// Where a cell with it runs.
    pub placement: Placement,
}

/// The declaration most kinds start from: a foreground step on any actor's
/// idle connection, recorded, with nothing else.
pub(crate) const BASE: Declaration = Declaration {
    word: "",
    side: Side::Any,
    record: Record::Yes,
    bounded: false,
    on_timeout: false,
    background: false,
    save: false,
    key: false,
    when: false,
    expects: Expects::Nothing,
    own_deadline: true,
    connection: Connection::Uses,
    needs: Needs::Nothing,
    fault: false,
    placement: Placement::ColumnServer,
};

#[cfg(test)]
mod tests {
    use super::*;

    /// A restart outranks the fault server, which outranks the column's.
    #[test]
    fn placements_are_ordered_by_precedence() {
        assert!(Placement::ColumnServer < Placement::FaultServer);
        assert!(Placement::FaultServer < Placement::OwnCluster);
    }
}
