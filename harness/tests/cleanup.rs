//! Nothing the harness starts outlives it: the `locklab` binary is run as a
//! child process and stopped normally, by SIGINT, by SIGTERM and by SIGKILL
//! (no destructor runs at all); afterwards its cluster directory and its
//! postmaster must be gone. Waiting is done by watching the file system and
//! the process table, with a deadline.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rstest::rstest;

/// Starts `locklab run` and reads its stderr until the local cluster is up.
fn start() -> (Child, PathBuf, i32, std::thread::JoinHandle<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_locklab"))
        .args(["run", "--scenario", "lock-timeout-200ms"])
        .env_remove("LOCKLAB_DSN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("locklab binary");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if let Some(rest) = line.split_once("(local cluster in ").map(|(_, r)| r) {
            let (dir, pid) = rest.trim_end_matches(')').split_once(", postmaster pid ").unwrap();
            // Keep draining stderr so the child never blocks on a full pipe.
            let drain = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"));
            return (child, PathBuf::from(dir), pid.parse().unwrap(), drain);
        }
    }
    let _ = child.kill();
    let status = child.wait();
    panic!("locklab exited ({status:?}) before its server was ready:\n{seen}");
}

fn alive(pid: i32) -> bool {
    // Signal 0 checks existence; a zombie no one has reaped yet is not "running"
    // as far as /proc/<pid>/stat is concerned.
    kill(Pid::from_raw(pid), None).is_ok()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.split_whitespace().nth(2).is_none_or(|st| st != "Z"))
}

fn wait_until_gone(dir: &Path, pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while dir.exists() || alive(pid) {
        assert!(
            Instant::now() < deadline,
            "after 30 s: dir exists = {}, postmaster {pid} alive = {}",
            dir.exists(),
            alive(pid)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_normal_run_removes_its_cluster_before_exiting() {
    let (mut child, dir, pid, drain) = start();
    assert!(dir.exists() && alive(pid));
    let status = child.wait().unwrap();
    let log = drain.join().unwrap();
    assert!(status.success(), "locklab run failed: {log}");
    // Drop stopped the postmaster and removed the directory before exit.
    assert!(!dir.exists(), "{} left behind", dir.display());
    wait_until_gone(&dir, pid);
}

#[rstest]
#[case::sigint(Signal::SIGINT)]
#[case::sigterm(Signal::SIGTERM)]
#[case::sigkill(Signal::SIGKILL)]
fn a_signalled_run_leaves_no_server_behind(#[case] signal: Signal) {
    let (mut child, dir, pid, _drain) = start();
    assert!(dir.exists() && alive(pid));
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());
    wait_until_gone(&dir, pid);
}
