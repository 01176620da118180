//! How big a bin's state is, as observers see it: the keys it holds and an estimate of its
//! bytes in memory.
//!
//! Sizes are sampled every few hundred milliseconds for every bin, so they must cost O(1):
//! `bytes` is a shallow estimate (entries × entry size), not a traversal. The exact
//! serialized size of a bin is known when it moves, and reported then.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::mem::size_of;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The size of a bin's state.
pub trait StateSize {
    /// Keys (entries) held.
    fn keys(&self) -> usize;
    /// Estimated bytes in memory, without following pointers out of the entries.
    fn bytes(&self) -> usize;
}

/// Everything a bin's state must be to live in a migrateable operator: encodable to move
/// to another process, sendable to move to another worker of this one as it is, creatable
/// empty, and measurable for observers.
pub trait BinState: Serialize + DeserializeOwned + Default + StateSize + Send + 'static {}

impl<S: Serialize + DeserializeOwned + Default + StateSize + Send + 'static> BinState for S {}

impl StateSize for () {
    fn keys(&self) -> usize {
        0
    }
    fn bytes(&self) -> usize {
        0
    }
}

macro_rules! sequence {
    ($($t:ident),*) => {$(
        impl<T> StateSize for $t<T> {
            fn keys(&self) -> usize {
                self.len()
            }
            fn bytes(&self) -> usize {
                self.len() * size_of::<T>()
            }
        }
    )*};
}
sequence!(Vec, VecDeque, BTreeSet);

impl<T, H> StateSize for HashSet<T, H> {
    fn keys(&self) -> usize {
        self.len()
    }
    fn bytes(&self) -> usize {
        self.capacity() * size_of::<T>()
    }
}

impl<K, V, H> StateSize for HashMap<K, V, H> {
    fn keys(&self) -> usize {
        self.len()
    }
    fn bytes(&self) -> usize {
        self.capacity() * size_of::<(K, V)>()
    }
}

impl<K, V> StateSize for BTreeMap<K, V> {
    fn keys(&self) -> usize {
        self.len()
    }
    fn bytes(&self) -> usize {
        self.len() * size_of::<(K, V)>()
    }
}

/// `bytes` in the binary unit that keeps the number short (`1.5 MiB`), for people to read.
pub fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_entries() {
        let mut m: HashMap<u64, u64> = HashMap::new();
        m.insert(1, 2);
        m.insert(3, 4);
        assert_eq!(StateSize::keys(&m), 2);
        assert!(StateSize::bytes(&m) >= 2 * 16);
        assert_eq!(vec![0u32; 5].keys(), 5);
        assert_eq!(vec![0u32; 5].bytes(), 20);
        assert_eq!(().keys(), 0);
    }

    #[test]
    fn human_sizes_keep_short() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(3 << 20), "3.0 MiB");
        assert_eq!(human(5 << 30), "5.0 GiB");
    }
}
