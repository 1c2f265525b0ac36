//! Spreading the matrix over several machines: `--shard I/N` runs one N-th of
//! the cells, and [`crate::report::merge`] puts the shards' `matrix.json` files together into
//! the report one unsharded run would have written.
//!
//! The split is by a cell's position in the matrix (server-major, then
//! scenario, then driver, as [`crate::matrix::run_all`] orders them): shard
//! `I/N` runs the cells at positions `I-1`, `I-1+N`, `I-1+2N`, …. So the
//! same selection always splits the same way, every cell is in exactly one
//! shard, and the cells of one scenario (whose runs cost alike: a race or a
//! fault scenario costs seconds in every column) spread over all shards. A
//! cell's repeats stay together in its shard, so its timing statistics
//! (`elapsed_stats`, computed from the samples of its repeats) are complete in
//! the shard file and carry over into the merge unchanged.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One of N parts of the matrix: `index` (1-based) of `count`. Written and
/// read as `I/N` (`--shard 2/4`; in `matrix.json`, `"shard": "2/4"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shard {
    /// Which part, from 1 to `count`.
    pub index: usize,
    /// How many parts, at least 1.
    pub count: usize,
}

/// At most this many shards (a cell per shard would be many more machines
/// than anyone has).
pub const MAX_SHARDS: usize = 1000;

impl Shard {
    /// The whole matrix: `1/1`.
    pub const ALL: Shard = Shard { index: 1, count: 1 };

    /// Whether the cell at `position` (0-based, in run order) is in this shard.
    pub fn contains(self, position: usize) -> bool {
        position % self.count == self.index - 1
    }

    /// Whether this is the whole matrix (`1/1`).
    pub fn is_all(self) -> bool {
        self.count == 1
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    /// `I/N` with 1 ≤ I ≤ N ≤ [`MAX_SHARDS`].
    fn from_str(s: &str) -> Result<Shard, String> {
        let want = || format!("'{s}' is not a shard: give I/N, e.g. 2/4 (1 ≤ I ≤ N ≤ {MAX_SHARDS})");
        let (i, n) = s.split_once('/').ok_or_else(want)?;
        let (index, count): (usize, usize) = (
            i.trim().parse().map_err(|_| want())?,
            n.trim().parse().map_err(|_| want())?,
        );
        if index == 0 || count == 0 || index > count || count > MAX_SHARDS {
            return Err(want());
        }
        Ok(Shard { index, count })
    }
}

impl Serialize for Shard {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Shard {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Shard, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_print_as_i_of_n() {
        let s: Shard = "2/4".parse().unwrap();
        assert_eq!((s.index, s.count), (2, 4));
        assert_eq!(s.to_string(), "2/4");
        for bad in ["0/4", "5/4", "1/0", "2", "a/b", "1/1001", "-1/2", ""] {
            let e = bad.parse::<Shard>().unwrap_err();
            assert!(e.contains("is not a shard"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_position_is_in_exactly_one_shard() {
        for count in 1..=7 {
            for p in 0..100 {
                let holders = (1..=count).filter(|&index| Shard { index, count }.contains(p)).count();
                assert_eq!(holders, 1, "position {p} of {count} shards");
            }
        }
    }
}
