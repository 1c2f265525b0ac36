//! Each containerised pooler's configuration files and start-up script
//! ([`setup`]), for [`super::poolers`].
//!
//! Configurations (each product's docs, "Configuration"):
//! - PgBouncer: as Debian 12's ([`super::pgbouncer::config`]).
//! - Pgpool-II: `backend_clustering_mode = 'raw'` with one backend,
//!   `connection_cache = on`, `reset_query_list = 'ABORT; DISCARD ALL'` (its
//!   default: run when a client disconnects, before the server connection is
//!   cached), `num_init_children = 64` (the most clients at once),
//!   `max_pool = 4`, health and replication checks off, `pool_hba.conf`
//!   asking every client for scram-sha-256 and `pool_passwd` holding the
//!   password as text (Pgpool-II docs, "pool_passwd").
//! - pgagroal 1.6.0: listening on a free four-digit port, the server
//!   reached through socat on another (see [`PoolerKind::Pgagroal`]),
//!   `max_connections = 16`, `idle_timeout = 0`, `validation = off`,
//!   `blocking_timeout = 0` (a client waits for a server connection as long
//!   as it takes), `pgagroal_hba.conf` asking every client for
//!   scram-sha-256, a users file made at start with `pgagroal-admin` (its
//!   master key in the container's home) holding the server's password
//!   (pgagroal authenticates to the server with it), and a limits file
//!   naming the cell's database with 16 server connections made at start
//!   (an instance per cell: see [`PoolerKind::Pgagroal`]). Session pipeline:
//!   `DISCARD ALL` when a client disconnects (pgagroal docs, "Pipelines").
//!   Transaction pipeline: `allow_unknown_users = off`, as it requires (its
//!   configuration check).
//! - Odyssey 1.5.2: one `database default` / `user default` route with
//!   `pool "session"` or `pool "transaction"`, `pool_size 16`, its reset
//!   defaults (`pool_discard yes`, `pool_rollback yes`), clients asked for
//!   scram-sha-256, the server's user and password as `storage_user` and
//!   `storage_password` (Odyssey docs, "Rules").

use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use locklab_drivers::DirectConn;
use locklab_drivers::{Pooler, PoolerKind, PoolerMode};

use super::pgbouncer::Upstream;

/// What a pooler's log says when its port was taken: the system's message
/// (PgBouncer, Pgpool-II, Odyssey, socat), or pgagroal's own.
const PORT_TAKEN: [&str; 2] = ["Address already in use", "Could not bind to 127.0.0.1:"];

/// The line of `log` that says a port was taken ([`PORT_TAKEN`]), if one does.
pub(super) fn port_taken(log: &str) -> Option<&str> {
    log.lines()
        .find(|l| PORT_TAKEN.iter().any(|m| l.contains(m)))
        .map(str::trim)
}

/// How many server connections pgagroal and Odyssey may hold (pgagroal's
/// `max_connections`, and in its transaction pipeline the connections made
/// at start for the cell's database; Odyssey's `pool_size`).
pub(super) const SERVER_CONNECTIONS: u32 = 16;

/// A loopback port below 10000 that was free a moment ago, for pgagroal
/// 1.6.0 (see [`PoolerKind::Pgagroal`]): tried at random in 2000..10000 (ports
/// below are often taken by well-known services), the first that binds.
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

/// `PgBouncer 1.24.1`, `Pgpool-II 4.6.1`, `pgagroal 1.6.0` or `Odyssey
/// 1.5.2` from the first line the binary prints for `--version`.
pub(super) fn product_version(line: &str) -> String {
    let line = line.trim();
    let first_word = |rest: &str| rest.split_whitespace().next().unwrap_or(rest).to_owned();
    // `pgpool-II version 4.6.1 (chirikoboshi)`
    if let Some(rest) = line.strip_prefix("pgpool-II version ") {
        return format!("Pgpool-II {}", first_word(rest));
    }
    // `odyssey 1.5.2 release +pam -ldap +systemd -prom`
    if let Some(rest) = line.strip_prefix("odyssey ") {
        return format!("Odyssey {}", first_word(rest));
    }
    line.to_owned()
}

