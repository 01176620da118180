//! Traces are untrusted input: no bytes, no bytes after a real header, and no mutation of a
//! small real trace make the trace reader, the seek index, the player, the Perfetto export
//! (the report's path) or a re-run's reading panic; each returns, with a value or an error,
//! and none makes the process hold more than [`REFUSED`] bytes: this binary's allocator (a
//! [`Cap`]) refuses more, which aborts the test.

use std::alloc::System;

use cap::Cap;
use std::io::{Cursor, Write};
use std::sync::OnceLock;
use std::time::Duration;

use megaflux_probe::record::{BadLines, TraceReader, read_from};
use megaflux_replay::perfetto;
use megaflux_replay::player::{Player, Request};
use megaflux_replay::rerun::{Options, Recording};
use megaflux_replay::seek::Index;
use proptest::prelude::*;

mod common;

/// The most this test binary may hold at once, reading traces of a few hundred KB in
/// parallel: a line, a histogram (4 MiB), a model's bins (a few MB) each. More aborts it:
/// what an unbounded claim in a trace asks.
const REFUSED: usize = 256 << 20;

/// Every allocation of this test binary counts against [`REFUSED`] bytes in all: a trace
/// that makes a reader ask for more aborts the test.
#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, REFUSED);

/// The first 110 lines of the cluster sample (header, hellos, keyframe, samples, latency
/// windows, a plan and its moves) and its summary line.
fn small_trace() -> &'static [u8] {
    static TRACE: OnceLock<Vec<u8>> = OnceLock::new();
    TRACE.get_or_init(|| {
        let path = common::sample("cluster-keycount.jsonl");
        let text = std::fs::read_to_string(path).expect("the sample reads");
        let lines: Vec<&str> = text.lines().collect();
        let mut small: Vec<&str> = lines.iter().take(110).copied().collect();
        small.extend(lines.last());
        (small.join("\n") + "\n").into_bytes()
    })
}

/// The small trace's header line, newline included.
fn header_line() -> &'static [u8] {
    let trace = small_trace();
    let end = trace
        .iter()
        .position(|b| *b == b'\n')
        .map_or(trace.len(), |i| i + 1);
    &trace[..end]
}

/// Reads `bytes` as a trace every way the tools do. Whatever it is, each returns.
fn exercise(bytes: &[u8]) {
    // The whole-trace reader.
    let _ = read_from(bytes, "fuzz");
    // The seek index: built, then sought through.
    if let Ok(mut reader) = TraceReader::new(Cursor::new(bytes.to_vec()), "fuzz")
        && let Ok(index) = Index::build(&mut reader)
    {
        for n in [0, 1, index.events / 2, index.events] {
            let _ = index.model_after(&mut reader, n);
        }
        let _ = index.events_until(&mut reader, index.end_s);
        let _ = index.events_until(&mut reader, index.start_s);
    }
    // The player, asked everything.
    if let Ok(reader) = TraceReader::new(Cursor::new(bytes.to_vec()), "fuzz")
        && let Ok(mut player) = Player::new(reader)
    {
        let _ = player.start();
        let _ = player.advance(Duration::from_secs(3600));
        for request in [
            Request::StepBack,
            Request::PrevMark,
            Request::SeekTo(f64::MAX),
            Request::NextMark,
            Request::SeekBy(-1e300),
            Request::Step,
            Request::PlayPause,
        ] {
            let _ = player.request(request);
        }
        let _ = player.advance(Duration::from_secs(3600));
    }
    // The report's path: the Perfetto export of a reader that skips bad lines.
    if let Ok(mut reader) = TraceReader::new(bytes, "fuzz") {
        reader.set_bad_lines(BadLines::Skip);
        let _ = perfetto::export(&mut reader, std::io::sink(), "nowhere");
    }
    // A re-run's reading, from a file, and its configuration (not run).
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    file.write_all(bytes).expect("written");
    if let Ok(recording) = Recording::read(file.path()) {
        let _ = recording.rerun(&Options::default());
    }
}

/// Words that make a trace's numbers and structure interesting.
const TOKENS: &[&str] = &[
    "4294967295",
    "18446744073709551615",
    "-1",
    "1e308",
    "null",
    "\n",
    "{",
    "}",
    "\"",
    "[",
    "0",
    "\"latency\"",
    "\"keyframe\"",
    "HISTEwAA/////w==",
];

#[derive(Clone, Debug)]
enum Mutation {
    /// The byte at a place (modulo the length) becomes this one.
    Flip(usize, u8),
    /// A token goes in at a place.
    Insert(usize, &'static str),
    /// Up to that many bytes from a place go.
    Delete(usize, usize),
    /// The trace ends at a place.
    Cut(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Flip(at, byte)),
        (any::<usize>(), prop::sample::select(TOKENS)).prop_map(|(at, t)| Mutation::Insert(at, t)),
        (any::<usize>(), 0usize..256).prop_map(|(at, n)| Mutation::Delete(at, n)),
        any::<usize>().prop_map(Mutation::Cut),
    ]
}

fn mutate(bytes: &mut Vec<u8>, mutation: &Mutation) {
    let len = bytes.len();
    match *mutation {
        Mutation::Flip(at, byte) if len > 0 => bytes[at % len] = byte,
        Mutation::Insert(at, token) => {
            let tail = bytes.split_off(at % (len + 1));
            bytes.extend_from_slice(token.as_bytes());
            bytes.extend(tail);
        }
        Mutation::Delete(at, n) if len > 0 => {
            let from = at % len;
            let tail = bytes.split_off((from + n).min(len));
            bytes.truncate(from);
            bytes.extend(tail);
        }
        Mutation::Cut(at) => bytes.truncate(at % (len + 1)),
        Mutation::Flip(..) | Mutation::Delete(..) => {}
    }
}

#[test]
fn the_small_trace_reads_whole() {
    let trace = read_from(small_trace(), "small").expect("it reads");
    assert!(trace.unreadable.is_empty(), "{}", trace.unreadable);
    assert!(trace.events.len() > 100);
    exercise(small_trace());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn no_bytes_make_a_reader_panic_or_allocate_much(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        after_header in any::<bool>(),
    ) {
        let mut input = if after_header { header_line().to_vec() } else { Vec::new() };
        input.extend(bytes);
        exercise(&input);
    }

    #[test]
    fn no_mutation_of_a_real_trace_makes_a_reader_panic_or_allocate_much(
        mutations in proptest::collection::vec(mutation(), 1..12),
    ) {
        let mut bytes = small_trace().to_vec();
        for m in &mutations {
            mutate(&mut bytes, m);
        }
        exercise(&bytes);
    }
}
