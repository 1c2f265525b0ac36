//! Pgpool-II 4.6 in a container of the pooler image (Pgpool-II docs,
//! "Configuration", "Connection Pooling"): `backend_clustering_mode = 'raw'`
//! with one backend, `connection_cache = on`, `reset_query_list = 'ABORT;
//! DISCARD ALL'` (its default: run when a client disconnects, before the
//! server connection is cached), `num_init_children = 64` (the most clients
//! at once), `max_pool = 4`, health and replication checks off,
//! `pool_hba.conf` asking every client for scram-sha-256 and `pool_passwd`
//! holding the password as text (Pgpool-II docs, "pool_passwd"). It
//! authenticates to the server with the password its clients give. Its
//! queue is not read (a scenario's cap does not apply: it has no
//! transaction pooling).

use anyhow::Result;
use locklab_drivers::PoolerMode;

use super::{Product, Setup, Started};

/// Pgpool-II.
pub(super) struct Pgpool;

impl Product for Pgpool {
    fn container(&self, _: PoolerMode, at: &Setup<'_>) -> Result<Started> {
        let dir = super::DIR;
        let pcp_port = crate::server::local::free_port()?;
        let conf = format!(
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
            port = at.port,
            host = at.up.host,
            up_port = at.up.port,
        );
        Ok(Started {
            files: vec![
                ("pgpool.conf", conf),
                ("pool_hba.conf", "host all all 127.0.0.1/32 scram-sha-256\n".into()),
                ("pool_passwd", format!("{}:TEXT{}\n", at.up.user, at.password)),
                ("pcp.conf", String::new()),
            ],
            run: "echo \"locklab-version: $(pgpool --version 2>&1 | head -n 1)\"; \
                  exec pgpool -n -f /tmp/locklab/pgpool.conf -a /tmp/locklab/pool_hba.conf -F /tmp/locklab/pcp.conf"
                .into(),
        })
    }

    fn client_password_is_the_servers(&self) -> bool {
        true
    }
}
