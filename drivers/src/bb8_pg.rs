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

            use $crate::kit::{ClientGuard, DropReturns};
            use $crate::{
                Conn, ConnectSpec, Driver, DriverError, DriverInfo, DriverKind, Pool, PoolOptions,
                crate_version_matching,
            };

            type Manager = PostgresConnectionManager<NoTls>;

            /// bb8 + bb8-postgres with the builder's defaults.
            pub struct Bb8Postgres;

            struct Bb8Pool($bb8p::bb8::Pool<Manager>);

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
                    Ok(Box::new(DropReturns(Guard(
                        self.0.get_owned().await.map_err(run_error)?,
                    ))))
                }

                async fn close(&self) {}
            }

            #[async_trait]
            impl Driver for Bb8Postgres {
                fn info(&self) -> DriverInfo {
                    DriverInfo {
                        id: $id,
                        crate_name: "bb8-postgres",
                        crate_version: format!(
                            "{} (bb8 {})",
                            crate_version_matching("bb8-postgres", $version),
                            crate_version_matching("bb8", "")
                        ),
                        configuration: "Builder defaults (test_on_check_out = true)",
                        kind: DriverKind::Pooled,
                        pooler: None,
                        notices: $crate::Notices::NotPassedOn($crate::TOKIO_POSTGRES_SPAWNED),
                    }
                }

                async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
                    let manager = PostgresConnectionManager::new(spec.tokio_postgres_config(), NoTls);
                    let pool = $bb8p::bb8::Pool::builder()
                        .max_size(opts.max_size)
                        .connection_timeout(opts.checkout_timeout)
                        .build(manager)
                        .await?;
                    Ok(Box::new(Bb8Pool(pool)))
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
        columns: &[("bb8", "tried::Bb8Postgres")],
    }
};
