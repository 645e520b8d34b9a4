//! Maps and sets hashed with a multiplication per word instead of SipHash, for tables whose
//! keys no client chooses: a client can only look keys up, so SipHash's defence against
//! crafted collisions buys nothing there, and on the step path it was a large share of the
//! work (profiles in bench/RESULTS.md).
//!
//! - [`IdMap`] / [`IdSet`]: session ids, numbers the pool hands out (1, 2, 3, ...). Multiplying
//!   by an odd constant maps sequential ids to distinct low bits (the table's bucket) and
//!   mixes the high bits (its control byte).
//! - [`StrMap`] / [`StrSet`]: names loaded from data files (TextCraft's recipe tables), looked
//!   up with words from actions.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// The hasher of [`IdMap`] and [`IdSet`]: Fibonacci hashing of one `u64`.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

/// 2^64 divided by the golden ratio, odd: multiplying by it permutes the low bits.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(GOLDEN);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub type IdBuildHasher = BuildHasherDefault<IdHasher>;
pub type IdMap<V> = HashMap<u64, V, IdBuildHasher>;
pub type IdSet = HashSet<u64, IdBuildHasher>;

/// The hasher of [`StrMap`] and [`StrSet`]: eight bytes per multiplication, and a final
/// rotation that brings the well-mixed high bits down to the bucket bits.
#[derive(Debug, Default, Clone, Copy)]
pub struct StrHasher(u64);

impl Hasher for StrHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            self.write_u64(u64::from_le_bytes(w));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(w) ^ (rest.len() as u64) << 59);
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(GOLDEN);
    }

    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

pub type StrBuildHasher = BuildHasherDefault<StrHasher>;
pub type StrMap<V> = HashMap<String, V, StrBuildHasher>;
pub type StrSet = HashSet<String, StrBuildHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn sequential_ids_land_in_distinct_buckets() {
        let build = IdBuildHasher::default();
        let mask = (1u64 << 12) - 1;
        let buckets: IdSet = (1..=4096u64).map(|id| build.hash_one(id) & mask).collect();
        assert_eq!(buckets.len(), 4096);
    }

    #[test]
    fn names_spread_over_buckets() {
        // 4,096 distinct recipe-like names: some differ in one late character or only in length.
        let build = StrBuildHasher::default();
        let names: StrSet = (0..36)
            .map(|i| format!("minecraft:{}_planks{}", ["oak", "birch", "acacia", "dark_oak"][i % 4], "x".repeat(i / 4)))
            .chain((0..4060).map(|i| format!("minecraft:item_{i}")))
            .collect();
        assert_eq!(names.len(), 4096);
        let mask = (1u64 << 12) - 1;
        let buckets: IdSet = names.iter().map(|n| build.hash_one(n.as_str()) & mask).collect();
        // Random hashing fills about 63% of the 4,096 buckets (2,589).
        assert!(buckets.len() > 2_400, "{} buckets used", buckets.len());
    }

    #[test]
    fn maps_behave_as_maps() {
        let mut map: IdMap<u64> = IdMap::default();
        for id in 0..10_000u64 {
            map.insert(id * 7 + 1, id);
        }
        assert_eq!(map.len(), 10_000);
        assert!((0..10_000u64).all(|id| map[&(id * 7 + 1)] == id));
        assert!(!map.contains_key(&0));
    }
}
