//! The fields of a `library` step that are types of their own: `call:`
//! and `migrate:`.

use schemars::JsonSchema;
use serde::Deserialize;

use super::OrParam;

/// What a `library` step asks of a lock library (`call:`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LibraryCallRaw {
    /// Take the lock on `key`, waiting as long as it takes.
    Acquire,
    /// Take it if it is free.
    TryAcquire,
    /// Release it as the library does.
    Release,
    /// Drop the library's handle without releasing.
    DropHandle,
}

/// A `library: sqlx-migrator` step's run (`migrate:`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MigrateRaw {
    /// How many migrators run at once (1–8), each with a pool of its own.
    #[schemars(range(min = 1, max = 8))]
    pub runners: u32,
    /// How long the migration runs, in ms (a `pg_sleep`).
    #[schemars(range(min = 0, max = 60000))]
    pub migration_ms: u64,
    /// Kill the first migrator while its migration runs, before the others start.
    #[serde(default)]
    #[schemars(with = "Option<OrParam<bool>>")]
    pub kill_first: bool,
    /// Each migrator gives up after this many ms (its future dropped, the
    /// process gone); below the step's deadline.
    #[schemars(range(min = 1, max = 600000))]
    pub give_up_ms: u64,
}
