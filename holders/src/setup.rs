//! What every form of `holders` needs ([`Setup`]: where, the thresholds and
//! the names; made from the command line by `cli`), and one judged snapshot
//! of it.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::names::KeyNames;
use crate::snapshot::{self, Target};
use crate::{Judged, Thresholds, judge};

/// What every form needs: where, the thresholds and the names.
pub(crate) struct Setup {
    pub(crate) target: Target,
    pub(crate) thresholds: Thresholds,
    pub(crate) names: KeyNames,
}

impl Setup {
    /// One judged snapshot, and the time it took (connecting included), within
    /// `--timeout`. The keys file's server-side rules are computed first, until
    /// that succeeds once (also within `--timeout`).
    pub(crate) async fn snapshot(&mut self) -> (Result<Judged>, Duration) {
        let started = Instant::now();
        let result = async {
            if self.names.needs_server() {
                let names = &mut self.names;
                let what = "computing the --keys file's hashtext keys";
                snapshot::within(&self.target, what, async |client| names.resolve(client).await)
                    .await
                    .context("computing the --keys file's hashtext keys on the server")?;
            }
            let s = snapshot::take(&self.target).await?;
            Ok(judge(s, self.thresholds, &self.names))
        }
        .await;
        (result, started.elapsed())
    }
}
