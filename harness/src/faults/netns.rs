//! A network namespace of the run's own, for `network: namespace` actors and
//! `do: partition` / `do: heal` (docs/src/faults-and-races.md).
//!
//! Created on first use, once per process (needs root and `ip` and `nft`):
//! namespace `locklab-net-<pid>`, joined to the host by a veth pair
//! `llh<pid>` (host side, [`Namespace::host_addr`]) and `lln<pid>` (inside,
//! [`Namespace::peer_addr`]), a /30 of 10.213.0.0/16. Inside the namespace an
//! nftables table `inet locklab` drops, on input and output, TCP packets
//! whose local port is in its set `cut`: a partition adds the connection's
//! local port to the set, a heal removes it. Packets just stop: neither
//! kernel sends FIN or RST, as with a cut cable (a userspace proxy could not
//! do that: its kernel would keep acknowledging the server's data and
//! keepalive probes).
//!
//! A connection is made from inside the namespace by a thread that enters
//! it (`setns(2)`) and creates the socket there; the socket stays in the
//! namespace for its life, whatever thread uses it afterwards.
//!
//! Removal: a watchdog (`sh`, [`crate::server`]'s kind) holds a pipe from
//! this process and deletes the namespace (which deletes the veth pair)
//! once the pipe closes: when the process ends, however it ends.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The run's namespace.
pub struct Namespace {
    name: String,
    host: Ipv4Addr,
    peer: Ipv4Addr,
    /// Holds the watchdog's stdin: closing it removes the namespace.
    _watchdog: Mutex<std::process::Child>,
}

/// Removes the namespace and the veth pair at end of input (see module docs).
const WATCHDOG: &str = r#"
trap '' INT TERM HUP
read -r _ || true
ip netns del "$1" 2>/dev/null
ip link del "$2" 2>/dev/null
exit 0
"#;

/// The prefix of every namespace this harness creates (`.ci/run` checks
/// that none is left).
pub const NAME_PREFIX: &str = "locklab-net-";

/// Why this machine cannot make the run's namespace, if it cannot: not
/// root, or no `ip`, `nft` or `ss` on the `PATH` (Debian: `iproute2`,
/// `nftables`). Cells that need one are then not applicable.
pub fn unavailable() -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("needs root (a network namespace and a veth pair)".into());
    }
    for tool in ["ip", "nft", "ss"] {
        let found =
            std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(tool).is_file()));
        if !found {
            return Some(format!("needs `{tool}` (Debian's iproute2 and nftables)"));
        }
    }
    None
}

