//! Bin state in transit: a bin is serialized into bounded chunks, so that no single
//! message (and no single allocation) holds a whole large bin.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::Time;

/// The chunk size used when none is given: 1 MiB.
pub const DEFAULT_CHUNK_BYTES: usize = 1 << 20;

/// One piece of a bin's serialized state, addressed to the bin's new owner.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StateChunk {
    /// The worker that receives the bin.
    pub dest: u32,
    pub bin: u32,
    /// Position of this chunk in the bin's byte stream.
    pub seq: u32,
    /// How many chunks the bin was cut into.
    pub total: u32,
    pub bytes: Vec<u8>,
}

/// Serializes `value` with bincode into chunks of at most `chunk_bytes` bytes.
///
/// The value is first written into one buffer (bincode's fast path, several times quicker
/// than a streaming writer) and then cut: the extra copy is one bin, never the whole state.
pub fn encode<T: Serialize>(value: &T, chunk_bytes: usize) -> Vec<Vec<u8>> {
    let bytes = match bincode::serialize(value) {
        Ok(bytes) => bytes,
        // Serializing plain data into memory cannot fail.
        Err(e) => panic!("serializing bin state into memory failed: {e}"),
    };
    let size = chunk_bytes.max(1);
    if bytes.len() <= size {
        return vec![bytes];
    }
    bytes.chunks(size).map(<[u8]>::to_vec).collect()
}

/// Reads a value back from its chunks, in order.
pub fn decode<T: for<'de> Deserialize<'de>>(mut chunks: Vec<Vec<u8>>) -> Result<T, bincode::Error> {
    if chunks.len() == 1 {
        return bincode::deserialize(&chunks[0]);
    }
    let mut joined = Vec::with_capacity(chunks.iter().map(Vec::len).sum());
    for chunk in chunks.drain(..) {
        joined.extend_from_slice(&chunk);
    }
    bincode::deserialize(&joined)
}

/// Chunks received for bins that have not all arrived yet.
#[derive(Default)]
pub struct Assembly {
    partial: HashMap<(Time, u32), Vec<StateChunk>>,
}

impl Assembly {
    /// Adds a chunk; returns the bin's chunks in order once all of them are here.
    pub fn add(&mut self, time: Time, chunk: StateChunk) -> Option<(u32, Vec<Vec<u8>>)> {
        let key = (time, chunk.bin);
        let total = chunk.total as usize;
        let parts = self.partial.entry(key).or_default();
        parts.push(chunk);
        if parts.len() < total {
            return None;
        }
        let mut parts = self.partial.remove(&key).unwrap_or_default();
        parts.sort_by_key(|c| c.seq);
        Some((key.1, parts.into_iter().map(|c| c.bytes).collect()))
    }

    /// Forgets bins of times before `time`: their senders stopped before sending every
    /// chunk (a failure), and they can no longer be installed.
    pub fn forget_before(&mut self, time: Time) {
        self.partial.retain(|(t, _), _| *t >= time);
    }

    /// Whether any bin is still incomplete.
    pub fn is_empty(&self) -> bool {
        self.partial.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_in_small_chunks() {
        let value: Vec<(u64, String)> = (0..1000).map(|i| (i, format!("v{i}"))).collect();
        let chunks = encode(&value, 100);
        assert!(chunks.len() > 10);
        assert!(chunks.iter().all(|c| c.len() <= 100 && !c.is_empty()));
        let back: Vec<(u64, String)> = decode(chunks).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn empty_value_is_one_chunk() {
        let chunks = encode(&(), 100);
        assert_eq!(chunks.len(), 1);
        decode::<()>(chunks).unwrap();
    }

    #[test]
    fn assembly_waits_for_every_chunk() {
        let mut a = Assembly::default();
        let chunk = |seq, bytes: &[u8]| StateChunk {
            dest: 0,
            bin: 3,
            seq,
            total: 2,
            bytes: bytes.to_vec(),
        };
        assert!(a.add(7, chunk(1, b"cd")).is_none());
        let (bin, parts) = a.add(7, chunk(0, b"ab")).unwrap();
        assert_eq!(bin, 3);
        assert_eq!(parts, vec![b"ab".to_vec(), b"cd".to_vec()]);
        assert!(a.is_empty());
    }
}
