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
///
/// Implemented for the standard collections, integers, floats, `bool`, `char`, `String`,
/// `Option`, `Box` and tuples of up to eight of them, so `Bin<(BTreeMap<String, u64>, u64)>`
/// needs nothing more. A type of your own needs one line, `impl StateSize for MyState {}`,
/// and its size is then estimated from the type's ([`std::mem::size_of_val`]), with no keys;
/// implement the two methods to count what it holds.
pub trait StateSize {
    /// Keys (entries) held.
    fn keys(&self) -> usize {
        0
    }
    /// Estimated bytes in memory, without following pointers out of the entries.
    fn bytes(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

/// Everything a bin's state must be to live in a migrateable operator: encodable to move
/// to another process, sendable to move to another worker of this one as it is, creatable
/// empty, and measurable for observers.
pub trait BinState: Serialize + DeserializeOwned + Default + StateSize + Send + 'static {}

impl<S: Serialize + DeserializeOwned + Default + StateSize + Send + 'static> BinState for S {}

impl StateSize for () {
    fn bytes(&self) -> usize {
        0
    }
}

/// Plain values: no keys, their own size.
macro_rules! plain {
    ($($t:ty),*) => {$(
        impl StateSize for $t {}
    )*};
}
plain!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64, bool, char
);

impl StateSize for String {
    fn bytes(&self) -> usize {
        size_of::<String>() + self.capacity()
    }
}

impl<T: StateSize> StateSize for Option<T> {
    fn keys(&self) -> usize {
        self.as_ref().map_or(0, T::keys)
    }
    fn bytes(&self) -> usize {
        self.as_ref().map_or(size_of::<Self>(), |t| {
            size_of::<Self>() - size_of::<T>() + t.bytes()
        })
    }
}

impl<T: StateSize> StateSize for Box<T> {
    fn keys(&self) -> usize {
        T::keys(self)
    }
    fn bytes(&self) -> usize {
        size_of::<Self>() + T::bytes(self)
    }
}

/// Tuples: what their parts hold, together.
macro_rules! tuple {
    ($($t:ident . $i:tt),+) => {
        impl<$($t: StateSize),+> StateSize for ($($t,)+) {
            fn keys(&self) -> usize {
                0 $(+ self.$i.keys())+
            }
            fn bytes(&self) -> usize {
                0 $(+ self.$i.bytes())+
            }
        }
    };
}
tuple!(A.0);
tuple!(A.0, B.1);
tuple!(A.0, B.1, C.2);
tuple!(A.0, B.1, C.2, D.3);
tuple!(A.0, B.1, C.2, D.3, E.4);
tuple!(A.0, B.1, C.2, D.3, E.4, F.5);
tuple!(A.0, B.1, C.2, D.3, E.4, F.5, G.6);
tuple!(A.0, B.1, C.2, D.3, E.4, F.5, G.6, H.7);

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

/// Bytes as people write them: `1048576`, `64MiB`, `1.5 GiB`, `500 KB` (binary units
/// `KiB`, `MiB`, `GiB`; decimal `KB`, `MB`, `GB`; `B`; any case). Says what is wrong.
pub fn parse(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit_bytes: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => {
            return Err(format!(
                "{text:?}: unknown unit {other:?} (expected B, KiB, MiB, GiB, KB, MB or GB)"
            ));
        }
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a number of bytes, like 64MiB"))?;
    let bytes = n * unit_bytes as f64;
    if !(bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64) {
        return Err(format!("{text:?}: out of range"));
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_people_write_them_and_nonsense_is_named() {
        assert_eq!(parse("1048576"), Ok(1 << 20));
        assert_eq!(parse("64MiB"), Ok(64 << 20));
        assert_eq!(parse("1.5 GiB"), Ok(3 << 29));
        assert_eq!(parse("500 kb"), Ok(500_000));
        assert_eq!(parse("0"), Ok(0));
        assert!(parse("64 MiBs").unwrap_err().contains("unknown unit"));
        assert!(parse("MiB").unwrap_err().contains("expected a number"));
        assert!(parse("1.2.3").is_err());
        assert!(parse("99999999999 GiB").unwrap_err().contains("out of range"));
    }

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
    fn common_types_and_tuples_have_sizes_and_a_type_of_ones_own_needs_one_line() {
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        counts.insert("a".into(), 1);
        counts.insert("b".into(), 2);
        let state = (counts, 7u64);
        assert_eq!(state.keys(), 2);
        assert_eq!(state.bytes(), 2 * size_of::<(String, u64)>() + 8);
        assert_eq!(Some(vec![1u8, 2, 3]).keys(), 3);
        assert_eq!(None::<Vec<u8>>.keys(), 0);
        assert_eq!(String::with_capacity(100).bytes(), size_of::<String>() + 100);
        assert_eq!((1u8, 2i64, 3.0f32, true).bytes(), 1 + 8 + 4 + 1);

        #[derive(Default)]
        struct Mine {
            _total: u64,
            _seen: [u32; 4],
        }
        impl StateSize for Mine {}
        assert_eq!((Mine::default().keys(), Mine::default().bytes()), (0, 24));
    }

    #[test]
    fn human_sizes_keep_short() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(3 << 20), "3.0 MiB");
        assert_eq!(human(5 << 30), "5.0 GiB");
    }
}
