//! What worker 0 measures while the run goes on: each epoch's per-record latency once the
//! output has passed it, its 250 ms windows, and resident memory.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use timely::dataflow::ProbeHandle;

use crate::Time;
use crate::driver::MigrationRecord;
use crate::epoch::EpochLen;
use crate::latency::{Done, LatencyRecorder};
use crate::rss;
use crate::summary::DuringLatency;

/// How often resident memory is sampled.
const RSS_SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// Latency of the measured epochs, by the output's progress.
pub(super) struct Latencies {
    pub(super) recorder: LatencyRecorder,
    /// The first epoch whose latency is not yet known.
    next: u64,
    /// Whether windows are reported as the run goes (someone observes the job).
    windowed: bool,
    per_window: u64,
    /// Plans whose latency during them was reported.
    reported: BTreeSet<u64>,
}

impl Latencies {
    pub(super) fn new(recorder: LatencyRecorder, per_window: u64, windowed: bool) -> Self {
        Latencies {
            recorder,
            next: 1,
            windowed,
            per_window,
            reported: BTreeSet::new(),
        }
    }

    /// Reports the latency during every finished plan once all its epochs are measured
    /// (with `end_s`, the run's end: every plan, a running one up to `end_s`), as the
    /// summary will say it: a `megaflux::plan` event of phase `latency`, for observers.
    pub(super) fn report_plans<'a>(
        &mut self,
        plans: impl Iterator<Item = &'a MigrationRecord>,
        epoch: EpochLen,
        end_s: Option<f64>,
    ) {
        if !self.windowed {
            return;
        }
        let mut oldest = None;
        for plan in plans {
            oldest = Some(oldest.map_or(plan.id, |o: u64| o.min(plan.id)));
            let Some(to_s) = plan.completed_s.or(end_s) else {
                continue;
            };
            if self.reported.contains(&plan.id)
                || (end_s.is_none() && DuringLatency::last_epoch(epoch, to_s) > self.measured())
            {
                continue;
            }
            let d = DuringLatency::between(&self.recorder, epoch, plan.issued_s, to_s);
            tracing::info!(
                target: "megaflux::plan",
                phase = "latency", id = plan.id, p50 = d.p50, p99 = d.p99, max = d.max
            );
            self.reported.insert(plan.id);
        }
        // Plans older than those asked about are never asked about again (the driver shows
        // its latest ones): forget them, so that this set stays as small as that list.
        if let Some(oldest) = oldest {
            self.reported = self.reported.split_off(&oldest);
        }
    }

    /// Records every epoch before `until` that the output has passed, at `now_ns` after the
    /// start: one clock reading for all of them, so that recording one does not add to the
    /// next. `time_of` gives an epoch's logical time.
    pub(super) fn record_done(
        &mut self,
        probe: &ProbeHandle<Time>,
        time_of: impl Fn(u64) -> Time,
        now_ns: u64,
        until: u64,
    ) {
        while self.next < until && !probe.less_equal(&time_of(self.next)) {
            self.recorder.record(self.next, now_ns, self.windowed);
            if self.windowed && self.next.is_multiple_of(self.per_window) {
                self.recorder.report_window(self.next / self.per_window - 1);
            }
            self.next += 1;
        }
    }

    /// Goes on from the epochs an earlier computation of the run measured, each with when
    /// it completed: the epochs after them count from here.
    pub(super) fn resume(&mut self, measured: Vec<Done>) {
        for (epoch, done_ns) in measured.into_iter().flat_map(Done::each) {
            if epoch >= self.next {
                self.recorder.record(epoch, done_ns, false);
                self.next = epoch + 1;
            }
        }
    }

    /// The last epoch whose latency is known (0 before the first).
    pub(super) fn measured(&self) -> u64 {
        self.next - 1
    }
}

/// Resident memory over the run, sampled by one worker per process.
pub(super) struct RssSamples {
    samples: Vec<(f64, u64)>,
    last: Option<Instant>,
}

impl RssSamples {
    pub(super) fn new() -> Self {
        RssSamples {
            samples: Vec::new(),
            last: None,
        }
    }

    /// Samples at `now_s` seconds into the run if the last sample is old enough.
    pub(super) fn maybe_sample(&mut self, now_s: f64) {
        if self.last.is_some_and(|l| l.elapsed() < RSS_SAMPLE_EVERY) {
            return;
        }
        self.last = Some(Instant::now());
        if let Some(r) = rss::current() {
            self.samples.push((now_s, r));
        }
    }

    pub(super) fn into_samples(self) -> Vec<(f64, u64)> {
        self.samples
    }
}
