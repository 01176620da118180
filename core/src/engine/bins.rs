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
    list_of(bins.iter().map(|b| *b as usize))
}

/// Runs of consecutive bins as `start-end`, others alone, in the order given.
fn list_of(bins: impl Iterator<Item = usize>) -> String {
    let mut out = String::new();
    let mut run: Option<(usize, usize)> = None;
    let push = |out: &mut String, (start, end): (usize, usize)| {
        if !out.is_empty() {
            out.push(',');
        }
        if end == start {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
    };
    for bin in bins {
        run = match run {
            Some((start, end)) if end.checked_add(1) == Some(bin) => Some((start, bin)),
            Some(done) => {
                push(&mut out, done);
                Some((bin, bin))
            }
            None => Some((bin, bin)),
        };
    }
    if let Some(done) = run {
        push(&mut out, done);
    }
    out
}

/// Longest bin list [`describe`] writes out, in characters.
pub const DESCRIBED_BINS: usize = 96;

/// "bin 3", "bins 3-9" or "bins 0-3,7" (sorted, each bin once), cut past
/// [`DESCRIBED_BINS`] characters with the count: a description of any list is short.
pub fn describe(bins: &[usize]) -> String {
    let mut sorted = bins.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    match sorted.as_slice() {
        [] => "no bins".into(),
        [one] => format!("bin {one}"),
        many => {
            let listed = list_of(many.iter().copied());
            if listed.len() <= DESCRIBED_BINS {
                format!("bins {listed}")
            } else {
                format!("{} bins ({})", many.len(), cut(&listed, DESCRIBED_BINS))
            }
        }
    }
}

/// `text` cut to `chars` characters, marked `…` when cut.
pub fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        None => text.to_string(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

/// The most bins a bin list may name (a job has at most 2^16 bins).
pub const MAX_LISTED: usize = 1 << 16;

/// Reads a [`list`] (`0-3,7,9-10`) back; at most [`MAX_LISTED`] bins, none above that
/// either, so that a short text cannot name a huge list.
pub fn parse_list(text: &str) -> Result<Vec<usize>, String> {
    let mut bins = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let number = |s: &str| {
            s.trim()
                .parse::<usize>()
                .ok()
                .filter(|b| *b < MAX_LISTED)
                .ok_or_else(|| format!("`{s}` is not a bin (0 to {})", MAX_LISTED - 1))
        };
        let (start, end) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(part)?, number(part)?),
        };
        if end < start {
            return Err(format!("`{part}`: a range goes up"));
        }
        if bins.len() + (end - start + 1) > MAX_LISTED {
            return Err(format!("more than {MAX_LISTED} bins"));
        }
        bins.extend(start..=end);
    }
    Ok(bins)
}

/// Serde for a list of bins as a compact [`list`]: a command moving thousands of bins is
/// logged in a few bytes. Reads either that text or a JSON array of bin numbers (older
/// traces), never more than [`MAX_LISTED`] bins.
pub mod compact {
    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    use super::{MAX_LISTED, parse_list};

    /// Writes `bins` as `0-3,7`.
    pub fn serialize<S: Serializer>(bins: &[usize], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::list_of(bins.iter().copied()))
    }

    /// Reads `0-3,7` or `[0, 1, 2, 3, 7]`.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<usize>, D::Error> {
        deserializer.deserialize_any(BinsVisitor)
    }

    struct BinsVisitor;

    impl<'de> Visitor<'de> for BinsVisitor {
        type Value = Vec<usize>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "bins as `0-3,7` or a list of at most {MAX_LISTED} numbers")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            parse_list(text).map_err(E::custom)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut bins = Vec::new();
            while let Some(bin) = seq.next_element::<usize>()? {
                if bins.len() >= MAX_LISTED {
                    return Err(de::Error::custom(format!("more than {MAX_LISTED} bins")));
                }
                bins.push(bin);
            }
            Ok(bins)
        }
    }
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
        assert_eq!(parse_list("0-3,7,9-10"), Ok(vec![0, 1, 2, 3, 7, 9, 10]));
        assert_eq!(parse_list(""), Ok(vec![]));
        assert!(parse_list("3-1").is_err());
        assert!(parse_list("0-4000000000").is_err());
        assert!(
            parse_list(&"0-65535,".repeat(2)).is_err(),
            "more than the most bins"
        );
        assert!(parse_list("x").is_err());
    }

    #[test]
    fn descriptions_are_short_whatever_the_list() {
        assert_eq!(describe(&[3]), "bin 3");
        assert_eq!(describe(&[9, 3, 4, 5, 3]), "bins 3-5,9");
        let every_other: Vec<usize> = (0..14_000).step_by(2).collect();
        let said = describe(&every_other);
        assert!(said.starts_with("7000 bins (0,2,4,"), "{said}");
        assert!(said.chars().count() < DESCRIBED_BINS + 20, "{said}");
        assert_eq!(cut("ééé", 2), "éé…");
    }

    #[test]
    fn compact_lists_read_back_from_either_form() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct Moved {
            #[serde(with = "compact")]
            bins: Vec<usize>,
        }
        let moved = Moved {
            bins: (0..7000).chain([9000, 7001]).collect(),
        };
        let json = serde_json::to_string(&moved).unwrap();
        assert_eq!(json, r#"{"bins":"0-6999,9000,7001"}"#);
        assert_eq!(serde_json::from_str::<Moved>(&json).unwrap(), moved);
        let old: Moved = serde_json::from_str(r#"{"bins":[3,1]}"#).unwrap();
        assert_eq!(old.bins, vec![3, 1]);
        assert!(serde_json::from_str::<Moved>(r#"{"bins":"0-99999"}"#).is_err());
    }

    #[test]
    fn hash_is_fixed() {
        // The same in every process and build: pinned.
        assert_eq!(mix64(1), 0x5692_161d_100b_05e5);
    }
}
