//! Advisory lock keys: PostgreSQL's two key spaces (one `bigint`, or two
//! `integer`s) and string keys through a stable, namespaced hash.

use sha2::{Digest, Sha256};

/// An advisory lock key, in one of PostgreSQL's two key spaces, which never
/// overlap: `pg_advisory_lock(bigint)` and `pg_advisory_lock(int, int)`
/// lock different objects even when the numbers look alike (PostgreSQL docs
/// §9.28.10, "Advisory Lock Functions"; `pg_locks` shows the first with
/// `objsubid = 1`, the second with `objsubid = 2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// One 64-bit key: `pg_advisory_lock(bigint)`.
    Single(i64),
    /// Two 32-bit keys: `pg_advisory_lock(int, int)`.
    Pair(i32, i32),
}

/// A key that does not fit PostgreSQL's key space.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A number outside the range of the argument it would be passed as.
    #[error("advisory lock key {value} does not fit {fits}")]
    OutOfRange {
        /// The number given, in decimal.
        value: String,
        /// What it had to fit: `bigint` or `integer`.
        fits: &'static str,
    },
    /// A string key's namespace with a NUL character, which the hash uses
    /// to separate the namespace from the name.
    #[error("advisory lock namespace {0:?} contains a NUL character")]
    NulInNamespace(String),
}

/// The string hashed before every namespaced key: changing it would change
/// every key, so it carries a version.
const DOMAIN: &[u8] = b"pg-advisory-lock/v1";

impl Key {
    /// A 64-bit key.
    pub const fn new(key: i64) -> Key {
        Key::Single(key)
    }

    /// A key in the two-`integer` space.
    pub const fn pair(a: i32, b: i32) -> Key {
        Key::Pair(a, b)
    }

    /// A key in the two-`integer` space from wider numbers.
    ///
    /// # Errors
    /// [`KeyError::OutOfRange`] when either number does not fit an `integer`
    /// (−2³¹ … 2³¹−1).
    pub fn try_pair(a: i64, b: i64) -> Result<Key, KeyError> {
        let fit = |v: i64| {
            i32::try_from(v).map_err(|_| KeyError::OutOfRange {
                value: v.to_string(),
                fits: "integer",
            })
        };
        Ok(Key::Pair(fit(a)?, fit(b)?))
    }

    /// A 64-bit key from an unsigned number (an id column of type `u64`).
    ///
    /// # Errors
    /// [`KeyError::OutOfRange`] above `i64::MAX`: PostgreSQL's `bigint` is signed.
    pub fn try_unsigned(key: u64) -> Result<Key, KeyError> {
        i64::try_from(key).map(Key::Single).map_err(|_| KeyError::OutOfRange {
            value: key.to_string(),
            fits: "bigint",
        })
    }

    /// A 64-bit key for a name within a namespace, the same on every
    /// machine, version and architecture: the first 8 bytes, read as a
    /// big-endian `i64`, of the SHA-256 digest of `pg-advisory-lock/v1`, a
    /// NUL byte, the namespace's UTF-8 bytes, a NUL byte and the name's
    /// UTF-8 bytes. Different namespaces give unrelated keys for the same
    /// name, so two services (or a service and a migration runner) that name
    /// their locks alike do not collide unless they share a namespace.
    ///
    /// Unlike `hashtext()` (PostgreSQL's internal hash, not documented as
    /// stable across major versions: it changed in PostgreSQL 8.4) this does
    /// not depend on the server; two names collide with probability about
    /// n²/2⁶⁵ for n names.
    ///
    /// # Errors
    /// [`KeyError::NulInNamespace`] when the namespace holds a NUL character.
    pub fn named(namespace: &str, name: &str) -> Result<Key, KeyError> {
        if namespace.contains('\0') {
            return Err(KeyError::NulInNamespace(namespace.to_owned()));
        }
        let mut h = Sha256::new();
        h.update(DOMAIN);
        h.update([0]);
        h.update(namespace.as_bytes());
        h.update([0]);
        h.update(name.as_bytes());
        let digest = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        Ok(Key::Single(i64::from_be_bytes(first)))
    }

    /// The arguments of the lock functions, as SQL literals: `42` or `1, 2`.
    pub(crate) fn args(self) -> String {
        match self {
            Key::Single(k) => k.to_string(),
            Key::Pair(a, b) => format!("{a}, {b}"),
        }
    }

    /// How `pg_locks` shows this key: `(classid, objid, objsubid)`. A
    /// `bigint` key's high 32 bits are `classid` and its low 32 bits
    /// `objid`, with `objsubid = 1`; a pair's numbers are `classid` and
    /// `objid` (as unsigned `oid`s), with `objsubid = 2` (PostgreSQL docs
    /// §53.12, `pg_locks`).
    pub fn pg_locks_tag(self) -> (u32, u32, u8) {
        match self {
            Key::Single(k) => ((k as u64 >> 32) as u32, k as u64 as u32, 1),
            Key::Pair(a, b) => (a as u32, b as u32, 2),
        }
    }
}

impl From<i64> for Key {
    fn from(k: i64) -> Key {
        Key::Single(k)
    }
}

impl From<(i32, i32)> for Key {
    fn from((a, b): (i32, i32)) -> Key {
        Key::Pair(a, b)
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Single(k) => write!(f, "{k}"),
            Key::Pair(a, b) => write!(f, "({a}, {b})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_keys_are_stable_and_namespaced() {
        // Computed once from the rule in `Key::named`'s docs and pinned: a
        // change here changes every user's keys.
        let a = Key::named("billing", "invoice-run").unwrap();
        let mut h = Sha256::new();
        h.update(b"pg-advisory-lock/v1\0billing\0invoice-run");
        let d = h.finalize();
        assert_eq!(a, Key::Single(i64::from_be_bytes(d[..8].try_into().unwrap())));
        assert_ne!(a, Key::named("reports", "invoice-run").unwrap());
        // The separator keeps ("ab", "c") apart from ("a", "bc").
        assert_ne!(Key::named("ab", "c").unwrap(), Key::named("a", "bc").unwrap());
        assert!(matches!(Key::named("a\0b", "c"), Err(KeyError::NulInNamespace(_))));
    }

    #[test]
    fn keys_that_do_not_fit_are_errors() {
        assert_eq!(Key::try_pair(1, 2), Ok(Key::Pair(1, 2)));
        let e = Key::try_pair(1, 1 << 31).unwrap_err();
        assert_eq!(e.to_string(), "advisory lock key 2147483648 does not fit integer");
        assert!(Key::try_pair(i64::from(i32::MIN) - 1, 0).is_err());
        assert_eq!(Key::try_unsigned(7), Ok(Key::Single(7)));
        assert!(Key::try_unsigned(u64::MAX).is_err());
    }

    #[test]
    fn pg_locks_tags_split_bigints_and_keep_pairs() {
        assert_eq!(Key::new(1).pg_locks_tag(), (0, 1, 1));
        assert_eq!(Key::new(-1).pg_locks_tag(), (u32::MAX, u32::MAX, 1));
        assert_eq!(Key::new(1 << 32).pg_locks_tag(), (1, 0, 1));
        assert_eq!(Key::pair(-2, 3).pg_locks_tag(), (u32::MAX - 1, 3, 2));
    }
}
