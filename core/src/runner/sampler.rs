//! What each worker tells observers every [`SAMPLE_EVERY`]: the size of every bin it holds,
//! the frontiers of its operators, and its load. Everything goes out as `tracing` events
//! (targets `megaflux::state`, `megaflux::frontier`, `megaflux::worker`); with no subscriber
//! listening the sampler is never built. The sizes of one operator's bins travel in one
//! event (`kind = "bins"`, field `sizes`: `bin:keys:bytes` triples separated by spaces,
//! `bin:keys:bytes:s` for a bin this worker holds the standby of).
//!
//! Bin sizes go out in full at the first sample; after that for the bins that changed since
//! the last sample, plus one [`REFRESH_EVERY`]th of all bins in turn, so that an observer
//! that dropped events catches up within `REFRESH_EVERY` samples without any one sample
//! reporting every bin of a job with 2^16 of them.
//!
//! What each bin cost in the interval goes out the same way, one event per operator
//! (target `megaflux::load`, field `loads`: `bin:records:busy_ns` for the bins that had work,
//! `:s` appended for a standby's copy; the busiest [`LOAD_BINS_PER_EVENT`] of them), with the
//! interval's length.

use std::time::Duration;

use timely::worker::Worker;

use crate::Time;
use crate::operator::{BinLoad, BinSize, Observers};

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
    /// When the last sample was taken, on the harness's clock.
    last: Duration,
    samples: u64,
    /// Per operator, the size and role last reported for each bin (`None`: not held here).
    reported: Vec<Vec<Option<(u64, u64, bool)>>>,
    records_before: u64,
    busy_before: u64,
    applied_before: u64,
    scratch: Vec<BinSize>,
    /// The changed bins of one operator as `bin:keys:bytes` triples, space separated.
    sizes: String,
    /// Per operator, each bin's cost at the last sample (records, busy ns).
    costs: Vec<Vec<(u64, u64)>>,
    loads: Vec<BinLoad>,
}

impl Sampler {
    /// Starts sampling `observers` on `worker`; from now on its operators time their
    /// activations (the worker's busy time).
    pub fn new(worker: &Worker, observers: Observers) -> Self {
        observers.time_operators();
        Sampler {
            worker: worker.index(),
            observers,
            last: Duration::ZERO,
            samples: 0,
            reported: Vec::new(),
            records_before: 0,
            busy_before: 0,
            applied_before: 0,
            scratch: Vec::new(),
            sizes: String::new(),
            costs: Vec::new(),
            loads: Vec::new(),
        }
    }

    /// Starts the intervals at the measured run's start: the preload's records and busy time
    /// are not the first sample's.
    pub fn begin(&mut self, records: u64) {
        self.records_before = records;
        self.busy_before = self.observers.busy_ns();
        self.applied_before = self.observers.applied();
        self.last = Duration::ZERO;
        let (costs, loads) = (&mut self.costs, &mut self.loads);
        costs.clear();
        self.observers.each(|op| {
            loads.clear();
            (op.loads)(loads);
            let mut last = Vec::new();
            for l in loads.iter() {
                let bin = l.bin as usize;
                if last.len() <= bin {
                    last.resize(bin + 1, (0, 0));
                }
                last[bin] = (l.records, l.busy_ns);
            }
            costs.push(last);
        });
    }

