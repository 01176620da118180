//! What one epoch costs with nothing to do: one worker advances its data and control inputs
//! by one time and steps until the output frontier passed it, with a migrateable count (F, S
//! and the broadcast control input) and with its native twin. This is the floor under every
//! epoch's latency, paid whether records arrive or not. The busy variants send
//! [`BUSY_RECORDS`] records of a million keys per epoch with the operators' activations
//! timed, as a run with a sampler does: what the per-bin bookkeeping costs shows there.
//!
//! `cargo bench -p megaflux --bench epoch`

use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use megaflux::operator::native_unary;
use megaflux::{Bin, Bins, ControlInst, StatefulConfig, Time, stateful_unary};
use rustc_hash::FxHashMap;
use timely::WorkerConfig;
use timely::communication::Allocator;
use timely::communication::allocator::Thread;
use timely::dataflow::operators::Probe;
use timely::dataflow::{InputHandleVec, ProbeHandle};
use timely::worker::Worker;

const BINS: usize = 256;
/// Records per epoch in the busy variants: 8M records/s at the default 100 µs epoch.
const BUSY_RECORDS: u64 = 800;
/// Keys the busy variants draw from.
const KEYS: u64 = 1 << 20;

fn count(_: Time, bin: &mut Bin<FxHashMap<u64, u64>>, records: &mut Vec<u64>, out: &mut Vec<(u64, u64)>) {
    for key in records.drain(..) {
        let n = bin.state.entry(key).or_default();
        *n += 1;
        out.push((key, *n));
    }
}

fn idle_epochs(c: &mut Criterion) {
    let mut group = c.benchmark_group("epoch");
    for (native, busy) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut worker = Worker::new(
            WorkerConfig::default(),
            Allocator::Thread(Thread::default()),
            Some(Instant::now()),
        );
        let config = StatefulConfig::uniform(Bins::new(BINS).expect("a power of two"), 1);
        if busy {
            config.observers.time_operators();
        }
        let mut data = InputHandleVec::<Time, u64>::new();
        let mut control = InputHandleVec::<Time, ControlInst>::new();
        let probe = ProbeHandle::new();
        worker.dataflow::<Time, _, _>(|scope| {
            let records = data.to_stream(scope);
            let out = if native {
                native_unary(records, &config, "count", |k: &u64| *k, count)
            } else {
                stateful_unary(
                    records,
                    control.to_stream(scope),
                    &config,
                    "count",
                    |k: &u64| *k,
                    count,
                )
            };
            out.probe_with(&probe);
        });
        let mut time: Time = 0;
        let name = match (busy, native) {
            (false, true) => "idle, native",
            (false, false) => "idle, migrateable",
            (true, true) => "busy, native",
            (true, false) => "busy, migrateable",
        };
        // A fixed LCG: the same keys in every run.
        let mut key: u64 = 1;
        group.bench_function(name, |b| {
            b.iter(|| {
                for _ in 0..if busy { BUSY_RECORDS } else { 0 } {
                    key = key
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    data.send((key >> 33) % KEYS);
                }
                time += 1;
                data.advance_to(time);
                control.advance_to(time);
                while probe.less_than(&time) {
                    worker.step();
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, idle_epochs);
criterion_main!(benches);
