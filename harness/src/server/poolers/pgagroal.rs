//! pgagroal 1.6.0 in a container of the pooler image (pgagroal docs,
//! "Configuration", "Pipelines"; why it runs this way:
//! `locklab_drivers`' pgagroal module): listening on a free four-digit port,
//! the server reached through socat on another, `max_connections = 16` (or
//! a scenario's cap), `idle_timeout = 0`, `validation = off`,
//! `blocking_timeout = 0` (a client waits for a server connection as long
//! as it takes), `pgagroal_hba.conf` asking every client for scram-sha-256,
//! a users file made at start with `pgagroal-admin` (its master key in the
//! container's home) holding the server's password (pgagroal authenticates
//! to the server with it), and a limits file naming the cell's database
//! with all its server connections made at start (an instance per cell's
//! database). Session pipeline: `DISCARD ALL` when a client disconnects.
//! Transaction pipeline: `allow_unknown_users = off`, as it requires (its
//! configuration check).
//!
//! Its queue: pgagroal 1.6 lists no clients (its `pgagroal-cli status
//! details` lists server connections; its Prometheus gauge
//! `pgagroal_client_wait` counts clients still authenticating,
//! `src/libpgagroal/worker.c`), so it is read from the server instead (the
//! runner's [`crate::observe::queued_on_no_backend_sql`]).

use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use locklab_drivers::{DirectConn, PoolerMode};

use super::{Product, Queue, SERVER_CONNECTIONS, Setup, Started};

/// pgagroal.
pub(super) struct Pgagroal;

impl Product for Pgagroal {
    fn container(&self, mode: PoolerMode, at: &Setup<'_>) -> Result<Started> {
        let (up, port) = (at.up, at.port);
        let dir = super::DIR;
        let cap = at.cap.unwrap_or(SERVER_CONNECTIONS);
        let mut files = Vec::new();
        // The server through a four-digit port (see the module docs);
        // socat's own log lines name it.
        let (forward, server_port) = if up.port < 10000 {
            (String::new(), up.port)
        } else {
            let via = free_four_digit_port()?;
            (
                format!(
                    "socat -d TCP-LISTEN:{via},bind=127.0.0.1,fork,reuseaddr TCP:{host}:{up_port} & ",
                    host = up.host,
                    up_port = up.port
                ),
                via,
            )
        };
        let transaction = mode == PoolerMode::Transaction;
        files.push((
            "pgagroal.conf",
            format!(
                "[pgagroal]\n\
                 host = 127.0.0.1\n\
                 port = {port}\n\
                 log_type = console\n\
                 log_level = info\n\
                 max_connections = {cap}\n\
                 idle_timeout = 0\n\
                 blocking_timeout = 0\n\
                 validation = off\n\
                 unix_socket_dir = {dir}\n\
                 pipeline = {pipeline}\n\
                 {unknown}\
                 \n\
                 [primary]\n\
                 host = {host}\n\
                 port = {server_port}\n",
                pipeline = mode.as_str(),
                unknown = if transaction { "allow_unknown_users = off\n" } else { "" },
                host = if forward.is_empty() { up.host } else { "127.0.0.1" },
            ),
        ));
        files.push(("pgagroal_hba.conf", "host all all all scram-sha-256\n".into()));
        let Some(db) = at.database else {
            bail!("pgagroal is started for one database, and none was named")
        };
        for (what, name) in [("database", db), ("user", up.user)] {
            if name.contains(char::is_whitespace) || name.contains(['"', '\'', '#', '\\', '$', '`']) {
                bail!("pgagroal's limits file cannot name the {what} {name:?}");
            }
        }
        files.push((
            "pgagroal_databases.conf",
            format!("{db} {user} {n} {n} {n}\n", user = up.user, n = cap),
        ));
        let args =
            "-c /tmp/locklab/pgagroal.conf -a /tmp/locklab/pgagroal_hba.conf -l /tmp/locklab/pgagroal_databases.conf";
        // The users file: its password is the client's and the server's,
        // given to pgagroal-admin on its standard input (not on a command
        // line). The master key that encrypts it goes to ~/.pgagroal.
        files.push(("password", at.password.to_owned()));
        let run = format!(
            "{forward}\
             echo \"locklab-version: $(pgagroal --version 2>&1 | head -n 1)\"; \
             key=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \\n'); \
             printf '%s\\n%s\\n' \"$key\" \"$key\" | pgagroal-admin master-key >/dev/null; \
             pw=$(cat /tmp/locklab/password); rm /tmp/locklab/password; \
             printf '%s\\n%s\\n' \"$pw\" \"$pw\" | pgagroal-admin -f /tmp/locklab/pgagroal_users.conf -U '{user}' user add >/dev/null; \
             unset pw key; \
             exec pgagroal {args} -u /tmp/locklab/pgagroal_users.conf",
            user = up.user
        );
        Ok(Started { files, run })
    }

    fn listen_port(&self) -> Result<u16> {
        free_four_digit_port()
    }

    fn client_password_is_the_servers(&self) -> bool {
        true
    }

    fn makes_server_connections_at_start(&self) -> bool {
        true
    }

    fn queue(&self) -> Queue {
        Queue::Server
    }
}

/// A loopback port below 10000 that was free a moment ago, for pgagroal
/// 1.6.0 (see the module docs): tried at random in 2000..10000 (ports below
/// are often taken by well-known services), the first that binds.
///
/// # Errors
/// None of 200 tries binds.
pub(super) fn free_four_digit_port() -> Result<u16> {
    for _ in 0..200 {
        let port = rand::random_range(2000..10000);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free loopback port below 10000 in 200 tries (pgagroal 1.6.0 needs one)")
}

/// How many backends pgagroal made in `db` (their `application_name` is
/// `pgagroal`), asked within 5 s.
///
/// # Errors
/// The query failed or took over 5 s.
pub(super) async fn backends(admin: &DirectConn, db: &str) -> Result<i64> {
    let row = tokio::time::timeout(
        Duration::from_secs(5),
        admin.client().query_one(
            "select count(*) from pg_stat_activity where datname = $1 and application_name = 'pgagroal'",
            &[&db],
        ),
    )
    .await
    .map_err(|_| anyhow!("counting pgagroal's backends took over 5 s"))??;
    Ok(row.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_four_digit_port_is_below_10000_and_free() {
        let port = free_four_digit_port().unwrap();
        assert!((2000..10000).contains(&port));
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    }
}
