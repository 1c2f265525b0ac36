//! The lab's API in one program: one scenario through one pool on a local
//! PostgreSQL 17 cluster (installed into `.cache/` on first use), its typed
//! outcome, and its report. Shown in `locklab::lab`'s documentation and run
//! by `cargo test` (`harness/tests/docs.rs`), so the two cannot drift apart.

use locklab::lab::{self, BackendChoice, Format, Lab, ServerOptions, Status};

pub fn main() -> anyhow::Result<()> {
    let scenarios = lab::load_scenarios(&lab::shipped_scenarios().join("session-lock-pool-return.yaml"))?;
    let drivers = lab::drivers(&["deadpool-fast"])?;
    let lab = Lab::start(&ServerOptions::new(BackendChoice::Local, 17))?;
    let results = lab.run(&scenarios, &drivers)?;

    // One cell: the scenario's own expectations held, and each `record:`
    // step left a typed observation.
    assert_eq!(results.len(), 1);
    let cell = &results[0];
    assert_eq!(cell.status(), Status::Pass, "{:?}", cell.failure());
    assert_ne!(cell.observations().len(), 0);
    for o in cell.observations() {
        println!(
            "{} × {}: {} = {}",
            cell.scenario(),
            cell.driver(),
            o.name(),
            o.reading()
        );
    }

    // The matrix report, as `locklab report` writes it.
    let report = lab.report(&scenarios, &drivers, results);
    let dir = tempfile::tempdir()?;
    let written = report.write(dir.path(), &[Format::Md])?;
    assert!(std::fs::read_to_string(&written[0])?.contains("session-lock-pool-return"));
    Ok(())
}
