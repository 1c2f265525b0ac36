//! `sqlx` `PgPool`, with default options and with an `after_release` hook,
//! for sqlx 0.9 (module `v09`) and 0.8 (`v08`, the crate renamed `sqlx08`
//! in `Cargo.toml`), from one body ([`sqlx_driver!`]). On
//! return sqlx pings the connection in a background task before it becomes idle
//! again (`PoolConnection::return_to_pool`, sqlx-core `src/pool/connection.rs`);
//! it does not reset session state. sqlx has no cancel API; its own
//! advisory-lock guard (`PgAdvisoryLock`, sqlx-postgres `src/advisory_lock.rs`)
//! is reachable through [`Conn::advisory_lock_guard`].

/// One module per sqlx version: `$sqlx` is the crate's name in
/// `Cargo.toml` (`sqlx`, or `sqlx08` for the renamed 0.8), `$version` the
/// version prefix its columns report, the two ids its columns, and
/// `|$statement| $raw_sql` how that version runs a string of SQL unprepared
/// (0.9 asks for `AssertSqlSafe`, 0.8 takes the `&str`), and `$hook_fn` the
/// function that runs the `after_release` hook's statement (`raw_sql` in
/// 0.9; in 0.8 `raw_sql` does not compile in the hook's closure, so `query`),
/// and `$libraries` the function that puts the lock libraries on the
/// column's pool (they take a sqlx 0.8 `PgPool`: [`crate::libraries`]).
#[macro_export]
macro_rules! sqlx_driver {
    ($module:ident, $sqlx:ident, $version:literal, $defaults_id:literal, $after_release_id:literal,
     |$statement:ident| $raw_sql:expr, $hook_fn:ident, $libraries:path) => {
        pub(crate) mod $module {
            use std::time::Duration;

            use async_trait::async_trait;
            use futures::TryStreamExt;
            use $sqlx::pool::PoolConnection;
            use $sqlx::postgres::{PgAdvisoryLock, PgAdvisoryLockKey, PgConnectOptions, PgPoolOptions};
            use $sqlx::{Column, Either, Postgres, Row, ValueRef};

            use $crate::{
                Conn, ConnectSpec, DbError, Driver, DriverError, DriverInfo, DriverKind, GuardAcquire, GuardEnd, Pool,
                PoolOptions, Returned, Rows, crate_version_matching,
            };

            /// What a user's configuration does to the `PgPoolOptions` locklab
            /// starts from ([`SqlxPgPool::configured`]).
            type Customize = std::sync::Arc<dyn Fn(PgPoolOptions) -> PgPoolOptions + Send + Sync>;

            /// sqlx `PgPool` with `PgPoolOptions` defaults apart from the size, with or
            /// without the mitigation hook, or configured by a user's function.
            pub struct SqlxPgPool {
                id: &'static str,
                configuration: &'static str,
                /// Install an `after_release` hook running `select pg_advisory_unlock_all()`.
                unlock_all_after_release: bool,
                /// A user's own configuration ([`SqlxPgPool::configured`]).
                customize: Option<Customize>,
            }

            impl SqlxPgPool {
                /// `PgPoolOptions` defaults.
                pub fn defaults() -> Self {
                    SqlxPgPool {
                        id: $defaults_id,
                        configuration: "PgPoolOptions defaults (test_before_acquire = true)",
                        unlock_all_after_release: false,
                        customize: None,
                    }
                }

                /// A column of your own: a `PgPool` configured as your service
                /// configures it. `configure` gets `PgPoolOptions::new()` with the
                /// scenario's size and checkout timeout set
                /// (`max_connections`, `acquire_timeout`) and returns the options
                /// to connect with: add your hooks (`after_release`,
                /// `before_acquire`, `after_connect`) and settings there. `id`
                /// names the column (letters, digits, `-`); `configuration`
                /// says in sqlx's terms what differs from the defaults, for the
                /// report and for messages.
                pub fn configured(
                    id: &'static str,
                    configuration: &'static str,
                    configure: impl Fn(PgPoolOptions) -> PgPoolOptions + Send + Sync + 'static,
                ) -> Self {
                    SqlxPgPool {
                        id,
                        configuration,
                        unlock_all_after_release: false,
                        customize: Some(std::sync::Arc::new(configure)),
                    }
                }

                /// `PgPoolOptions::after_release` running `select pg_advisory_unlock_all()`
                /// on every return (the mitigation); the connection is kept when it succeeds.
                pub fn after_release_unlock_all() -> Self {
                    SqlxPgPool {
                        id: $after_release_id,
                        configuration: "after_release hook: select pg_advisory_unlock_all()",
                        unlock_all_after_release: true,
                        customize: None,
                    }
                }
            }

            /// The pool, and the lock libraries on it where they apply
            /// (sqlx 0.8: [`crate::libraries`]).
            struct SqlxPool($sqlx::PgPool, Option<$crate::libraries::LibraryPool>);

            struct SqlxConn {
                conn: PoolConnection<Postgres>,
                pool: $sqlx::PgPool,
            }

            fn sqlx_error(e: $sqlx::Error) -> DriverError {
                match &e {
                    $sqlx::Error::Database(db) => DriverError::Db(DbError {
                        sqlstate: db.code().map(|c| c.into_owned()).unwrap_or_default(),
                        message: db.message().to_owned(),
                    }),
                    _ => DriverError::Client(e.to_string()),
                }
            }

            #[async_trait]
            impl Conn for SqlxConn {
                async fn simple_query(&mut self, sql: &str) -> Result<Rows, DriverError> {
                    let mut out = Rows::default();
                    let $statement = sql;
                    let mut stream = $raw_sql.fetch_many(&mut *self.conn);
                    while let Some(item) = stream.try_next().await.map_err(sqlx_error)? {
                        if let Either::Right(row) = item {
                            out.columns = row.columns().iter().map(|c| c.name().to_owned()).collect();
                            let mut values = Vec::with_capacity(row.len());
                            for i in 0..row.len() {
                                let raw = row.try_get_raw(i).map_err(sqlx_error)?;
                                if raw.is_null() {
                                    values.push(None);
                                } else {
                                    let text = raw.as_str().map_err(|e| DriverError::Client(e.to_string()))?;
                                    values.push(Some(text.to_owned()));
                                }
                            }
                            out.rows.push(values);
                        }
                    }
                    Ok(out)
                }

                async fn release(self: Box<Self>) {
                    drop(self);
                }

                async fn give_back(self: Box<Self>) -> Returned {
                    let SqlxConn { conn, pool } = *self;
                    let idle_before = pool.num_idle();
                    let size_before = pool.size();
                    drop(conn);
                    // sqlx finishes the return in a spawned task (ping, then release to idle).
                    // Wait until the pool shows the connection idle again, or closed.
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                    loop {
                        if pool.num_idle() > idle_before {
                            return Returned::ToPool;
                        }
                        if pool.size() < size_before {
                            return Returned::Closed;
                        }
                        if tokio::time::Instant::now() > deadline {
                            tracing::warn!("sqlx: connection not back in the pool after 10 s");
                            return Returned::ToPool;
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }

                async fn advisory_lock_guard(
                    &mut self,
                    key: i64,
                    acquire: GuardAcquire,
                    end: GuardEnd,
                ) -> Result<bool, DriverError> {
                    let lock = PgAdvisoryLock::with_key(PgAdvisoryLockKey::BigInt(key));
                    let guard = match acquire {
                        GuardAcquire::Wait => lock.acquire(&mut *self.conn).await.map_err(sqlx_error)?,
                        GuardAcquire::Try => match lock.try_acquire(&mut *self.conn).await.map_err(sqlx_error)? {
                            $sqlx::Either::Left(guard) => guard,
                            $sqlx::Either::Right(_) => return Ok(false),
                        },
                    };
                    match end {
                        GuardEnd::ReleaseNow => {
                            guard.release_now().await.map_err(sqlx_error)?;
                        }
                        GuardEnd::Drop => drop(guard),
                        GuardEnd::Leak => {
                            guard.leak();
                        }
                    }
                    Ok(true)
                }
            }

            #[async_trait]
            impl Pool for SqlxPool {
                async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError> {
                    let conn = self.0.acquire().await.map_err(sqlx_error)?;
                    Ok(Box::new(SqlxConn {
                        conn,
                        pool: self.0.clone(),
                    }))
                }

                async fn library(
                    &self,
                    library: $crate::libraries::Library,
                    call: &$crate::libraries::LibraryCall,
                ) -> Result<String, DriverError> {
                    match &self.1 {
                        Some(l) => l.call(library, call).await,
                        None => Err(DriverError::Unsupported(format!(
                            "{} takes a sqlx 0.8 PgPool",
                            library.as_str()
                        ))),
                    }
                }

                async fn close(&self) {
                    if let Some(l) = &self.1 {
                        l.close(false).await;
                    }
                    self.0.close().await;
                }
            }

            #[async_trait]
            impl Driver for SqlxPgPool {
                fn info(&self) -> DriverInfo {
                    DriverInfo {
                        id: self.id,
                        crate_name: "sqlx",
                        crate_version: crate_version_matching("sqlx", $version),
                        configuration: self.configuration,
                        kind: DriverKind::Pooled,
                        pooler: None,
                        // sqlx-postgres src/connection/stream.rs: a NoticeResponse
                        // is logged (target `sqlx::postgres::notice`), not returned.
                        notices: $crate::Notices::NotPassedOn(
                            "sqlx logs notices (target sqlx::postgres::notice) and does not return them \
                             (sqlx-postgres src/connection/stream.rs)",
                        ),
                    }
                }

                async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
                    let mut options = PgConnectOptions::new()
                        .host(&spec.host)
                        .port(spec.port)
                        .username(&spec.user)
                        .database(&spec.dbname)
                        .application_name(&spec.application_name);
                    if let Some(p) = &spec.password {
                        options = options.password(p);
                    }
                    if !spec.options.is_empty() {
                        options = options.options(spec.options.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                    }
                    let mut pool = PgPoolOptions::new()
                        .max_connections(opts.max_size)
                        .acquire_timeout(opts.checkout_timeout);
                    if self.unlock_all_after_release {
                        pool = pool.after_release(|conn, _meta| {
                            Box::pin(async move {
                                $sqlx::$hook_fn("select pg_advisory_unlock_all()")
                                    .execute(&mut *conn)
                                    .await?;
                                Ok(true)
                            })
                        });
                    }
                    if let Some(customize) = &self.customize {
                        pool = customize(pool);
                    }
                    let pool = pool.connect_lazy_with(options);
                    let libraries = $libraries(&pool, spec);
                    Ok(Box::new(SqlxPool(pool, libraries)))
                }
            }
        }
    };
}

#[cfg(feature = "columns")]
sqlx_driver!(
    v09,
    sqlx,
    "0.9",
    "sqlx",
    "sqlx-after-release",
    |sql| sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned())),
    raw_sql,
    crate::libraries::on_sqlx09
);
#[cfg(feature = "columns")]
sqlx_driver!(
    v08,
    sqlx08,
    "0.8",
    "sqlx-0.8",
    "sqlx-0.8-after-release",
    |sql| sqlx08::raw_sql(sql),
    query,
    crate::libraries::on_sqlx08
);

