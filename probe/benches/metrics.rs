//! What one scrape costs the model's owner and the server: a snapshot of a large job's model
//! (65536 bins on 16 workers, two operators, 256 Kafka partitions, a minute of latency
//! windows) and its encoding in both formats.

use criterion::{Criterion, criterion_group, criterion_main};
use megaflux_probe::JobModel;
use megaflux_probe::event::{Event, Stamped};
use megaflux_probe::metrics::{Format, Snapshot};

const BINS: u32 = 65536;
const WORKERS: u32 = 16;
const PARTITIONS: u32 = 256;

fn at(at_s: f64, event: Event) -> Stamped {
    Stamped {
        at_s,
        process: 0,
        event,
    }
}

fn big_job() -> JobModel {
    let mut m = JobModel::new();
    m.apply(&at(
        0.0,
        Event::Hello {
            processes: 1,
            workers: WORKERS,
            peers: WORKERS,
            bins: BINS,
            config: serde_json::json!({"replicas": 2, "epoch_us": 100}),
            anchor_unix_s: None,
        },
    ));
    let mut window = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
    for i in 0..100_000u64 {
        window
            .record(20_000 + i * i % 4_000_000)
            .expect("a value in bounds");
    }
    let encoded = megaflux::latency::encode(&window).expect("the window encodes");
    for w in 0..WORKERS {
        m.apply(&at(
            0.1,
            Event::JobStarted {
                worker: w,
                peers: WORKERS,
                base: 10,
                records: Some(1000),
            },
        ));
        for operator in ["count", "join"] {
            m.apply(&at(
                0.2,
                Event::Sampled {
                    worker: w,
                    operator: operator.into(),
                    full: true,
                    bins: u64::from(BINS / WORKERS),
                    keys: 1000,
                    bytes: 8000,
                },
            ));
            m.apply(&at(
                0.2,
                Event::BinLoads {
                    worker: w,
                    operator: operator.into(),
                    interval_ns: 250_000_000,
                    applied: Some(5000),
                    loads: "1:10:100".into(),
                },
            ));
            m.apply(&at(
                0.2,
                Event::Frontier {
                    worker: w,
                    operator: operator.into(),
                    applied: Some(100),
                    control: Some(100),
                    input: 102,
                },
            ));
        }
        m.apply(&at(
            0.25,
            Event::WorkerStats {
                worker: w,
                records: 100_000,
                applied: Some(100_000 + u64::from(w) * 1000),
                outputs_total: Some(100_000),
                busy_ns: 100_000_000,
                interval_ns: 250_000_000,
            },
        ));
    }
    for p in 0..PARTITIONS {
        m.apply(&at(
            0.3,
            Event::InputPartition {
                partition: p,
                offset: 1000,
                end: 2000,
            },
        ));
    }
    // A minute of latency windows.
    for w in 0..240u64 {
        m.apply(&at(
            w as f64 / 4.0,
            Event::Latency {
                window: w,
                t_s: w as f64 / 4.0,
                count: 100_000,
                p50: 40_000,
                p99: 400_000,
                max: 4_000_000,
                histogram: encoded.clone(),
            },
        ));
    }
    m
}

fn scrape(c: &mut Criterion) {
    let model = big_job();
    c.bench_function("snapshot of a 65536-bin, 16-worker model", |b| {
        b.iter(|| Snapshot::of(&model, false))
    });
    let snapshot = Snapshot::of(&model, false);
    c.bench_function("encode as text", |b| {
        b.iter(|| snapshot.clone().encode(Format::Prometheus))
    });
    c.bench_function("encode as OpenMetrics", |b| {
        b.iter(|| snapshot.clone().encode(Format::OpenMetrics))
    });
}

criterion_group!(benches, scrape);
criterion_main!(benches);
