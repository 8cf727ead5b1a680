//! A multiply-and-fold hasher and the maps keyed with it, for the hot tables of the extender's snapshot and the
//! node agent's per-pass bookkeeping: several times cheaper than the standard SipHash on short keys.
//!
//! NB: it is not keyed, so someone who chooses many keys could crowd one bucket. Every key hashed with it comes
//! from the API server (Node names, PV UIDs and names, LocalDisk names) or from the host's own discovery
//! directories, never from a request body or a tenant: crowding a table would take someone who may already
//! create Nodes or PVs, or mount disks on the node. Requests only look keys up.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Clone, Copy, Debug, Default)]
pub struct FastHasher(u64);

const MUL: u64 = 0x9e37_79b9_7f4a_7c15;

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0 ^ word).rotate_left(23).wrapping_mul(MUL);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        // NB: tables pick buckets from the low bits; a bare multiply leaves those depending on the first bytes
        // only, so fold the full 128-bit product.
        let wide = u128::from(self.0) * u128::from(MUL);
        (wide >> 64) as u64 ^ wide as u64
    }
}

pub type FastBuild = BuildHasherDefault<FastHasher>;
pub type FastMap<K, V> = HashMap<K, V, FastBuild>;
pub type FastSet<T> = HashSet<T, FastBuild>;

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn sequential_names_and_paths_spread_over_buckets() {
        let build = FastBuild::default();
        for key in [|i| format!("n{i}"), |i| format!("/mnt/disks/disk-{i:05}")] {
            let buckets: HashSet<u64> = (0..8192).map(|i| build.hash_one(key(i)) & 8191).collect();
            // Uniform hashing fills about 63% of the buckets; a hash keyed on the first bytes fills a handful.
            assert!(buckets.len() > 4500, "only {} buckets used", buckets.len());
        }
    }
}
