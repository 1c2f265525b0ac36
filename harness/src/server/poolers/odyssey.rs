//! Odyssey 1.5.2 in a container of the pooler image (Odyssey docs,
//! "Rules"): one `database default` / `user default` route with `pool
//! "session"` or `pool "transaction"`, `pool_size 16` (or a scenario's cap),
//! its reset defaults (`pool_discard yes`, `pool_rollback yes`), clients
//! asked for scram-sha-256, the server's user and password as
//! `storage_user` and `storage_password`. Its admin console is configured
//! too (database `console`, same user and password as the clients; Odyssey
//! docs, "Console"), for its queue: `show clients`, `state` `queue`.
//! Odyssey puts a client in its route's queue while it tries to attach it
//! to a server connection and leaves it there while it waits for one
//! (`od_router_try_attach` in Odyssey's `sources/router.c`; the console's
//! `od_console_show_clients` in `sources/console.c` writes `active`,
//! `pending` or `queue`; a client between transactions is `pending`).

use anyhow::Result;
use locklab_drivers::PoolerMode;

use super::{Product, Queue, SERVER_CONNECTIONS, Setup, Started};

/// Odyssey.
pub(super) struct Odyssey;

impl Product for Odyssey {
    fn container(&self, mode: PoolerMode, at: &Setup<'_>) -> Result<Started> {
        let up = at.up;
        let cap = at.cap.unwrap_or(SERVER_CONNECTIONS);
        let (port, password) = (at.port, at.password);
        let storage_password = match up.password {
            Some(p) => format!("\t\tstorage_password \"{p}\"\n"),
            None => String::new(),
        };
        let conf = format!(
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
            mode = mode.as_str(),
        );
        Ok(Started {
            files: vec![("odyssey.conf", conf)],
            run: "echo \"locklab-version: $(odyssey --version 2>&1 | head -n 1)\"; exec odyssey /tmp/locklab/odyssey.conf"
                .into(),
        })
    }

    fn queue(&self) -> Queue {
        Queue::Console {
            database: "console",
            waiting_state: "queue",
        }
    }
}
