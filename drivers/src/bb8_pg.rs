//! `bb8` with `bb8-postgres`: defaults (`test_on_check_out = true`, which runs an
//! empty simple query on checkout; bb8 `src/api.rs`), nothing on return.

/// The module of one bb8-postgres version: `$bb8p` is the crate's name
/// (bb8 through its re-export `$bb8p::bb8`), `$version` the version
/// prefix its column reports (`""`: the only one in the build), `$id` the
/// column's id. Invoked once here, and by `locklab try` for another version.
#[macro_export]
macro_rules! bb8_driver {
    ($module:ident, $bb8p:ident, $version:literal, $id:literal) => {
        #[allow(dead_code)]
        pub(crate) mod $module {
            use async_trait::async_trait;
            use tokio_postgres::NoTls;
            use $bb8p::PostgresConnectionManager;
            use $bb8p::bb8::{PooledConnection, RunError};

            use $crate::kit::{BeforeReturn, ClientGuard, DropReturns, ReturnsAfter};
            use $crate::{
                Conn, ConnectSpec, Driver, DriverError, DriverInfo, DriverKind, Pool, PoolOptions,
                crate_version_matching,
            };

            type Manager = PostgresConnectionManager<NoTls>;

            /// What a user's configuration does to the `bb8::Builder` locklab
            /// starts from ([`Bb8Postgres::configured`]).
            type Customize =
                std::sync::Arc<dyn Fn($bb8p::bb8::Builder<Manager>) -> $bb8p::bb8::Builder<Manager> + Send + Sync>;

            /// bb8 + bb8-postgres with the builder's defaults, or as a user configures it.
            pub struct Bb8Postgres {
                id: &'static str,
                configuration: &'static str,
                customize: Option<Customize>,
                /// The application's own code before a return ([`Bb8Postgres::before_return`]).
                before_return: Option<BeforeReturn>,
            }

            impl Bb8Postgres {
                /// The builder's defaults.
                pub fn defaults() -> Self {
                    Bb8Postgres {
                        id: $id,
                        configuration: "Builder defaults (test_on_check_out = true)",
                        customize: None,
                        before_return: None,
                    }
                }

                /// A column of your own: a bb8 pool configured as your service
                /// configures it. `configure` gets `bb8::Pool::builder()` with
                /// the scenario's size and checkout bound set (`max_size`,
                /// `connection_timeout`) and returns the builder to build with:
                /// add your `connection_customizer` (its `on_acquire` runs on a
                /// new connection), `test_on_check_out`, `min_idle` there.
                /// locklab builds it with a `PostgresConnectionManager` for the
                /// cell's database. bb8 runs nothing when a connection goes back
                /// (`PooledConnection`'s drop, bb8 `src/api.rs`): code that must
                /// is the application's own ([`Bb8Postgres::before_return`]).
                /// `id` names the column (letters, digits, `-`);
                /// `configuration` says in bb8's terms what differs from the
                /// defaults, for the report.
                pub fn configured(
                    id: &'static str,
                    configuration: &'static str,
                    configure: impl Fn($bb8p::bb8::Builder<Manager>) -> $bb8p::bb8::Builder<Manager>
                    + Send
                    + Sync
                    + 'static,
                ) -> Self {
                    Bb8Postgres {
                        id,
                        configuration,
                        customize: Some(std::sync::Arc::new(configure)),
                        before_return: None,
                    }
                }

                /// Runs the application's own code on each checked-out client
                /// before it is dropped back into the pool, as a service's
                /// release path does. A failed call is logged and the client
                /// goes back all the same.
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

            struct Bb8Pool($bb8p::bb8::Pool<Manager>, Option<BeforeReturn>);

            /// A checked-out connection (a type of this module, so that the
            /// trait can be implemented wherever the macro is invoked).
            struct Guard(PooledConnection<'static, Manager>);

            impl ClientGuard for Guard {
                // PooledConnection::drop calls put_back synchronously (bb8 src/api.rs).
                fn client(&self) -> &tokio_postgres::Client {
                    &self.0
                }
            }

            fn run_error(e: RunError<tokio_postgres::Error>) -> DriverError {
                match e {
                    RunError::User(e) => e.into(),
                    RunError::TimedOut => DriverError::Client("bb8: timed out waiting for a connection".into()),
                }
            }

            #[async_trait]
            impl Pool for Bb8Pool {
                async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError> {
                    let guard = Guard(self.0.get_owned().await.map_err(run_error)?);
                    Ok(match &self.1 {
                        Some(code) => Box::new(ReturnsAfter {
                            guard,
                            before_return: code.clone(),
                        }),
                        None => Box::new(DropReturns(guard)),
                    })
                }

                async fn close(&self) {}
            }

            #[async_trait]
            impl Driver for Bb8Postgres {
                fn info(&self) -> DriverInfo {
                    DriverInfo {
                        id: self.id,
                        crate_name: "bb8-postgres",
                        crate_version: format!(
                            "{} (bb8 {})",
                            crate_version_matching("bb8-postgres", $version),
                            crate_version_matching("bb8", "")
                        ),
                        configuration: self.configuration,
                        kind: DriverKind::Pooled,
                        pooler: None,
                        notices: $crate::Notices::NotPassedOn($crate::TOKIO_POSTGRES_SPAWNED),
                    }
                }

                async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
                    let manager = PostgresConnectionManager::new(spec.tokio_postgres_config(), NoTls);
                    let mut builder = $bb8p::bb8::Pool::builder()
                        .max_size(opts.max_size)
                        .connection_timeout(opts.checkout_timeout);
                    if let Some(customize) = &self.customize {
                        builder = customize(builder);
                    }
                    let pool = builder.build(manager).await?;
                    Ok(Box::new(Bb8Pool(pool, self.before_return.clone())))
                }

                // Its connections are tokio-postgres clients (`DropReturns`).
                fn extended_protocol(&self) -> Result<(), &'static str> {
                    Ok(())
                }
            }
        }
    };
}

#[cfg(feature = "columns")]
bb8_driver!(current, bb8_postgres, "", "bb8");
#[cfg(feature = "columns")]
pub use current::Bb8Postgres;

/// How `locklab try` builds this file for another version of bb8-postgres ([`crate::try_kit`]).
pub(crate) const FAMILY: crate::kit::Family = {
    use crate::kit::{Dep, Family};
    Family {
        crate_name: "bb8-postgres",
        aliases: &["bb8"],
        file: "drivers/src/bb8_pg.rs",
        deps: &[Dep::tried("bb8-postgres", "bb8_postgres")],
        module: |v| format!("locklab_drivers::bb8_driver!(tried, bb8_postgres, \"{v}\", \"bb8\");"),
        columns: &[("bb8", "tried::Bb8Postgres::defaults()")],
    }
};
