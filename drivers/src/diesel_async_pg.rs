//! `diesel-async`'s `AsyncPgConnection` pooled by its deadpool integration
//! (`diesel_async::pooled_connection::deadpool`) with the default
//! `RecyclingMethod::Verified`: on recycle (the next checkout) the connection
//! must not be broken (`AsyncConnection::is_broken`) and answers a `SELECT 1`
//! (diesel-async `src/pooled_connection/mod.rs`); no session reset.
//!
//! Statements go through diesel: one statement with the extended protocol
//! (`sql_query` loaded as raw rows; diesel asks for binary results, which are
//! shown as PostgreSQL's text form for bool, integer, float, text-like and
//! void columns, and as `<oid N, K bytes>` otherwise); a string with several
//! statements with `batch_execute`: one simple Query message, which the server
//! runs as one implicit transaction (PostgreSQL docs §55.2.2.1, "Multiple
//! Statements in a Simple Query"), but no rows (diesel-async's
//! `SimpleAsyncConnection::batch_execute` returns none, and
//! `AsyncPgConnection` does not hand out its tokio-postgres client).

/// The module of one diesel-async version: `$da` is the crate's name
/// (with `diesel`, by that name, of the version it takes), `$version` the
/// version prefix its column reports (`""`: the only one in the build),
/// `$id` the column's id. Invoked once here, and by `locklab try` for
/// another version.
#[macro_export]
macro_rules! diesel_async_driver {
    ($module:ident, $da:ident, $version:literal, $id:literal) => {
        #[allow(dead_code)]
        pub(crate) mod $module {
            use async_trait::async_trait;
            use diesel::row::{Field, Row};
            use futures::{FutureExt, TryStreamExt};
            use tokio_postgres::NoTls;
            use $da::pooled_connection::deadpool::{Object, Pool as DieselPool};
            use $da::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig, PoolError};
            use $da::{AsyncConnectionCore, AsyncPgConnection, SimpleAsyncConnection};

            use $crate::kit::token_canceller;
            use $crate::{
                Canceller, Conn, ConnectSpec, DbError, Driver, DriverError, DriverInfo, DriverKind, Pool, PoolOptions,
                Returned, Rows, crate_version_matching,
            };

            /// What a user's configuration does to the `ManagerConfig` locklab
            /// starts from ([`DieselAsyncDeadpool::configured`]).
            type Customize = std::sync::Arc<
                dyn Fn(ManagerConfig<AsyncPgConnection>) -> ManagerConfig<AsyncPgConnection> + Send + Sync,
            >;

            /// diesel-async + its deadpool pool, with defaults apart from the size or a user's `ManagerConfig`.
            pub struct DieselAsyncDeadpool {
                id: &'static str,
                configuration: &'static str,
                customize: Option<Customize>,
            }

            impl DieselAsyncDeadpool {
                /// The deadpool integration's defaults apart from the size (`RecyclingMethod::Verified`).
                pub fn defaults() -> Self {
                    DieselAsyncDeadpool {
                        id: $id,
                        configuration: "deadpool integration, RecyclingMethod::Verified (default)",
                        customize: None,
                    }
                }

                /// A column of your own: diesel-async's deadpool pool with your
                /// `ManagerConfig`. `configure` gets `ManagerConfig::default()`
                /// and returns yours (its `recycling_method`: `Fast`,
                /// `Verified`, `CustomQuery`, `CustomFunction`); locklab then
                /// sets its `custom_setup` to connect to the cell's database
                /// (a `custom_setup` of yours is replaced), and the scenario's
                /// size and checkout bound on the pool. The recycling runs at a
                /// checkout, never on return (diesel-async
                /// `src/pooled_connection/deadpool.rs`). `id` names the column
                /// (letters, digits, `-`); `configuration` says in diesel-async's
                /// terms what differs from the defaults, for the report.
                pub fn configured(
                    id: &'static str,
                    configuration: &'static str,
                    configure: impl Fn(ManagerConfig<AsyncPgConnection>) -> ManagerConfig<AsyncPgConnection>
                    + Send
                    + Sync
                    + 'static,
                ) -> Self {
                    DieselAsyncDeadpool {
                        id,
                        configuration,
                        customize: Some(std::sync::Arc::new(configure)),
                    }
                }
            }

            struct DieselPoolBox(DieselPool<AsyncPgConnection>);

            struct DieselConn(Object<AsyncPgConnection>);

            fn diesel_error(e: diesel::result::Error) -> DriverError {
                use diesel::result::Error;
                match &e {
                    Error::DatabaseError(_, info) => {
                        let sqlstate = sqlstate_of(&e).unwrap_or_default();
                        DriverError::Db(DbError {
                            sqlstate,
                            message: info.message().to_owned(),
                        })
                    }
                    _ => DriverError::Client($crate::with_sources(&e)),
                }
            }

            /// The SQLSTATE behind a diesel database error, as far as diesel-async keeps
            /// it: it maps a few codes to `DatabaseErrorKind`s and all others to
            /// `Unknown`, dropping the code (diesel-async `src/pg/error_helper.rs`).
            fn sqlstate_of(e: &diesel::result::Error) -> Option<String> {
                if let diesel::result::Error::DatabaseError(kind, _) = e {
                    use diesel::result::DatabaseErrorKind as K;
                    return Some(
                        match kind {
                            K::UniqueViolation => "23505",
                            K::ForeignKeyViolation => "23503",
                            K::NotNullViolation => "23502",
                            K::CheckViolation => "23514",
                            K::SerializationFailure => "40001",
                            K::ReadOnlyTransaction => "25006",
                            K::ClosedConnection => "08006",
                            _ => return None,
                        }
                        .to_owned(),
                    );
                }
                None
            }

            /// PostgreSQL's text form of a binary-format value of type `oid`.
            fn binary_to_text(oid: u32, bytes: &[u8]) -> String {
                let int = |n: usize| -> Option<i64> {
                    let b: [u8; 8] = {
                        let mut a = [0u8; 8];
                        if bytes.len() != n {
                            return None;
                        }
                        a[8 - n..].copy_from_slice(bytes);
                        a
                    };
                    let v = i64::from_be_bytes(b);
                    // sign-extend
                    let shift = 64 - 8 * n as u32;
                    Some((v << shift) >> shift)
                };
                let shown = match oid {
                    16 => bytes
                        .first()
                        .map(|b| if *b != 0 { "t".to_owned() } else { "f".to_owned() }),
                    20 => int(8).map(|v| v.to_string()),
                    21 => int(2).map(|v| v.to_string()),
                    23 => int(4).map(|v| v.to_string()),
                    26 => int(4).map(|v| (v as u32).to_string()),
                    700 => bytes.try_into().ok().map(|b| f32::from_be_bytes(b).to_string()),
                    701 => bytes.try_into().ok().map(|b| f64::from_be_bytes(b).to_string()),
                    18 | 19 | 25 | 1042 | 1043 => std::str::from_utf8(bytes).ok().map(str::to_owned),
                    2278 => Some(String::new()),
                    _ => None,
                };
                shown.unwrap_or_else(|| format!("<oid {oid}, {} bytes>", bytes.len()))
            }

            /// Whether `sql` holds more than one statement (a `;` before the end).
            fn several_statements(sql: &str) -> bool {
                sql.trim().trim_end_matches(';').contains(';')
            }

            #[async_trait]
            impl Conn for DieselConn {
                async fn simple_query(&mut self, sql: &str) -> Result<Rows, DriverError> {
                    let conn: &mut AsyncPgConnection = &mut self.0;
                    if several_statements(sql) {
                        conn.batch_execute(sql).await.map_err(diesel_error)?;
                        return Ok(Rows::default());
                    }
                    let mut out = Rows::default();
                    let query = diesel::sql_query(sql.to_owned());
                    let mut stream = AsyncConnectionCore::load(conn, query)
                        .await
                        .map_err(diesel_error)?;
                    while let Some(row) = stream.try_next().await.map_err(diesel_error)? {
                        let n = row.field_count();
                        if out.columns.is_empty() {
                            out.columns = (0..n)
                                .map(|i| {
                                    row.get(i)
                                        .and_then(|f| f.field_name().map(str::to_owned))
                                        .unwrap_or_default()
                                })
                                .collect();
                        }
                        let values = (0..n)
                            .map(|i| {
                                row.get(i)
                                    .and_then(|f| f.value().map(|v| binary_to_text(v.get_oid().get(), v.as_bytes())))
                            })
                            .collect();
                        out.rows.push(values);
                    }
                    Ok(out)
                }

                async fn give_back(self: Box<Self>) -> Returned {
                    // Dropping a deadpool Object puts it back synchronously; recycling
                    // happens on the next checkout.
                    drop(self);
                    Returned::ToPool
                }

                fn canceller(&self) -> Option<Canceller> {
                    Some(token_canceller(self.0.cancel_token()))
                }
            }

            fn pool_error(e: $da::pooled_connection::deadpool::PoolError) -> DriverError {
                match e {
                    deadpool::managed::PoolError::Backend(PoolError::QueryError(q)) => diesel_error(q),
                    deadpool::managed::PoolError::Backend(PoolError::ConnectionError(c)) => {
                        DriverError::Client(format!("diesel-async: {c}"))
                    }
                    other => DriverError::Client(format!("diesel-async pool: {other}")),
                }
            }

            #[async_trait]
            impl Pool for DieselPoolBox {
                async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError> {
                    Ok(Box::new(DieselConn(self.0.get().await.map_err(pool_error)?)))
                }

                async fn close(&self) {
                    self.0.close();
                }
            }

            #[async_trait]
            impl Driver for DieselAsyncDeadpool {
                fn info(&self) -> DriverInfo {
                    DriverInfo {
                        id: self.id,
                        crate_name: "diesel-async",
                        crate_version: crate_version_matching("diesel-async", $version),
                        configuration: self.configuration,
                        kind: DriverKind::Pooled,
                        pooler: None,
                        notices: $crate::Notices::NotPassedOn(
                            "diesel-async's connection task keeps notifications and drops notices \
                             (diesel-async src/pg/mod.rs)",
                        ),
                    }
                }

                async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
                    let config = spec.tokio_postgres_config();
                    let mut manager_config = ManagerConfig::<AsyncPgConnection>::default();
                    if let Some(customize) = &self.customize {
                        manager_config = customize(manager_config);
                    }
                    // Connect with the same tokio-postgres configuration as every other
                    // driver rather than through a URL.
                    manager_config.custom_setup = Box::new(move |_url| {
                        let config = config.clone();
                        async move {
                            let (client, connection) = config
                                .connect(NoTls)
                                .await
                                .map_err(|e| diesel::ConnectionError::BadConnection($crate::with_sources(&e)))?;
                            AsyncPgConnection::try_from_client_and_connection(client, connection).await
                        }
                        .boxed()
                    });
                    let manager =
                        AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config("", manager_config);
                    let pool = DieselPool::builder(manager)
                        .max_size(opts.max_size as usize)
                        .runtime(deadpool::Runtime::Tokio1)
                        .wait_timeout(Some(opts.checkout_timeout))
                        .build()
                        .map_err(|e| DriverError::Client(e.to_string()))?;
                    Ok(Box::new(DieselPoolBox(pool)))
                }
            }
        }
    };
}

