//! Bins: the unit of state placement and migration.
//!
//! Every record carries a 64-bit *bin key*; the top `log2(bins)` bits of that key pick the
//! bin. Bin keys must be well mixed: [`hash_key`] turns any hashable key into one with a
//! fixed hash, so the same key lands in the same bin in every process and every run.

use std::hash::{Hash, Hasher};

use crate::error::ConfigError;

/// The bin count used when none is given.
pub const DEFAULT_BINS: usize = 256;
/// The smallest supported bin count.
pub const MIN_BINS: usize = 1 << 4;
/// The largest supported bin count.
pub const MAX_BINS: usize = 1 << 16;

/// A power-of-two number of bins, and the key→bin function that goes with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bins {
    log2: u32,
}

impl Bins {
    /// Checks that `count` is a power of two in `MIN_BINS..=MAX_BINS`.
    pub fn new(count: usize) -> Result<Self, ConfigError> {
        if !count.is_power_of_two() || !(MIN_BINS..=MAX_BINS).contains(&count) {
            return Err(ConfigError::BinCount(count));
        }
        Ok(Bins {
            log2: count.trailing_zeros(),
        })
    }

    /// The number of bins.
    pub fn count(self) -> usize {
        1 << self.log2
    }

    /// log2 of the number of bins.
    pub fn log2(self) -> u32 {
        self.log2
    }

    /// The bin of a bin key: its top bits.
    #[inline]
    pub fn bin_of(self, bin_key: u64) -> u32 {
        (bin_key >> (64 - self.log2)) as u32
    }
}

/// A fixed 64-bit mixing function (the splitmix64 finalizer). It is a bijection, so distinct
/// inputs give distinct outputs, and its output bits are all well mixed.
#[inline]
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A fixed hash of any hashable key, usable as a bin key. Unlike `std`'s `RandomState` it is
/// the same in every process, which cluster runs need.
pub fn hash_key<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    key.hash(&mut hasher);
    mix64(hasher.finish())
}

/// Bins as a compact list: `0-3,7,9-10`.
pub fn list(bins: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < bins.len() {
        let start = bins[i];
        let mut end = start;
        while i + 1 < bins.len() && bins[i + 1] == end + 1 {
            i += 1;
            end = bins[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if end == start {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_counts() {
        assert!(Bins::new(0).is_err());
        assert!(Bins::new(100).is_err());
        assert!(Bins::new(8).is_err());
        assert!(Bins::new(1 << 17).is_err());
        assert_eq!(Bins::new(256).map(Bins::count), Ok(256));
        assert_eq!(Bins::new(1 << 16).map(Bins::count), Ok(1 << 16));
    }

    #[test]
    fn bins_are_top_bits_and_roughly_uniform() {
        let bins = Bins::new(16).unwrap();
        assert_eq!(bins.bin_of(u64::MAX), 15);
        assert_eq!(bins.bin_of(0), 0);
        let mut counts = [0usize; 16];
        for k in 0..16_000u64 {
            counts[bins.bin_of(hash_key(&k)) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (800..1200).contains(&c)), "{counts:?}");
    }

    #[test]
    fn bin_lists_are_compact() {
        assert_eq!(list(&[0, 1, 2, 3, 7, 9, 10]), "0-3,7,9-10");
        assert_eq!(list(&[]), "");
    }

    #[test]
    fn hash_is_fixed() {
        // The same in every process and build: pinned.
        assert_eq!(mix64(1), 0x5692_161d_100b_05e5);
    }
}
