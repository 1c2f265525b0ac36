//! Advisory lock keys and their decoding from `pg_locks`.
//!
//! Source: PostgreSQL documentation, "pg_locks" (System Views): a bigint key is
//! shown with its high half in `classid`, its low half in `objid` and
//! `objsubid = 1`, reassembled as `(classid::bigint << 32) | objid::bigint`; a
//! key of two int4 values is shown as `classid` = first, `objid` = second and
//! `objsubid = 2`.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

/// An advisory lock key: one `bigint` (i64) or two `integer`s (i32, i32).
/// The two spaces are distinct: `(0, 7)` is not the same lock as `7`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AdvisoryKey {
    /// `pg_advisory_lock(bigint)`.
    Big(i64),
    /// `pg_advisory_lock(integer, integer)`.
    Pair(i32, i32),
}

impl AdvisoryKey {
    /// Decodes a `pg_locks` row with `locktype = 'advisory'`.
    /// `classid` and `objid` are the unsigned `oid` columns; returns `None` for an
    /// `objsubid` other than 1 or 2.
    pub fn decode(classid: u32, objid: u32, objsubid: i16) -> Option<AdvisoryKey> {
        match objsubid {
            1 => Some(AdvisoryKey::Big((((classid as u64) << 32) | objid as u64) as i64)),
            2 => Some(AdvisoryKey::Pair(classid as i32, objid as i32)),
            _ => None,
        }
    }
}

/// A bigint advisory lock key for a string id in a namespace: the first 8 bytes
/// of SHA-256(`namespace:id`, UTF-8), big-endian, as an i64 — the guide's
/// "fixed-width hash" (§1), 64 bits wide. The same value in SQL (PostgreSQL 11+):
/// `('x' || left(encode(sha256(convert_to(ns || ':' || id, 'UTF8')), 'hex'), 16))::bit(64)::bigint`
/// (scenario `string-keys-fixed-width-hash`). Unlike `hashtext`, which is
/// internal, 32-bit and undocumented, this is stable across languages and
/// server versions.
pub fn namespaced_key(namespace: &str, id: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(namespace.as_bytes())
        .chain_update(b":")
        .chain_update(id.as_bytes())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

impl AdvisoryKey {
    /// Reads a key back from its text as [`Display`](fmt::Display) writes it
    /// (`7`, `(1, 2)`), e.g. from `matrix.json`; `None` for anything else.
    pub fn from_text(t: &str) -> Option<AdvisoryKey> {
        if let Some(pair) = t.strip_prefix('(').and_then(|t| t.strip_suffix(')')) {
            let (a, b) = pair.split_once(',')?;
            return Some(AdvisoryKey::Pair(a.trim().parse().ok()?, b.trim().parse().ok()?));
        }
        t.parse().ok().map(AdvisoryKey::Big)
    }
}

impl fmt::Display for AdvisoryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdvisoryKey::Big(k) => write!(f, "{k}"),
            AdvisoryKey::Pair(a, b) => write!(f, "({a}, {b})"),
        }
    }
}

impl<'de> Deserialize<'de> for AdvisoryKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AdvisoryKey;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an advisory lock key: a bigint, or a list of two integers")
            }
            fn visit_i64<E>(self, v: i64) -> Result<AdvisoryKey, E> {
                Ok(AdvisoryKey::Big(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<AdvisoryKey, E> {
                i64::try_from(v)
                    .map(AdvisoryKey::Big)
                    .map_err(|_| E::custom(format!("key {v} does not fit in a bigint")))
            }
            /// `"7"`: a bigint written as text (what a quoted `"${param}"` expands to).
            fn visit_str<E: de::Error>(self, v: &str) -> Result<AdvisoryKey, E> {
                v.trim()
                    .parse::<i64>()
                    .map(AdvisoryKey::Big)
                    .map_err(|_| E::custom(format!("key '{v}' is not a bigint")))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AdvisoryKey, A::Error> {
                let a: i32 = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let b: i32 = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
                if seq.next_element::<i32>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                Ok(AdvisoryKey::Pair(a, b))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bigint_keys_reassemble_from_both_halves() {
        assert_eq!(AdvisoryKey::decode(0, 43, 1), Some(AdvisoryKey::Big(43)));
        assert_eq!(AdvisoryKey::decode(1, 5, 1), Some(AdvisoryKey::Big((1 << 32) | 5)));
        assert_eq!(AdvisoryKey::decode(u32::MAX, u32::MAX, 1), Some(AdvisoryKey::Big(-1)));
        assert_eq!(
            AdvisoryKey::decode(0x7fff_ffff, u32::MAX, 1),
            Some(AdvisoryKey::Big(i64::MAX))
        );
        assert_eq!(AdvisoryKey::decode(0x8000_0000, 0, 1), Some(AdvisoryKey::Big(i64::MIN)));
    }

    #[test]
    fn namespaced_keys_differ_by_namespace() {
        assert_ne!(namespaced_key("rollup", "42"), namespaced_key("billing", "42"));
        // "a:b" + "c" and "a" + "b:c" hash the same text: the separator is part of the contract.
        assert_eq!(namespaced_key("a:b", "c"), namespaced_key("a", "b:c"));
    }

    #[test]
    fn two_int_keys_are_signed_and_distinct_from_bigint() {
        assert_eq!(AdvisoryKey::decode(3, 4, 2), Some(AdvisoryKey::Pair(3, 4)));
        assert_eq!(
            AdvisoryKey::decode(u32::MAX, 0x8000_0000, 2),
            Some(AdvisoryKey::Pair(-1, i32::MIN))
        );
        assert_ne!(AdvisoryKey::decode(0, 7, 2), AdvisoryKey::decode(0, 7, 1));
        assert_eq!(AdvisoryKey::decode(0, 7, 3), None);
    }
}
