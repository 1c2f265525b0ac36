//! Debian 13's PgBouncer (1.24) in a container of the pooler image,
//! configured as Debian 12's ([`super::pgbouncer::config`]), its log on
//! stderr for `docker logs`.

use anyhow::Result;
use locklab_drivers::PoolerMode;

use super::pgbouncer::{CONSOLE_QUEUE, DEFAULT_POOL_SIZE, config};
use super::{Product, Queue, Setup, Started};

/// Debian 13's PgBouncer.
pub(super) struct Trixie;

impl Product for Trixie {
    fn container(&self, mode: PoolerMode, at: &Setup<'_>) -> Result<Started> {
        let up = at.up;
        let quote = |v: &str| format!("'{}'", v.replace('\'', "''"));
        let mut server = format!("host={} port={} user={}", up.host, up.port, quote(up.user));
        if let Some(p) = up.password {
            server.push_str(&format!(" password={}", quote(p)));
        }
        let dir = super::DIR;
        let ini = config(
            &server,
            at.port,
            dir,
            mode,
            at.check_in,
            up.user,
            at.cap.unwrap_or(DEFAULT_POOL_SIZE),
        )
        .replace(&format!("logfile = {dir}/pgbouncer.log\n"), "");
        Ok(Started {
            files: vec![
                ("pgbouncer.ini", ini),
                ("userlist.txt", format!("\"{}\" \"{}\"\n", up.user, at.password)),
            ],
            run: "echo \"locklab-version: $(pgbouncer --version | head -n 1)\"; exec pgbouncer /tmp/locklab/pgbouncer.ini"
                .into(),
        })
    }

    fn queue(&self) -> Queue {
        CONSOLE_QUEUE
    }
}
