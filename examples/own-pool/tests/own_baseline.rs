//! The pool against a baseline directory of the project's own
//! (`Suite::baseline`): with no accepted file the suite fails and writes the
//! run's cells as a pending file; accepted, the same pool passes; the pool
//! without its hook then fails, naming the cell that changed.

use locklab::lab::{SqlxPgPool, Suite, SuiteError, Unmet};

/// A directory of its own, removed on drop.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The suite of `session-lock-pool-return` through the pool, with or
/// without its hook, against the baseline directory `dir`.
fn suite(hook: bool, dir: &std::path::Path) -> Result<(), SuiteError> {
    let pool = if hook {
        SqlxPgPool::configured(
            "own-pool",
            "after_release hook: select pg_advisory_unlock_all()",
            own_pool::with_unlock_on_return,
        )
    } else {
        SqlxPgPool::configured("own-pool", "PgPoolOptions defaults", |options| options)
    };
    Suite::new(pool)
        .only(&["session-lock-pool-return"])
        .baseline(dir)
        .check()
        .map(|_| ())
}

/// The one `Unmet::Baseline` of a failed suite, as text.
fn baseline_diff(outcome: Result<(), SuiteError>) -> String {
    let unmet = match outcome {
        Err(SuiteError::Unmet(unmet)) => unmet,
        Err(SuiteError::Setup(e)) => panic!("the suite could not run: {e:#}"),
        Ok(()) => panic!("the suite passed against a baseline it differs from"),
    };
    match unmet.as_slice() {
        [Unmet::Baseline { scenario, diff }] => {
            assert_eq!(scenario, "session-lock-pool-return");
            diff.clone()
        }
        other => panic!("expected one baseline difference, got {other:?}"),
    }
}

#[test]
fn a_changed_pool_fails_against_its_own_baseline() {
    let dir = Scratch(std::env::temp_dir().join(format!("own-pool-baseline-{}", std::process::id())));
    let pending = dir.0.join("session-lock-pool-return.json.new");
    let accepted = dir.0.join("session-lock-pool-return.json");

    let diff = baseline_diff(suite(true, &dir.0));
    assert!(diff.contains("no baseline for scenario session-lock-pool-return"), "{diff}");
    assert!(pending.is_file(), "{diff}");
    // What `locklab review --baseline DIR --accept session-lock-pool-return` does.
    std::fs::rename(&pending, &accepted).unwrap();

    if let Err(e) = suite(true, &dir.0) {
        panic!("the accepted pool differs from its own baseline: {e}");
    }
    assert!(!pending.exists());

    let diff = baseline_diff(suite(false, &dir.0));
    assert!(
        diff.contains("session-lock-pool-return × own-pool") && diff.contains("`held_after_return`"),
        "{diff}"
    );
    assert!(pending.is_file(), "the change is written as a pending file: {diff}");
}
