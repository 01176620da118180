//! Opening an hour-long trace in the time machine and seeking to its end.
//!
//! The hour is made from the committed sample `traces/keycount-fluid.jsonl` (a real 4 s
//! recording: 64 bins, 2 workers, two migrations) repeated back to back for 3600 s, each copy's
//! clock and latency windows moved on by the copies before it. It is written once to the
//! system's temporary directory; its size and event count are printed.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use criterion::{Criterion, criterion_group, criterion_main};
use megaflux_probe::event::{Event, Stamped};
use megaflux_probe::record::TraceReader;
use megaflux_replay::player::{Player, Request};

/// The trace's length, in seconds of its clock.
const HOUR_S: f64 = 3600.0;

fn hour() -> PathBuf {
    let sample = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces/keycount-fluid.jsonl");
    let out = std::env::temp_dir().join("megaflux-bench-hour.jsonl");
    if !out.exists() {
        write_hour(&sample, &out);
    }
    let events =
        std::io::BufRead::lines(std::io::BufReader::new(std::fs::File::open(&out).unwrap())).count() - 1;
    let bytes = std::fs::metadata(&out).unwrap().len();
    eprintln!(
        "{}: {:.1} MB, {events} events over {HOUR_S} s",
        out.display(),
        bytes as f64 / 1e6
    );
    out
}

fn write_hour(sample: &Path, out: &Path) {
    let mut reader = TraceReader::open(sample).unwrap();
    let header = reader.header().clone();
    let mut events = Vec::new();
    let mut summary = None;
    while let Some(e) = reader.next_event().unwrap() {
        match e.event {
            Event::Summary { .. } => summary = Some(e),
            _ => events.push(e),
        }
    }
    let period = events.iter().map(|e| e.at_s).fold(0.0, f64::max) + 0.25;
    let windows = (period * 4.0).ceil() as u64;
    let tmp = out.with_extension("part");
    let mut w = BufWriter::new(std::fs::File::create(&tmp).unwrap());
    serde_json::to_writer(&mut w, &header).unwrap();
    w.write_all(b"\n").unwrap();
    let copies = (HOUR_S / period).ceil() as u64;
    for k in 0..copies {
        for e in &events {
            // A process says hello once.
            if k > 0 && matches!(e.event, Event::Hello { .. }) {
                continue;
            }
            let mut e: Stamped = e.clone();
            e.at_s += k as f64 * period;
            if let Event::Latency { window, t_s, .. } = &mut e.event {
                *window += k * windows;
                *t_s += k as f64 * period;
            }
            serde_json::to_writer(&mut w, &e).unwrap();
            w.write_all(b"\n").unwrap();
        }
    }
    if let Some(s) = summary {
        serde_json::to_writer(&mut w, &s).unwrap();
        w.write_all(b"\n").unwrap();
    }
    w.flush().unwrap();
    drop(w);
    std::fs::rename(tmp, out).unwrap();
}

fn open_and_seek_to_the_end(c: &mut Criterion) {
    let path = hour();
    let mut group = c.benchmark_group("hour-long trace");
    group.sample_size(10);
    group.bench_function("open and seek to the end", |b| {
        b.iter(|| {
            let mut player = Player::new(TraceReader::open(&path).unwrap()).unwrap();
            let end = player.index().end_s;
            let out = player.request(Request::SeekTo(end));
            assert!(out.len() >= 2);
        })
    });
    group.bench_function("seek to the middle of an open trace", |b| {
        let mut player = Player::new(TraceReader::open(&path).unwrap()).unwrap();
        let middle = player.index().end_s / 2.0;
        b.iter(|| player.request(Request::SeekTo(middle)))
    });
    group.finish();
}

criterion_group!(benches, open_and_seek_to_the_end);
criterion_main!(benches);
