use locklab::lab::{Checked, Deadpool, Suite, SuiteError};
use own_deadpool::{pool_builder, unlock_before_return};

const PROPERTY: &str = "session-lock-released-on-return";

fn check(pool: Deadpool) -> Result<Checked, SuiteError> {
    let suite = Suite::new(pool).only(&["session-lock-pool-return"]);
    suite.require(&[PROPERTY]).check()
}

#[test]
fn unlocking_before_the_return_meets_the_property() {
    let pool = Deadpool::configured("own-deadpool", "post_recycle hook, unlock on return", pool_builder);
    let checked = check(pool.before_return(|client| Box::pin(unlock_before_return(client))));
    checked.unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn the_post_recycle_hook_alone_does_not() {
    let pool = Deadpool::configured("own-deadpool-hook", "post_recycle hook", pool_builder);
    let outcome = check(pool).map_err(|e| e.to_string());
    assert!(outcome.is_err_and(|e| e.contains(PROPERTY)), "{PROPERTY} held");
}
