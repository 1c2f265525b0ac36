//! Step kinds. Each kind is one file here (`steps/NAME.rs`) holding its raw
//! fields (a `raw_fields!` macro), its [`Declaration`], how its raw step is
//! checked into its typed step, and how that step runs against the run's
//! `StepCx`; and one line in the list at the bottom of this file
//! (`kinds!`). From that list the compiler builds the raw step's keys
//! (`RawStep`, with serde's `deny_unknown_fields` and the JSON Schema),
//! the typed enum ([`StepKind`]), the dispatch (checking, labels, running),
//! the "exactly one of …" message and the list the tests visit.
//!
//! Beside the kinds: [`declaration`] (what a kind may declare), [`expect`]
//! (the typed expectations several kinds share), `context` (what a kind's
//! execution sees: the actors' connections, their backend pids, saved
//! values, the recorder), `statement` (running a statement and recording
//! its outcome), [`check`] (an outcome against `expect`), [`error`] (why a
//! step failed), `connection` (giving a connection back) and `faults`
//! (what fault steps keep from step to step).

pub mod check;
pub(crate) mod connection;
pub(crate) mod context;
pub mod declaration;
pub mod error;
pub mod expect;
pub(crate) mod faults;
pub(crate) mod statement;

use locklab_drivers::{DirectConn, Pool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_saphyr::Spanned;

pub use declaration::{Connection, Declaration, Expects, Needs, Placement, Record, Side};
pub use expect::{ClientBound, ObserveExpect, SqlExpect};

use crate::scenario::validate::expect::Expect;
use crate::scenario::validate::validator::Validator;
use crate::scenario::validate::walk::Walk;
use crate::scenario::{Actor, Pos, When};
use context::StepCx;
use error::StepResult;

/// One step: what every kind has, and its [`StepKind`].
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// 0-based index in the file's `steps` list.
    pub index: usize,
    /// Where the step starts in the file.
    pub pos: Pos,
    /// Optional id (needed to `await` a background step or name it in `order`).
    pub id: Option<String>,
    /// Deadline in ms, after which the scenario fails (for an `await`: the
    /// background step's).
    pub deadline_ms: u64,
    /// Observation name for the matrix (`record:`).
    pub record: Option<String>,
    /// `time_varies: true`: the recorded time is shown but not compared
    /// with the baseline ([`crate::outcome::Observation::time_varies`]).
    pub time_varies: bool,
    /// What it does.
    pub kind: StepKind,
}

impl Step {
    /// The actor whose connection the step uses (`None` for `order`).
    pub fn actor(&self) -> Option<usize> {
        self.kind.actor()
    }

    /// Which driver kinds the step applies to (`None`: all).
    pub fn when(&self) -> Option<When> {
        self.kind.when()
    }

    /// A short human label, e.g. `step 4 (b: select pg_advisory_xact_lock(7))`.
    pub fn label(&self, actors: &[Actor], steps: &[Step]) -> String {
        let what = self.kind.describe(actors, steps);
        match self.actor() {
            Some(a) => format!("step {} ({}: {})", self.index + 1, actors[a].name, what),
            None => format!("step {} ({})", self.index + 1, what),
        }
    }
}

/// The contract of a step kind, implemented by its typed step in its file.
/// Methods with a default are what most kinds do.
pub(crate) trait Kind: Sized {
    /// The key that makes a step of this kind (`sql`, `do`, `observe`, …);
    /// several kinds may share one (`do:` picks by its action).
    const KEY: &'static str;

    /// Every form of the kind's declaration (one per `do:` action it
    /// covers; one for most kinds).
    const FORMS: &'static [Declaration];

    /// Whether `raw` has [`Kind::KEY`].
    fn has_key(raw: &RawStep) -> bool;

    /// Whether a step with the key is of this kind (default: yes; `do:`
    /// kinds look at the action, `sql` at `background`).
    fn is(raw: &RawStep) -> bool {
        Self::has_key(raw)
    }

    /// Which of [`Kind::FORMS`] a raw step of this kind is.
    fn form_of_raw(_raw: &RawStep) -> usize {
        0
    }

    /// Which of [`Kind::FORMS`] this step is.
    fn form(&self) -> usize {
        0
    }

