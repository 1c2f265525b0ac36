//! tokio-postgres' `Client` and `Transaction`, and the pools built on it:
//! deadpool-postgres, bb8-postgres, mobc-postgres (each derefs to a
//! `Client`).

use std::future::Future;

use tokio_postgres::{Client, Transaction};

use crate::{ClientError, Session};

/// A tokio-postgres error as the crate reads it; `closed` is the client's
/// `is_closed()` after the error.
fn error(e: tokio_postgres::Error, closed: bool) -> ClientError {
    match e.as_db_error() {
        Some(db) => ClientError {
            message: db.message().to_owned(),
            sqlstate: Some(db.code().code().to_owned()),
            connection_lost: closed,
        },
        None => ClientError {
            message: e.to_string(),
            sqlstate: None,
            connection_lost: closed || e.is_closed(),
        },
    }
}

/// Runs `sql` on `client` (`batch_execute`: the simple query protocol).
async fn run(client: &Client, sql: &str) -> Result<(), ClientError> {
    client
        .batch_execute(sql)
        .await
        .map_err(|e| error(e, client.is_closed()))
}

impl Session for Client {
    fn execute(&mut self, sql: &str) -> impl Future<Output = Result<(), ClientError>> + Send {
        run(self, sql)
    }
}

impl Session for Transaction<'_> {
    fn execute(&mut self, sql: &str) -> impl Future<Output = Result<(), ClientError>> + Send {
        run(self.client(), sql)
    }
}

/// [`Session`] for a type that derefs to a tokio-postgres `Client` (or
/// `Transaction`), through that.
#[allow(unused_macros)]
macro_rules! through_deref {
    ($target:ty; $($generics:tt)*) => {
        impl $($generics)* {
            fn execute(&mut self, sql: &str) -> impl Future<Output = Result<(), ClientError>> + Send {
                let inner: &mut $target = &mut *self;
                inner.execute(sql)
            }
        }
    };
}

#[cfg(feature = "deadpool-postgres")]
through_deref!(Client; Session for deadpool_postgres::Object);
#[cfg(feature = "deadpool-postgres")]
through_deref!(Transaction<'a>; <'a> Session for deadpool_postgres::Transaction<'a>);
#[cfg(feature = "bb8-postgres")]
through_deref!(Client; <'a, T> Session for bb8::PooledConnection<'a, bb8_postgres::PostgresConnectionManager<T>>
    where
        T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + Sync,
        T::TlsConnect: Send,
        <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
);
#[cfg(feature = "mobc-postgres")]
through_deref!(Client; <T> Session for mobc::Connection<mobc_postgres::PgConnectionManager<T>>
    where
        T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + Sync,
        T::TlsConnect: Send,
        <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
);
