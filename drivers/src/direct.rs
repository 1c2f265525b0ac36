//! The unpooled baseline: one tokio-postgres connection per checkout, closed on return.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt;
use futures::future::BoxFuture;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client, NoTls, SimpleQueryMessage};

use crate::{
    Canceller, Conn, ConnectSpec, Driver, DriverError, DriverInfo, DriverKind, Pool, PoolOptions, Returned, Rows,
    crate_version,
};

/// A [`Canceller`] from a tokio-postgres cancel token (`CancelToken::cancel_query`).
pub fn token_canceller(token: tokio_postgres::CancelToken) -> Canceller {
    Box::new(move || Box::pin(async move { token.cancel_query(NoTls).await.map_err(DriverError::from) }))
}

/// Runs `sql` on a tokio-postgres client with the simple query protocol and
/// collects every data row as text.
///
/// # Errors
/// The server's error (with SQLSTATE) or the client's.
pub async fn simple_query_rows(client: &Client, sql: &str) -> Result<Rows, DriverError> {
    let mut out = Rows::default();
    for msg in client.simple_query(sql).await? {
        match msg {
            SimpleQueryMessage::RowDescription(cols) => {
                out.columns = cols.iter().map(|c| c.name().to_owned()).collect();
            }
            SimpleQueryMessage::Row(row) => {
                out.rows
                    .push((0..row.len()).map(|i| row.get(i).map(str::to_owned)).collect());
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Runs `sql` on a tokio-postgres client with the extended query protocol
/// as one unnamed statement (`Client::query_typed`: Parse, Bind, Describe,
/// Execute, Sync in one round trip, the parameters typed `bigint` or
/// `text`), so that no prepared statement outlives the call (behind a
/// transaction-mode pooler a named one prepared in one transaction is gone,
/// or on another server connection, in the next), and collects every row
/// as text: `bool` as `t`/`f`, integers and text as they read, `void` as
/// an empty text, as the simple protocol shows them.
///
/// # Errors
/// The server's error (with SQLSTATE) or the client's; a result column of
/// a type not listed above ([`DriverError::Client`]).
pub async fn extended_query_rows(client: &Client, sql: &str, params: &[crate::Param]) -> Result<Rows, DriverError> {
    use tokio_postgres::types::{ToSql, Type};
    let owned: Vec<(Box<dyn ToSql + Sync + Send>, Type)> = params
        .iter()
        .map(|p| -> (Box<dyn ToSql + Sync + Send>, Type) {
            match p {
                crate::Param::Int(i) => (Box::new(*i), Type::INT8),
                crate::Param::Text(t) => (Box::new(t.clone()), Type::TEXT),
            }
        })
        .collect();
    let typed: Vec<(&(dyn ToSql + Sync), Type)> = owned
        .iter()
        .map(|(b, t)| (b.as_ref() as &(dyn ToSql + Sync), t.clone()))
        .collect();
    let mut out = Rows::default();
    for row in client.query_typed(sql, &typed).await? {
        if out.columns.is_empty() {
            out.columns = row.columns().iter().map(|c| c.name().to_owned()).collect();
        }
        let mut values = Vec::with_capacity(row.len());
        for (i, column) in row.columns().iter().enumerate() {
            let text = match *column.type_() {
                Type::BOOL => row
                    .try_get::<_, Option<bool>>(i)?
                    .map(|b| if b { "t" } else { "f" }.to_owned()),
                Type::INT2 => row.try_get::<_, Option<i16>>(i)?.map(|v| v.to_string()),
                Type::INT4 => row.try_get::<_, Option<i32>>(i)?.map(|v| v.to_string()),
                Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(|v| v.to_string()),
                Type::TEXT | Type::VARCHAR | Type::NAME => row.try_get::<_, Option<String>>(i)?,
                Type::VOID => Some(String::new()),
                ref other => {
                    return Err(DriverError::Client(format!(
                        "the extended protocol's result column {} is of type {other}, which locklab does not read",
                        column.name()
                    )));
                }
            };
            values.push(text);
        }
        out.rows.push(values);
    }
    Ok(out)
}

/// How long [`DirectConn::close`] waits for the peer to close the socket
/// after Terminate: 5 s.
pub const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A dedicated tokio-postgres connection: the direct driver's checkout and the
/// harness's own observer connections. It captures server notices
/// ([`Rows::notices`]).
pub struct DirectConn {
    client: Client,
    task: JoinHandle<()>,
    notices: Arc<Mutex<Vec<String>>>,
    /// The error that ended the connection, e.g. the server's FATAL
    /// `25P03 terminating connection due to idle-in-transaction timeout`,
    /// sent while no statement was running.
    ended_by: Arc<Mutex<Option<DriverError>>>,
    /// Whether a cancel request can reach the server (not for a connection
    /// made over a stream the caller opened: [`DirectConn::connect_stream`]).
    cancellable: bool,
}

/// The error for a session not made within [`CONNECT_TIMEOUT`].
fn no_session(spec: &ConnectSpec) -> DriverError {
    DriverError::Client(format!(
        "no session with {} within {} s (connect and start-up)",
        spec.redacted(),
        CONNECT_TIMEOUT.as_secs()
    ))
}

/// How long [`DirectConn::connect`] waits for a session, TCP connect and
/// start-up (authentication) together.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl DirectConn {
    /// Opens a connection and drives it on a tokio task that keeps the server's
    /// notices (`AsyncMessage::Notice`, tokio-postgres `Connection::poll_message`).
    ///
    /// # Errors
    /// The connection error (server refused, unreachable, authentication), or
    /// no session within [`CONNECT_TIMEOUT`] (10 s; tokio-postgres's own
    /// `connect_timeout` bounds only the TCP connect, not the start-up exchange).
    pub async fn connect(spec: &ConnectSpec) -> Result<Self, DriverError> {
        Self::connect_with(spec, spec.tokio_postgres_config()).await
    }

    /// Like [`DirectConn::connect`], with `config` (made from `spec` and
    /// changed by the caller) instead of `spec`'s own.
    ///
    /// # Errors
    /// As [`DirectConn::connect`].
    pub async fn connect_with(spec: &ConnectSpec, config: tokio_postgres::Config) -> Result<Self, DriverError> {
        let (client, connection) = tokio::time::timeout(CONNECT_TIMEOUT, config.connect(NoTls))
            .await
            .map_err(|_| no_session(spec))??;
        Ok(DirectConn::drive(client, connection))
    }

    /// Like [`DirectConn::connect`], over a TCP stream the caller opened (for
    /// a socket made in another network namespace). It has no
    /// [`Conn::canceller`]: tokio-postgres has no address for a cancel
    /// request on such a connection.
    ///
    /// # Errors
    /// As [`DirectConn::connect`], without the TCP connect.
    pub async fn connect_stream(spec: &ConnectSpec, stream: tokio::net::TcpStream) -> Result<Self, DriverError> {
        let (client, connection) =
            tokio::time::timeout(CONNECT_TIMEOUT, spec.tokio_postgres_config().connect_raw(stream, NoTls))
                .await
                .map_err(|_| no_session(spec))??;
        let mut conn = DirectConn::drive(client, connection);
        conn.cancellable = false;
        Ok(conn)
    }

    /// Drives `connection` on a task that keeps its notices and its end.
    fn drive<S>(client: Client, mut connection: tokio_postgres::Connection<S, tokio_postgres::tls::NoTlsStream>) -> Self
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let notices = Arc::new(Mutex::new(Vec::new()));
        let sink = notices.clone();
        let ended_by = Arc::new(Mutex::new(None));
        let end = ended_by.clone();
        let task = tokio::spawn(async move {
            // Messages are handled in the order the server sent them, so a
            // statement's notices are stored before its result reaches the client.
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(m) = messages.next().await {
                match m {
                    Ok(AsyncMessage::Notice(n)) => {
                        if let Ok(mut v) = sink.lock() {
                            v.push(format!("{}: {}", n.severity(), n.message()));
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "direct connection ended with an error");
                        if let Ok(mut slot) = end.lock() {
                            *slot = Some(DriverError::from(e));
                        }
                        break;
                    }
                }
            }
        });
        DirectConn {
            client,
            task,
            notices,
            ended_by,
            cancellable: true,
        }
    }

    /// The underlying client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Closes the connection (sends Terminate) and waits until the socket is
    /// closed, at most [`CLOSE_WAIT`]: a peer that does not close its end
    /// after Terminate (pgagroal 1.6.0 was seen here spinning on such a
    /// connection for minutes, under load) is cut off then, the socket
    /// dropped from our side.
    pub async fn close(self) {
        drop(self.client);
        let mut task = self.task;
        if tokio::time::timeout(CLOSE_WAIT, &mut task).await.is_err() {
            task.abort();
        }
    }
}

#[async_trait]
impl Conn for DirectConn {
    async fn simple_query(&mut self, sql: &str) -> Result<Rows, DriverError> {
        if let Ok(mut v) = self.notices.lock() {
            v.clear();
        }
        let mut rows = match simple_query_rows(&self.client, sql).await {
            Ok(rows) => rows,
            // A connection the server ended between statements: report why
            // (with its SQLSTATE) rather than just "connection closed".
            Err(DriverError::Client(closed)) if self.client.is_closed() => {
                let why = self.ended_by.lock().ok().and_then(|e| e.clone());
                return Err(match why {
                    Some(DriverError::Db(db)) => DriverError::Db(crate::DbError {
                        sqlstate: db.sqlstate,
                        message: format!("{} (the server ended the connection: {closed})", db.message),
                    }),
                    _ => DriverError::Client(closed),
                });
            }
            Err(e) => return Err(e),
        };
        if let Ok(mut v) = self.notices.lock() {
            rows.notices = std::mem::take(&mut *v);
        }
        Ok(rows)
    }

    async fn extended_query(&mut self, sql: &str, params: &[crate::Param]) -> Result<Rows, DriverError> {
        if let Ok(mut v) = self.notices.lock() {
            v.clear();
        }
        let mut rows = extended_query_rows(&self.client, sql, params).await?;
        if let Ok(mut v) = self.notices.lock() {
            rows.notices = std::mem::take(&mut *v);
        }
        Ok(rows)
    }

    async fn give_back(self: Box<Self>) -> Returned {
        self.close().await;
        Returned::Closed
    }

    fn canceller(&self) -> Option<Canceller> {
        self.cancellable.then(|| token_canceller(self.client.cancel_token()))
    }

    fn no_cancel_reason(&self) -> &'static str {
        "a connection made over a socket of another network namespace has no address for a cancel request"
    }
}

/// A pooled tokio-postgres client (deadpool's `Object`, bb8's `PooledConnection`).
pub trait ClientGuard: Send + 'static {
    /// The client behind the guard.
    fn client(&self) -> &Client;
}

