//! A histogram from a trace cannot choose how much memory reading it takes: a crafted
//! header claiming a 4 GiB payload, or a range whose counts would be huge, is refused without
//! a large allocation. While each case is read, this test binary's allocator (a [`Cap`])
//! refuses, and so aborts on, anything past [`BOUND`] more than it held before.

use std::alloc::System;

use cap::Cap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use megaflux::latency::{encode, merge_encoded};

/// Larger allocations fail (the process aborts): far more than a histogram read may take.
const REFUSED: usize = 256 << 20;

/// Every allocation of this test binary counts against [`REFUSED`] bytes in all: a trace
/// that makes a reader ask for more aborts the test.
#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, REFUSED);

/// The most a histogram read may allocate at once: its serialized bytes or its counts, a few
/// MiB, with room for the test's own strings.
const BOUND: usize = 16 << 20;

/// A real window histogram with header fields overwritten (offset, big-endian bytes).
fn crafted(edits: &[(usize, &[u8])]) -> String {
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
    h.record(1_000_000).expect("in range");
    let mut bytes = BASE64.decode(encode(&h).expect("it encodes")).expect("base64");
    for (at, field) in edits {
        bytes[*at..*at + field.len()].copy_from_slice(field);
    }
    BASE64.encode(bytes)
}

#[test]
fn crafted_histogram_headers_allocate_nothing_large() {
    let cases = [
        // A payload of 4 GiB.
        crafted(&[(4, u32::MAX.to_be_bytes().as_slice())]),
        // Five significant digits over the whole u64 range: ~50 MB of counts.
        crafted(&[
            (12, 5u32.to_be_bytes().as_slice()),
            (24, u64::MAX.to_be_bytes().as_slice()),
        ]),
    ];
    for text in &cases {
        ALLOCATOR
            .set_limit(ALLOCATOR.allocated() + BOUND)
            .expect("a limit above what is held");
        let read = merge_encoded(None, text);
        ALLOCATOR.set_limit(REFUSED).expect("the test holds little");
        assert!(read.is_none());
    }
}
