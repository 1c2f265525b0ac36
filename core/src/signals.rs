//! SIGINT and SIGTERM: listened for during the runs and the screenshot, and
//! turned into [`Interrupted`], which `main` maps to exit code 130 or 143.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// A command stopped by SIGINT or SIGTERM, after it cleaned up. `main` exits
/// with [`Interrupted::exit_code`] and prints no error: what was stopped has
/// been said already.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct Interrupted {
    /// "interrupted (SIGINT)" or "terminated (SIGTERM)".
    pub what: &'static str,
    /// The exit code a shell reports for that signal: 128 + its number.
    pub code: u8,
}

impl Interrupted {
    /// The process's exit code: 130 (SIGINT) or 143 (SIGTERM).
    pub fn exit_code(&self) -> std::process::ExitCode {
        std::process::ExitCode::from(self.code)
    }
}

/// The [`Interrupted`] somewhere in `e`'s chain of causes and contexts, if any.
pub fn interrupted(e: &anyhow::Error) -> Option<&Interrupted> {
    e.chain().find_map(|cause| cause.downcast_ref::<Interrupted>())
}

/// SIGINT and SIGTERM listeners, installed once for the whole run (start-up
/// and runs), so that a signal arriving between the two phases is not lost.
pub struct Interrupts {
    int: Option<Signal>,
    term: Option<Signal>,
}

impl Interrupts {
    /// Installs the listeners; must be called inside the tokio runtime.
    pub fn install() -> Interrupts {
        Interrupts {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
        }
    }

    /// Resolves on SIGINT or SIGTERM with what arrived.
    pub async fn next(&mut self) -> Interrupted {
        async fn recv(s: &mut Option<Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = recv(&mut self.int) => Interrupted { what: "interrupted (SIGINT)", code: 130 },
            () = recv(&mut self.term) => Interrupted { what: "terminated (SIGTERM)", code: 143 },
        }
    }
}
