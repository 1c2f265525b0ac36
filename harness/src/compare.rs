//! One comparison of [`Outcome`]s, for the three places that ask whether runs
//! behaved alike: the folding of a cell's repeats ([`crate::matrix`], and so
//! `soak`), and `locklab check` against the baseline ([`crate::baseline`]).
//!
//! [`align`] lines up the items of several outcomes (status, each
//! observation's reading and SQLSTATE, locks left, backends ended,
//! leak-guard leftovers), each with its typed [`Field`] in every outcome;
//! fields compare as typed values, and their `Display` writes the lines.
//! From that:
//! - [`diff`] compares two outcomes (before, after) into [`Change`]s, rendered
//!   `` `name`: before → after ``; with [`Timings`], observations whose values
//!   agree also compare their p50 times within a [`Tolerance`];
//! - [`disagreements`] tallies the repeats of one cell into [`Disagreement`]s,
//!   rendered `` `name`: true ×19, false ×1 ``.

use std::fmt;

use crate::outcome::{LocksLeft, Outcome, Seen, Status};

/// An item of an outcome, named as the lines of a diff name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item<'a> {
    /// The cell's status: `outcome`.
    Status,
    /// A recorded observation, by name: `` `name` ``.
    Observation(&'a str),
    /// `locks left after run`.
    LocksLeft,
    /// `backends ended after run`.
    CleanedBackends,
    /// `left in the run's database once it was over (leak guard)`.
    BackendsLeft,
}

impl fmt::Display for Item<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Item::Status => f.write_str("outcome"),
            Item::Observation(name) => write!(f, "`{name}`"),
            Item::LocksLeft => f.write_str("locks left after run"),
            Item::CleanedBackends => f.write_str("backends ended after run"),
            Item::BackendsLeft => f.write_str("left in the run's database once it was over (leak guard)"),
        }
    }
}

/// The value of an [`Item`] in one outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field<'a> {
    /// The status (of [`Item::Status`]).
    Status(Status),
    /// A recorded observation: what it compares as and its SQLSTATE, shown
    /// as `value [SQLSTATE]` unless the value's text already contains the
    /// SQLSTATE.
    Observed {
        /// Its reading (or a race row's often-seen readings).
        seen: &'a Seen,
        /// SQLSTATE, if the step failed on the server.
        sqlstate: Option<&'a str>,
    },
    /// An observation this outcome did not record: `(not recorded)`.
    NotRecorded,
    /// The locks left (`none`, or keys with backend states).
    Locks(&'a LocksLeft),
    /// A number of backends.
    Count(usize),
}

impl fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Status(s) => write!(f, "{s}"),
            Field::Observed { seen, sqlstate } => {
                let value = seen.to_string();
                match sqlstate {
                    Some(state) if !value.contains(state) => write!(f, "{value} [{state}]"),
                    _ => f.write_str(&value),
                }
            }
            Field::NotRecorded => f.write_str("(not recorded)"),
            Field::Locks(l) => write!(f, "{l}"),
            Field::Count(n) => write!(f, "{n}"),
        }
    }
}

/// The items of `outcomes`, each with its field in every outcome (in their
/// order): the status, the observations (in first-seen order over the
/// outcomes; [`Field::NotRecorded`] where one lacks it), the locks left, the
/// backends ended and the leak guard's leftovers.
pub fn align<'a>(outcomes: &[&'a Outcome]) -> Vec<(Item<'a>, Vec<Field<'a>>)> {
    let each = |f: &dyn Fn(&'a Outcome) -> Field<'a>| outcomes.iter().map(|o| f(o)).collect::<Vec<_>>();
    let mut items = vec![(Item::Status, each(&|o| Field::Status(o.status)))];
    let mut names: Vec<&str> = Vec::new();
    for o in outcomes {
        for r in &o.observations {
            if !names.contains(&r.name.as_str()) {
                names.push(&r.name);
            }
        }
    }
    for name in names {
        let field = |o: &'a Outcome| match o.observations.iter().find(|r| r.name == name) {
            Some(r) => Field::Observed {
                seen: &r.seen,
                sqlstate: r.sqlstate.as_deref(),
            },
            None => Field::NotRecorded,
        };
        items.push((Item::Observation(name), each(&field)));
    }
    items.push((Item::LocksLeft, each(&|o| Field::Locks(&o.locks_left))));
    items.push((Item::CleanedBackends, each(&|o| Field::Count(o.cleaned_backends))));
    items.push((Item::BackendsLeft, each(&|o| Field::Count(o.backends_left))));
    items
}

/// How far a time may move before it counts as changed: a new p50 `t`
/// against a baseline p50 `b` is accepted when
/// `b / factor - slack_ms <= t <= b * factor + slack_ms`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Multiplicative factor (≥ 1).
    pub factor: f64,
    /// Additive slack, in ms.
    pub slack_ms: f64,
}