    /// Errors for this kind's own fields set on a step of another kind
    /// (`step N: 'detail' only applies to 'observe' steps`).
    fn stray(_raw: &RawStep, _v: &mut Validator<'_>, _n: usize, _pos: Pos) {}

    /// Errors for this kind's own fields on a step of this kind that need
    /// neither its actor nor the steps before it (checked with the other
    /// kinds' [`Kind::stray`], before the actor is resolved).
    fn fields(_raw: &RawStep, _v: &mut Validator<'_>, _n: usize, _pos: Pos) {}

    /// The typed step of a raw step of this kind, with what it refers to
    /// checked; `None` when its own fields are unusable (the errors
    /// recorded in `cx.v`).
    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self>;

    /// Takes the step's validated `expect:` (for kinds whose declaration
    /// [`Declaration::expects`] something).
    fn expect(&mut self, _e: Expect) {}

    /// The actor whose connection the step uses (`None`: no actor).
    fn actor(&self) -> Option<usize>;

    /// Which driver kinds the step applies to (`None`: all).
    fn when(&self) -> Option<When> {
        None
    }

    /// What a label says of the step after its actor's name.
    fn describe(&self, actors: &[Actor], steps: &[Step]) -> String;

    /// Runs the step; `pool` is the pool under test, `monitor` the harness's
    /// own connection to the run's database.
    ///
    /// # Errors
    /// The step failed (a mismatch, a missed deadline, a driver error).
    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, pool: &dyn Pool, monitor: &mut DirectConn) -> StepResult;
}

/// What a kind's [`Kind::check`] sees: the error sink, what the validator
/// knows of the steps so far, and the step's place and actor.
pub(crate) struct Checking<'c, 'v, 's> {
    /// Where errors go.
    pub(crate) v: &'c mut Validator<'v>,
    /// What is known of the steps before this one.
    pub(crate) walk: &'c mut Walk<'s>,
    /// The step's number (1-based), for messages.
    pub(crate) n: usize,
    /// Where the step starts.
    pub(crate) pos: Pos,
    /// Its index (0-based).
    pub(crate) index: usize,
    /// Its actor (for a kind without one, 0 and unused).
    pub(crate) actor: usize,
    /// Its client-side bound, when valid.
    pub(crate) bound: Option<ClientBound>,
    /// Whether a fault step came before it.
    pub(crate) faulted_before: bool,
}

impl Checking<'_, '_, '_> {
    /// Records an error at `pos`.
    pub(crate) fn err(&mut self, pos: Pos, message: impl Into<String>) {
        self.v.err(pos, message);
    }
}

