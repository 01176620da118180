//! Bin state in transit: a bin is serialized into bounded chunks, so that no single
//! message (and no single allocation) holds a whole large bin.
//!
//! Both ends stream: the sender serializes straight into chunk-sized buffers and hands each
//! one on as it fills, and the receiver deserializes from the chunks in order, freeing each
//! once read. Neither side ever holds the bin's whole encoding in one buffer next to the
//! chunks, so a move costs the state plus its encoding once, not twice.

use std::collections::HashMap;
use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use crate::Time;

/// The chunk size used when none is given: 1 MiB.
pub const DEFAULT_CHUNK_BYTES: usize = 1 << 20;

/// One piece of a bin's serialized state, addressed to the bin's new owner.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StateChunk {
    /// The worker that receives the bin.
    pub dest: u32,
    /// The bin whose state this is.
    pub bin: u32,
    /// Position of this chunk in the bin's byte stream.
    pub seq: u32,
    /// How many chunks the bin was cut into.
    pub total: u32,
    /// This chunk's part of the bin's bincode encoding (at most the chunk size). Serialized
    /// as one byte string (the same bytes on the wire): as a sequence, bincode writes and
    /// reads it a byte at a time, 2.58 ms a 1 MB chunk against 63 µs (`benches/transfer.rs`),
    /// which between processes cost ten times the bin's encoding.
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
}

/// How one value was cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// The number of chunks (at least one).
    pub chunks: u32,
    /// The encoding's length, in bytes.
    pub bytes: u64,
}

/// Serializes `value` with bincode into chunks of at most `chunk_bytes` bytes, passing each
/// to `emit(seq, total, bytes)` as soon as it is full. The chunks joined are exactly
/// `bincode::serialize(value)`; a value that encodes to nothing is one empty chunk.
pub fn encode<T: Serialize>(
    value: &T,
    chunk_bytes: usize,
    mut emit: impl FnMut(u32, u32, Vec<u8>),
) -> Encoded {
    // Serializing plain data into memory cannot fail; a type whose Serialize fails (a
    // sequence of unknown length) is a bug in the operator's state type.
    let len = match bincode::serialized_size(value) {
        Ok(len) => len,
        Err(e) => panic!("serializing bin state failed: {e}"),
    };
    let size = chunk_bytes.max(1) as u64;
    let total = len.div_ceil(size).max(1);
    let Ok(total) = u32::try_from(total) else {
        panic!("a bin of {len} bytes needs more than 2^32 chunks of {size} bytes");
    };
    let mut out = Chunker {
        size: size as usize,
        left: len,
        seq: 0,
        total,
        current: Vec::new(),
        emit: &mut emit,
    };
    out.start();
    if let Err(e) = bincode::serialize_into(&mut out, value) {
        panic!("serializing bin state failed: {e}");
    }
    out.finish();
    assert_eq!(
        out.seq, total,
        "a bin's serialized size changed while it was written"
    );
    Encoded {
        chunks: total,
        bytes: len,
    }
}

/// A writer that cuts its bytes into chunks of `size`, each allocated at its final size.
struct Chunker<'a, E: FnMut(u32, u32, Vec<u8>)> {
    size: usize,
    /// Bytes not yet given a chunk buffer.
    left: u64,
    seq: u32,
    total: u32,
    current: Vec<u8>,
    emit: &'a mut E,
}

impl<E: FnMut(u32, u32, Vec<u8>)> Chunker<'_, E> {
    fn start(&mut self) {
        let cap = (self.size as u64).min(self.left) as usize;
        self.left -= cap as u64;
        self.current = Vec::with_capacity(cap);
    }

    fn pass_on(&mut self) {
        let full = std::mem::take(&mut self.current);
        (self.emit)(self.seq, self.total, full);
        self.seq += 1;
    }

    /// Writes `buf`, which does not fit in the current chunk, across as many as it takes.
    #[cold]
    #[inline(never)]
    fn spill(&mut self, mut buf: &[u8]) {
        loop {
            let room = self.size - self.current.len();
            if buf.len() <= room {
                self.current.extend_from_slice(buf);
                return;
            }
            let (now, rest) = buf.split_at(room);
            self.current.extend_from_slice(now);
            buf = rest;
            self.pass_on();
            self.start();
        }
    }

    fn finish(&mut self) {
        if !self.current.is_empty() || self.seq == 0 {
            self.pass_on();
        }
    }
}