impl Default for Tolerance {
    /// 3× and 1000 ms: machines are shared and noisy, and a debug build under
    /// `cargo test` is slower than the release build that wrote the baseline
    /// (on a loaded two-core machine single round trips of a few ms took up to
    /// 0.7 s in both of two repeats); a lock wait that went from a 200 ms
    /// `lock_timeout` to a 10 s deadline is still caught.
    fn default() -> Tolerance {
        Tolerance {
            factor: 3.0,
            slack_ms: 1000.0,
        }
    }
}

impl Tolerance {
    /// Whether `after` (ms) is within the tolerance of `before` (ms).
    pub fn accepts(&self, before: f64, after: f64) -> bool {
        after >= before / self.factor - self.slack_ms && after <= before * self.factor + self.slack_ms
    }
}

/// The p50 times of the observations of the two outcomes [`diff`] compares,
/// aligned with their `observations` (`None`: no time kept).
#[derive(Clone, Copy, Debug)]
pub struct Timings<'a> {
    /// Of the first outcome's observations, in ms.
    pub before: &'a [Option<f64>],
    /// Of the second outcome's observations, in ms.
    pub after: &'a [Option<f64>],
    /// How far they may move.
    pub tolerance: Tolerance,
    /// What a missing time counts as, in ms (times under it are not kept):
    /// shown as `under N ms`.
    pub untimed_ms: f64,
}

/// One difference between two outcomes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Change<'a> {
    /// An item whose value changed: `` `name`: before → after ``.
    Value {
        /// What changed.
        item: Item<'a>,
        /// Its value in the first outcome.
        before: Field<'a>,
        /// Its value in the second.
        after: Field<'a>,
    },
    /// An observation whose value held but whose p50 time moved beyond the
    /// tolerance: `` `name` time: p50 200 ms → 10000 ms (outside 3× ± 1000 ms) ``.
    Time {
        /// The observation.
        name: &'a str,
        /// Its p50 in the first outcome, ms (`None`: under `untimed_ms`).
        before: Option<f64>,
        /// Its p50 in the second, ms.
        after: Option<f64>,
        /// The tolerance it is outside of.
        tolerance: Tolerance,
        /// [`Timings::untimed_ms`].
        untimed_ms: f64,
    },
}

impl fmt::Display for Change<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Value { item, before, after } => write!(f, "{item}: {before} → {after}"),
            Change::Time {
                name,
                before,
                after,
                tolerance,
                untimed_ms,
            } => {
                let show = |t: Option<f64>| t.map_or(format!("under {untimed_ms} ms"), |t| format!("{t} ms"));
                write!(
                    f,
                    "`{name}` time: p50 {} → {} (outside {}× ± {} ms)",
                    show(*before),
                    show(*after),
                    tolerance.factor,
                    tolerance.slack_ms
                )
            }
        }
    }
}

/// What changed from `before` to `after`, item by item in [`align`]'s order:
/// each item whose value differs, and with `timings`, each observation whose
/// value is the same but whose p50 (a missing one counting as
/// [`Timings::untimed_ms`]) moved outside the tolerance, when either has one.
pub fn diff<'a>(before: &'a Outcome, after: &'a Outcome, timings: Option<Timings<'_>>) -> Vec<Change<'a>> {
    let time = |o: &Outcome, times: &[Option<f64>], name: &str| {
        let i = o.observations.iter().position(|r| r.name == name)?;
        times.get(i).copied().flatten()
    };
    let mut changes = Vec::new();
    for (item, fields) in align(&[before, after]) {
        let (b, a) = (fields[0], fields[1]);
        if b != a {
            changes.push(Change::Value {
                item,
                before: b,
                after: a,
            });
            continue;
        }
        let (Item::Observation(name), Some(t)) = (item, timings) else {
            continue;
        };
        let (tb, ta) = (time(before, t.before, name), time(after, t.after, name));
        if (tb.is_some() || ta.is_some())
            && !t
                .tolerance
                .accepts(tb.unwrap_or(t.untimed_ms), ta.unwrap_or(t.untimed_ms))
        {
            changes.push(Change::Time {
                name,
                before: tb,
                after: ta,
                tolerance: t.tolerance,
                untimed_ms: t.untimed_ms,
            });
        }
    }
    changes
}

/// An item the repeats of a cell disagree on, with how often each value
/// occurred, in first-seen order: `` `held`: true ×19, false ×1 ``.
#[derive(Clone, Debug, PartialEq)]
pub struct Disagreement<'a> {
    /// What they disagree on.
    pub item: Item<'a>,
    /// Each distinct value and its count.
    pub tally: Vec<(Field<'a>, usize)>,
}

impl fmt::Display for Disagreement<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.item)?;
        for (i, (value, n)) in self.tally.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{value} ×{n}")?;
        }
        Ok(())
    }
}

/// The items whose values differ between `outcomes`, in [`align`]'s
/// order; empty when they all agree.
pub fn disagreements(outcomes: &[Outcome]) -> Vec<Disagreement<'_>> {
    let all: Vec<&Outcome> = outcomes.iter().collect();
    align(&all)
        .into_iter()
        .filter_map(|(item, fields)| {
            let tally = tally(fields);
            (tally.len() > 1).then_some(Disagreement { item, tally })
        })
        .collect()
}

