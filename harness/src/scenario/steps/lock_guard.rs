//! `lock_guard: KEY`: takes the session-level advisory lock on a bigint key
//! through the driver's own guard API (sqlx `PgAdvisoryLock`) and ends the
//! guard as `end` says; drivers without one record "not supported".

use std::time::{Duration, Instant};

use locklab_drivers::{DirectConn, DriverError, Pool};
use schemars::JsonSchema;
use serde::Deserialize;

use super::context::StepCx;
use super::declaration::{BASE, Declaration, Side};
use super::statement::late;
use super::{Checking, Kind, RawStep, Step};
use crate::outcome::{GuardEnded, Value};
use crate::scenario::steps::error::{StepError, StepResult};
use crate::scenario::validate::validator::Validator;
use crate::scenario::{Actor, Pos};

macro_rules! raw_fields {
    ($next:ident [$($f:tt)*] $($rest:tt)*) => {
        $next! { @collect [$($f)*
            /// Take the session-level advisory lock on this bigint key through the
            /// driver's own guard API (sqlx `PgAdvisoryLock`) and end the guard as `end`
            /// says; other drivers record "not supported".
            #[serde(default)]
            #[schemars(with = "Option<i64>")]
            pub(crate) lock_guard: Option<serde_saphyr::Spanned<i64>>,
            /// For `lock_guard`: `wait` (the default: sqlx `acquire`) or `try`
            /// (`try_acquire`: a guard only if the lock is free; else `not acquired`
            /// is recorded and `end` does not apply).
            #[serde(default)]
            #[schemars(with = "Option<crate::scenario::raw::step::OrParam<crate::scenario::steps::lock_guard::GuardAcquireRaw>>")]
            pub(crate) acquire: Option<$crate::scenario::steps::lock_guard::GuardAcquireRaw>,
            /// For `lock_guard`: `release_now`, `drop` or `leak`.
            #[serde(default)]
            #[schemars(with = "Option<crate::scenario::raw::step::OrParam<crate::scenario::steps::lock_guard::GuardEndRaw>>")]
            pub(crate) end: Option<$crate::scenario::steps::lock_guard::GuardEndRaw>,
        ] $($rest)* }
    };
}
pub(crate) use raw_fields;

/// How a `lock_guard` step ends its guard (`end:`); see
/// [`locklab_drivers::GuardEnd`].
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuardEndRaw {
    /// `release_now()`.
    ReleaseNow,
    /// Drop the guard.
    Drop,
    /// `leak()`.
    Leak,
}

impl GuardEndRaw {
    /// The driver-side value.
    pub fn to_driver(self) -> locklab_drivers::GuardEnd {
        match self {
            GuardEndRaw::ReleaseNow => locklab_drivers::GuardEnd::ReleaseNow,
            GuardEndRaw::Drop => locklab_drivers::GuardEnd::Drop,
            GuardEndRaw::Leak => locklab_drivers::GuardEnd::Leak,
        }
    }
}

/// How a `lock_guard` step takes its lock (`acquire:`); see
/// [`locklab_drivers::GuardAcquire`].
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuardAcquireRaw {
    /// `acquire`: wait for the lock.
    #[default]
    Wait,
    /// `try_acquire`: only if it is free.
    Try,
}

impl GuardAcquireRaw {
    /// The driver-side value.
    pub fn to_driver(self) -> locklab_drivers::GuardAcquire {
        match self {
            GuardAcquireRaw::Wait => locklab_drivers::GuardAcquire::Wait,
            GuardAcquireRaw::Try => locklab_drivers::GuardAcquire::Try,
        }
    }
}

/// Take the session-level advisory lock on a bigint key through the
/// driver's guard API (sqlx `PgAdvisoryLock`) and end the guard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardStep {
    /// Actor index (a pool actor).
    pub actor: usize,
    /// The bigint key.
    pub key: i64,
    /// How the guard takes the lock.
    pub acquire: GuardAcquireRaw,
    /// How the guard ends.
    pub end: GuardEndRaw,
    /// `client_timeout_ms`: the client gives up on `acquire` after this
    /// many ms (its future is dropped, as `tokio::time::timeout` does),
    /// the guard never made.
    pub client_timeout_ms: Option<u64>,
}