/// A checked-out pooled client whose return to its pool happens synchronously
/// when the guard is dropped, as in application code: `DropReturns(guard)`.
pub struct DropReturns<G>(pub G);

#[async_trait]
impl<G: ClientGuard> Conn for DropReturns<G> {
    async fn simple_query(&mut self, sql: &str) -> Result<Rows, DriverError> {
        simple_query_rows(self.0.client(), sql).await
    }

    async fn extended_query(&mut self, sql: &str, params: &[crate::Param]) -> Result<Rows, DriverError> {
        extended_query_rows(self.0.client(), sql, params).await
    }

    async fn give_back(self: Box<Self>) -> Returned {
        drop(self);
        Returned::ToPool
    }

    fn canceller(&self) -> Option<Canceller> {
        Some(token_canceller(self.0.client().cancel_token()))
    }
}

/// Code of the application's own run on a checked-out client just before
/// the client goes back to its pool: what a service's release path does
/// that the pool does not (say, `select pg_advisory_unlock_all()` before
/// dropping deadpool's `Object`, whose recycling hooks run only at the next
/// checkout: deadpool `src/managed/mod.rs`, `Pool::get`). Given to a
/// column helper's `before_return` ([`crate::Deadpool::before_return`],
/// [`crate::Bb8Postgres::before_return`]).
pub type BeforeReturn =
    Arc<dyn for<'a> Fn(&'a Client) -> BoxFuture<'a, Result<(), tokio_postgres::Error>> + Send + Sync>;

