//! The harness under faults (docs/src/faults-and-races.md): a server that dies (its
//! postmaster or its container killed) in the
//! middle of a matrix fails the cells in flight and after it with a message
//! that says so, nothing hangs, and nothing is left; a run with crashed
//! children, a crashed pool, cut connections and a restarted cluster of its
//! own leaves no child process, pool adapter, network namespace, veth pair
//! or cluster behind. Waiting is bounded; the server and the
//! kernel are observed, never slept on.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use locklab::scenario::{self, Scenario};
use locklab::server::{BackendChoice, Server, ServerOptions};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn shipped(names: &[&str]) -> Vec<Scenario> {
    let dir = common::root().join("scenarios");
    names
        .iter()
        .flat_map(|n| scenario::load_file(&dir.join(format!("{n}.yaml"))).unwrap_or_else(|e| panic!("{e:?}")))
        .collect()
}

/// Runs twelve cells two at a time on `server`, calls `kill` after the
/// third, and checks that the cells after it fail saying the server is gone,
/// within a bound, and that the cells before it passed.
fn matrix_outlives_its_server(server: Server, kill: impl FnOnce(&Server)) {
    let scenarios = shipped(&[
        "xact-lock-competition",
        "session-released-by-unlock",
        "reentrant-xact-lock",
    ]);
    let drivers: Vec<_> = ["tokio-postgres", "deadpool-fast", "bb8", "sqlx"]
        .iter()
        .map(|d| locklab_drivers::find(d).unwrap())
        .collect();
    let servers = [server];
    let mut kill = Some(kill);
    let mut done = 0;
    let began = Instant::now();
    let results = common::block_on_multi(locklab::matrix::run_all(
        &servers,
        &scenarios,
        &drivers,
        2,
        1,
        |_, _| {
            done += 1;
            if done == 3
                && let Some(k) = kill.take()
            {
                k(&servers[0]);
            }
        },
    ));
    let took = began.elapsed();
    assert_eq!(results.len(), scenarios.len() * drivers.len());
    assert!(
        took < Duration::from_secs(120),
        "the matrix took {took:?} after the server died"
    );
    let failed: Vec<&str> = results.iter().filter_map(|r| r.failure.as_deref()).collect();
    // Two cells run at a time and the kill comes after the third: at least
    // the last of the twelve cells starts after it.
    assert!(!failed.is_empty(), "no cell failed after the server was killed");
    for f in &failed {
        assert!(
            f.contains("the server does not answer any more") || f.contains("cannot connect to the server"),
            "a failed cell does not say the server is gone: {f}"
        );
    }
    assert!(
        results.iter().filter(|r| r.passed()).count() >= 2,
        "the cells before the kill passed"
    );
}

