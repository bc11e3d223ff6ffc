//! A hasher for integer keys no one chooses (inode numbers, addresses): a multiply spreads them
//! enough, where SipHash cost a tenth of the collector's time on the per-record path. Not for
//! keys an outsider picks (strings from the network, file names): those take [`FastMap`],
//! seeded at random per process, or keep SipHash.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default)]
pub struct IntHasher(u64);

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        // A multiply leaves its entropy in the high bits; the table indexes with the low ones.
        self.0 ^ (self.0 >> 32)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(K);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(K);
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (self.0 ^ n as u64 ^ (n as u64 >> 29)).wrapping_mul(K);
    }
}

/// A map keyed by such integers.
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// Maps looked up once per row by container id or domain on the 1 ms path: foldhash, seeded at
/// random per process (a chosen container name cannot aim at one bucket) and several times
/// cheaper than SipHash on ids; SipHash and a B-tree of ids were a quarter of that path at
/// 1,000 containers.
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearby_keys_spread_over_the_low_bits() {
        // Inode numbers and addresses come in runs: their hashes must not share low bits.
        let low: std::collections::HashSet<u64> = (0..1024u64)
            .map(|i| {
                let mut h = IntHasher::default();
                h.write_u64(0x1000 + i * 8);
                h.finish() & 0x3ff
            })
            .collect();
        assert!(low.len() > 600, "{} distinct of 1024", low.len());
    }
}
