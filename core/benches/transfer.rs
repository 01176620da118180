//! What moving a bin costs per entry when it travels encoded (to another process): bincode
//! into chunks on the sender, decoded back into the state (the install) on the receiver.
//! The state is one bin of hashcount with 16M keys in 256 bins: 62,500 `u64 -> u64` entries.
//! A bin moving between workers of one process does none of this: it is handed over as it
//! is (`operator/handoff.rs`), one map insert and one remove per bin.
//!
//! Between processes each chunk is also a timely message: `chunk on the wire` is what timely's
//! bincode makes of one chunk (serialized into a buffer and read back), per entry of the bin.
//!
//! `cargo bench -p megaflux --bench transfer`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use megaflux::operator::DEFAULT_CHUNK_BYTES;
use megaflux::operator::transfer::{StateChunk, decode, encode};
use rustc_hash::FxHashMap;

const KEYS: u64 = 62_500;

fn bin() -> FxHashMap<u64, u64> {
    (0..KEYS).map(|k| (megaflux::bins::mix64(k), k)).collect()
}

fn encoded(state: &FxHashMap<u64, u64>) -> Vec<Vec<u8>> {
    let mut chunks = Vec::new();
    encode(state, DEFAULT_CHUNK_BYTES, |_, _, chunk| chunks.push(chunk));
    chunks
}

fn transfer(c: &mut Criterion) {
    let state = bin();
    let mut group = c.benchmark_group("bin");
    group.throughput(Throughput::Elements(KEYS));
    group.bench_function("encode", |b| {
        b.iter(|| {
            let mut bytes = 0;
            encode(black_box(&state), DEFAULT_CHUNK_BYTES, |_, _, chunk| {
                bytes += chunk.len()
            });
            bytes
        })
    });
    let chunks = encoded(&state);
    group.bench_function("decode and install", |b| {
        b.iter_batched(
            || chunks.clone(),
            decode::<FxHashMap<u64, u64>>,
            BatchSize::LargeInput,
        )
    });
    let chunk = StateChunk {
        dest: 1,
        bin: 0,
        seq: 0,
        total: 1,
        bytes: chunks.concat(),
    };
    group.bench_function("chunk on the wire", |b| {
        let mut wire = Vec::with_capacity(chunk.bytes.len() + 64);
        b.iter(|| {
            wire.clear();
            bincode::serialize_into(&mut wire, black_box(&chunk)).map_err(|e| e.to_string())?;
            bincode::deserialize::<StateChunk>(&wire).map_err(|e| e.to_string())
        })
    });
    group.finish();
}

criterion_group!(benches, transfer);
criterion_main!(benches);
