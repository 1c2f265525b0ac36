//! [`crate::Session`] for each supported client, behind its feature.

#[cfg(feature = "diesel-async")]
mod diesel_async;
#[cfg(any(feature = "sqlx", feature = "sqlx-0-8"))]
mod sqlx;
#[cfg(feature = "tokio-postgres")]
mod tokio_postgres;
