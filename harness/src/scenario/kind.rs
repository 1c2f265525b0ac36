//! Each step kind's one declaration: which actor runs it, whether it can be
//! recorded, bounded (`client_timeout_ms`) or run in the background, what it
//! does to its actor's connection, what it needs of the actor and where a
//! cell containing it must run.
//!
//! [`Kind::declaration`] is one `match` without a wildcard: a new kind does
//! not compile until it is declared here, and the validator
//! (`validate/`) and the runner's placement of a cell
//! ([`crate::scenario::Scenario::placement`]) read the declaration instead
//! of lists of kinds. A new kind is one [`Kind`] variant (or one [`Action`]),
//! its declaration here, its [`crate::scenario::StepKind`] variant and one
//! file under `runner/`; the compiler names the other places (the raw step's
//! kind keys in `validate/step.rs`, the typed step, the runner's dispatch).

use super::raw::Action;

/// A step kind as a scenario file names it: by the key that makes the step
/// (`sql:`, `observe:`, …) or, for `do:`, by its action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `sql:` (in the foreground, or with `background: true`).
    Sql,
    /// `do: ACTION`.
    Do(Action),
    /// `observe: advisory_locks`.
    Observe,
    /// `held_count: KEY`.
    HeldCount,
    /// `blocked: ACTORS`.
    Blocked,
    /// `granted: ACTOR`.
    Granted,
    /// `restart: fast | immediate`.
    Restart,
    /// `await: ID`.
    Await,
    /// `order: [IDS]`.
    Order,
    /// `lock_guard: KEY`.
    Guard,
    /// `library: NAME`.
    Library,
}

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
const BASE: Declaration = Declaration {
    word: "",
    side: Side::Any,
    record: Record::Yes,
    bounded: false,
    on_timeout: false,
    background: false,
    save: false,
    when: false,
    expects: Expects::Nothing,
    own_deadline: true,
    connection: Connection::Uses,
    needs: Needs::Nothing,
    fault: false,
    placement: Placement::ColumnServer,
};

impl Kind {
    /// The kind's declaration.
    pub const fn declaration(self) -> Declaration {
        match self {
            Kind::Sql => Declaration {
                word: "sql",
                bounded: true,
                on_timeout: true,
                background: true,
                save: true,
                when: true,
                expects: Expects::Sql,
                ..BASE
            },
            Kind::Do(action) => action.declaration(),
            Kind::Observe => Declaration {
                word: "observe",
                side: Side::Observer,
                when: true,
                expects: Expects::Locks,
                ..BASE
            },
            // On the actor's own connection (a pool actor's checkout, a
            // direct actor's), as the locks it counts are that session's.
            Kind::HeldCount => Declaration {
                word: "held_count",
                ..BASE
            },
            Kind::Blocked => Declaration {
                word: "blocked",
                side: Side::Observer,
                ..BASE
            },
            Kind::Granted => Declaration {
                word: "granted",
                side: Side::Observer,
                ..BASE
            },
            Kind::Restart => Declaration {
                word: "restart",
                side: Side::Observer,
                record: Record::No,
                fault: true,
                placement: Placement::OwnCluster,
                ..BASE
            },
            Kind::Await => Declaration {
                word: "await",
                side: Side::Awaited,
                expects: Expects::Sql,
                own_deadline: false,
                connection: Connection::Finishes,
                ..BASE
            },
            Kind::Order => Declaration {
                word: "order",
                side: Side::Nobody,
                own_deadline: false,
                connection: Connection::Nothing,
                ..BASE
            },
            Kind::Guard => Declaration {
                word: "lock_guard",
                side: Side::Pool(
                    "'lock_guard' uses the driver under test, so it runs on a pool actor, not on direct actor '{actor}'",
                ),
                bounded: true,
                ..BASE
            },
            Kind::Library => Declaration {
                word: "library",
                side: Side::Pool(
                    "'library' calls a lock library on the pool under test, so it runs on a pool actor, not on direct actor '{actor}'",
                ),
                connection: Connection::Nothing,
                ..BASE
            },
        }
    }
}