/// Builds [`RawStep`] from the fields each kind's `raw_fields!` adds (a
/// chain: each kind's macro adds its fields and calls the next).
macro_rules! raw_step {
    (@collect [$($fields:tt)*]) => {
        /// One step: exactly one kind's key (`sql`, `do`, `observe`, …; see
        /// the book's "Scenario format"), with the fields that go with it.
        #[derive(Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct RawStep {
            /// The actor that runs the step (not for `await` and `order`).
            #[serde(default)]
            #[schemars(with = "Option<String>")]
            pub(crate) actor: Option<Spanned<String>>,
            /// A name for the step, needed to `await` a background step or to list it in `order`.
            #[serde(default)]
            #[schemars(with = "Option<String>")]
            pub(crate) id: Option<Spanned<String>>,
            $($fields)*
            /// Transaction or connection control.
            #[serde(default, rename = "do")]
            pub(crate) action: Option<crate::scenario::raw::step::Action>,
            /// For `observe`: only this advisory lock key; for `library`: the
            /// key the library locks. A bigint (`7`) or two integers (`[1, 2]`).
            #[serde(default)]
            #[schemars(with = "Option<crate::scenario::raw::step::KeySchema>")]
            pub(crate) key: Option<crate::keys::AdvisoryKey>,
            /// Start the `sql` step and go on; finish it with an `await` step.
            #[serde(default)]
            pub(crate) background: bool,
            /// Client-side bound in ms (1–600000, below the deadline) on a foreground
            /// `sql`, transaction, `checkout`, `return` or `lock_guard` step, like
            /// `tokio::time::timeout`: when it elapses the call's future is dropped
            /// (or, with `on_timeout: cancel`, a cancel request is sent) and the step
            /// records that instead of failing.
            #[serde(default)]
            #[schemars(with = "Option<crate::scenario::raw::step::MsOrParam>")]
            pub(crate) client_timeout_ms: Option<Spanned<i64>>,
            /// What `client_timeout_ms` does when it elapses: `drop` (default) or `cancel`.
            #[serde(default)]
            #[schemars(with = "Option<crate::scenario::raw::step::OrParam<crate::scenario::raw::step::OnTimeout>>")]
            pub(crate) on_timeout: Option<crate::scenario::raw::step::OnTimeout>,
            /// Deadline of this step in ms (1–600000).
            #[serde(default)]
            #[schemars(with = "Option<u32>", range(min = 1, max = 600000))]
            pub(crate) deadline_ms: Option<Spanned<i64>>,
            /// What must hold after the step.
            #[serde(default)]
            #[schemars(with = "Option<crate::scenario::raw::expect::RawExpect>")]
            pub(crate) expect: Option<Spanned<crate::scenario::raw::expect::RawExpect>>,
            /// Record the outcome as a row of the matrix report under this name.
            #[serde(default)]
            #[schemars(with = "Option<String>")]
            pub(crate) record: Option<Spanned<String>>,
            /// With `record`: the step's time varies by nature (a pool's or a
            /// pooler's own retry timer, e.g. Pgpool-II reconnecting after a restart
            /// in 0 or about 1000 ms), so `check` and the baseline do not compare it;
            /// the report still shows it.
            #[serde(default)]
            pub(crate) time_varies: bool,
            /// Save the first value of the first row as `${name}` for later steps.
            #[serde(default)]
            #[schemars(with = "Option<String>")]
            pub(crate) save: Option<Spanned<String>>,
            /// Run only for pooled drivers or only for the direct driver.
            #[serde(default)]
            pub(crate) when: Option<crate::scenario::raw::step::When>,
        }
    };
    (@collect [$($fields:tt)*] $module:ident $($rest:ident)*) => {
        $module::raw_fields! { raw_step [$($fields)*] $($rest)* }
    };
}

/// `raw_fields!` of a kind without keys of its own (`pub(crate) use
/// super::no_raw_fields as raw_fields;`): passes the fields on.
macro_rules! no_raw_fields {
    ($next:ident [$($f:tt)*] $($rest:tt)*) => {
        $next! { @collect [$($f)*] $($rest)* }
    };
}
pub(crate) use no_raw_fields;

