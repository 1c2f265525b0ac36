//! `deadpool-postgres`: recycles a connection when it is next checked out
//! (`Manager::recycle`, deadpool-postgres `src/lib.rs`), never on return.
//! The current release line (0.14) and the previous one (0.13, the crate
//! renamed `deadpool_postgres013` in `Cargo.toml`) from one body
//! ([`deadpool_driver!`]).

/// One module per deadpool-postgres release line: `$dp` is the crate's
/// name in `Cargo.toml` (`deadpool_postgres`, or `deadpool_postgres013` for
/// the renamed 0.13), `$version` the version prefix its columns report, and
/// `$prefix` its columns' ids before `-fast`, `-verified`, ….
#[macro_export]
macro_rules! deadpool_driver {
    ($module:ident, $dp:ident, $version:literal, $prefix:literal) => {
        // Not every configuration has a column in every release line.
        #[allow(dead_code)]
        pub(crate) mod $module {
            use async_trait::async_trait;
            use tokio_postgres::NoTls;
            use $dp::{Manager, ManagerConfig, Object, RecyclingMethod};

            use $crate::kit::{BeforeReturn, ClientGuard, DropReturns, ReturnsAfter};
            use $crate::{
                Conn, ConnectSpec, Driver, DriverError, DriverInfo, DriverKind, Pool, PoolOptions,
                crate_version_matching,
            };

            /// A user's own pool builder ([`Deadpool::configured`]): from the
            /// server's connection settings to a `PoolBuilder`.
            type Build = std::sync::Arc<dyn Fn(tokio_postgres::Config) -> $dp::PoolBuilder + Send + Sync>;

            /// deadpool-postgres with one [`RecyclingMethod`], or as a user builds it.
            pub struct Deadpool {
                id: &'static str,
                configuration: &'static str,
                method: fn() -> RecyclingMethod,
                /// A user's own builder: replaces `method`.
                build: Option<Build>,
                /// The application's own code before a return ([`Deadpool::before_return`]).
                before_return: Option<BeforeReturn>,
            }

            impl Deadpool {
                /// `RecyclingMethod::Fast`, the crate's default: only `Client::is_closed()` on recycle.
                pub fn fast() -> Self {
                    Deadpool {
                        id: concat!($prefix, "-fast"),
                        configuration: "RecyclingMethod::Fast (default)",
                        method: || RecyclingMethod::Fast,
                        build: None,
                        before_return: None,
                    }
                }

                /// `RecyclingMethod::Verified`: runs an empty simple query on recycle.
                pub fn verified() -> Self {
                    Deadpool {
                        id: concat!($prefix, "-verified"),
                        configuration: "RecyclingMethod::Verified",
                        method: || RecyclingMethod::Verified,
                        build: None,
                        before_return: None,
                    }
                }

                /// `RecyclingMethod::Custom("select pg_advisory_unlock_all()")`: the
                /// mitigation on its own, run on recycle (the next checkout).
                pub fn custom_unlock_all() -> Self {
                    Deadpool {
                        id: concat!($prefix, "-custom"),
                        configuration: "RecyclingMethod::Custom(\"select pg_advisory_unlock_all()\")",
                        method: || RecyclingMethod::Custom("select pg_advisory_unlock_all()".into()),
                        build: None,
                        before_return: None,
                    }
                }

                /// `RecyclingMethod::Clean`: runs the crate's DISCARD-like script, which includes
                /// `SELECT pg_advisory_unlock_all()`, on recycle.
                pub fn clean() -> Self {
                    Deadpool {
                        id: concat!($prefix, "-clean"),
                        configuration: "RecyclingMethod::Clean",
                        method: || RecyclingMethod::Clean,
                        build: None,
                        before_return: None,
                    }
                }

                /// A column of your own: a deadpool-postgres pool built as your
                /// service builds it. `build` gets the server's connection
                /// settings (a `tokio_postgres::Config` naming the cell's
                /// database) and returns a `PoolBuilder`: your `Manager` (its
                /// `ManagerConfig`, recycling method and TLS-less connector)
                /// and your hooks (`post_create`, `pre_recycle`,
                /// `post_recycle`). locklab then sets the scenario's size and
                /// checkout bound (`max_size`, `wait_timeout`) and the Tokio
                /// runtime, and builds it. `id` names the column (letters,
                /// digits, `-`); `configuration` says in deadpool's terms what
                /// differs from the defaults, for the report. deadpool's
                /// hooks run at a checkout, never on return (deadpool
                /// `src/managed/mod.rs`): code that must run before a
                /// connection goes back is the application's own
                /// ([`Deadpool::before_return`]).
                pub fn configured(
                    id: &'static str,
                    configuration: &'static str,
                    build: impl Fn(tokio_postgres::Config) -> $dp::PoolBuilder + Send + Sync + 'static,
                ) -> Self {
                    Deadpool {
                        id,
                        configuration,
                        method: || RecyclingMethod::Fast,
                        build: Some(std::sync::Arc::new(build)),
                        before_return: None,
                    }
                }

                /// Runs the application's own code on each checked-out client
                /// before it is dropped back into the pool, as a service's
                /// release path does (say `client.batch_execute("select
                /// pg_advisory_unlock_all()")`). A failed call is logged and the
                /// client goes back all the same.
                pub fn before_return(
                    mut self,
                    code: impl for<'a> Fn(
                        &'a tokio_postgres::Client,
                    ) -> futures::future::BoxFuture<'a, Result<(), tokio_postgres::Error>>
                    + Send
                    + Sync
                    + 'static,
                ) -> Self {
                    self.before_return = Some(std::sync::Arc::new(code));
                    self
                }
            }

            struct DeadpoolPool($dp::Pool, Option<BeforeReturn>);

            /// A checked-out `Object` (a type of this module, so that the
            /// trait can be implemented wherever the macro is invoked).
            struct Guard(Object);

            impl ClientGuard for Guard {
                // Dropping an Object puts it back into the pool's slots synchronously;
                // recycling happens on the next checkout (deadpool src/managed/mod.rs).
                fn client(&self) -> &tokio_postgres::Client {
                    &self.0
                }
            }

            fn pool_error(e: $dp::PoolError) -> DriverError {
                match e {
                    $dp::PoolError::Backend(e) => e.into(),
                    other => DriverError::Client(other.to_string()),
                }
            }

            #[async_trait]
            impl Pool for DeadpoolPool {
                async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError> {
                    let guard = Guard(self.0.get().await.map_err(pool_error)?);
                    Ok(match &self.1 {
                        Some(code) => Box::new(ReturnsAfter {
                            guard,
                            before_return: code.clone(),
                        }),
                        None => Box::new(DropReturns(guard)),
                    })
                }

                async fn close(&self) {
                    self.0.close();
                }
            }

            #[async_trait]
            impl Driver for Deadpool {
                fn info(&self) -> DriverInfo {
                    DriverInfo {
                        id: self.id,
                        crate_name: "deadpool-postgres",
                        crate_version: crate_version_matching("deadpool-postgres", $version),
                        configuration: self.configuration,
                        kind: DriverKind::Pooled,
                        pooler: None,
                        notices: $crate::Notices::NotPassedOn($crate::TOKIO_POSTGRES_SPAWNED),
                    }
                }

                async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
                    let builder = match &self.build {
                        Some(build) => build(spec.tokio_postgres_config()),
                        None => $dp::Pool::builder(Manager::from_config(
                            spec.tokio_postgres_config(),
                            NoTls,
                            ManagerConfig {
                                recycling_method: (self.method)(),
                            },
                        )),
                    };
                    let pool = builder
                        .max_size(opts.max_size as usize)
                        .runtime($dp::Runtime::Tokio1)
                        .wait_timeout(Some(opts.checkout_timeout))
                        .build()
                        .map_err(|e| DriverError::Client(e.to_string()))?;
                    Ok(Box::new(DeadpoolPool(pool, self.before_return.clone())))
                }

                // Its connections are tokio-postgres clients (`DropReturns`).
                fn extended_protocol(&self) -> Result<(), &'static str> {
                    Ok(())
                }
            }
        }
    };
}

// Also in the kit `locklab try` builds from: the pooler columns' client.
deadpool_driver!(current, deadpool_postgres, "0.14", "deadpool");
#[cfg(feature = "columns")]
deadpool_driver!(v013, deadpool_postgres013, "0.13", "deadpool-0.13");

pub use current::Deadpool;

/// How `locklab try` builds this file for another version of deadpool-postgres ([`crate::try_kit`]).
pub(crate) const FAMILY: crate::kit::Family = {
    use crate::kit::{Dep, Family};
    Family {
        crate_name: "deadpool-postgres",
        aliases: &[],
        file: "drivers/src/deadpool_pg.rs",
        deps: &[Dep::tried("deadpool-postgres", "deadpool_postgres")],
        module: |v| format!("locklab_drivers::deadpool_driver!(tried, deadpool_postgres, \"{v}\", \"deadpool\");"),
        columns: &[
            ("deadpool-fast", "tried::Deadpool::fast()"),
            ("deadpool-verified", "tried::Deadpool::verified()"),
            ("deadpool-clean", "tried::Deadpool::clean()"),
            ("deadpool-custom", "tried::Deadpool::custom_unlock_all()"),
        ],
    }
};
