//! A cell's floor: the same SQL its actors send, in the same order, from a
//! bare client (tokio-postgres, a connection of its own per actor, nothing
//! checked, nothing observed). What a cell costs above it is the harness's:
//! the pool's own work, the pid probes, the observations, the verify, the
//! leak guard, the database. `locklab bench` puts the two side by side.
//!
//! Only scenarios whose steps all have a bare-client meaning are replayed:
//! SQL in the foreground without `${name}`, transaction control, checkout
//! (the actor's first one connects), return (the connection stays open, as
//! in a pool), disconnect; no `setup` or `teardown`. [`why_not`] says why
//! another scenario has no floor.

use std::time::{Duration, Instant};

use locklab_drivers::{ConnectSpec, DirectConn};

use crate::scenario::{CheckoutStep, DisconnectStep, ReturnStep, Scenario, StepKind, Via};

/// Why `scenario` has no floor (a step kind or feature the bare client
/// does not replay), or `None` when [`replay`] can run it.
pub fn why_not(scenario: &Scenario) -> Option<String> {
    if scenario.trials.is_some() {
        return Some("a race cell (trials with drawn timings)".to_owned());
    }
    if !scenario.setup.is_empty() || !scenario.teardown.is_empty() {
        return Some("setup or teardown SQL".to_owned());
    }
    for step in &scenario.steps {
        let ok = match &step.kind {
            StepKind::Sql(s) => !s.sql.contains("${") && s.bound.is_none() && s.when.is_none(),
            StepKind::Transaction(t) => t.bound.is_none(),
            StepKind::Checkout(CheckoutStep { client_timeout_ms, .. })
            | StepKind::Return(ReturnStep { client_timeout_ms, .. }) => client_timeout_ms.is_none(),
            StepKind::Disconnect(DisconnectStep { .. }) => true,
            _ => false,
        };
        if !ok {
            return Some(format!("step {} ({})", step.index + 1, step.kind.declaration().word));
        }
    }
    None
}

/// Replays `scenario`'s SQL on `spec`'s server and database (its
/// `application_name` and options as given), one bare connection per actor:
/// direct actors connect first, in actor order, a pool actor at its first
/// checkout; every connection is closed at the end. A statement's error is
/// the scenario's business (an expected `55P03`), not the replay's.
/// Returns the wall time from the first connect to the last close.
///
/// # Errors
/// A scenario [`why_not`] refuses; a connection that cannot be made.
pub async fn replay(spec: &ConnectSpec, scenario: &Scenario) -> Result<Duration, String> {
    if let Some(why) = why_not(scenario) {
        return Err(format!("no floor for '{}': {why}", scenario.name));
    }
    let began = Instant::now();
    let mut conns: Vec<Option<DirectConn>> = scenario.actors.iter().map(|_| None).collect();
    let connect = || async {
        DirectConn::connect(spec)
            .await
            .map_err(|e| format!("cannot connect: {e}"))
    };
    for (i, actor) in scenario.actors.iter().enumerate() {
        if actor.via == Via::Direct {
            conns[i] = Some(connect().await?);
        }
    }
    for step in &scenario.steps {
        let (actor, sql) = match &step.kind {
            StepKind::Checkout(CheckoutStep { actor, .. }) => {
                if conns[*actor].is_none() {
                    conns[*actor] = Some(connect().await?);
                }
                continue;
            }
            StepKind::Return(ReturnStep { .. }) => continue,
            StepKind::Disconnect(DisconnectStep { actor }) => {
                if let Some(c) = conns[*actor].take() {
                    c.close().await;
                }
                continue;
            }
            StepKind::Sql(s) => (s.actor, s.sql.as_str()),
            StepKind::Transaction(t) => (t.actor, t.action.sql()),
            other => return Err(format!("no floor for step kind {}", other.declaration().word)),
        };
        let conn = match &mut conns[actor] {
            Some(c) => c,
            slot => slot.insert(connect().await?),
        };
        // The scenario's expected errors are answers too.
        let _ = conn.client().simple_query(sql).await;
    }
    for c in conns.into_iter().flatten() {
        c.close().await;
    }
    Ok(began.elapsed())
}