/// The one list of step kinds: `Variant: module::Type`, one line per kind,
/// in the order the "exactly one of" message names their keys. It declares
/// each kind's module and builds [`RawStep`], [`StepKind`], [`KindOf`] and
/// the dispatch.
macro_rules! kinds {
    ($($variant:ident: $module:ident :: $ty:ident),* $(,)?) => {
        $(pub mod $module;)*
        $(pub use $module::$ty;)*

        raw_step!(@collect [] $($module)*);

        /// What a step does: one variant per kind (the list in `steps/mod.rs`).
        #[derive(Clone, Debug, PartialEq)]
        pub enum StepKind {
            $(
                #[doc = concat!("See [`", stringify!($ty), "`].")]
                $variant($module::$ty),
            )*
        }

        /// Which kind a raw step is, before it is checked.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum KindOf {
            $(
                #[doc = concat!("See [`", stringify!($ty), "`].")]
                $variant,
            )*
        }

        impl KindOf {
            /// Every kind, in the list's order.
            pub(crate) const ALL: &'static [KindOf] = &[$(KindOf::$variant,)*];

            /// Its key.
            pub(crate) fn key(self) -> &'static str {
                match self { $(KindOf::$variant => <$module::$ty as Kind>::KEY,)* }
            }

            /// Whether `raw` has its key.
            fn has_key(self, raw: &RawStep) -> bool {
                match self { $(KindOf::$variant => <$module::$ty as Kind>::has_key(raw),)* }
            }

            /// Whether `raw`, which has its key, is of this kind.
            fn is(self, raw: &RawStep) -> bool {
                match self { $(KindOf::$variant => <$module::$ty as Kind>::is(raw),)* }
            }

            /// Every form of its declaration.
            pub(crate) fn forms(self) -> &'static [Declaration] {
                match self { $(KindOf::$variant => <$module::$ty as Kind>::FORMS,)* }
            }

            /// The declaration of `raw`, a step of this kind.
            pub(crate) fn declared(self, raw: &RawStep) -> Declaration {
                match self {
                    $(KindOf::$variant => {
                        let forms = <$module::$ty as Kind>::FORMS;
                        forms[<$module::$ty as Kind>::form_of_raw(raw).min(forms.len() - 1)]
                    })*
                }
            }

            /// Errors for the fields of every other kind's own set on `raw`,
            /// and for this kind's own ([`Kind::fields`]).
            pub(crate) fn strays(self, raw: &RawStep, v: &mut Validator<'_>, n: usize, pos: Pos) {
                $(
                    if self == KindOf::$variant {
                        <$module::$ty as Kind>::fields(raw, v, n, pos);
                    } else {
                        <$module::$ty as Kind>::stray(raw, v, n, pos);
                    }
                )*
            }

            /// The typed step of `raw`, a step of this kind.
            pub(crate) fn check(self, raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<StepKind> {
                match self {
                    $(KindOf::$variant => <$module::$ty as Kind>::check(raw, cx).map(StepKind::$variant),)*
                }
            }
        }

        impl StepKind {
            /// Its declaration.
            pub fn declaration(&self) -> Declaration {
                match self {
                    $(StepKind::$variant(s) => {
                        let forms = <$module::$ty as Kind>::FORMS;
                        forms[s.form().min(forms.len() - 1)]
                    })*
                }
            }

            /// The actor whose connection the step uses (`None`: no actor).
            pub fn actor(&self) -> Option<usize> {
                match self { $(StepKind::$variant(s) => s.actor(),)* }
            }

            /// Which driver kinds the step applies to (`None`: all).
            pub fn when(&self) -> Option<When> {
                match self { $(StepKind::$variant(s) => s.when(),)* }
            }

            /// What a label says of the step after its actor's name.
            fn describe(&self, actors: &[Actor], steps: &[Step]) -> String {
                match self { $(StepKind::$variant(s) => s.describe(actors, steps),)* }
            }

            /// Gives the step its validated `expect:`.
            pub(crate) fn take_expect(&mut self, e: Expect) {
                match self { $(StepKind::$variant(s) => s.expect(e),)* }
            }

            /// Runs the step.
            ///
            /// # Errors
            /// The step failed.
            pub(crate) async fn run(
                &self,
                step: &Step,
                cx: &mut StepCx<'_>,
                pool: &dyn Pool,
                monitor: &mut DirectConn,
            ) -> StepResult {
                match self { $(StepKind::$variant(s) => s.run(step, cx, pool, monitor).await,)* }
            }
        }
    };
}

impl StepKind {
    /// Whether the step ends or cuts connections itself: a fault (`do:
    /// crash | terminate | partition`) or a server restart.
    pub fn is_fault(&self) -> bool {
        self.declaration().fault
    }
}

impl KindOf {
    /// The kind of `raw`: `Err(count)` unless it has exactly one kind's key
    /// (`count` keys found).
    pub(crate) fn of(raw: &RawStep) -> Result<KindOf, usize> {
        let mut keys: Vec<&str> = KindOf::ALL.iter().filter(|k| k.has_key(raw)).map(|k| k.key()).collect();
        keys.dedup();
        if keys.len() != 1 {
            return Err(keys.len());
        }
        KindOf::ALL
            .iter()
            .copied()
            .find(|k| k.has_key(raw) && k.is(raw))
            .ok_or(1)
    }

    /// The keys, each once, in the list's order: `'sql', 'do', …`.
    pub(crate) fn keys_message() -> String {
        let mut keys: Vec<&str> = Vec::new();
        for k in KindOf::ALL {
            if !keys.contains(&k.key()) {
                keys.push(k.key());
            }
        }
        keys.iter().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", ")
    }

    /// The words of every kind's forms whose declaration says `pick`, as
    /// `'a' and 'b'` (or `'a', 'b' and 'c'`).
    pub(crate) fn words_where(pick: impl Fn(&Declaration) -> bool) -> String {
        let mut words: Vec<String> = KindOf::ALL
            .iter()
            .flat_map(|k| k.forms())
            .filter(|d| pick(d))
            .map(|d| format!("'{}'", d.word))
            .collect();
        words.dedup();
        match words.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            Some((last, _)) => last.clone(),
            None => String::new(),
        }
    }
}

