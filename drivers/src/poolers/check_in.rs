//! What a pooler does to a server connection when a client gives it back
//! (check-in), as PgBouncer's settings model it ([`CheckIn`]), and the
//! products a column's check-in stands for ([`Modelled`]).
//!
//! PgBouncer runs `server_reset_query` (default `DISCARD ALL`) when it
//! releases a server connection in session mode, and in transaction mode
//! only with `server_reset_query_always = 1` (PgBouncer docs,
//! "server_reset_query", "server_reset_query_always"; the setting since
//! 1.7, its NEWS; pgbouncer/pgbouncer#102). `DISCARD ALL` includes
//! `SELECT pg_advisory_unlock_all()`; `RESET ALL`, `DEALLOCATE ALL` and
//! `CLOSE ALL` are other steps of it and do not (PostgreSQL docs,
//! "DISCARD"), which the server cells of `reset-statements-after-session-lock`
//! measure.

/// PgCat's and pg_doorman's check-in statements, all of them at once.
const RESET_KEEPING_LOCKS: &str = "RESET ROLE; RESET ALL; DEALLOCATE ALL; CLOSE ALL;";

/// What a pooler column's pooler sends a server connection at check-in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckIn {
    /// The product's own default (PgBouncer: `DISCARD ALL` in session mode
    /// when the client disconnects, nothing in transaction mode).
    Default,
    /// PgBouncer with `server_reset_query = RESET ROLE; RESET ALL;
    /// DEALLOCATE ALL; CLOSE ALL` (and, in transaction mode,
    /// `server_reset_query_always = 1`): the statements PgCat and
    /// pg_doorman clean a returned connection with, none of which ends an
    /// advisory lock.
    ResetKeepingLocks,
    /// PgBouncer in transaction mode with `server_reset_query_always = 1`
    /// and the default `DISCARD ALL`: a reset after every transaction.
    DiscardAlways,
}

impl CheckIn {
    /// The PgBouncer settings that make it, as `name = value` lines of
    /// `pgbouncer.ini`'s `[pgbouncer]` section (none for the default).
    pub fn pgbouncer_settings(self) -> Vec<String> {
        match self {
            CheckIn::Default => Vec::new(),
            CheckIn::ResetKeepingLocks | CheckIn::DiscardAlways => vec![
                format!("server_reset_query = {}", self.reset_query()),
                "server_reset_query_always = 1".to_owned(),
            ],
        }
    }

    /// The statement PgBouncer sends at check-in, as the server connection's
    /// backend then shows it in `pg_stat_activity.query`.
    pub fn reset_query(self) -> &'static str {
        match self {
            CheckIn::Default | CheckIn::DiscardAlways => "DISCARD ALL",
            CheckIn::ResetKeepingLocks => RESET_KEEPING_LOCKS,
        }
    }

    /// Whether the reset follows every transaction in transaction mode
    /// (`server_reset_query_always = 1`), not only a client's disconnect in
    /// session mode. PgBouncer sends it as it releases the server
    /// connection, after passing the transaction's last ReadyForQuery to
    /// the client (`release_server`, `reset_on_release` in its
    /// `src/objects.c`): a client may see its statement done before the
    /// reset ran.
    pub fn resets_every_transaction(self) -> bool {
        matches!(self, CheckIn::ResetKeepingLocks | CheckIn::DiscardAlways)
    }

    /// `reset-keeping-locks`, `discard-always`; `None` for the default.
    pub fn label(self) -> Option<&'static str> {
        match self {
            CheckIn::Default => None,
            CheckIn::ResetKeepingLocks => Some("reset-keeping-locks"),
            CheckIn::DiscardAlways => Some("discard-always"),
        }
    }
}

/// A product (and mode) whose check-in a column models, with the source of
/// what it does. The report's card for the column says, per product,
/// whether a session-level lock survives check-in there, from the column's
/// verdict of `session-lock-released-on-return`.
#[derive(Debug)]
pub struct Modelled {
    /// The product, e.g. `PgCat`.
    pub product: &'static str,
    /// `session` or `transaction` (the product's own word for its mode).
    pub mode: &'static str,
    /// What it sends at check-in, in a few words.
    pub sends: &'static str,
    /// Where that is stated: the product's source file and function, or its
    /// docs' page and section.
    pub source: &'static str,
}