#[cfg(feature = "columns")]
diesel_async_driver!(current, diesel_async, "", "diesel-async");
#[cfg(feature = "columns")]
pub use current::DieselAsyncDeadpool;

/// How `locklab try` builds this file for another version of diesel-async ([`crate::try_kit`]).
pub(crate) const FAMILY: crate::kit::Family = {
    use crate::kit::{Dep, Family};
    Family {
        crate_name: "diesel-async",
        aliases: &[],
        file: "drivers/src/diesel_async_pg.rs",
        deps: &[
            Dep {
                features: &["postgres", "deadpool"],
                ..Dep::tried("diesel-async", "diesel_async")
            },
            // The diesel the tried diesel-async takes (any 2.x: cargo picks the one it asks for).
            Dep {
                package: "diesel",
                name: "diesel",
                version: Some("2"),
                follows: false,
                default_features: false,
                features: &["postgres_backend"],
            },
            // Its deadpool (not re-exported; the driver names `Runtime`):
            // the version the tried diesel-async depends on.
            Dep {
                package: "deadpool",
                name: "deadpool",
                version: Some("0.13"),
                follows: true,
                default_features: true,
                features: &["rt_tokio_1"],
            },
        ],
        module: |v| format!("locklab_drivers::diesel_async_driver!(tried, diesel_async, \"{v}\", \"diesel-async\");"),
        columns: &[("diesel-async", "tried::DieselAsyncDeadpool::defaults()")],
    }
};
