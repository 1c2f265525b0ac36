//! A job queue's process: a thread and a Tokio runtime of its own, with
//! its own pool, so that to the server and to a pooler it is a process of
//! its own. It says when it has started (the queue's worker runs its job,
//! its scheduler holds its lock, …), then runs until it is stopped (the
//! queue's own shutdown) or killed (its runtime dropped with everything in
//! flight: its sockets close with no Terminate message and no `ROLLBACK`,
//! as the kernel closes a killed process's).

use std::future::Future;
use std::time::Duration;

use tokio::sync::oneshot;

/// How long a process may take to stop by the queue's own shutdown: a
/// bound, past which it is killed and the reading says so.
const STOP_BOUND: Duration = Duration::from_secs(15);

/// What a process's body is given: where to say it has started, and the
/// stop request to wait for.
pub(super) struct Life {
    started: Option<oneshot::Sender<String>>,
    /// Resolves when the process is asked to stop (the queue's shutdown).
    pub(super) stop: oneshot::Receiver<()>,
}

impl Life {
    /// Says the process has started, in a word (`running`, `registered`,
    /// `not acquired`, …); later calls are ignored.
    pub(super) fn started(&mut self, word: impl Into<String>) {
        if let Some(tx) = self.started.take() {
            let _ = tx.send(word.into());
        }
    }
}

/// A running process (see the module's docs).
pub(super) struct Process {
    started: Option<oneshot::Receiver<String>>,
    stop: Option<oneshot::Sender<()>>,
    kill: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<String>>,
}

impl Process {
    /// Starts `body` in a process of its own; the body returns its last
    /// word (`done`, `stopped`, an error's text).
    pub(super) fn spawn<F, Fut>(body: F) -> Process
    where
        F: FnOnce(Life) -> Fut + Send + 'static,
        Fut: Future<Output = String>,
    {
        let (started_tx, started_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        let (kill_tx, kill_rx) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => return format!("failed (runtime: {e})"),
            };
            let life = Life {
                started: Some(started_tx),
                stop: stop_rx,
            };
            let word = rt.block_on(async move {
                tokio::select! {
                    word = body(life) => word,
                    _ = kill_rx => "killed".to_owned(),
                }
            });
            // Dropping the runtime drops every task still holding a
            // connection: their sockets close with nothing more sent.
            rt.shutdown_background();
            word
        });
        Process {
            started: Some(started_rx),
            stop: Some(stop_tx),
            kill: Some(kill_tx),
            thread: Some(thread),
        }
    }

    /// Waits (at most `bound`) until the process says it has started, or
    /// has ended first (then its last word). `None`: neither within `bound`.
    pub(super) async fn started(&mut self, bound: Duration) -> Option<String> {
        let rx = self.started.take()?;
        match tokio::time::timeout(bound, rx).await {
            Ok(Ok(word)) => Some(word),
            // It ended without saying it started.
            Ok(Err(_)) => Some(self.join().await),
            Err(_) => None,
        }
    }

    /// Whether its thread has ended.
    pub(super) fn ended(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Asks it to stop (the queue's own shutdown) and waits for its last
    /// word; one that has not stopped within [`STOP_BOUND`] is killed and
    /// says so.
    pub(super) async fn stop(&mut self) -> String {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let deadline = std::time::Instant::now() + STOP_BOUND;
        while !self.ended() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if !self.ended() {
            self.kill().await;
            return format!("did not stop within {} s (killed)", STOP_BOUND.as_secs());
        }
        self.join().await
    }

    /// Kills it (its runtime dropped) and waits until it is gone.
    pub(super) async fn kill(&mut self) -> String {
        if let Some(tx) = self.kill.take() {
            let _ = tx.send(());
        }
        self.join().await
    }

    /// Its last word, once its thread has ended.
    async fn join(&mut self) -> String {
        let Some(t) = self.thread.take() else {
            return "ended".into();
        };
        match tokio::task::spawn_blocking(move || t.join()).await {
            Ok(Ok(word)) => word,
            _ => "panicked".into(),
        }
    }
}

impl Drop for Process {
    /// A process still running when its call ends (an error on the way) is
    /// killed, so that nothing outlives the call.
    fn drop(&mut self) {
        if let Some(tx) = self.kill.take() {
            let _ = tx.send(());
        }
    }
}

/// Runs `body` to its end on a thread and runtime of its own (a queue's
/// setup: its migrations and schedule, whose futures rustc cannot prove
/// `Send` for every lifetime, so they do not run on the caller's tasks).
pub(super) async fn apart<F, Fut>(body: F) -> Result<(), String>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), String>>,
{
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        let r = rt.block_on(body());
        rt.shutdown_background();
        r
    });
    match tokio::task::spawn_blocking(move || thread.join()).await {
        Ok(Ok(r)) => r,
        _ => Err("panicked".into()),
    }
}
