//! Seeking to any point of a trace, from its keyframes, gives the model that applying every
//! event up to that point gives: on the sample traces as recorded, and with keyframes put
//! anywhere in them; seeks go back and forth on one reader.

use std::io::Cursor;
use std::path::PathBuf;

use megaflux_probe::event::{Event, Stamped};
use megaflux_probe::model::{JobModel, LATENCY_WINDOWS};
use megaflux_probe::record::{Trace, TraceHeader, TraceReader, Unreadable, read, read_from};
use megaflux_replay::seek::Index;
use proptest::prelude::*;

const SAMPLES: [&str; 5] = [
    "keycount-fluid.jsonl",
    "keycount-failover.jsonl",
    "q4-batched.jsonl",
    "cluster-keycount.jsonl",
    "sessions-drain.jsonl",
];

fn sample(name: &str) -> Trace {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../traces")
        .join(name);
    read(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// `trace`'s events with a keyframe of the model so far before each event numbered in
/// `at`, as a trace file's bytes and as its reader reads them back.
fn with_keyframes(trace: &Trace, at: &[usize]) -> (Vec<u8>, Vec<Stamped>) {
    let mut events = Vec::new();
    let mut model = JobModel::from_header(&trace.header);
    for (i, e) in trace.events.iter().enumerate() {
        if at.contains(&i) {
            let frame = Stamped {
                at_s: e.at_s,
                process: 0,
                event: Event::Keyframe {
                    model: serde_json::to_value(model.keyframe()).unwrap(),
                },
            };
            model.apply(&frame);
            events.push(frame);
        }
        model.apply(e);
        events.push(e.clone());
    }
    let mut bytes = serde_json::to_vec(&trace.header).unwrap();
    bytes.push(b'\n');
    for e in &events {
        bytes.extend(serde_json::to_vec(e).unwrap());
        bytes.push(b'\n');
    }
    // The events as a reader of the file gets them (floats through text).
    let events = megaflux_probe::record::read_from(bytes.as_slice(), "memory")
        .unwrap()
        .events;
    (bytes, events)
}

/// Every event of `events` applied to the model of the trace's header: what seeking must
/// equal.
fn replay_all<'a>(header: &TraceHeader, events: impl IntoIterator<Item = &'a Stamped>) -> JobModel {
    let mut model = JobModel::from_header(header);
    for e in events {
        model.apply(e);
    }
    model
}

fn check(bytes: Vec<u8>, events: &[Stamped], seeks: &[f64]) -> Result<(), TestCaseError> {
    let mut reader = TraceReader::new(Cursor::new(bytes), "memory").unwrap();
    let index = Index::build(&mut reader).unwrap();
    let header = reader.header().clone();
    prop_assert_eq!(index.events as usize, events.len());
    for at in seeks {
        let n = (at * events.len() as f64).round() as u64;
        let sought = index.model_after(&mut reader, n).unwrap();
        let replayed = replay_all(&header, &events[..n as usize]);
        prop_assert!(sought == replayed, "after {} of {} events", n, events.len());
    }
    Ok(())
}

#[test]
fn the_samples_have_keyframes_to_seek_from() {
    for name in SAMPLES {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../traces")
            .join(name);
        let mut reader = TraceReader::open(&path).unwrap();
        let index = Index::build(&mut reader).unwrap();
        assert!(!index.keyframes.is_empty(), "{name}");
        // Seeking to the end and back to the start on one reader.
        let trace = sample(name);
        let end = index.model_after(&mut reader, index.events).unwrap();
        assert!(
            end == replay_all(&trace.header, &trace.events),
            "{name}: at the end"
        );
        let start = index.model_after(&mut reader, 1).unwrap();
        assert!(
            start == replay_all(&trace.header, &trace.events[..1]),
            "{name}: at the start"
        );
    }
}

/// A model holds at most [`LATENCY_WINDOWS`] latency windows, dropping the oldest; a model
/// sought from a keyframe after more windows than that holds the same ones.
#[test]
fn seeking_keeps_the_latency_windows_a_model_keeps() {
    let header = sample("keycount-fluid.jsonl").header;
    let window = |i: usize| Stamped {
        at_s: i as f64 * 0.25,
        process: 0,
        event: Event::Latency {
            window: i as u64,
            t_s: i as f64 * 0.25,
            count: 1,
            p50: 1,
            p99: 1,
            max: 1,
            histogram: String::new(),
        },
    };
    let n = LATENCY_WINDOWS + LATENCY_WINDOWS / 8 + 3;
    let trace = Trace {
        header,
        events: (0..n).map(window).collect(),
        skipped: 0,
        unreadable: Unreadable::default(),
        truncated: false,
    };
    let (bytes, events) = with_keyframes(&trace, &[n - 1]);
    let replayed = replay_all(&trace.header, &events);
    assert!(replayed.latency.len() <= LATENCY_WINDOWS);
    check(bytes, &events, &[1.0]).unwrap();
}

/// A line that is not an event in the middle of a trace is skipped by the index, which
/// names it; the events around it are counted and sought as a reader that skips it reads
/// them.
#[test]
fn the_index_skips_a_line_it_cannot_read() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces/keycount-fluid.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[247] = "not an event";
    let bytes = (lines.join("\n") + "\n").into_bytes();
    let trace = read_from(bytes.as_slice(), "broken").unwrap();
    assert_eq!(trace.unreadable.lines().to_vec(), vec![248]);
    let mut reader = TraceReader::new(Cursor::new(bytes), "broken").unwrap();
    let index = Index::build(&mut reader).expect("the index skips the line");
    assert_eq!(index.events as usize, trace.events.len());
    assert_eq!(index.unreadable.lines().to_vec(), vec![248]);
    assert_eq!(index.events_until(&mut reader, f64::MAX).unwrap(), index.events);
    // Line 248 is the 247th line after the header: 246 events come before it.
    let before = index.model_after(&mut reader, 246).unwrap();
    assert!(before == replay_all(&trace.header, &trace.events[..246]));
    // Rebuilding past it reads it, and names it.
    if index.keyframes.iter().all(|k| k.events_before < 246) {
        let e = index.model_after(&mut reader, 300).unwrap_err().to_string();
        assert!(e.contains("line 248"), "{e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn seeking_equals_replaying_from_the_start(
        sample_index in 0..SAMPLES.len(),
        frames in proptest::collection::vec(0.0f64..1.0, 0..6),
        seeks in proptest::collection::vec(0.0f64..=1.0, 1..8),
    ) {
        let trace = sample(SAMPLES[sample_index]);
        let at: Vec<usize> = frames.iter().map(|f| (f * trace.events.len() as f64) as usize).collect();
        let (bytes, events) = with_keyframes(&trace, &at);
        check(bytes, &events, &seeks)?;
    }
}
