//! What `locklab try CRATE@VERSION` builds another version of a Rust pool
//! crate from: each family of Rust columns ([`Family`]) is one driver file
//! whose module is a macro (`deadpool_driver!`, `sqlx_driver!`, …) taking
//! the crate by name. `locklab try` writes a scratch Cargo project outside
//! the workspace that depends on this crate without its `columns` feature
//! (this kit: the traits, the driver protocol's adapter end), on the
//! requested version of the pool crate, and whose `main` invokes the
//! family's macro and serves its columns with [`serve_main`], as `locklab
//! pool-adapter ID` serves the built-in ones (docs/src/upgrading.md).
//!
//! Adding a family: its driver file declares a `FAMILY` constant
//! ([`crate::kit`]), listed in [`families`].

use std::process::ExitCode;

use crate::external::HOST_COMMAND;
pub use crate::kit::{
    COMMON, ClientGuard, Dep, DropReturns, Family, TRIED, simple_query_rows, token_canceller, unclaimed_notice,
};
use crate::{Driver, versions};

/// Every family of Rust columns `locklab try` can build: one line per
/// driver file. (tokio-postgres without a pool, and the pooler columns,
/// are not pool crates.)
pub fn families() -> Vec<Family> {
    vec![
        crate::deadpool_pg::FAMILY,
        crate::bb8_pg::FAMILY,
        crate::sqlx_pg::FAMILY,
        crate::mobc_pg::FAMILY,
        crate::r2d2_pg::FAMILY,
        crate::diesel_async_pg::FAMILY,
    ]
}

/// The family `name` names: its crate or one of its aliases.
pub fn family(name: &str) -> Option<Family> {
    families()
        .into_iter()
        .find(|f| f.crate_name == name || f.aliases.contains(&name))
}

/// The `main` of a driver built by `locklab try`: `PROGRAM pool-adapter
/// ID` serves driver `ID` of `drivers` over the driver protocol until
/// stdin ends ([`crate::external::serve`]); `PROGRAM --list` prints their
/// ids. `lockfile` is the scratch project's `Cargo.lock`, which the
/// columns' versions are read from ([`versions::use_lockfile`]). Exit code
/// 2 for a missing or unknown id.
pub fn serve_main(lockfile: &str, drivers: Vec<Box<dyn Driver>>) -> ExitCode {
    versions::use_lockfile(lockfile);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ids: Vec<&str> = drivers.iter().map(|d| d.info().id).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["--list"] => {
            for d in &drivers {
                let info = d.info();
                println!("{}\t{} {}", info.id, info.crate_name, info.crate_version);
            }
            ExitCode::SUCCESS
        }
        [command, id] if *command == HOST_COMMAND => {
            let Some(driver) = drivers.into_iter().find(|d| d.info().id == *id) else {
                eprintln!("unknown driver '{id}'; this build has: {}", ids.join(", "));
                return ExitCode::from(2);
            };
            serve_blocking(driver, "PROGRAM")
        }
        _ => {
            eprintln!(
                "usage: PROGRAM {HOST_COMMAND} DRIVER_ID | --list (drivers: {})",
                ids.join(", ")
            );
            ExitCode::from(2)
        }
    }
}

/// Serves `driver` over stdin/stdout ([`crate::external::serve`]) on a
/// runtime of two worker threads until stdin ends: the body of a
/// `pool-adapter` program (`locklab pool-adapter ID`, or a program `locklab
/// try` built). Exit code 2 when no runtime can be started (`program` names
/// the program in the message).
pub fn serve_blocking(driver: Box<dyn Driver>, program: &str) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{program}: cannot start a runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(crate::external::serve(driver));
    // A synchronous pool's blocking calls (r2d2) are not waited for.
    runtime.shutdown_background();
    ExitCode::SUCCESS
}

#[cfg(all(test, feature = "columns"))]
mod tests {
    use super::*;

    #[test]
    fn every_family_column_is_a_registered_column_of_its_crate() {
        let registry = crate::registry();
        for f in families() {
            assert!(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("..")
                    .join(f.file)
                    .is_file(),
                "{}",
                f.file
            );
            assert_eq!(
                f.deps.iter().filter(|d| d.version.is_none()).count(),
                1,
                "{}",
                f.crate_name
            );
            for (id, _) in f.columns {
                let d = registry.iter().find(|d| d.info().id == *id);
                let d = d.unwrap_or_else(|| panic!("{}: no column {id}", f.crate_name));
                assert_eq!(d.info().crate_name, f.crate_name, "{id}");
            }
            assert!((f.module)("1.2.3").contains("mod tried") || (f.module)("1.2.3").contains("(tried,"));
        }
    }
}
