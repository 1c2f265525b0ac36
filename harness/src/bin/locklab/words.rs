//! The command line's words for the library's enums: `--backend`
//! (`LOCKLAB_BACKEND`), `--format`, `--require-severity`, `--pattern` and
//! `pooler-check --mode`.
//! clap's `ValueEnum` is implemented here, on a newtype per enum, so that
//! the model types carry no command-line derive; each word's help is the
//! one `--help` shows.

use clap::builder::PossibleValue;
use locklab::load::Pattern;
use locklab::properties::Severity;
use locklab::report::Format;
use locklab::server::BackendChoice;

/// A newtype around `$ty` that clap parses from the words given, each with
/// its help.
macro_rules! words {
    ($(#[$doc:meta])* $name:ident for $ty:ty { $($variant:ident => $word:literal: $help:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name(pub $ty);

        impl clap::ValueEnum for $name {
            fn value_variants<'a>() -> &'a [Self] {
                &[$($name(<$ty>::$variant)),+]
            }

            fn to_possible_value(&self) -> Option<PossibleValue> {
                Some(match self.0 {
                    $(<$ty>::$variant => PossibleValue::new($word).help($help),)+
                })
            }
        }
    };
}

words! {
    /// `--backend`, `LOCKLAB_BACKEND`: [`BackendChoice`].
    BackendWord for BackendChoice {
        Auto => "auto": "`external` when a DSN is given, else `container` when a Docker engine answers, else `local`",
        Container => "container": "A PostgreSQL container started with testcontainers",
        Local => "local": "A throw-away cluster from PostgreSQL binaries",
        External => "external": "An existing server (`--dsn` / `LOCKLAB_DSN`)",
    }
}

words! {
    /// `--format`: [`Format`].
    FormatWord for Format {
        Json => "json": "`matrix.json` (the schema above)",
        Md => "md": "`matrix.md` (GitHub-flavoured Markdown)",
        Html => "html": "`index.html` (self-contained: inline CSS and SVG, no scripts or external assets)",
    }
}

words! {
    /// `--require-severity`: [`Severity`].
    SeverityWord for Severity {
        Unsafe => "unsafe": "A lock can be held by nobody's code, or work can run unprotected",
        Surprising => "surprising": "Not what a reader of the PostgreSQL documentation or the guide would expect, but no lock is lost or leaked by it",
        Informational => "informational": "Worth knowing; nothing to do",
    }
}

words! {
    /// `stress --pattern`: [`Pattern`].
    PatternWord for Pattern {
        XactTry => "xact-try": "`pg_try_advisory_xact_lock` in a transaction; the section runs only when it returned true (else the attempt counts as busy)",
        XactWait => "xact-wait": "`pg_advisory_xact_lock` in a transaction, bounded by `lock_timeout` (a timeout is SQLSTATE 55P03, counted apart)",
        SessionDedicated => "session-dedicated": "`pg_advisory_lock` and `pg_advisory_unlock` around the section, on a connection the worker keeps for the whole run (for a pool: checked out once)",
        SkipLocked => "skip-locked": "A queue: each attempt claims the first job not done with `FOR UPDATE SKIP LOCKED` (no advisory lock); checked for double claims",
        SessionAcrossCheckouts => "session-across-checkouts": "Wrong on purpose: `pg_advisory_lock` on one checkout, the section on the next, `pg_advisory_unlock` on a third",
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    /// Each word is the library's own name for the value (`as_str`), so
    /// what the command line takes and what the library prints agree.
    #[test]
    fn the_words_are_the_librarys_names() {
        for w in BackendWord::value_variants() {
            assert_eq!(w.to_possible_value().unwrap().get_name(), w.0.as_str());
        }
        for w in PatternWord::value_variants() {
            assert_eq!(w.to_possible_value().unwrap().get_name(), w.0.name());
        }
        assert_eq!(FormatWord::value_variants().len(), 3);
        assert_eq!(SeverityWord::value_variants().len(), 3);
        for w in SeverityWord::value_variants() {
            let json = serde_json::to_value(w.0).unwrap();
            assert_eq!(json.as_str(), Some(w.to_possible_value().unwrap().get_name()));
        }
    }
}

words! {
    /// `pooler-check --mode`: [`PoolerMode`](locklab_drivers::PoolerMode).
    PoolerModeWord for locklab_drivers::PoolerMode {
        Session => "session": "A server connection is the client's for the client's whole connection",
        Transaction => "transaction": "A server connection is the client's for one transaction",
    }
}
