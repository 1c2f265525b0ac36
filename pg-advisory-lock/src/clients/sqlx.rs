//! sqlx's `PgConnection`, `PoolConnection<Postgres>` and
//! `Transaction<Postgres>`, for each release line the crate supports (0.9:
//! feature `sqlx`; 0.8: `sqlx-0-8`). After a dropped wait, sqlx waits for
//! the dropped query's results before the connection's next statement
//! (sqlx-postgres `PgConnection::wait_until_ready`), so the crate's
//! clean-up runs once the wait ended at its bound.

use std::future::Future;

use crate::{ClientError, Session};

macro_rules! sqlx_line {
    ($sqlx:ident, $sql:ident => $raw:expr) => {
        /// A sqlx error as the crate reads it.
        fn error(e: $sqlx::Error) -> ClientError {
            match e {
                $sqlx::Error::Database(db) => ClientError::server(db.message(), db.code().map(|c| c.into_owned())),
                $sqlx::Error::Io(_)
                | $sqlx::Error::Tls(_)
                | $sqlx::Error::Protocol(_)
                | $sqlx::Error::PoolClosed
                | $sqlx::Error::WorkerCrashed => ClientError::lost(e.to_string()),
                other => ClientError::server(other.to_string(), None),
            }
        }

        impl Session for $sqlx::PgConnection {
            fn execute(&mut self, sql: &str) -> impl Future<Output = Result<(), ClientError>> + Send {
                // `raw_sql`: the simple query protocol, several statements
                // in one round trip, no prepared statement (which a pooler
                // in transaction mode could hand to another server
                // connection).
                let $sql = sql.to_owned();
                async move {
                    let conn: &mut $sqlx::PgConnection = self;
                    $sqlx::Executor::execute(conn, $raw)
                        .await
                        .map(|_| ())
                        .map_err(error)
                }
            }
        }

        impl Session for $sqlx::pool::PoolConnection<$sqlx::Postgres> {
            fn execute(&mut self, sql: &str) -> impl Future<Output = Result<(), ClientError>> + Send {
                let inner: &mut $sqlx::PgConnection = &mut *self;
                inner.execute(sql)
            }
        }

        impl Session for $sqlx::Transaction<'_, $sqlx::Postgres> {
            fn execute(&mut self, sql: &str) -> impl Future<Output = Result<(), ClientError>> + Send {
                let inner: &mut $sqlx::PgConnection = &mut *self;
                inner.execute(sql)
            }
        }
    };
}

#[cfg(feature = "sqlx")]
mod v09 {
    use super::*;
    // The crate's statements hold no caller input but numbers it formats.
    sqlx_line!(sqlx, sql => sqlx::raw_sql(sqlx::AssertSqlSafe(sql.as_str())));
}

#[cfg(feature = "sqlx-0-8")]
mod v08 {
    use super::*;
    sqlx_line!(sqlx08, sql => sqlx08::raw_sql(sql.as_str()));
}
