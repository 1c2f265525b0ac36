//! sqlx 0.8 connect options and errors, for the lock libraries
//! (`on_sqlx08.rs`) and the job queues' sqlx 0.8 pools (`queues/`).

use sqlx08::postgres::PgConnectOptions;

use crate::{ConnectSpec, DbError, DriverError};

/// A sqlx 0.8 error as a [`DriverError`]: the server's error with its
/// SQLSTATE, or the client's.
pub(super) fn sqlx_error(e: sqlx08::Error) -> DriverError {
    match &e {
        sqlx08::Error::Database(db) => DriverError::Db(DbError {
            sqlstate: db.code().map(|c| c.into_owned()).unwrap_or_default(),
            message: db.message().to_owned(),
        }),
        _ => DriverError::Client(e.to_string()),
    }
}

/// sqlx 0.8 connect options for `spec`.
pub(super) fn connect_options(spec: &ConnectSpec, application_name: &str) -> PgConnectOptions {
    let mut options = PgConnectOptions::new()
        .host(&spec.host)
        .port(spec.port)
        .username(&spec.user)
        .database(&spec.dbname)
        .application_name(application_name);
    if let Some(p) = &spec.password {
        options = options.password(p);
    }
    if !spec.options.is_empty() {
        options = options.options(spec.options.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    }
    options
}