/// The container's start-up script and its environment: the script writes
/// each `LOCKLAB_FILE_<NAME>` variable into `/tmp/locklab/<name>`, prints
/// `locklab-version: …`, and runs the pooler in the foreground. `database`:
/// the one database an instance per database serves.
///
/// `server_connections`: how many server connections it may hold
/// ([`SERVER_CONNECTIONS`], or a scenario's cap): PgBouncer's
/// `default_pool_size` (else [`super::pgbouncer::DEFAULT_POOL_SIZE`]),
/// pgagroal's `max_connections` and limits file, Odyssey's `pool_size`.
/// Odyssey's admin console is configured too (database `console`, same
/// user and password as the clients; Odyssey docs, "Console"), for
/// [`super::pooler_queue`].
pub(super) fn setup(
    pooler: Pooler,
    up: &Upstream<'_>,
    port: u16,
    password: &str,
    database: Option<&str>,
    server_connections: Option<u32>,
) -> Result<(String, Vec<String>)> {
    let cap = server_connections.unwrap_or(SERVER_CONNECTIONS);
    if [up.user, up.password.unwrap_or_default()]
        .iter()
        .any(|v| v.contains(['\n', '\r', '"', '\'', ':']))
    {
        bail!(
            "the server's user name or password contains a newline, quote or ':', which the pooler's files cannot hold"
        );
    }
    let dir = "/tmp/locklab";
    let mut files: Vec<(&str, String)> = Vec::new();
    let pgagroal_run;
    let run = match pooler.kind {
        PoolerKind::PgBouncer | PoolerKind::PgBouncerTrixie => {
            let quote = |v: &str| format!("'{}'", v.replace('\'', "''"));
            let mut server = format!("host={} port={} user={}", up.host, up.port, quote(up.user));
            if let Some(p) = up.password {
                server.push_str(&format!(" password={}", quote(p)));
            }
            files.push((
                "pgbouncer.ini",
                // Its log on stderr, for `docker logs`.
                super::pgbouncer::config(
                    &server,
                    port,
                    dir,
                    pooler.mode,
                    up.user,
                    server_connections.unwrap_or(super::pgbouncer::DEFAULT_POOL_SIZE),
                )
                .replace(&format!("logfile = {dir}/pgbouncer.log\n"), ""),
            ));
            files.push(("userlist.txt", format!("\"{}\" \"{password}\"\n", up.user)));
            "echo \"locklab-version: $(pgbouncer --version | head -n 1)\"; exec pgbouncer /tmp/locklab/pgbouncer.ini"
        }
        PoolerKind::Pgpool => {
            let pcp_port = super::local::free_port()?;
            files.push((
                "pgpool.conf",
                format!(
                    "backend_clustering_mode = 'raw'\n\
                     listen_addresses = '127.0.0.1'\n\
                     port = {port}\n\
                     unix_socket_directories = '{dir}'\n\
                     pcp_listen_addresses = ''\n\
                     pcp_port = {pcp_port}\n\
                     pcp_socket_dir = '{dir}'\n\
                     backend_hostname0 = '{host}'\n\
                     backend_port0 = {up_port}\n\
                     backend_weight0 = 1\n\
                     backend_flag0 = 'DISALLOW_TO_FAILOVER'\n\
                     num_init_children = 64\n\
                     max_pool = 4\n\
                     connection_cache = on\n\
                     reset_query_list = 'ABORT; DISCARD ALL'\n\
                     enable_pool_hba = on\n\
                     pool_passwd = '{dir}/pool_passwd'\n\
                     health_check_period = 0\n\
                     sr_check_period = 0\n\
                     load_balance_mode = off\n\
                     failover_on_backend_error = off\n\
                     logdir = '{dir}'\n\
                     pid_file_name = '{dir}/pgpool.pid'\n\
                     log_destination = 'stderr'\n",
                    host = up.host,
                    up_port = up.port,
                ),
            ));
            files.push(("pool_hba.conf", "host all all 127.0.0.1/32 scram-sha-256\n".into()));
            files.push(("pool_passwd", format!("{}:TEXT{password}\n", up.user)));
            files.push(("pcp.conf", String::new()));
            "echo \"locklab-version: $(pgpool --version 2>&1 | head -n 1)\"; \
             exec pgpool -n -f /tmp/locklab/pgpool.conf -a /tmp/locklab/pool_hba.conf -F /tmp/locklab/pcp.conf"
        }
        PoolerKind::Pgagroal => {
            // The server through a four-digit port (`PoolerKind::Pgagroal`);
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
            let transaction = pooler.mode == PoolerMode::Transaction;
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
                    pipeline = pooler.mode.as_str(),
                    unknown = if transaction { "allow_unknown_users = off\n" } else { "" },
                    host = if forward.is_empty() { up.host } else { "127.0.0.1" },
                ),
            ));
            files.push(("pgagroal_hba.conf", "host all all all scram-sha-256\n".into()));
            let mut args = String::from("-c /tmp/locklab/pgagroal.conf -a /tmp/locklab/pgagroal_hba.conf");
            {
                let Some(db) = database else {
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
                args.push_str(" -l /tmp/locklab/pgagroal_databases.conf");
            }
            // The users file: its password is the client's and the server's,
            // given to pgagroal-admin on its standard input (not on a command
            // line). The master key that encrypts it goes to ~/.pgagroal.
            files.push(("password", password.to_owned()));
            pgagroal_run = format!(
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
            &pgagroal_run
        }
        PoolerKind::Odyssey => {
            let storage_password = match up.password {
                Some(p) => format!("\t\tstorage_password \"{p}\"\n"),
                None => String::new(),
            };
            files.push((
                "odyssey.conf",
                format!(
                    "daemonize no\n\
                     log_to_stdout yes\n\
                     log_format \"%p %t %l [%i %s] (%c) %m\\n\"\n\
                     workers 2\n\
                     listen {{\n\thost \"127.0.0.1\"\n\tport {port}\n}}\n\
                     storage \"server\" {{\n\ttype \"remote\"\n\thost \"{host}\"\n\tport {up_port}\n}}\n\
                     database default {{\n\tuser default {{\n\
                     \t\tauthentication \"scram-sha-256\"\n\
                     \t\tpassword \"{password}\"\n\
                     \t\tstorage \"server\"\n\
                     \t\tstorage_user \"{user}\"\n\
                     {storage_password}\
                     \t\tpool \"{mode}\"\n\
                     \t\tpool_size {cap}\n\
                     \t}}\n}}\n\
                     storage \"local\" {{\n\ttype \"local\"\n}}\n\
                     database \"console\" {{\n\tuser \"{user}\" {{\n\
                     \t\tauthentication \"scram-sha-256\"\n\
                     \t\tpassword \"{password}\"\n\
                     \t\trole \"admin\"\n\
                     \t\tpool \"session\"\n\
                     \t\tstorage \"local\"\n\
                     \t}}\n}}\n",
                    host = up.host,
                    up_port = up.port,
                    user = up.user,
                    mode = pooler.mode.as_str(),
                ),
            ));
            "echo \"locklab-version: $(odyssey --version 2>&1 | head -n 1)\"; exec odyssey /tmp/locklab/odyssey.conf"
        }
        PoolerKind::External => bail!("a pooler of your own is not started by locklab"),
    };
    let mut env = Vec::new();
    let mut script = format!("set -e; umask 077; mkdir -p {dir}; ");
    for (i, (name, text)) in files.iter().enumerate() {
        env.push(format!("LOCKLAB_FILE_{i}={text}"));
        script.push_str(&format!(
            "printf '%s' \"$LOCKLAB_FILE_{i}\" > {dir}/{name}; unset LOCKLAB_FILE_{i}; "
        ));
    }
    script.push_str(run);
    Ok((script, env))
}

