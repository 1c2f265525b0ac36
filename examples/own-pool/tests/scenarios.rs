//! The service's pool through locklab's scenario library: one test per
//! scenario (`cargo test -- --list` lists them), on a local PostgreSQL
//! cluster locklab starts (or the server `LOCKLAB_DSN` names). The return
//! property must hold: a session-level lock the code did not unlock must not
//! outlive the connection's return to the pool.

use locklab::lab::{SqlxPgPool, Suite};

fn main() -> std::process::ExitCode {
    let pool = SqlxPgPool::configured(
        "own-pool",
        "after_release hook: select pg_advisory_unlock_all()",
        own_pool::with_unlock_on_return,
    );
    Suite::new(pool).require(&["session-lock-released-on-return"]).main()
}
