//! `r2d2` with `r2d2_postgres`: a synchronous pool of synchronous `postgres`
//! clients, driven from the async harness on tokio's blocking threads
//! (`spawn_blocking`), as an async service using it would. r2d2's defaults
//! (`test_on_check_out = true`: `ManageConnection::is_valid` runs an empty
//! simple query, r2d2_postgres `src/lib.rs`); a return only asks `has_broken`
//! (`Client::is_closed`) and keeps the connection (r2d2 `src/lib.rs`
//! `put_back`).
//!
//! A `postgres::Client` blocks on a runtime of its own, also when it is
//! dropped, which must not happen on an async worker thread: connections and
//! pools are dropped on a plain thread.
//!
//! A blocking call cannot be dropped: when the caller gives up on it (a
//! timeout drops the `spawn_blocking` future), the thread runs the statement to
//! its end and only then releases the connection. The connection sits behind a
//! mutex, so the next call on it waits for the abandoned one.

/// The module of one r2d2_postgres version: `$r2p` is the crate's name
/// (r2d2 and postgres through its re-exports `$r2p::r2d2`,
/// `$r2p::postgres`), `$version` the version prefix its column reports
/// (`""`: the only one in the build), `$id` the column's id. Invoked once
/// here, and by `locklab try` for another version.
#[macro_export]
macro_rules! r2d2_driver {
    ($module:ident, $r2p:ident, $version:literal, $id:literal) => {
        #[allow(dead_code)]
        pub(crate) mod $module {
            use std::sync::{Arc, Mutex};

            use async_trait::async_trait;
            use $r2p::PostgresConnectionManager;
            use $r2p::postgres::NoTls;
            use $r2p::r2d2::PooledConnection;

            use $crate::{
                Canceller, Conn, ConnectSpec, Driver, DriverError, DriverInfo, DriverKind, Pool, PoolOptions, Returned,
                Rows, crate_version_matching,
            };

            type Manager = PostgresConnectionManager<NoTls>;
            type Shared = Arc<Mutex<PooledConnection<Manager>>>;

            /// What a user's configuration does to the builder locklab starts
            /// from ([`R2d2Postgres::configured`]).
            type Customize = std::sync::Arc<dyn Fn($r2p::r2d2::Builder<Manager>) -> $r2p::r2d2::Builder<Manager> + Send + Sync>;

            /// r2d2 + r2d2_postgres, with the builder's defaults apart from the size or as a user configures it.
            pub struct R2d2Postgres {
                id: &'static str,
                configuration: &'static str,
                customize: Option<Customize>,
            }

            impl R2d2Postgres {
                /// The builder's defaults apart from the size.
                pub fn defaults() -> Self {
                    R2d2Postgres {
                        id: $id,
                        configuration: "Builder defaults (test_on_check_out = true), via spawn_blocking",
                        customize: None,
                    }
                }

                /// A column of your own: an r2d2 pool configured as your service
                /// configures it. `configure` gets `r2d2::Pool::builder()` with
                /// the scenario's size and checkout bound set (`max_size`,
                /// `min_idle(Some(0))`, `connection_timeout`) and returns the
                /// builder to build with (your `connection_customizer`, whose
                /// `on_acquire` runs on a new connection, `test_on_check_out`,
                /// …); locklab builds it, on a blocking thread, with a
                /// `PostgresConnectionManager` for the cell's database. r2d2
                /// runs nothing when a connection goes back. `id` names the
                /// column (letters, digits, `-`); `configuration` says in r2d2's
                /// terms what differs from the defaults, for the report.
                pub fn configured(
                    id: &'static str,
                    configuration: &'static str,
                    configure: impl Fn($r2p::r2d2::Builder<Manager>) -> $r2p::r2d2::Builder<Manager> + Send + Sync + 'static,
                ) -> Self {
                    R2d2Postgres {
                        id,
                        configuration,
                        customize: Some(std::sync::Arc::new(configure)),
                    }
                }
            }

            struct R2d2Pool(Option<$r2p::r2d2::Pool<Manager>>);

            struct R2d2Conn(Option<Shared>);

            /// Drops `value` on a thread of its own (see the module docs).
            fn drop_off_runtime<T: Send + 'static>(value: T) {
                if std::thread::Builder::new()
                    .name("locklab-r2d2-drop".into())
                    .spawn(move || drop(value))
                    .is_err()
                {
                    tracing::warn!("r2d2: cannot start a thread to drop a connection; leaking it");
                }
            }

            impl Drop for R2d2Conn {
                fn drop(&mut self) {
                    if let Some(shared) = self.0.take() {
                        drop_off_runtime(shared);
                    }
                }
            }

            impl Drop for R2d2Pool {
                fn drop(&mut self) {
                    if let Some(pool) = self.0.take() {
                        drop_off_runtime(pool);
                    }
                }
            }

            impl R2d2Conn {
                fn shared(&self) -> Result<Shared, DriverError> {
                    self.0
                        .clone()
                        .ok_or_else(|| DriverError::Client("r2d2 connection already given back".into()))
                }
            }

            fn join_error(e: tokio::task::JoinError) -> DriverError {
                DriverError::Client(format!("blocking task failed: {e}"))
            }

            std::thread_local! {
                /// The notices of the statement this thread is running, if it
                /// collects them ([`query`]). The `postgres` crate calls a
                /// connection's notice callback on the thread that waits on
                /// the statement (postgres `src/connection.rs`, `poll_block_on`).
                static NOTICES: std::cell::RefCell<Option<Vec<String>>> = const { std::cell::RefCell::new(None) };
            }

            /// The connections' notice callback: into [`NOTICES`] of the
            /// thread running the statement; a notice outside [`query`] (the
            /// pool's own check on checkout) is logged, as the crate's
            /// default callback does (postgres `src/config.rs`).
            fn collect_notice(n: $r2p::postgres::error::DbError) {
                let line = format!("{}: {}", n.severity(), n.message());
                let kept = NOTICES.with(|s| s.borrow_mut().as_mut().map(|v| v.push(line.clone())).is_some());
                if !kept {
                    $crate::kit::unclaimed_notice(&line);
                }
            }

            /// Collects this thread's notices until dropped (also on a panic).
            struct Collecting;

            impl Collecting {
                fn start() -> Collecting {
                    NOTICES.with(|s| *s.borrow_mut() = Some(Vec::new()));
                    Collecting
                }

                fn notices(self) -> Vec<String> {
                    NOTICES.with(|s| s.borrow_mut().take()).unwrap_or_default()
                }
            }

            impl Drop for Collecting {
                fn drop(&mut self) {
                    NOTICES.with(|s| *s.borrow_mut() = None);
                }
            }

            fn query(client: &mut $r2p::postgres::Client, sql: &str) -> Result<Rows, DriverError> {
                let collecting = Collecting::start();
                let result = query_rows(client, sql);
                let notices = collecting.notices();
                result.map(|rows| Rows { notices, ..rows })
            }

            fn query_rows(client: &mut $r2p::postgres::Client, sql: &str) -> Result<Rows, DriverError> {
                let mut out = Rows::default();
                for msg in client.simple_query(sql)? {
                    match msg {
                        $r2p::postgres::SimpleQueryMessage::RowDescription(cols) => {
                            out.columns = cols.iter().map(|c| c.name().to_owned()).collect();
                        }
                        $r2p::postgres::SimpleQueryMessage::Row(row) => {
                            out.rows
                                .push((0..row.len()).map(|i| row.get(i).map(str::to_owned)).collect());
                        }
                        _ => {}
                    }
                }
                Ok(out)
            }

            #[async_trait]
            impl Conn for R2d2Conn {
                async fn simple_query(&mut self, sql: &str) -> Result<Rows, DriverError> {
                    let shared = self.shared()?;
                    let sql = sql.to_owned();
                    tokio::task::spawn_blocking(move || {
                        let mut guard = shared
                            .lock()
                            .map_err(|_| DriverError::Client("r2d2 connection poisoned by a panic".into()))?;
                        query(&mut guard, &sql)
                    })
                    .await
                    .map_err(join_error)?
                }

                async fn give_back(self: Box<Self>) -> Returned {
                    // The last owner drops the PooledConnection, which puts it back
                    // synchronously (a broken one is closed): on a blocking thread here, or
                    // in a blocking call still running on it.
                    let mut this = self;
                    if let Some(shared) = this.0.take() {
                        let _ = tokio::task::spawn_blocking(move || drop(shared)).await;
                    }
                    Returned::ToPool
                }

                fn canceller(&self) -> Option<Canceller> {
                    // The token must be taken before a statement holds the mutex.
                    let token = self.0.as_ref()?.try_lock().ok()?.cancel_token();
                    Some(Box::new(move || {
                        Box::pin(async move {
                            tokio::task::spawn_blocking(move || token.cancel_query(NoTls).map_err(DriverError::from))
                                .await
                                .map_err(join_error)?
                        })
                    }))
                }
            }

            #[async_trait]
            impl Pool for R2d2Pool {
                async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError> {
                    let pool = self
                        .0
                        .clone()
                        .ok_or_else(|| DriverError::Client("r2d2 pool closed".into()))?;
                    let conn = tokio::task::spawn_blocking(move || pool.get())
                        .await
                        .map_err(join_error)?
                        .map_err(|e| DriverError::Client(format!("r2d2: {e}")))?;
                    Ok(Box::new(R2d2Conn(Some(Arc::new(Mutex::new(conn))))))
                }

                async fn close(&self) {}
            }

            #[async_trait]
            impl Driver for R2d2Postgres {
                fn info(&self) -> DriverInfo {
                    DriverInfo {
                        id: self.id,
                        crate_name: "r2d2_postgres",
                        crate_version: format!(
                            "{} (r2d2 {})",
                            crate_version_matching("r2d2_postgres", $version),
                            crate_version_matching("r2d2", "")
                        ),
                        configuration: self.configuration,
                        kind: DriverKind::Pooled,
                        pooler: None,
                        notices: $crate::Notices::PassedOn,
                    }
                }

                async fn pool(&self, spec: &ConnectSpec, opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
                    let mut config = $r2p::postgres::Config::new();
                    config
                        .host(&spec.host)
                        .port(spec.port)
                        .user(&spec.user)
                        .dbname(&spec.dbname)
                        .application_name(&spec.application_name)
                        .connect_timeout(std::time::Duration::from_secs(10))
                        .notice_callback(collect_notice);
                    if let Some(p) = &spec.password {
                        config.password(p);
                    }
                    if !spec.options.is_empty() {
                        config.options(&spec.options_string());
                    }
                    let manager = PostgresConnectionManager::new(config, NoTls);
                    let (max, timeout) = (opts.max_size, opts.checkout_timeout);
                    // build_unchecked: no connection is opened before the first checkout,
                    // like the other pools here.
                    let customize = self.customize.clone();
                    let pool = tokio::task::spawn_blocking(move || {
                        let mut builder = $r2p::r2d2::Pool::builder()
                            .max_size(max)
                            .min_idle(Some(0))
                            .connection_timeout(timeout);
                        if let Some(customize) = customize {
                            builder = customize(builder);
                        }
                        builder.build_unchecked(manager)
                    })
                    .await
                    .map_err(join_error)?;
                    Ok(Box::new(R2d2Pool(Some(pool))))
                }
            }
        }
    };
}

#[cfg(feature = "columns")]
r2d2_driver!(current, r2d2_postgres, "", "r2d2");
#[cfg(feature = "columns")]
pub use current::R2d2Postgres;

/// How `locklab try` builds this file for another version of r2d2_postgres ([`crate::try_kit`]).
pub(crate) const FAMILY: crate::kit::Family = {
    use crate::kit::{Dep, Family};
    Family {
        crate_name: "r2d2_postgres",
        aliases: &["r2d2-postgres"],
        file: "drivers/src/r2d2_pg.rs",
        deps: &[Dep::tried("r2d2_postgres", "r2d2_postgres")],
        module: |v| format!("locklab_drivers::r2d2_driver!(tried, r2d2_postgres, \"{v}\", \"r2d2\");"),
        columns: &[("r2d2", "tried::R2d2Postgres::defaults()")],
    }
};
