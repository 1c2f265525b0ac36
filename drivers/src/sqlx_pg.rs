//! `sqlx` `PgPool` with default options. On return sqlx pings the connection in a
//! background task before it becomes idle again (`PoolConnection::return_to_pool`,
//! sqlx-core `src/pool/connection.rs`); it does not reset session state.

use std::time::Duration;

use async_trait::async_trait;
use futures::TryStreamExt;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Column, Either, Postgres, Row, ValueRef};

use crate::{
    Conn, ConnectSpec, DbError, Driver, DriverError, DriverInfo, DriverKind, Pool, PoolOptions, Returned, Rows,
    crate_version,
};

/// sqlx `PgPool` with `PgPoolOptions` defaults apart from the size.
pub struct SqlxPgPool;

struct SqlxPool(sqlx::PgPool);

struct SqlxConn {
    conn: PoolConnection<Postgres>,
    pool: sqlx::PgPool,
}

fn sqlx_error(e: sqlx::Error) -> DriverError {
    match &e {
        sqlx::Error::Database(db) => DriverError::Db(DbError {
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
        let mut stream = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned())).fetch_many(&mut *self.conn);
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

    async fn close(&self) {
        self.0.close().await;
    }
}

#[async_trait]
impl Driver for SqlxPgPool {
    fn info(&self) -> DriverInfo {
        DriverInfo {
            id: "sqlx",
            crate_name: "sqlx",
            crate_version: crate_version("sqlx"),
            configuration: "PgPoolOptions defaults (test_before_acquire = true)",
            kind: DriverKind::Pooled,
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
        let pool = PgPoolOptions::new()
            .max_connections(opts.max_size)
            .acquire_timeout(opts.checkout_timeout)
            .connect_lazy_with(options);
        Ok(Box::new(SqlxPool(pool)))
    }
}