/// A checked-out pooled client whose return first runs the application's
/// [`BeforeReturn`] code on it, then drops the guard (the pool's own
/// return, synchronous as in [`DropReturns`]). A failed `before_return` is
/// logged; the client goes back all the same, as an application's
/// release path that ignores the error would.
pub struct ReturnsAfter<G> {
    /// The pool's guard of the client.
    pub guard: G,
    /// What runs before the guard is dropped.
    pub before_return: BeforeReturn,
}

#[async_trait]
impl<G: ClientGuard> Conn for ReturnsAfter<G> {
    async fn simple_query(&mut self, sql: &str) -> Result<Rows, DriverError> {
        simple_query_rows(self.guard.client(), sql).await
    }

    async fn extended_query(&mut self, sql: &str, params: &[crate::Param]) -> Result<Rows, DriverError> {
        extended_query_rows(self.guard.client(), sql, params).await
    }

    async fn give_back(self: Box<Self>) -> Returned {
        if let Err(e) = (self.before_return)(self.guard.client()).await {
            tracing::warn!(error = %e, "the application's code before the return failed");
        }
        drop(self);
        Returned::ToPool
    }

    fn canceller(&self) -> Option<Canceller> {
        Some(token_canceller(self.guard.client().cancel_token()))
    }
}

