//! diesel-async's `AsyncPgConnection` and the deadpool `Object` of its
//! pool integration. diesel passes no SQLSTATE on for most errors
//! (diesel-async src/pg/error_helper.rs); the crate needs none, since its
//! statements decide their outcome on the server.

use std::future::Future;

use diesel_async::{AsyncPgConnection, SimpleAsyncConnection};

use crate::{ClientError, Session};

/// A diesel error as the crate reads it.
fn error(e: diesel::result::Error) -> ClientError {
    use diesel::result::{DatabaseErrorKind, Error};
    match e {
        Error::DatabaseError(DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand, info) => {
            ClientError::lost(info.message())
        }
        Error::DatabaseError(_, info) => ClientError::server(info.message(), None),
        Error::BrokenTransactionManager => ClientError::lost(e.to_string()),
        other => ClientError::server(other.to_string(), None),
    }
}

impl Session for AsyncPgConnection {
    async fn execute(&mut self, sql: &str) -> Result<(), ClientError> {
        self.batch_execute(sql).await.map_err(error)
    }
}

impl Session for diesel_async::pooled_connection::deadpool::Object<AsyncPgConnection> {
    fn execute(&mut self, sql: &str) -> impl Future<Output = Result<(), ClientError>> + Send {
        let inner: &mut AsyncPgConnection = &mut *self;
        inner.execute(sql)
    }
}
