//! A job's gate: the job's handler says it has started and waits until
//! the call lets it finish, so the locks the queue holds while its job
//! runs can be observed from the server. Gates are named by a token the
//! job carries (its input), unique to the call.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use tokio::sync::oneshot;

struct Gate {
    started: Option<oneshot::Sender<()>>,
    release: Option<oneshot::Receiver<()>>,
    runs: u32,
}

static GATES: LazyLock<Mutex<HashMap<String, Gate>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn gates() -> std::sync::MutexGuard<'static, HashMap<String, Gate>> {
    GATES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The call's side of a gate: removed when dropped.
pub(super) struct Opened {
    token: String,
    started: Option<oneshot::Receiver<()>>,
    release: Option<oneshot::Sender<()>>,
}

/// Opens the gate `token` for a job to pass.
pub(super) fn open(token: &str) -> Opened {
    let (started_tx, started_rx) = oneshot::channel();
    let (release_tx, release_rx) = oneshot::channel();
    gates().insert(
        token.to_owned(),
        Gate {
            started: Some(started_tx),
            release: Some(release_rx),
            runs: 0,
        },
    );
    Opened {
        token: token.to_owned(),
        started: Some(started_rx),
        release: Some(release_tx),
    }
}

/// Called by the job's handler: counts the run, says the job has started
/// and waits until the call releases it (a job run again after that
/// passes at once).
pub(super) async fn pass(token: &str) {
    let (started, release) = {
        let mut g = gates();
        match g.get_mut(token) {
            Some(gate) => {
                gate.runs += 1;
                (gate.started.take(), gate.release.take())
            }
            None => (None, None),
        }
    };
    if let Some(tx) = started {
        let _ = tx.send(());
    }
    if let Some(rx) = release {
        let _ = rx.await;
    }
}

impl Opened {
    /// A future that resolves when the job has started (and never, if the
    /// gate's sender is gone without it).
    pub(super) fn started(&mut self) -> impl Future<Output = ()> + use<> {
        let rx = self.started.take();
        async move {
            let ok = match rx {
                Some(rx) => rx.await.is_ok(),
                None => false,
            };
            if !ok {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Lets the job finish.
    pub(super) fn release(&mut self) {
        if let Some(tx) = self.release.take() {
            let _ = tx.send(());
        }
    }

    /// How many times the job's handler ran.
    pub(super) fn runs(&self) -> u32 {
        gates().get(&self.token).map_or(0, |g| g.runs)
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        gates().remove(&self.token);
    }
}