    /// Samples if [`SAMPLE_EVERY`] has passed. `now` is the harness's clock (its loop reads it
    /// anyway: no clock read here); `records` counts the records this worker has sent so far;
    /// `input` is the time its input is open at; `output` reads the output frontier and the
    /// outputs this worker counted so far, only when a sample is due (this is called on every
    /// turn of the worker's loop).
    pub fn maybe_sample(
        &mut self,
        now: Duration,
        records: u64,
        input: Time,
        output: impl FnOnce() -> (Option<Time>, u64),
    ) {
        let interval = now.saturating_sub(self.last);
        if interval < SAMPLE_EVERY {
            return;
        }
        let (output, outputs) = output();
        self.last = now;
        let full = self.samples == 0;
        let turn = self.samples % REFRESH_EVERY;
        self.samples += 1;
        let worker = self.worker;
        let mut index = 0;
        let (reported, scratch, sizes) = (&mut self.reported, &mut self.scratch, &mut self.sizes);
        let (costs, loads) = (&mut self.costs, &mut self.loads);
        let interval_ns = interval.as_nanos() as u64;
        self.observers.each(|op| {
            if reported.len() <= index {
                reported.push(Vec::new());
            }
            if costs.len() <= index {
                costs.push(Vec::new());
            }
            loads.clear();
            (op.loads)(loads);
            sample_loads(worker, &op.name, interval_ns, loads, &mut costs[index], sizes);
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
                if refresh || last[bin] != Some((s.keys, s.bytes, s.standby)) {
                    use std::fmt::Write;
                    let role = if s.standby { ":s" } else { "" };
                    let _ = write!(sizes, "{}:{}:{}{role} ", s.bin, s.keys, s.bytes);
                    last[bin] = Some((s.keys, s.bytes, s.standby));
                }
            }
            // One event for all of them: a sample must not cost a tracing event per bin.
            if !sizes.is_empty() {
                tracing::info!(target: "megaflux::state", kind = "bins", worker, operator = %op.name, sizes = %sizes.trim_end());
                sizes.clear();
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
        let busy = self.observers.busy_ns();
        let applied = self.observers.applied();
        tracing::info!(
            target: "megaflux::worker",
            worker,
            // A stop lowers the records that count as the run's below what was reported.
            records = records.saturating_sub(self.records_before),
            applied = applied.saturating_sub(self.applied_before),
            outputs_total = outputs,
            busy_ns = busy.saturating_sub(self.busy_before),
            interval_ns = interval.as_nanos() as u64
        );
        self.records_before = records;
        self.busy_before = busy;
        self.applied_before = applied;
    }
}

/// The most bins one load event names: the busiest of the interval (a job with 2^16 bins
/// would otherwise send a megabyte per operator, worker and sample; the hot bins are what a
/// viewer needs, and a worker's total load has an event of its own).
pub const LOAD_BINS_PER_EVENT: usize = 512;

/// Reports what each bin of operator `operator` cost on `worker` since the last sample (at
/// most [`LOAD_BINS_PER_EVENT`] bins, the busiest): `loads` are the totals now, `last` those
/// at the last sample (updated); `text` is scratch.
fn sample_loads(
    worker: usize,
    operator: &str,
    interval_ns: u64,
    loads: &mut Vec<BinLoad>,
    last: &mut Vec<(u64, u64)>,
    text: &mut String,
) {
    use std::fmt::Write;
    for l in loads.iter_mut() {
        let bin = l.bin as usize;
        if last.len() <= bin {
            last.resize(bin + 1, (0, 0));
        }
        let now = (l.records, l.busy_ns);
        l.records -= last[bin].0.min(l.records);
        l.busy_ns -= last[bin].1.min(l.busy_ns);
        last[bin] = now;
    }
    // Every bin's records, before the quiet ones and those past the busiest are left out.
    let applied: u64 = loads.iter().map(|l| l.records).sum();
    loads.retain(|l| l.records > 0 || l.busy_ns > 0);
    if loads.len() > LOAD_BINS_PER_EVENT {
        let busiest = |l: &BinLoad| std::cmp::Reverse((l.busy_ns, l.records));
        loads.select_nth_unstable_by_key(LOAD_BINS_PER_EVENT - 1, busiest);
        loads.truncate(LOAD_BINS_PER_EVENT);
        loads.sort_unstable_by_key(|l| l.bin);
    }
    text.clear();
    for l in loads.iter() {
        let role = if l.standby { ":s" } else { "" };
        let _ = write!(text, "{}:{}:{}{role} ", l.bin, l.records, l.busy_ns);
    }
    if !text.is_empty() {
        tracing::info!(target: "megaflux::load", worker, operator, interval_ns, applied, loads = %text.trim_end());
        text.clear();
    }
}
