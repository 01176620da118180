//! The Perfetto export of every sample trace in `traces/` is valid trace-event JSON with one
//! async slice per recorded bin move, each begun and ended once.

use std::collections::HashMap;

use megaflux_probe::event::{Event, Phase};
use megaflux_probe::record::{TraceReader, read};
use megaflux_replay::perfetto::export;
use serde_json::Value;

mod common;
use common::samples;

#[test]
fn every_sample_exports_one_async_slice_per_bin_move() {
    for path in samples() {
        let trace = read(&path).expect("a sample trace reads");
        let issued = trace
            .events
            .iter()
            .filter(|e| {
                matches!(
                    e.event,
                    Event::Migration {
                        phase: Phase::Issued,
                        ..
                    }
                )
            })
            .count();
        let mut reader = TraceReader::open(&path).unwrap();
        let mut out = Vec::new();
        let stats = export(&mut reader, &mut out, "memory").expect("exports");
        let json: Value = serde_json::from_slice(&out).expect("valid JSON");
        let events = json["traceEvents"].as_array().expect("a traceEvents array");
        assert_eq!(stats.events as usize, events.len());

        // Every event has a phase and a process; all but metadata have a time.
        for e in events {
            let ph = e["ph"].as_str().expect("ph");
            assert!(e["pid"].is_u64(), "{}: no pid: {e}", path.display());
            if ph != "M" {
                assert!(
                    e["ts"].as_f64().is_some_and(|t| t >= 0.0),
                    "{}: ts: {e}",
                    path.display()
                );
            }
        }
        let mut slices: HashMap<u64, (usize, usize)> = HashMap::new();
        for e in events.iter().filter(|e| e["cat"] == "move") {
            let id = e["id"].as_u64().expect("an async id");
            let entry = slices.entry(id).or_default();
            match e["ph"].as_str() {
                Some("b") => entry.0 += 1,
                Some("e") => entry.1 += 1,
                other => panic!("{}: move event of phase {other:?}", path.display()),
            }
        }
        assert_eq!(slices.len(), issued, "{}: slices per issued move", path.display());
        assert_eq!(stats.moves as usize, issued);
        assert!(
            slices.values().all(|&n| n == (1, 1)),
            "{}: a move slice not begun and ended once",
            path.display()
        );
        let workers = (trace.header.peers) as usize;
        let threads = events.iter().filter(|e| e["name"] == "thread_name").count();
        assert_eq!(threads, workers, "{}: a thread per worker", path.display());
    }
}

/// The balancer's sample shows its measures as a counter and its decision as an instant.
#[test]
fn the_balancers_measures_and_decisions_are_exported() {
    let mut reader = TraceReader::open(&common::sample("hashcount-balance.jsonl")).unwrap();
    let mut out = Vec::new();
    export(&mut reader, &mut out, "memory").expect("exports");
    let json: Value = serde_json::from_slice(&out).expect("valid JSON");
    let events = json["traceEvents"].as_array().expect("a traceEvents array");
    let named = |prefix: &str, ph: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == ph && e["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
            .count()
    };
    assert!(named("imbalance", "C") >= 3, "a measure a second");
    assert_eq!(named("balancer issued: worker 1 at 1.42x mean", "i"), 1);
}