impl Action {
    /// The declaration of `do: ACTION`.
    pub const fn declaration(self) -> Declaration {
        match self {
            Action::Begin => transaction("begin"),
            Action::Commit => transaction("commit"),
            Action::Rollback => transaction("rollback"),
            Action::Checkout => Declaration {
                word: "checkout",
                side: Side::Pool(
                    "'{actor}' is a direct actor, connected for the whole run; 'checkout' is for pool actors",
                ),
                record: Record::WhenBounded,
                bounded: true,
                connection: Connection::Opens,
                ..BASE
            },
            Action::Return => Declaration {
                word: "return",
                side: Side::Pool(
                    "'{actor}' is a direct actor; 'return' is for pool actors ('disconnect' closes a direct actor's connection)",
                ),
                record: Record::WhenBounded,
                bounded: true,
                connection: Connection::Closes,
                ..BASE
            },
            Action::Disconnect => Declaration {
                word: "disconnect",
                side: Side::Direct(
                    "'{actor}' is a pool actor; 'disconnect' is for direct actors ('return' gives a pooled connection back)",
                ),
                record: Record::No,
                connection: Connection::Closes,
                ..BASE
            },
            Action::Abandon => Declaration {
                word: "abandon",
                record: Record::No,
                connection: Connection::DropsBackground,
                ..BASE
            },
            Action::Crash => fault("crash", Connection::Kills, Needs::ChildProcess, Placement::ColumnServer),
            Action::Terminate => fault("terminate", Connection::Ends, Needs::Nothing, Placement::ColumnServer),
            Action::Partition => fault("partition", Connection::Cuts, Needs::Namespace, Placement::FaultServer),
            Action::Heal => Declaration {
                fault: false,
                ..fault("heal", Connection::Cuts, Needs::Namespace, Placement::FaultServer)
            },
        }
    }
}

/// A transaction-control step (`do: begin | commit | rollback`).
const fn transaction(word: &'static str) -> Declaration {
    Declaration {
        word,
        bounded: true,
        expects: Expects::Sql,
        ..BASE
    }
}

/// A fault step: no outcome of its own, timed by a later `granted`.
const fn fault(word: &'static str, connection: Connection, needs: Needs, placement: Placement) -> Declaration {
    Declaration {
        word,
        record: Record::No,
        connection,
        needs,
        fault: true,
        placement,
        ..BASE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `do:` action.
    const ACTIONS: [Action; 11] = [
        Action::Checkout,
        Action::Return,
        Action::Disconnect,
        Action::Begin,
        Action::Commit,
        Action::Rollback,
        Action::Abandon,
        Action::Crash,
        Action::Terminate,
        Action::Partition,
        Action::Heal,
    ];

    fn every_kind() -> Vec<Kind> {
        let mut kinds = vec![
            Kind::Sql,
            Kind::Observe,
            Kind::HeldCount,
            Kind::Blocked,
            Kind::Granted,
            Kind::Restart,
            Kind::Await,
            Kind::Order,
            Kind::Guard,
            Kind::Library,
        ];
        kinds.extend(ACTIONS.map(Kind::Do));
        kinds
    }

    /// A `do:` action's word is how a file spells it, and no two kinds
    /// share a word (error messages name kinds by it).
    #[test]
    fn words_are_the_files_spelling_and_unique() {
        for a in ACTIONS {
            let back: Action = serde_saphyr::from_str(a.declaration().word).unwrap();
            assert_eq!(back, a);
        }
        let mut words: Vec<&str> = every_kind().iter().map(|k| k.declaration().word).collect();
        words.sort_unstable();
        let n = words.len();
        words.dedup();
        assert_eq!(words.len(), n, "{words:?}");
    }

    /// A restart outranks the fault server, which outranks the column's.
    #[test]
    fn placements_are_ordered_by_precedence() {
        assert!(Placement::ColumnServer < Placement::FaultServer);
        assert!(Placement::FaultServer < Placement::OwnCluster);
    }

    /// The declarations agree with each other where the rules assume so.
    #[test]
    fn declarations_are_consistent() {
        for k in every_kind() {
            let d = k.declaration();
            assert!(!d.word.is_empty(), "{k:?}");
            // Recorded only when bounded: it must take the bound.
            assert!(d.record != Record::WhenBounded || d.bounded, "{k:?}");
            // `on_timeout` goes with a bound; a background step is SQL on the actor's own connection.
            assert!(!d.on_timeout || d.bounded, "{k:?}");
            assert!(!d.background || d.connection == Connection::Uses, "{k:?}");
            // A lock snapshot is taken by the observer.
            assert!(d.expects != Expects::Locks || d.side == Side::Observer, "{k:?}");
            // Only what acts on a namespace actor runs on the fault cells' server.
            assert_eq!(
                d.placement == Placement::FaultServer,
                d.needs == Needs::Namespace,
                "{k:?}"
            );
            // A kind without an actor, or with the awaited step's, sets no deadline of its own.
            assert_eq!(matches!(d.side, Side::Awaited | Side::Nobody), !d.own_deadline, "{k:?}");
        }
    }
}
