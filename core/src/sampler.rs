//! What each worker tells observers every [`SAMPLE_EVERY`]: the size of every bin it holds,
//! the frontiers of its operators, and its load. Everything goes out as `tracing` events
//! (targets `megaflux::state`, `megaflux::frontier`, `megaflux::worker`); with no subscriber
//! listening the sampler is never built.
//!
//! Bin sizes go out in full at the first sample; after that for the bins that changed since
//! the last sample, plus one [`REFRESH_EVERY`]th of all bins in turn, so that an observer
//! that dropped events catches up within `REFRESH_EVERY` samples without any one sample
//! reporting every bin of a job with 2^16 of them.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use timely::logging::{StartStop, TimelyEvent, TimelyEventBuilder};
use timely::worker::Worker;

use crate::Time;
use crate::operator::{BinSize, Observers};

/// How often a worker samples its bins, frontiers and load.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// Every bin's size is reported at least once every this many samples.
pub const REFRESH_EVERY: u64 = 20;

/// Whether anyone listens to the sampler's events (decided once per run).
pub fn wanted() -> bool {
    tracing::enabled!(target: "megaflux::state", tracing::Level::INFO)
}

/// One worker's sampler.
pub struct Sampler {
    worker: usize,
    observers: Observers,
    last: Instant,
    samples: u64,
    /// Per operator, the size last reported for each bin (`None`: not held here).
    reported: Vec<Vec<Option<(u64, u64)>>>,
    records_before: u64,
    busy: Rc<Cell<u64>>,
    busy_before: u64,
    scratch: Vec<BinSize>,
}

impl Sampler {
    /// Starts sampling `observers` on `worker`. Call before any dataflow is built: the
    /// worker's busy time comes from timely's scheduling log, which operators pick up when
    /// they are built.
    pub fn new(worker: &mut Worker, observers: Observers) -> Self {
        let busy = Rc::new(Cell::new(0u64));
        if let Some(mut register) = worker.log_register() {
            let busy = Rc::clone(&busy);
            // Only the outermost schedule counts: dataflows schedule their operators inside.
            let (mut depth, mut since) = (0usize, Duration::ZERO);
            register.insert::<TimelyEventBuilder, _>("timely", move |_now, batch| {
                let Some(batch) = batch else { return };
                for (at, event) in batch.iter() {
                    if let TimelyEvent::Schedule(s) = event {
                        match s.start_stop {
                            StartStop::Start => {
                                if depth == 0 {
                                    since = *at;
                                }
                                depth += 1;
                            }
                            StartStop::Stop => {
                                depth = depth.saturating_sub(1);
                                if depth == 0 {
                                    busy.set(busy.get() + at.saturating_sub(since).as_nanos() as u64);
                                }
                            }
                        }
                    }
                }
            });
        }
        Sampler {
            worker: worker.index(),
            observers,
            last: Instant::now(),
            samples: 0,
            reported: Vec::new(),
            records_before: 0,
            busy,
            busy_before: 0,
            scratch: Vec::new(),
        }
    }

    /// Samples if [`SAMPLE_EVERY`] has passed. `records` counts the records this worker has
    /// sent so far, `input` is the time its input is open at, `output` its output frontier.
    pub fn maybe_sample(&mut self, records: u64, input: Time, output: Option<Time>) {
        let interval = self.last.elapsed();
        if interval < SAMPLE_EVERY {
            return;
        }
        self.last = Instant::now();
        let full = self.samples == 0;
        let turn = self.samples % REFRESH_EVERY;
        self.samples += 1;
        let worker = self.worker;
        let mut index = 0;
        let (reported, scratch) = (&mut self.reported, &mut self.scratch);
        self.observers.each(|op| {
            if reported.len() <= index {
                reported.push(Vec::new());
            }
            let last = &mut reported[index];
            index += 1;
            scratch.clear();
            (op.sizes)(scratch);
            let (mut keys, mut bytes) = (0u64, 0u64);
            let mut held = vec![false; last.len()];
            for s in scratch.iter() {
                let bin = s.bin as usize;
                if last.len() <= bin {
                    last.resize(bin + 1, None);
                    held.resize(bin + 1, false);
                }
                held[bin] = true;
                keys += s.keys;
                bytes += s.bytes;
                let refresh = full || u64::from(s.bin) % REFRESH_EVERY == turn;
                if refresh || last[bin] != Some((s.keys, s.bytes)) {
                    tracing::info!(
                        target: "megaflux::state",
                        kind = "bin", worker, operator = %op.name, bin = s.bin, keys = s.keys, bytes = s.bytes
                    );
                    last[bin] = Some((s.keys, s.bytes));
                }
            }
            // Bins that left since the last sample are reported by their new owner.
            for (slot, held) in last.iter_mut().zip(held) {
                if !held {
                    *slot = None;
                }
            }
            tracing::info!(
                target: "megaflux::state",
                kind = "sampled", worker, operator = %op.name, full, bins = scratch.len(), keys, bytes
            );
            let f = (op.frontiers)();
            match f.control {
                Some(control) => tracing::info!(
                    target: "megaflux::frontier",
                    worker, operator = %op.name, applied = f.applied, control, input
                ),
                None => tracing::info!(
                    target: "megaflux::frontier",
                    worker, operator = %op.name, applied = f.applied, input
                ),
            }
        });
        if let Some(output) = output {
            tracing::info!(target: "megaflux::frontier", worker, operator = "output", applied = output, input);
        }
        let busy = self.busy.get();
        tracing::info!(
            target: "megaflux::worker",
            worker,
            records = records - self.records_before,
            busy_ns = busy - self.busy_before,
            interval_ns = interval.as_nanos() as u64
        );
        self.records_before = records;
        self.busy_before = busy;
    }
}
