// The broken-fixture tests (harness/tests/validation.rs) are generated from the
// files in tests/fixtures when the tests are compiled (rstest `#[files]`):
// rebuild when that directory changes. (The scenario × driver tests,
// harness/tests/matrix.rs, are generated when they run, from scenarios/ and
// the driver registry: nothing to rebuild for them.)
//
// The tests in harness/tests/container.rs that need Docker are compiled as
// `#[ignore]`d ("ignored, needs Docker", by name, in cargo test's output)
// unless a Docker engine answers `GET /_ping` now: this sets
// `cfg(locklab_docker)` when it does. LOCKLAB_DOCKER_TESTS=0 forces the skip,
// =1 forces the tests on (they then fail clearly without an engine). The
// matrix's container trials decide at run time instead.
//
// Likewise the tests of harness/tests/faults.rs that need a network
// namespace (root) are compiled as `#[ignore]`d ("needs root") unless the
// build runs as root: `cfg(locklab_root)`. LOCKLAB_ROOT_TESTS=0/1 forces it.
// The matrix's fault cells that need one decide at run time.
use std::io::{Read, Write};
use std::time::Duration;

fn main() {
    println!("cargo:rerun-if-changed=tests/fixtures");
    println!("cargo:rerun-if-env-changed=DOCKER_HOST");
    println!("cargo:rerun-if-env-changed=LOCKLAB_DOCKER_TESTS");
    println!("cargo::rustc-check-cfg=cfg(locklab_docker)");
    println!("cargo::rustc-check-cfg=cfg(locklab_root)");
    println!("cargo:rerun-if-env-changed=LOCKLAB_ROOT_TESTS");
    let root = match std::env::var("LOCKLAB_ROOT_TESTS").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => effective_uid() == Some(0),
    };
    if root {
        println!("cargo:rustc-cfg=locklab_root");
    }
    let host = std::env::var("DOCKER_HOST")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    if let Some(path) = host.strip_prefix("unix://") {
        // Re-probe when the engine (re)creates its socket. A missing path would
        // make cargo rerun this script on every build, so watch the directory
        // the socket would appear in instead.
        let p = std::path::Path::new(path);
        match p.parent() {
            // Never `/` (DOCKER_HOST=unix:///x): cargo would walk the whole
            // file system on every build to see whether it changed.
            Some(dir) if !p.exists() && dir.exists() && dir.parent().is_some() => {
                println!("cargo:rerun-if-changed={}", dir.display())
            }
            _ if p.exists() => println!("cargo:rerun-if-changed={path}"),
            _ => {}
        }
    }
    let docker = match std::env::var("LOCKLAB_DOCKER_TESTS").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => ping(&host),
    };
    if docker {
        println!("cargo:rustc-cfg=locklab_docker");
    } else {
        println!(
            "cargo:warning=no Docker engine answered at {host}: the tests of container.rs are compiled as ignored (skipped)"
        );
    }
}

/// The build's effective user id (`/proc/self/status`, line `Uid:`: real,
/// effective, saved, file system).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

fn ping(host: &str) -> bool {
    let timeout = Some(Duration::from_secs(3));
    let request = b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n";
    let mut reply = Vec::new();
    let ok = if let Some(path) = host.strip_prefix("unix://") {
        std::os::unix::net::UnixStream::connect(path).and_then(|mut s| {
            s.set_read_timeout(timeout)?;
            s.write_all(request)?;
            s.take(1024).read_to_end(&mut reply)
        })
    } else if let Some(addr) = host.strip_prefix("tcp://") {
        use std::net::ToSocketAddrs;
        let Some(sock) = addr.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
            return false;
        };
        std::net::TcpStream::connect_timeout(&sock, Duration::from_secs(3)).and_then(|mut s| {
            s.set_read_timeout(timeout)?;
            s.write_all(request)?;
            s.take(1024).read_to_end(&mut reply)
        })
    } else {
        // Like the harness (`server::container::docker_host`): only unix:// and tcp://.
        return false;
    };
    ok.is_ok() && reply.starts_with(b"HTTP/1.") && reply.get(9..12) == Some(b"200")
}
