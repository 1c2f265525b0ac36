//! `held_count: KEY`: how many times the actor's own session holds the
//! session-level advisory lock on a key (how many `pg_advisory_unlock`
//! calls it takes to release it), probed on the actor's connection in one
//! statement that never lets the lock go ([`crate::held_count`]); recorded
//! as `held N×`.

use std::time::{Duration, Instant};

use locklab_drivers::{DirectConn, Pool};

use super::context::StepCx;
use super::declaration::{BASE, Declaration};
use super::statement::late;
use super::{Checking, Kind, RawStep, Step};
use crate::held_count;
use crate::keys::AdvisoryKey;
use crate::outcome::Value;
use crate::scenario::steps::error::StepResult;
use crate::scenario::validate::validator::Validator;
use crate::scenario::{Actor, Pos};

macro_rules! raw_fields {
    ($next:ident [$($f:tt)*] $($rest:tt)*) => {
        $next! { @collect [$($f)*
            /// How many times the actor's own session holds the session-level
            /// advisory lock on this key (a bigint, or two integers): how many
            /// `pg_advisory_unlock` calls it takes to release it. Probed on the
            /// actor's connection in one statement that never lets the lock go
            /// (see the docs); recorded as `held N×`.
            #[serde(default)]
            #[schemars(with = "Option<crate::scenario::raw::step::KeySchema>")]
            pub(crate) held_count: Option<$crate::keys::AdvisoryKey>,
            /// For `held_count`: count the shared (`pg_advisory_lock_shared`) holds
            /// instead of the exclusive ones.
            #[serde(default)]
            pub(crate) shared: bool,
        ] $($rest)* }
    };
}
pub(crate) use raw_fields;

/// A `held_count: KEY` step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldCountStep {
    /// Actor index (pool or direct; a pool actor needs a connection).
    pub actor: usize,
    /// The key whose session-level holds are counted.
    pub key: AdvisoryKey,
    /// Count the shared holds (`ShareLock`) rather than the exclusive ones.
    pub shared: bool,
}

impl Kind for HeldCountStep {
    const KEY: &'static str = "held_count";
    // On the actor's own connection (a pool actor's checkout, a direct
    // actor's), as the locks it counts are that session's.
    const FORMS: &'static [Declaration] = &[Declaration {
        word: "held_count",
        ..BASE
    }];

    fn has_key(raw: &RawStep) -> bool {
        raw.held_count.is_some()
    }

    fn stray(raw: &RawStep, v: &mut Validator<'_>, n: usize, pos: Pos) {
        if raw.shared {
            v.err(pos, format!("step {n}: 'shared' only applies to 'held_count' steps"));
        }
    }

    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        if raw.record.is_none() {
            let n = cx.n;
            cx.err(cx.pos, format!("step {n}: 'held_count' is a reading; name it with 'record'"));
        }
        Some(HeldCountStep {
            actor: cx.actor,
            key: raw.held_count?,
            shared: raw.shared,
        })
    }

    fn actor(&self) -> Option<usize> {
        Some(self.actor)
    }

    fn describe(&self, _: &[Actor], _: &[Step]) -> String {
        format!("held_count {}{}", self.key, if self.shared { " (shared)" } else { "" })
    }

    /// Runs the probe on the actor's connection and records `held N×`, or
    /// the statement's error (a failed transaction, a probe missing behind a
    /// pooler that routes to another database) as any recorded statement's.
    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, _: &dyn Pool, _: &mut DirectConn) -> StepResult {
        let deadline = Duration::from_millis(step.deadline_ms);
        let sql = held_count::probe_sql(self.key, self.shared);
        let conn = cx.conn(self.actor)?;
        let t0 = Instant::now();
        let r = tokio::time::timeout(deadline, conn.simple_query(&sql))
            .await
            .map_err(|_| late(step, "the held_count probe had not finished"))?;
        let took = conn.last_elapsed().unwrap_or_else(|| t0.elapsed());
        let value = match r {
            Ok(rows) => {
                let text = rows.first_value().flatten().unwrap_or_default();
                let count = text
                    .parse::<i64>()
                    .map_err(|_| format!("the held_count probe answered {text:?}, not a count"))?;
                Value::HeldCount {
                    count,
                    shared: self.shared,
                }
            }
            Err(e) => Value::of_driver_error(&e),
        };
        cx.record_note(step, value, Some(took));
        Ok(())
    }
}
