//! A column of the matrix as a run records it ([`DriverColumn`]): the
//! driver's identity and configuration, and the pooler it goes through.

use serde::{Deserialize, Serialize};

/// A driver column.
#[derive(Debug, Serialize, Deserialize)]
pub struct DriverColumn {
    /// Column id.
    pub id: String,
    /// Crate under test.
    pub crate_name: String,
    /// Exact version from Cargo.lock.
    pub crate_version: String,
    /// Configuration in the crate's terms.
    pub configuration: String,
    /// `direct` or `pooled`.
    pub kind: String,
    /// The pool mode of the pooler for configurations behind one (`session` /
    /// `transaction`), else `None`.
    pub pooler: Option<String>,
    /// Which pooler (`pgbouncer`, `pgbouncer-trixie`, `pgpool`), else `None`.
    #[serde(default)]
    pub pooler_kind: Option<String>,
    /// The pooler's version as its binary printed it (`PgBouncer 1.24.1`,
    /// `pgpool-II version 4.6.1 (chirikoboshi)`), when it ran in this run.
    #[serde(default)]
    pub pooler_version: Option<String>,
}

impl DriverColumn {
    /// The product of the pooler it goes through (`PgBouncer`,
    /// `Pgpool-II`, `your pooler`), else `None`.
    pub fn pooler_product(&self) -> Option<&'static str> {
        self.pooler_kind
            .as_deref()
            .and_then(locklab_drivers::PoolerKind::from_id)
            .map(locklab_drivers::PoolerKind::product)
    }

    /// Whether its cells' readings vary by nature (its pooler's
    /// `PoolerKind::readings_vary`: pgagroal, Odyssey).
    pub fn readings_vary(&self) -> bool {
        self.pooler_kind
            .as_deref()
            .and_then(locklab_drivers::PoolerKind::from_id)
            .is_some_and(locklab_drivers::PoolerKind::readings_vary)
    }
}
