//! What a pool's driver file is built from, in the workspace and in a
//! scratch project `locklab try` builds ([`crate::try_kit`]): the building
//! blocks its macro names (`$crate::kit::ClientGuard`, …) and the
//! description of its family ([`Family`]), which the driver file declares
//! as its `FAMILY` constant. Nothing here depends on another driver module.

pub use crate::direct::{BeforeReturn, ClientGuard, DropReturns, ReturnsAfter, simple_query_rows, token_canceller};

/// What a tried column's id has between the built-in column's id and the
/// version: `deadpool-fast+try-0.12.1`.
pub const TRIED: &str = "+try-";

/// A dependency of the scratch project, as a `[dependencies]` line says it.
#[derive(Clone, Copy, Debug)]
pub struct Dep {
    /// The package on the registry, e.g. `deadpool-postgres`.
    pub package: &'static str,
    /// Its name in Rust (and in the scratch `Cargo.toml`), e.g. `deadpool_postgres`.
    pub name: &'static str,
    /// The version requirement, or `None` for the version being tried.
    pub version: Option<&'static str>,
    /// Take the version the tried crate depends on (resolved first): a
    /// crate whose types the driver names but the tried crate does not
    /// re-export (diesel-async's deadpool). `version` is then a fallback.
    pub follows: bool,
    /// `default-features`.
    pub default_features: bool,
    /// Features to turn on.
    pub features: &'static [&'static str],
}

impl Dep {
    /// The crate being tried: `package` under `name`, default features.
    pub const fn tried(package: &'static str, name: &'static str) -> Dep {
        Dep {
            package,
            name,
            version: None,
            follows: false,
            default_features: true,
            features: &[],
        }
    }
}

/// What the driver macros use besides the pool crate, at the requirements
/// of the workspace's `Cargo.toml` (the scratch project starts from the
/// workspace's `Cargo.lock`, so it gets the same versions).
pub const COMMON: &[Dep] = &[
    Dep {
        package: "async-trait",
        name: "async_trait",
        version: Some("0.1"),
        follows: false,
        default_features: true,
        features: &[],
    },
    Dep {
        package: "futures",
        name: "futures",
        version: Some("0.3"),
        follows: false,
        default_features: true,
        features: &[],
    },
    Dep {
        package: "tokio",
        name: "tokio",
        version: Some("1"),
        follows: false,
        default_features: true,
        features: &["full"],
    },
    Dep {
        package: "tokio-postgres",
        name: "tokio_postgres",
        version: Some("0.7"),
        follows: false,
        default_features: true,
        features: &[],
    },
    Dep {
        package: "tracing",
        name: "tracing",
        version: Some("0.1"),
        follows: false,
        default_features: true,
        features: &[],
    },
];

/// One family of Rust columns: the pool crate they test, the driver file
/// they come from, and how a scratch project builds them for another
/// version of that crate.
#[derive(Clone, Copy, Debug)]
pub struct Family {
    /// The crate whose version is tried, as its columns name it
    /// ([`crate::DriverInfo::crate_name`]), e.g. `bb8-postgres`.
    pub crate_name: &'static str,
    /// Other names `locklab try` takes for it, each meaning the same
    /// version of `crate_name` (`bb8@0.8` is `bb8-postgres@0.8`, whose
    /// versions follow bb8's).
    pub aliases: &'static [&'static str],
    /// The driver file, from the workspace root: what to adapt when a
    /// version does not compile with it.
    pub file: &'static str,
    /// The scratch project's dependencies: the tried crate (`version:
    /// None`) and what else the driver needs by name, beside [`COMMON`].
    pub deps: &'static [Dep],
    /// The Rust that defines module `tried` for `version` (the resolved
    /// version, e.g. `0.12.2`): one invocation of the family's macro.
    pub module: fn(version: &str) -> String,
    /// The columns: each built-in column's id and the expression, in
    /// module `tried`, that makes its driver.
    pub columns: &'static [(&'static str, &'static str)],
}

/// Logs a server notice no statement of a step claimed (one that arrived
/// during a pool's own check on checkout), at `info`, as the client
/// libraries' default notice handlers do.
pub fn unclaimed_notice(line: &str) {
    tracing::info!(notice = %line, "a connection's notice outside a step's statement");
}
