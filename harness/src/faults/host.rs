//! `locklab pool-adapter ID`: the pools of Rust driver `ID` in a process of
//! their own, served over the driver protocol (`locklab_drivers::external::serve`),
//! for scenarios whose pool a `do: crash` step kills with SIGKILL
//! (`pool.process: child`). Like a child connection, it asks the kernel for
//! SIGKILL should the harness die first (`PR_SET_PDEATHSIG`), and it ends
//! when its stdin closes.

use std::process::ExitCode;

pub use locklab_drivers::external::HOST_COMMAND as COMMAND;

/// Serves the driver named by the argument after [`COMMAND`]; exit code 2
/// for a missing or unknown driver id.
pub fn host_main() -> ExitCode {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    // The harness died before the request for SIGKILL took effect: orphaned
    // (adopted by init), nobody to serve.
    if nix::unistd::getppid() == nix::unistd::Pid::from_raw(1) {
        return ExitCode::from(2);
    }
    let Some(id) = std::env::args().nth(2) else {
        eprintln!("usage: locklab {COMMAND} DRIVER_ID");
        return ExitCode::from(2);
    };
    let driver = match locklab_drivers::find(&id) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("locklab {COMMAND}: {e}");
            return ExitCode::from(2);
        }
    };
    locklab_drivers::try_kit::serve_blocking(driver, &format!("locklab {COMMAND}"))
}
