//! The same pool without the hook: the requirement must fail, and its error
//! must name the property and the cell that decided it. A test that the
//! requirement can fail at all, not only pass.

use locklab::lab::{SqlxPgPool, Suite, SuiteError, Unmet};

#[test]
fn the_pool_without_the_hook_violates_the_return_property() {
    let pool = SqlxPgPool::configured("own-pool-no-hook", "PgPoolOptions defaults", |options| options);
    let outcome = Suite::new(pool)
        .only(&["session-lock-pool-return"])
        .require(&["session-lock-released-on-return"])
        .check();
    let unmet = match outcome {
        Err(SuiteError::Unmet(unmet)) => unmet,
        Err(SuiteError::Setup(e)) => panic!("the suite could not run: {e:#}"),
        Ok(_) => panic!("a pool that keeps session-level locks across a return passed the return property"),
    };
    let violated = unmet
        .iter()
        .find(|u| matches!(u, Unmet::Property { property, .. } if property == "session-lock-released-on-return"))
        .unwrap_or_else(|| panic!("no violation of the return property among: {unmet:?}"));
    let Unmet::Property {
        verdict,
        scenario,
        record,
        ..
    } = violated
    else {
        unreachable!()
    };
    assert_eq!(verdict, "violated");
    assert_eq!(scenario, "session-lock-pool-return");
    assert_eq!(record.as_deref(), Some("held_after_return"));
    let message = SuiteError::Unmet(unmet.clone()).to_string();
    assert!(
        message.contains("session-lock-released-on-return")
            && message.contains("session-lock-pool-return · held_after_return"),
        "the error does not name the property and the deciding cell: {message}"
    );
}