impl Namespace {
    /// The process's namespace, created on first call (blocking: it runs
    /// `ip` and `nft` a dozen times; [`crate::faults::server::for_major`]
    /// makes it off the runtime's threads).
    ///
    /// # Errors
    /// Not root, `ip` or `nft` missing or failing (their message).
    pub fn get() -> Result<&'static Namespace, String> {
        static NS: OnceLock<Result<Namespace, String>> = OnceLock::new();
        NS.get_or_init(Namespace::create).as_ref().map_err(Clone::clone)
    }

    fn create() -> Result<Namespace, String> {
        if !nix::unistd::Uid::effective().is_root() {
            return Err(
                "a 'network: namespace' actor needs root (to create a network namespace and a veth pair)".into(),
            );
        }
        let pid = std::process::id();
        let name = format!("{NAME_PREFIX}{pid}");
        let host_if = format!("llh{pid}");
        let peer_if = format!("lln{pid}");
        let watchdog =
            crate::server::spawn_watchdog(WATCHDOG, "locklab-net-watchdog", &[name.as_ref(), host_if.as_ref()])
                .map_err(|e| format!("cannot start the namespace's watchdog (sh): {e}"))?;
        // A /30 per process; another process's (a concurrent test binary)
        // address on the host makes us try the next.
        let taken = run(&["ip", "-o", "-4", "addr", "show"]).unwrap_or_default();
        let mut index = pid % 16_384;
        let (host, peer) = loop {
            let base = 0x0AD5_0000u32 + index * 4;
            let host = Ipv4Addr::from(base + 1);
            if !taken.contains(&format!(" {host}/")) {
                break (host, Ipv4Addr::from(base + 2));
            }
            index = (index + 1) % 16_384;
        };
        let ns = Namespace {
            name: name.clone(),
            host,
            peer,
            _watchdog: Mutex::new(watchdog),
        };
        let steps: Vec<Vec<String>> = [
            format!("ip netns add {name}"),
            format!("ip link add {host_if} type veth peer name {peer_if} netns {name}"),
            format!("ip addr add {host}/30 dev {host_if}"),
            format!("ip link set {host_if} up"),
            format!("ip -n {name} addr add {peer}/30 dev {peer_if}"),
            format!("ip -n {name} link set {peer_if} up"),
            format!("ip -n {name} link set lo up"),
            format!("ip netns exec {name} nft add table inet locklab"),
            format!("ip netns exec {name} nft add set inet locklab cut {{ type inet_service ; }}"),
            format!(
                "ip netns exec {name} nft add chain inet locklab out {{ type filter hook output priority 0 ; policy accept ; }}"
            ),
            format!(
                "ip netns exec {name} nft add chain inet locklab in {{ type filter hook input priority 0 ; policy accept ; }}"
            ),
            format!("ip netns exec {name} nft add rule inet locklab out tcp sport @cut drop"),
            format!("ip netns exec {name} nft add rule inet locklab in tcp dport @cut drop"),
        ]
        .iter()
        .map(|s| s.split(' ').map(str::to_owned).collect())
        .collect();
        for step in &steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            run(&args).map_err(|e| format!("cannot set up the run's network namespace: {e}"))?;
        }
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host side's address: the server must listen on it.
    pub fn host_addr(&self) -> Ipv4Addr {
        self.host
    }

    /// The namespace side's address: connections come from it.
    pub fn peer_addr(&self) -> Ipv4Addr {
        self.peer
    }

    /// Opens a TCP connection to `host_addr:port` from inside the namespace
    /// (within `timeout`), as a tokio stream.
    ///
    /// # Errors
    /// The namespace cannot be entered, or the connection fails.
    pub async fn connect(&self, port: u16, timeout: Duration) -> Result<tokio::net::TcpStream, String> {
        let path = format!("/run/netns/{}", self.name);
        let to = SocketAddr::V4(SocketAddrV4::new(self.host, port));
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A thread of its own: entering a namespace is for the rest of the
        // thread's life, so not a pooled one.
        std::thread::spawn(move || {
            let made = (|| {
                let file = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
                nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(|e| format!("cannot enter {path}: {e}"))?;
                let s = std::net::TcpStream::connect_timeout(&to, timeout).map_err(|e| format!("{to}: {e}"))?;
                s.set_nonblocking(true).map_err(|e| e.to_string())?;
                Ok::<_, String>(s)
            })();
            let _ = tx.send(made);
        });
        let std_stream = rx.await.map_err(|_| "the connecting thread ended".to_owned())??;
        let _ = std_stream.set_nodelay(true);
        tokio::net::TcpStream::from_std(std_stream).map_err(|e| e.to_string())
    }

    /// Waits (polling `ss`, at most `within`) until the host side of the
    /// connection from namespace port `port` to server port `server_port`
    /// has no unacknowledged data: the client's delayed ACK (up to 40 ms on
    /// Linux) of the last result has arrived. A cut before that leaves data
    /// in flight, and the server's retransmission timeout (or
    /// `tcp_user_timeout`) applies instead of keepalives; a partition of an
    /// idle connection waits for this first, so that which of them applies
    /// does not depend on timing. Returns whether it was so within `within`.
    ///
    /// # Errors
    /// `ss` failed, or shows no such connection.
    pub async fn wait_acknowledged(&self, port: u16, server_port: u16, within: Duration) -> Result<bool, String> {
        let until = std::time::Instant::now() + within;
        let filter = format!("( sport = :{server_port} and dport = :{port} )");
        loop {
            let out = run_async(&["ss", "-Htn", "state", "established", &filter]).await?;
            let send_q = out
                .lines()
                .find(|l| l.contains(&self.peer.to_string()))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|q| q.parse::<u64>().ok())
                .ok_or_else(|| {
                    format!(
                        "`ss` shows no connection from {}:{port} to port {server_port}",
                        self.peer
                    )
                })?;
            if send_q == 0 {
                return Ok(true);
            }
            if std::time::Instant::now() >= until {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Drops the packets of the connection with local port `port` (its end in
    /// the namespace), in both directions.
    ///
    /// # Errors
    /// `nft` failed.
    pub async fn cut(&self, port: u16) -> Result<(), String> {
        self.set_element("add", port).await
    }

    /// Stops dropping them.
    ///
    /// # Errors
    /// `nft` failed.
    pub async fn heal(&self, port: u16) -> Result<(), String> {
        self.set_element("delete", port).await
    }

    async fn set_element(&self, verb: &str, port: u16) -> Result<(), String> {
        let elem = format!("{{ {port} }}");
        run_async(&[
            "ip", "netns", "exec", &self.name, "nft", verb, "element", "inet", "locklab", "cut", &elem,
        ])
        .await
        .map(|_| ())
    }
}

/// [`run`] without blocking the runtime's thread.
async fn run_async(args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new(args[0]).args(&args[1..]).output().await;
    stdout_of(args, out)
}

/// Runs a command; its stdout, or its stderr as the error.
fn run(args: &[&str]) -> Result<String, String> {
    stdout_of(args, Command::new(args[0]).args(&args[1..]).output())
}

/// The stdout of command `args` that ended as `out`; else why not.
fn stdout_of(args: &[&str], out: std::io::Result<std::process::Output>) -> Result<String, String> {
    let out = out.map_err(|e| format!("cannot run {}: {e}", args[0]))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