impl<E: FnMut(u32, u32, Vec<u8>)> Write for Chunker<'_, E> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        // Most writes are one primitive that fits: keep that path small enough to inline.
        if buf.len() <= self.size - self.current.len() {
            self.current.extend_from_slice(buf);
        } else {
            self.spill(buf);
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads a value back from its chunks, in order, dropping each chunk once it is read.
pub fn decode<T: for<'de> Deserialize<'de>>(chunks: Vec<Vec<u8>>) -> Result<T, bincode::Error> {
    // A bin of one chunk (hashcount's 62,500 entries of a 16M-key state) is read in place:
    // bincode's slice reader skips the `Read` call per primitive.
    if let [only] = chunks.as_slice() {
        return bincode::deserialize(only);
    }
    let mut chunks = chunks.into_iter();
    let current = chunks.next().unwrap_or_default();
    bincode::deserialize_from(Unchunker {
        chunks,
        current,
        at: 0,
    })
}

/// A reader over chunks in order.
struct Unchunker {
    chunks: std::vec::IntoIter<Vec<u8>>,
    current: Vec<u8>,
    at: usize,
}

impl Unchunker {
    /// Moves to the next chunk with bytes left; `false` at the end.
    fn advance(&mut self) -> bool {
        while self.at == self.current.len() {
            match self.chunks.next() {
                Some(next) => {
                    self.current = next;
                    self.at = 0;
                }
                None => return false,
            }
        }
        true
    }
}

impl Read for Unchunker {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.advance() {
            return Ok(0);
        }
        let n = buf.len().min(self.current.len() - self.at);
        buf[..n].copy_from_slice(&self.current[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }

    #[inline]
    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        // The common case, one primitive inside the current chunk, without the loop.
        if let Some(bytes) = self.current.get(self.at..self.at + buf.len()) {
            buf.copy_from_slice(bytes);
            self.at += buf.len();
            return Ok(());
        }
        let mut filled = 0;
        while filled < buf.len() {
            match self.read(&mut buf[filled..])? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => filled += n,
            }
        }
        Ok(())
    }
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

    /// Encodes into a list of chunks, checking each one's place and count.
    fn chunks_of<T: Serialize>(value: &T, size: usize) -> Vec<Vec<u8>> {
        let mut chunks = Vec::new();
        let encoded = encode(value, size, |seq, total, bytes| {
            assert_eq!(seq as usize, chunks.len());
            assert!(seq < total);
            chunks.push(bytes);
        });
        assert_eq!(encoded.chunks as usize, chunks.len());
        assert_eq!(encoded.bytes as usize, chunks.iter().map(Vec::len).sum::<usize>());
        chunks
    }

    #[test]
    fn round_trip_in_small_chunks() {
        let value: Vec<(u64, String)> = (0..1000).map(|i| (i, format!("v{i}"))).collect();
        let chunks = chunks_of(&value, 100);
        assert!(chunks.len() > 10);
        assert!(chunks.iter().all(|c| c.len() <= 100 && !c.is_empty()));
        // Every chunk is allocated at its final size, and the format is bincode's own.
        assert!(chunks.iter().all(|c| c.capacity() == c.len()));
        assert_eq!(chunks.concat(), bincode::serialize(&value).unwrap());
        let back: Vec<(u64, String)> = decode(chunks).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn primitives_split_across_chunks_read_back() {
        let value: Vec<u64> = (0..100).map(|i| i * 0x0101_0101_0101).collect();
        for size in [1, 3, 7, 8, 9, 800, 808, 1 << 20] {
            let chunks = chunks_of(&value, size);
            assert_eq!(decode::<Vec<u64>>(chunks).unwrap(), value, "chunks of {size}");
        }
    }

    #[test]
    fn empty_value_is_one_chunk() {
        let chunks = chunks_of(&(), 100);
        assert_eq!(chunks, vec![Vec::<u8>::new()]);
        decode::<()>(chunks).unwrap();
    }

    #[test]
    fn cut_short_is_an_error() {
        let value: Vec<u64> = (0..100).collect();
        let mut chunks = chunks_of(&value, 64);
        chunks.pop();
        assert!(decode::<Vec<u64>>(chunks).is_err());
        // One chunk is read in place: cut short, it is an error too.
        let mut one = chunks_of(&value, 1 << 20);
        assert_eq!(one.len(), 1);
        one[0].truncate(100);
        assert!(decode::<Vec<u64>>(one).is_err());
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
