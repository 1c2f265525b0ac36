//! Validating a `library` step's call: `call` with a bigint `key` for a
//! lock library, `migrate` for `sqlx-migrator`.

use super::Validator;
use crate::keys::AdvisoryKey;
use crate::scenario::Pos;
use crate::scenario::raw::RawStep;

impl Validator<'_> {
    /// A `library` step's call: `call` with a bigint `key` for a lock
    /// library, `migrate` for `sqlx-migrator` (its `give_up_ms` below the
    /// step's deadline, `deadline_ms`).
    pub(super) fn library_call(
        &mut self,
        n: usize,
        pos: Pos,
        s: &RawStep,
        library: locklab_drivers::libraries::Library,
        deadline_ms: u64,
    ) -> Option<locklab_drivers::libraries::LibraryCall> {
        use crate::scenario::raw::LibraryCallRaw;
        use locklab_drivers::libraries::{Library, LibraryCall, MigrateRun};
        if library == Library::SqlxMigrator {
            let Some(m) = s.migrate else {
                self.err(
                    pos,
                    format!(
                        "step {n}: 'library: sqlx-migrator' needs 'migrate: {{ runners, migration_ms, give_up_ms }}'"
                    ),
                );
                return None;
            };
            if s.call.is_some() || s.key.is_some() {
                self.err(
                    pos,
                    format!("step {n}: 'library: sqlx-migrator' takes 'migrate', not 'call' or 'key'"),
                );
            }
            if !(1..=8).contains(&m.runners) {
                self.err(
                    pos,
                    format!("step {n}: 'migrate.runners' must be between 1 and 8, got {}", m.runners),
                );
            }
            if m.kill_first && m.runners < 2 {
                self.err(pos, format!("step {n}: 'migrate.kill_first' needs at least 2 runners (the first is killed, the others run after)"));
            }
            if m.give_up_ms == 0 || m.give_up_ms >= deadline_ms {
                self.err(pos, format!("step {n}: 'migrate.give_up_ms' must be between 1 and the step's deadline ({deadline_ms} ms) minus 1, got {}", m.give_up_ms));
            }
            if m.migration_ms > 60_000 {
                self.err(
                    pos,
                    format!(
                        "step {n}: 'migrate.migration_ms' must be at most 60000, got {}",
                        m.migration_ms
                    ),
                );
            }
            return Some(LibraryCall::Migrate(MigrateRun {
                runners: m.runners,
                migration_ms: m.migration_ms,
                kill_first: m.kill_first,
                give_up_ms: m.give_up_ms,
            }));
        }
        if s.migrate.is_some() {
            self.err(
                pos,
                format!("step {n}: 'migrate' goes with 'library: sqlx-migrator' only"),
            );
        }
        let Some(call) = s.call else {
            self.err(
                pos,
                format!(
                    "step {n}: 'library: {}' needs 'call: acquire | try_acquire | release | drop_handle'",
                    library.as_str()
                ),
            );
            return None;
        };
        let key = match s.key {
            Some(AdvisoryKey::Big(k)) => k,
            Some(AdvisoryKey::Pair(..)) => {
                self.err(
                    pos,
                    format!("step {n}: a lock library's 'key' is one bigint, not two integers"),
                );
                return None;
            }
            None => {
                self.err(
                    pos,
                    format!("step {n}: 'library: {}' needs a bigint 'key'", library.as_str()),
                );
                return None;
            }
        };
        Some(match call {
            LibraryCallRaw::Acquire => LibraryCall::Acquire { key, timeout_ms: None },
            LibraryCallRaw::TryAcquire => LibraryCall::TryAcquire { key },
            LibraryCallRaw::Release => LibraryCall::Release { key },
            LibraryCallRaw::DropHandle => LibraryCall::DropHandle { key },
        })
    }
}