/// Each distinct value with its count, in first-seen order.
fn tally<T: PartialEq>(values: impl IntoIterator<Item = T>) -> Vec<(T, usize)> {
    let mut seen: Vec<(T, usize)> = Vec::new();
    for v in values {
        match seen.iter_mut().find(|(x, _)| *x == v) {
            Some((_, n)) => *n += 1,
            None => seen.push((v, 1)),
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::AdvisoryKey;
    use crate::outcome::{LeftLock, Reading, Recorded, Value};

    fn recorded(name: &str, text: &str, sqlstate: Option<&str>) -> Recorded {
        Recorded {
            name: name.into(),
            seen: Seen::Value(Reading::plain(Value::of_text(text))),
            sqlstate: sqlstate.map(str::to_owned),
        }
    }

    fn outcome(status: Status, held: &str) -> Outcome {
        Outcome {
            status,
            observations: vec![recorded("held", held, None)],
            locks_left: LocksLeft::default(),
            cleaned_backends: 0,
            backends_left: 0,
        }
    }

    fn lines(outcomes: &[Outcome]) -> Vec<String> {
        disagreements(outcomes).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn agreeing_outcomes_are_stable() {
        let o = vec![outcome(Status::Pass, "true"); 5];
        assert!(disagreements(&o).is_empty());
    }

    #[test]
    fn a_differing_value_is_named_with_its_counts() {
        let o = vec![
            outcome(Status::Pass, "true"),
            outcome(Status::Pass, "false"),
            outcome(Status::Pass, "true"),
        ];
        assert_eq!(lines(&o), vec!["`held`: true ×2, false ×1".to_owned()]);
    }

    #[test]
    fn repeats_and_baselines_name_the_same_items_alike() {
        let mut after = outcome(Status::Fail, "55P03 lock timeout");
        after.observations[0].sqlstate = Some("55P03".into());
        after.observations.push(recorded("late", "1", Some("P0001")));
        after.locks_left = LocksLeft(vec![LeftLock {
            key: AdvisoryKey::Big(43),
            state: Some("idle".into()),
        }]);
        after.cleaned_backends = 1;
        after.backends_left = 2;
        let before = outcome(Status::Pass, "true");
        let changes: Vec<String> = diff(&before, &after, None).iter().map(ToString::to_string).collect();
        assert_eq!(
            changes,
            [
                "outcome: pass → fail",
                "`held`: true → 55P03 lock timeout",
                "`late`: (not recorded) → 1 [P0001]",
                "locks left after run: none → key 43 (idle)",
                "backends ended after run: 0 → 1",
                "left in the run's database once it was over (leak guard): 0 → 2",
            ]
        );
        assert_eq!(
            lines(&[before, after.clone(), after]),
            [
                "outcome: pass ×1, fail ×2",
                "`held`: true ×1, 55P03 lock timeout ×2",
                "`late`: (not recorded) ×1, 1 [P0001] ×2",
                "locks left after run: none ×1, key 43 (idle) ×2",
                "backends ended after run: 0 ×1, 1 ×2",
                "left in the run's database once it was over (leak guard): 0 ×1, 2 ×2",
            ]
        );
    }

    /// A value is compared typed, not by its text: the text "true" a
    /// statement returned is not the boolean true, though both read `true`.
    #[test]
    fn values_that_read_alike_but_differ_in_kind_differ() {
        let with = |v: Value| Outcome {
            observations: vec![Recorded {
                seen: Seen::Value(Reading::plain(v)),
                ..recorded("held", "x", None)
            }],
            ..outcome(Status::Pass, "x")
        };
        let (text, boolean) = (with(Value::Text("true".into())), with(Value::Bool(true)));
        let changes: Vec<String> = diff(&boolean, &text, None).iter().map(ToString::to_string).collect();
        assert_eq!(changes, ["`held`: true → true"]);
        assert_eq!(disagreements(&[boolean.clone(), text]).len(), 1);
        assert!(diff(&boolean, &boolean.clone(), None).is_empty());
    }

    #[test]
    fn times_are_compared_only_where_values_agree() {
        let o = outcome(Status::Pass, "true");
        let t = |before: &[Option<f64>], after: &[Option<f64>]| {
            let timings = Timings {
                before,
                after,
                tolerance: Tolerance::default(),
                untimed_ms: 50.0,
            };
            diff(&o, &o, Some(timings))
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert!(t(&[Some(200.0)], &[Some(390.0)]).is_empty());
        assert!(t(&[None], &[None]).is_empty());
        assert_eq!(
            t(&[None], &[Some(10_000.0)]),
            ["`held` time: p50 under 50 ms → 10000 ms (outside 3× ± 1000 ms)"]
        );
        assert!(diff(&o, &o, None).is_empty());
    }
}