/// The error for `end` without `lock_guard`, or `lock_guard` without `end`.
fn together(v: &mut Validator<'_>, n: usize, pos: Pos) {
    v.err(pos, format!("step {n}: 'lock_guard' and 'end' go together"));
}

/// The error for `acquire` without `lock_guard`.
fn acquire_alone(v: &mut Validator<'_>, n: usize, pos: Pos) {
    v.err(pos, format!("step {n}: 'acquire' belongs to a 'lock_guard' step"));
}

impl Kind for GuardStep {
    const KEY: &'static str = "lock_guard";
    const FORMS: &'static [Declaration] = &[Declaration {
        word: "lock_guard",
        side: Side::Pool(
            "'lock_guard' uses the driver under test, so it runs on a pool actor, not on direct actor '{actor}'",
        ),
        bounded: true,
        ..BASE
    }];

    fn has_key(raw: &RawStep) -> bool {
        raw.lock_guard.is_some()
    }

    fn stray(raw: &RawStep, v: &mut Validator<'_>, n: usize, pos: Pos) {
        if raw.end.is_some() {
            together(v, n, pos);
        }
        if raw.acquire.is_some() {
            acquire_alone(v, n, pos);
        }
    }

    fn fields(raw: &RawStep, v: &mut Validator<'_>, n: usize, pos: Pos) {
        if raw.end.is_none() {
            together(v, n, pos);
        }
    }

    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        Some(GuardStep {
            actor: cx.actor,
            key: raw.lock_guard.as_ref()?.value,
            acquire: raw.acquire.unwrap_or_default(),
            end: raw.end.unwrap_or(GuardEndRaw::ReleaseNow),
            client_timeout_ms: cx.bound.map(|b| b.ms),
        })
    }

    fn actor(&self) -> Option<usize> {
        Some(self.actor)
    }

    fn describe(&self, _: &[Actor], _: &[Step]) -> String {
        let how = if self.acquire == GuardAcquireRaw::Try { " (try)" } else { "" };
        format!("lock_guard {}{how}, end {:?}", self.key, self.end).to_lowercase()
    }

    /// Takes the lock on the key through the guard API and ends the guard;
    /// a driver without one records `n/a (no guard API)`. With
    /// `client_timeout_ms`, the client gives up on `acquire` after that many
    /// ms: its future is dropped and `dropped at N ms` recorded (what the
    /// server and the connection then hold is for later steps to observe).
    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, _: &dyn Pool, _: &mut DirectConn) -> StepResult {
        let deadline = Duration::from_millis(step.deadline_ms);
        let conn = cx.conn(self.actor)?;
        let t0 = Instant::now();
        let bound = self.client_timeout_ms.map_or(deadline, Duration::from_millis);
        let r = match tokio::time::timeout(bound, conn.advisory_lock_guard(self.key, self.acquire.to_driver(), self.end.to_driver())).await {
            Ok(r) => r,
            Err(_) => match self.client_timeout_ms {
                Some(ms) => {
                    let value = Value::Dropped {
                        at_ms: ms,
                        cancel: crate::outcome::Cancel::None,
                    };
                    cx.record_note(step, value, Some(t0.elapsed()));
                    return Ok(());
                }
                None => return Err(late(step, "the lock guard was not acquired")),
            },
        };
        let took = t0.elapsed();
        match r {
            Ok(false) => {
                cx.record_note(step, Value::Guard(GuardEnded::NotAcquired), Some(took));
                Ok(())
            }
            Ok(true) => {
                let ended = match self.end {
                    GuardEndRaw::ReleaseNow => GuardEnded::ReleaseNow,
                    GuardEndRaw::Drop => GuardEnded::Dropped,
                    GuardEndRaw::Leak => GuardEnded::Leaked,
                };
                cx.record_note(step, Value::Guard(ended), Some(took));
                Ok(())
            }
            Err(DriverError::Unsupported(why)) => {
                cx.record_note(step, Value::Unsupported(why), None);
                Ok(())
            }
            Err(e) => Err(StepError::Driver(format!("lock_guard failed: {e}"))),
        }
    }
}