/// How `locklab try` builds this file for another version of sqlx
/// ([`crate::try_kit`]): 0.9 and later run unprepared SQL as 0.9 does
/// (`AssertSqlSafe`), earlier versions as 0.8 does. The lock libraries are
/// not on a tried pool ([`crate::libraries::none`]).
pub(crate) const FAMILY: crate::kit::Family = {
    use crate::kit::{Dep, Family};
    Family {
        crate_name: "sqlx",
        aliases: &[],
        file: "drivers/src/sqlx_pg.rs",
        deps: &[Dep {
            default_features: false,
            features: &["postgres", "runtime-tokio"],
            ..Dep::tried("sqlx", "sqlx")
        }],
        module: sqlx_module,
        columns: &[
            ("sqlx", "tried::SqlxPgPool::defaults()"),
            ("sqlx-after-release", "tried::SqlxPgPool::after_release_unlock_all()"),
        ],
    }
};

/// [`FAMILY`]'s module for sqlx `version` (`0.7.4`, `0.9.0`, …).
fn sqlx_module(version: &str) -> String {
    let mut parts = version.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    let (raw_sql, hook_fn) = if major > 0 || minor >= 9 {
        ("sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))", "raw_sql")
    } else {
        ("sqlx::raw_sql(sql)", "query")
    };
    format!(
        "locklab_drivers::sqlx_driver!(tried, sqlx, \"{version}\", \"sqlx\", \"sqlx-after-release\", \
         |sql| {raw_sql}, {hook_fn}, locklab_drivers::libraries::none);"
    )
}
