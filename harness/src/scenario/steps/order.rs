//! `order: [IDS]`: asserts that these awaited background steps completed
//! in this order (by the time the client got each result); with `record`,
//! records the order.

use std::time::Instant;

use locklab_drivers::{DirectConn, Pool};

use super::context::StepCx;
use super::declaration::{BASE, Connection, Declaration, Side};
use super::{Checking, Kind, RawStep, Step};
use crate::outcome::Value;
use crate::scenario::steps::error::{StepError, StepResult};
use crate::scenario::validate::walk::ABANDONED;
use crate::scenario::{Actor, Pos};

macro_rules! raw_fields {
    ($next:ident [$($f:tt)*] $($rest:tt)*) => {
        $next! { @collect [$($f)*
            /// Assert that these awaited background steps completed in this order (by the time the
            /// client got each result). With `record`, records the order.
            #[serde(default)]
            #[schemars(with = "Option<Vec<String>>")]
            pub(crate) order: Option<serde_saphyr::Spanned<Vec<String>>>,
        ] $($rest)* }
    };
}
pub(crate) use raw_fields;

/// The listed background steps (indices) completed in this order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderStep {
    /// Indices of awaited background steps, in the expected order.
    pub steps: Vec<usize>,
}

impl Kind for OrderStep {
    const KEY: &'static str = "order";
    const FORMS: &'static [Declaration] = &[Declaration {
        word: "order",
        side: Side::Nobody,
        own_deadline: false,
        connection: Connection::Nothing,
        ..BASE
    }];

    fn has_key(raw: &RawStep) -> bool {
        raw.order.is_some()
    }

    /// The steps it names: awaited background steps, once each.
    fn check(raw: &RawStep, cx: &mut Checking<'_, '_, '_>) -> Option<Self> {
        let o = raw.order.as_ref()?;
        let (n, opos) = (cx.n, Pos::of(&o.referenced));
        if o.value.len() < 2 {
            cx.err(opos, format!("step {n}: 'order' needs at least two step ids"));
        }
        let mut steps = Vec::new();
        for id in &o.value {
            let found = cx.walk.ids.get(id).map(|i| (*i, cx.walk.background.get(i).copied()));
            match found {
                None => cx.err(
                    opos,
                    format!("step {n}: 'order' names '{id}', which is not the id of an earlier step"),
                ),
                Some((_, None)) => cx.err(
                    opos,
                    format!("step {n}: 'order' names '{id}', which is not a background step"),
                ),
                Some((_, Some(None))) => cx.err(
                    opos,
                    format!("step {n}: 'order' names '{id}', which is still in flight (await it first)"),
                ),
                Some((_, Some(Some(ABANDONED)))) => cx.err(
                    opos,
                    format!("step {n}: 'order' names '{id}', which was abandoned (it never completes)"),
                ),
                Some((i, Some(Some(_)))) => {
                    if steps.contains(&i) {
                        cx.err(opos, format!("step {n}: 'order' names '{id}' twice"));
                    }
                    steps.push(i);
                }
            }
        }
        Some(OrderStep { steps })
    }

    fn actor(&self) -> Option<usize> {
        None
    }

    fn describe(&self, _: &[Actor], steps: &[Step]) -> String {
        let names: Vec<String> = self
            .steps
            .iter()
            .map(|i| steps[*i].id.clone().unwrap_or_else(|| format!("step {}", i + 1)))
            .collect();
        format!("order: {}", names.join(" → "))
    }

    /// Whether the awaited steps completed in this order (client side).
    async fn run(&self, step: &Step, cx: &mut StepCx<'_>, _: &dyn Pool, _: &mut DirectConn) -> StepResult {
        let id_of = |i: &usize| cx.scenario.steps[*i].id.clone().unwrap_or_default();
        let mut seen: Vec<(Instant, usize)> = self
            .steps
            .iter()
            .filter_map(|i| cx.finished.get(i).map(|t| (*t, *i)))
            .collect();
        seen.sort();
        let actual: Vec<String> = seen.iter().map(|(_, i)| id_of(i)).collect();
        let wanted: Vec<String> = self.steps.iter().map(id_of).collect();
        cx.record_note(step, Value::Order(actual.clone()), None);
        if actual == wanted {
            Ok(())
        } else {
            Err(StepError::Mismatch(format!(
                "expected completion order {}, got {}",
                wanted.join(" → "),
                actual.join(" → ")
            )))
        }
    }
}
