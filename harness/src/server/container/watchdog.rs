//! The container watchdog: a `sh` process that removes a start's containers
//! once our process is gone, however it ended.

use std::process::{Child, Command, Stdio};

use super::OWNER_LABEL;

/// The last-resort cleanup (POSIX sh + the `docker` command). It waits for
/// end-of-file on its stdin, which comes when our process ends or drops the
/// [`Watchdog`], then force-removes every container labelled with token `$2`
/// on engine `$1`. A create request still in flight when our process died may
/// complete a moment later, so it keeps looking until two listings 2 s apart
/// (at most 10) are empty.
const WATCHDOG: &str = r#"
trap '' INT TERM HUP
read -r _ || true
empty=0
n=0
while [ "$empty" -lt 2 ] && [ "$n" -lt 10 ]; do
  ids=$(docker -H "$1" ps -aq --filter "label=locklab.owner=$2" 2>/dev/null)
  if [ -z "$ids" ]; then
    empty=$((empty+1))
  else
    empty=0
    docker -H "$1" rm -f -v $ids >/dev/null 2>&1
  fi
  n=$((n+1))
  [ "$empty" -ge 2 ] || sleep 2
done
"#;

/// The running container watchdog. Dropping it closes its stdin; it is not
/// waited for (its last listing takes 2 s), and it exits on its own.
pub struct Watchdog(Option<Child>);

impl Watchdog {
    /// `None` (with a warning) when the `docker` command is missing: then a
    /// SIGKILLed run can leave its container behind.
    pub fn start(host: &str, token: &str) -> Option<Watchdog> {
        let has_cli = Command::new("docker")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !has_cli {
            tracing::warn!(
                "the docker command is not installed: if locklab is killed (SIGKILL), its container \
                 (label {OWNER_LABEL}={token}) stays behind"
            );
            return None;
        }
        match super::super::spawn_watchdog(WATCHDOG, "locklab-container-watchdog", &[host.as_ref(), token.as_ref()]) {
            Ok(child) => Some(Watchdog(Some(child))),
            Err(e) => {
                tracing::warn!("cannot start the container cleanup watchdog: {e}");
                None
            }
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            drop(child.stdin.take());
            // Reaped in the background: its last listing takes 2 s.
            let _ = std::thread::Builder::new()
                .name("locklab-watchdog-reaper".into())
                .spawn(move || child.wait());
        }
    }
}
