//! Times encoding and decoding one bin of hashcount state (62,500 keys, as with 16M keys in 256 bins).
use std::time::Instant;

use megaflux::operator::transfer::{decode, encode};
use rustc_hash::FxHashMap;

fn main() {
    let bin: FxHashMap<u64, u64> = (0..62_500u64).map(|k| (megaflux::bins::mix64(k), k)).collect();
    let rounds = 50;
    let start = Instant::now();
    let mut chunks = Vec::new();
    for _ in 0..rounds {
        chunks.clear();
        encode(&bin, 1 << 20, |_, _, chunk| chunks.push(chunk));
    }
    let enc = start.elapsed() / rounds;
    let start = Instant::now();
    for _ in 0..rounds {
        let back: FxHashMap<u64, u64> = decode(chunks.clone()).unwrap();
        assert_eq!(back.len(), bin.len());
    }
    let dec = start.elapsed() / rounds;
    println!("encode {enc:?} decode {dec:?} ({} chunks)", chunks.len());
}