/// A connection to the server behind the pooler (its admin database), for
/// watching a pooler start.
///
/// # Errors
/// It cannot connect within 10 s.
pub(super) async fn server_connection(up: &Upstream<'_>) -> Result<DirectConn> {
    let server = locklab_drivers::ConnectSpec {
        host: up.host.to_owned(),
        port: up.port,
        user: up.user.to_owned(),
        password: up.password.map(str::to_owned),
        dbname: up.admin_db.to_owned(),
        application_name: "locklab-ready".into(),
        options: Vec::new(),
    };
    tokio::time::timeout(Duration::from_secs(10), DirectConn::connect(&server))
        .await
        .map_err(|_| anyhow!("connecting to the server took over 10 s"))?
        .map_err(anyhow::Error::from)
}

/// How many backends pgagroal made in `db` (their `application_name` is
/// `pgagroal`), asked within 5 s.
///
/// # Errors
/// The query failed or took over 5 s.
pub(super) async fn pgagroal_backends(admin: &DirectConn, db: &str) -> Result<i64> {
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
    fn versions_read_as_product_and_number() {
        for (line, want) in [
            ("PgBouncer 1.24.1", "PgBouncer 1.24.1"),
            ("pgpool-II version 4.6.1 (chirikoboshi)", "Pgpool-II 4.6.1"),
            ("pgagroal 1.6.0", "pgagroal 1.6.0"),
            ("odyssey 1.5.2 release +pam -ldap +systemd -prom", "Odyssey 1.5.2"),
        ] {
            assert_eq!(product_version(line), want);
        }
    }

    #[test]
    fn a_taken_port_is_recognised_in_each_poolers_words() {
        let socat = "socat[12] E bind(5, {AF=2 127.0.0.1:4321}, 16): Address already in use";
        assert_eq!(port_taken(&format!("started\n{socat}\n")), Some(socat));
        let pgagroal = "FATAL main.c:924 pgagroal: Could not bind to 127.0.0.1:4321";
        assert_eq!(port_taken(pgagroal), Some(pgagroal));
        assert_eq!(port_taken("pgagroal: 1.6.0 started on 127.0.0.1:4321"), None);
    }

    #[test]
    fn a_four_digit_port_is_below_10000_and_free() {
        let port = free_four_digit_port().unwrap();
        assert!((2000..10000).contains(&port));
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    }
}
