//! `mobc` with `mobc-postgres`: builder defaults (`test_on_check_out = true`:
//! `Manager::check` runs an empty simple query on checkout, mobc-postgres
//! `src/lib.rs`). Dropping a `mobc::Connection` recycles it in a spawned task
//! (`recycle_conn`, mobc `src/lib.rs`), which only asks `Manager::validate`
//! (for tokio-postgres: nothing) and puts it back idle; no session reset.

/// The module of one mobc-postgres version: `$mobcp` is the crate's name
/// (mobc through its re-export `$mobcp::mobc`), `$version` the version
/// prefix its column reports (`""`: the only one in the build), `$id` the
/// column's id. Invoked once here, and by `locklab try` for another version.
#[macro_export]
macro_rules! mobc_driver {
    ($module:ident, $mobcp:ident, $version:literal, $id:literal) => {
        #[allow(dead_code)]
        pub(crate) mod $module {
            use std::time::Duration;

            use async_trait::async_trait;
            use tokio_postgres::NoTls;
            use $mobcp::PgConnectionManager;
            use $mobcp::mobc;

            use $crate::kit::{simple_query_rows, token_canceller};
            use $crate::{
                Canceller, Conn, ConnectSpec, Driver, DriverError, DriverInfo, DriverKind, Pool, PoolOptions, Returned,
                Rows, crate_version_matching,
            };

            type Manager = PgConnectionManager<NoTls>;

            /// What a user's configuration does to the builder locklab starts
            /// from ([`MobcPostgres::configured`]).
            type Customize = std::sync::Arc<dyn Fn(mobc::Builder<Manager>) -> mobc::Builder<Manager> + Send + Sync>;

            /// mobc + mobc-postgres, with the builder's defaults apart from the size or as a user configures it.
            pub struct MobcPostgres {
                id: &'static str,
                configuration: &'static str,
                customize: Option<Customize>,
            }

            impl MobcPostgres {
                /// The builder's defaults.
                pub fn defaults() -> Self {
                    MobcPostgres {
                        id: $id,
                        configuration: "Builder defaults (test_on_check_out = true)",
                        customize: None,
                    }
                }

                /// A column of your own: a mobc pool configured as your service
                /// configures it. `configure` gets `mobc::Pool::builder()` with
                /// the scenario's size and checkout bound set (`max_open`,
                /// `get_timeout`) and returns the builder to build with (your
                /// `max_idle`, `test_on_check_out`, `max_lifetime`, …); locklab
                /// builds it with a `PgConnectionManager` for the cell's
                /// database. `id` names the column (letters, digits, `-`);
                /// `configuration` says in mobc's terms what differs from the
                /// defaults, for the report.
                pub fn configured(
                    id: &'static str,
                    configuration: &'static str,
                    configure: impl Fn(mobc::Builder<Manager>) -> mobc::Builder<Manager> + Send + Sync + 'static,
                ) -> Self {
                    MobcPostgres {
                        id,
                        configuration,
                        customize: Some(std::sync::Arc::new(configure)),
                    }
                }
            }

            struct MobcPool(mobc::Pool<Manager>);

            struct MobcConn {
                conn: mobc::Connection<Manager>,
                pool: mobc::Pool<Manager>,
            }

            fn mobc_error(e: mobc::Error<tokio_postgres::Error>) -> DriverError {
                match e {
                    mobc::Error::Inner(e) => e.into(),
                    other => DriverError::Client(format!("mobc: {other}")),
                }
            }

            #[async_trait]
            impl Conn for MobcConn {
                async fn simple_query(&mut self, sql: &str) -> Result<Rows, DriverError> {
                    simple_query_rows(&self.conn, sql).await
                }

                async fn release(self: Box<Self>) {
                    drop(self);
                }

                async fn give_back(self: Box<Self>) -> Returned {
                    let MobcConn { conn, pool } = *self;
                    let before = pool.state().await;
                    drop(conn);
                    // The return finishes in a task mobc spawns: wait until the pool no
                    // longer counts the connection as in use.
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                    loop {
                        let now = pool.state().await;
                        if now.in_use < before.in_use {
                            return if now.connections < before.connections {
                                Returned::Closed
                            } else {
                                Returned::ToPool
                            };
                        }
                        if tokio::time::Instant::now() > deadline {
                            tracing::warn!("mobc: connection not back in the pool after 10 s");
                            return Returned::ToPool;
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }

                fn canceller(&self) -> Option<Canceller> {
                    Some(token_canceller(self.conn.cancel_token()))
                }
            }

            #[async_trait]
            impl Pool for MobcPool {
                async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError> {
                    let conn = self.0.get().await.map_err(mobc_error)?;
                    Ok(Box::new(MobcConn {
                        conn,
                        pool: self.0.clone(),
                    }))
                }

                async fn close(&self) {}
            }

            #[async_trait]
            impl Driver for MobcPostgres {
                fn info(&self) -> DriverInfo {
                    DriverInfo {
                        id: self.id,
                        crate_name: "mobc-postgres",
                        crate_version: format!(
                            "{} (mobc {})",
                            crate_version_matching("mobc-postgres", $version),
                            crate_version_matching("mobc", "")
                        ),
                        configuration: self.configuration,
                        kind: DriverKind::Pooled,
                        pooler: None,
                        notices: $crate::Notices::NotPassedOn($crate::TOKIO_POSTGRES_SPAWNED),
                    }
                }

                async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
                    let manager = PgConnectionManager::new(spec.tokio_postgres_config(), NoTls);
                    let mut builder = mobc::Pool::builder()
                        .max_open(opts.max_size as u64)
                        .get_timeout(Some(opts.checkout_timeout));
                    if let Some(customize) = &self.customize {
                        builder = customize(builder);
                    }
                    let pool = builder.build(manager);
                    Ok(Box::new(MobcPool(pool)))
                }
            }
        }
    };
}

#[cfg(feature = "columns")]
mobc_driver!(current, mobc_postgres, "", "mobc");
#[cfg(feature = "columns")]
pub use current::MobcPostgres;

/// How `locklab try` builds this file for another version of mobc-postgres ([`crate::try_kit`]).
pub(crate) const FAMILY: crate::kit::Family = {
    use crate::kit::{Dep, Family};
    Family {
        crate_name: "mobc-postgres",
        aliases: &["mobc"],
        file: "drivers/src/mobc_pg.rs",
        deps: &[Dep::tried("mobc-postgres", "mobc_postgres")],
        module: |v| format!("locklab_drivers::mobc_driver!(tried, mobc_postgres, \"{v}\", \"mobc\");"),
        columns: &[("mobc", "tried::MobcPostgres::defaults()")],
    }
};