/// `tokio-postgres`, no pool: checkout connects, return disconnects.
pub struct TokioPostgresDirect;

struct DirectFactory {
    spec: ConnectSpec,
}

#[async_trait]
impl Pool for DirectFactory {
    async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError> {
        Ok(Box::new(DirectConn::connect(&self.spec).await?))
    }

    async fn close(&self) {}
}

#[async_trait]
impl Driver for TokioPostgresDirect {
    fn info(&self) -> DriverInfo {
        DriverInfo {
            id: "tokio-postgres",
            crate_name: "tokio-postgres",
            crate_version: crate_version("tokio-postgres"),
            configuration: "no pool: connect on checkout, close on return",
            kind: DriverKind::Direct,
            pooler: None,
            notices: crate::Notices::PassedOn,
        }
    }

    async fn pool(&self, spec: &ConnectSpec, _opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
        Ok(Box::new(DirectFactory { spec: spec.clone() }))
    }

    fn extended_protocol(&self) -> Result<(), &'static str> {
        Ok(())
    }
}

/// What a user's connection factory does to the `tokio_postgres::Config`
/// locklab makes ([`TokioPostgresFactory`]).
type Configure = Arc<dyn Fn(&mut tokio_postgres::Config) + Send + Sync>;

/// A column of your own with no pool: tokio-postgres connections made as
/// your service makes them (`Config::options`, `keepalives`,
/// `tcp_user_timeout`, …), one per checkout, closed on return, as the
/// `tokio-postgres` column does.
pub struct TokioPostgresFactory {
    id: &'static str,
    configuration: &'static str,
    configure: Configure,
}

impl TokioPostgresFactory {
    /// `configure` changes the `tokio_postgres::Config` locklab made for the
    /// cell's database (host, port, user, database and application name
    /// set: keep them). `id` names the column (letters, digits, `-`);
    /// `configuration` says what differs from the defaults, for the report.
    pub fn configured(
        id: &'static str,
        configuration: &'static str,
        configure: impl Fn(&mut tokio_postgres::Config) + Send + Sync + 'static,
    ) -> Self {
        TokioPostgresFactory {
            id,
            configuration,
            configure: Arc::new(configure),
        }
    }
}

struct ConfiguredFactory {
    spec: ConnectSpec,
    configure: Configure,
}

#[async_trait]
impl Pool for ConfiguredFactory {
    async fn checkout(&self) -> Result<Box<dyn Conn>, DriverError> {
        let mut config = self.spec.tokio_postgres_config();
        (self.configure)(&mut config);
        Ok(Box::new(DirectConn::connect_with(&self.spec, config).await?))
    }

    async fn close(&self) {}
}

#[async_trait]
impl Driver for TokioPostgresFactory {
    fn info(&self) -> DriverInfo {
        DriverInfo {
            id: self.id,
            crate_name: "tokio-postgres",
            crate_version: crate_version("tokio-postgres"),
            configuration: self.configuration,
            kind: DriverKind::Direct,
            pooler: None,
            notices: crate::Notices::PassedOn,
        }
    }

    async fn pool(&self, spec: &ConnectSpec, _opts: PoolOptions) -> Result<Box<dyn Pool>, DriverError> {
        Ok(Box::new(ConfiguredFactory {
            spec: spec.clone(),
            configure: self.configure.clone(),
        }))
    }

    fn extended_protocol(&self) -> Result<(), &'static str> {
        Ok(())
    }
}