kinds! {
    Sql: sql::SqlStep,
    Background: background::BackgroundStep,
    Transaction: transaction::TransactionStep,
    Checkout: checkout::CheckoutStep,
    Return: r#return::ReturnStep,
    Disconnect: disconnect::DisconnectStep,
    Abandon: abandon::AbandonStep,
    Fault: fault::FaultStep,
    Observe: observe::ObserveStep,
    HeldCount: held_count::HeldCountStep,
    Blocked: blocked::BlockedStep,
    Granted: granted::GrantedStep,
    Restart: restart::RestartStep,
    Await: r#await::AwaitStep,
    Order: order::OrderStep,
    Guard: lock_guard::GuardStep,
    Library: library::LibraryStep,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::raw::step::Action;
    use crate::scenario::{Fault, Transaction};

    /// Every `do:` word, as the JSON Schema of [`Action`] lists them (so a
    /// new action is in the list without anyone adding it).
    fn every_action() -> Vec<String> {
        let schema = serde_json::to_value(schemars::schema_for!(Action)).unwrap();
        let words: Vec<String> = schema["oneOf"]
            .as_array()
            .expect("Action's schema lists its words, one documented variant each")
            .iter()
            .map(|v| v["const"].as_str().expect("a word").to_owned())
            .collect();
        assert!(words.len() >= 11, "{words:?}");
        words
    }

    fn raw(yaml: &str) -> RawStep {
        serde_saphyr::from_str(yaml).unwrap()
    }

    /// Every `do:` action is one kind's, whose declaration for it has the
    /// action's word.
    #[test]
    fn every_action_is_one_kinds() {
        for word in every_action() {
            let step = raw(&format!("{{ actor: a, do: {word} }}"));
            let kind = KindOf::of(&step).unwrap_or_else(|n| panic!("{word}: {n} kinds"));
            let claimed: Vec<KindOf> = KindOf::ALL
                .iter()
                .copied()
                .filter(|k| k.has_key(&step) && k.is(&step))
                .collect();
            assert_eq!(claimed, vec![kind], "{word}");
            assert_eq!(kind.declared(&step).word, word);
        }
    }

    /// A kind of several forms says the same form of a raw step and of the
    /// typed step it becomes (`FORMS` follows its enum's order).
    #[test]
    fn a_typed_steps_form_is_its_raw_steps() {
        for t in [Transaction::Begin, Transaction::Commit, Transaction::Rollback] {
            assert_eq!(t.sql(), format!("{t:?}").to_lowercase());
        }
        for f in [Fault::Crash, Fault::Terminate, Fault::Partition, Fault::Heal] {
            assert_eq!(f.word(), format!("{f:?}").to_lowercase());
        }
    }

    /// No two kinds' forms share a word (error messages name kinds by it),
    /// except `sql` in the foreground and in the background.
    #[test]
    fn words_are_unique() {
        let mut words: Vec<&str> = KindOf::ALL
            .iter()
            .filter(|k| **k != KindOf::Background)
            .flat_map(|k| k.forms())
            .map(|d| d.word)
            .collect();
        words.sort_unstable();
        let n = words.len();
        words.dedup();
        assert_eq!(words.len(), n, "{words:?}");
    }

    /// The declarations agree with each other where the rules assume so.
    #[test]
    fn declarations_are_consistent() {
        for k in KindOf::ALL {
            assert!(!k.forms().is_empty(), "{k:?}");
            for d in k.forms() {
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

    /// The message lists each key once, in the list's order.
    #[test]
    fn the_keys_message_names_each_key_once() {
        let m = KindOf::keys_message();
        assert!(m.starts_with("'sql', 'do', 'observe'"), "{m}");
        for k in KindOf::ALL {
            assert_eq!(m.matches(&format!("'{}'", k.key())).count(), 1, "{m}");
        }
    }
}