/// PgBouncer's own defaults, as the columns `pgbouncer-session` and
/// `pgbouncer-transaction` run them.
pub(super) const PGBOUNCER_SESSION: Modelled = Modelled {
    product: "PgBouncer",
    mode: "session",
    sends: "DISCARD ALL when the client disconnects (server_reset_query's default)",
    source: "PgBouncer docs, \"server_reset_query\"",
};

/// See [`PGBOUNCER_SESSION`].
pub(super) const PGBOUNCER_TRANSACTION: Modelled = Modelled {
    product: "PgBouncer",
    mode: "transaction",
    sends: "nothing (server_reset_query is not used in transaction pooling)",
    source: "PgBouncer docs, \"server_reset_query\"; pgbouncer/pgbouncer#102",
};

/// Supavisor in session mode.
pub(super) const SUPAVISOR_SESSION: Modelled = Modelled {
    product: "Supavisor",
    mode: "session",
    sends: "DISCARD ALL when an idle client disconnects (a busy one's server connection is closed)",
    source: "supabase/supavisor lib/supavisor/client_handler.ex, maybe_cleanup_db_handler; lib/supavisor/db_handler.ex, :cleanup",
};

/// Supavisor in transaction mode.
pub(super) const SUPAVISOR_TRANSACTION: Modelled = Modelled {
    product: "Supavisor",
    mode: "transaction",
    sends: "nothing (its cleanup refuses transaction mode: cleanup_not_supported_in_transaction_mode)",
    source: "supabase/supavisor lib/supavisor/db_handler.ex, handle_event :cleanup",
};

/// PgCat in session mode.
pub(super) const PGCAT_SESSION: Modelled = Modelled {
    product: "PgCat",
    mode: "session",
    sends: "ROLLBACK if in a transaction; RESET ROLE; RESET ALL; DEALLOCATE ALL, only after it saw SET or PREPARE (cleanup_server_connections, on by default)",
    source: "postgresml/pgcat src/server.rs, Server::checkin_cleanup; src/client.rs calls it at Terminate",
};

/// PgCat in transaction mode.
pub(super) const PGCAT_TRANSACTION: Modelled = Modelled {
    product: "PgCat",
    mode: "transaction",
    sends: "as in session mode, after every transaction",
    source: "postgresml/pgcat src/server.rs, Server::checkin_cleanup; src/client.rs calls it when the server is released",
};

/// pg_doorman in session mode (a fork of PgCat: the same check-in).
pub(super) const PG_DOORMAN_SESSION: Modelled = Modelled {
    product: "pg_doorman",
    mode: "session",
    sends: "ROLLBACK if in a transaction; RESET ROLE, and RESET ALL after SET, DEALLOCATE ALL after PREPARE, CLOSE ALL after DECLARE (its docs claim RESET ALL runs pg_advisory_unlock_all; the server cells show it does not)",
    source: "ozontech/pg_doorman src/server/server_backend.rs, checkin_cleanup; src/client/transaction.rs calls it at Terminate; documentation/en/src/concepts/pool-modes.md, \"Cleanup on checkin\"",
};

/// pg_doorman in transaction mode.
pub(super) const PG_DOORMAN_TRANSACTION: Modelled = Modelled {
    product: "pg_doorman",
    mode: "transaction",
    sends: "as in session mode, after every transaction",
    source: "ozontech/pg_doorman src/server/server_backend.rs, checkin_cleanup; src/client/transaction.rs calls it at each transaction's end",
};

/// PgBouncer with `server_reset_query_always = 1`.
pub(super) const PGBOUNCER_RESET_ALWAYS: Modelled = Modelled {
    product: "PgBouncer",
    mode: "transaction",
    sends: "DISCARD ALL after every transaction, with server_reset_query_always = 1",
    source: "PgBouncer docs, \"server_reset_query_always\" (NEWS, 1.7)",
};