#[test]
fn the_server_dying_mid_matrix_fails_the_cells_that_follow_and_nothing_hangs_or_remains() {
    let server = Server::start(&ServerOptions::new(BackendChoice::Local, 17)).unwrap();
    let postmaster = server.postmaster_pid().unwrap();
    let dir = server.data_dir().unwrap().to_path_buf();
    // SIGKILL: no shutdown, the backends are orphaned.
    matrix_outlives_its_server(server, |_| {
        kill(Pid::from_raw(postmaster as i32), Signal::SIGKILL).unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while dir.exists() {
        assert!(
            Instant::now() < deadline,
            "{} still exists 30 s after the drop",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[cfg_attr(
    not(locklab_docker),
    ignore = "needs Docker: no Docker engine answered when the tests were built"
)]
fn a_container_killed_mid_matrix_fails_the_cells_that_follow_and_nothing_remains() {
    let server = Server::start(&ServerOptions::new(BackendChoice::Container, 17)).unwrap();
    let id = server.container_id().unwrap().to_owned();
    matrix_outlives_its_server(server, |_| {
        let out = Command::new("docker").args(["kill", &id]).output().unwrap();
        assert!(
            out.status.success(),
            "docker kill: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    // Dropped with the matrix: the killed container is removed too.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new("docker")
            .args(["ps", "-aq", "--no-trunc", "--filter", &format!("id={id}")])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stdout).trim().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "container {id} still exists 30 s after the drop"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `ip netns list` and `ip -o link` mention `needle`.
fn network_mentions(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for args in [&["netns", "list"][..], &["-o", "link"][..]] {
        let o = Command::new("ip").args(args).output().unwrap();
        out.extend(
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.contains(needle))
                .map(str::to_owned),
        );
    }
    out
}

#[test]
#[cfg_attr(
    not(locklab_root),
    ignore = "needs root (a network namespace): as root, `cargo test -p locklab --test faults -- --ignored a_run_of_crashes` runs it"
)]
fn a_run_of_crashes_partitions_and_restarts_leaves_no_child_adapter_namespace_or_cluster() {
    if let Some(why) = locklab::faults::netns::unavailable() {
        panic!("this test {why}; it is compiled as ignored unless the build runs as root (LOCKLAB_ROOT_TESTS=0/1)");
    }
    let child = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args([
            "run",
            "--backend",
            "local",
            "-d",
            "tokio-postgres",
            "-s",
            "crash-holder-mid-statement[check=250ms]",
            "-s",
            "partition-session-holder[case=idle-session-timeout-2s]",
            "-s",
            "restart-under-pool[mode=immediate]",
            "-s",
            "crash-pooled-holder[lock=pg_advisory_xact_lock]",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("4 passed"), "{stdout}");
    // Removed by their watchdogs once the process is gone.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let net = network_mentions(&format!("{pid}"))
            .into_iter()
            .filter(|l| l.contains("locklab-net-") || l.contains("llh"))
            .collect::<Vec<_>>();
        let clusters: Vec<_> = std::fs::read_dir(locklab::server::local::cluster_parent())
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&format!("locklab-pg-{pid}-")))
                    .collect()
            })
            .unwrap_or_default();
        let children: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| {
                c.contains(&format!("locklab {}", locklab::faults::child::COMMAND))
                    || c.contains(&format!("locklab {}", locklab::faults::host::COMMAND))
            })
            .collect();
        if net.is_empty() && clusters.is_empty() && children.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "30 s after the run: network {net:?}, clusters {clusters:?}, children {children:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Processes whose parent is this test process and whose command line
/// contains `needle`.
fn children_running(needle: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|st| {
                    st.rsplit(')')
                        .next()
                        .map(|r| r.split_whitespace().nth(1) == Some(me.as_str()))
                })
                .unwrap_or(false)
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(needle))
        .collect()
}

#[test]
fn a_pool_in_a_process_of_its_own_ends_with_its_cell_crashed_or_not() {
    // In this process (not a `locklab` child, whose end would take its
    // adapters with it): each cell's pool adapter must be gone when the
    // cell is over, not only when the harness exits.
    let server = Server::start(&ServerOptions::new(BackendChoice::Local, 17)).unwrap();
    let mut crashed = shipped(&["crash-pooled-holder"]);
    // The same pool hosted without a crash: closed with the cell.
    let mut closed = shipped(&["session-lock-pool-return"]);
    closed[0].pool_process = scenario::Process::Child;
    crashed.truncate(1);
    let needle = format!("locklab {}", locklab::faults::host::COMMAND);
    for s in crashed.iter().chain(&closed) {
        for d in ["deadpool-fast", "sqlx"] {
            let driver = locklab_drivers::find(d).unwrap();
            let r = common::block_on_multi(locklab::runner::run(&server, s, driver.as_ref()));
            assert!(r.passed(), "{} × {d}: {:?}", s.name, r.failure);
            let left = children_running(&needle);
            assert!(left.is_empty(), "after {} × {d}: {left:?}", s.name);
        }
    }
}
