use locklab::lab::{Bb8Postgres, Checked, Suite, SuiteError};
use own_bb8::{configure, unlock_before_return};

const PROPERTY: &str = "session-lock-released-on-return";

fn check(pool: Bb8Postgres) -> Result<Checked, SuiteError> {
    let suite = Suite::new(pool).only(&["session-lock-pool-return"]);
    suite.require(&[PROPERTY]).check()
}

#[test]
fn unlocking_before_the_return_meets_the_property() {
    let pool = Bb8Postgres::configured("own-bb8", "test_on_check_out, unlock on return", configure);
    let checked = check(pool.before_return(|client| Box::pin(unlock_before_return(client))));
    checked.unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn without_the_unlock_it_does_not() {
    let pool = Bb8Postgres::configured("own-bb8-plain", "test_on_check_out", configure);
    let outcome = check(pool).map_err(|e| e.to_string());
    assert!(outcome.is_err_and(|e| e.contains(PROPERTY)), "{PROPERTY} held");
}
