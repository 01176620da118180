//! The epoch driver: which measured epochs are due, their records, and how long a worker
//! with nothing to do may wait for the next.
//!
//! Measured epoch `e` (1-based, closing `e` epoch lengths after the start) has logical time
//! `base + e`, where the preload's times come before `base`. Every worker sends its feed's
//! records of each epoch (its share of a generator's, or, on worker 0, those it reads) and
//! advances its input past it once they are all in. With adaptive epochs
//! ([`EpochMode::Adaptive`]) a worker sends every due epoch at once, at the first one's
//! time, once the output has passed what it sent before; a worker behind by a full batch
//! (`MAX_BATCH_SPAN`) has up to `MAX_BATCHES_IN_FLIGHT` batches of at most that span out.

use std::collections::VecDeque;
use std::time::Duration;

use timely::dataflow::{InputHandleVec, ProbeHandle};

use super::{EpochMode, Idle, MAX_PACE_AHEAD, Pace, RunConfig};
use crate::Time;
use crate::epoch::EpochLen;
use crate::source::{Feed, Fill, InputError};

/// How long before its next epoch is due an idle open-loop worker stops waiting and spins,
/// so that waking late does not delay the epoch.
const PARK_MARGIN: Duration = Duration::from_micros(100);
/// The longest a worker of a [`Pace::Max`] run waits for news with nothing to do.
const MAX_PACE_PARK: Duration = Duration::from_millis(1);
/// Adaptive epochs: the most batches a worker has in flight at once (a worker keeping up
/// has one; one behind catches up with several, as fixed epochs pipeline theirs). A worker
/// behind catches up by at most this many batches per round trip of the output frontier.
/// With four, a 2-process job under a fluid plan (each step holds the output a few ms, and
/// the frontier's round trip between processes takes a few ms too) caught up 4 ms a round
/// and fell further behind with every step: 250-530 ms of latency, against 20-26 ms with 32
/// (README, *Moves between processes*).
const MAX_BATCHES_IN_FLIGHT: usize = 32;
/// Adaptive epochs: the longest stretch of due time one batch holds. A worker behind by more
/// sends more batches rather than a larger one: a batch's cost per record grows with its size
/// (its buffers are fresh memory), so ever larger batches would never catch up.
/// Measured on Q4 at 2M events/s (before Q4 was refused adaptive epochs: its answers read
/// times): with one unbounded batch in flight its output fell 5-9 s behind, with this bound
/// it mostly kept up. hashcount at 8M records/s keeps up or not with a bound of 1 ms, 10 ms
/// or none alike on this machine (noise decides: two rounds each).
const MAX_BATCH_SPAN: Duration = Duration::from_millis(1);

/// One worker's measured epochs.
pub(super) struct Epochs<R> {
    base: Time,
    len: EpochLen,
    pace: Pace,
    idle: Idle,
    /// More workers than cores in a [`Pace::Max`] run: waiting a moment beats spinning.
    parks: bool,
    /// Adaptive epochs: the due epochs go in as a batch once the last one is out (or, a full
    /// batch behind, while up to `MAX_BATCHES_IN_FLIGHT` are).
    adaptive: bool,
    /// Adaptive epochs: the batches sent and not yet out, oldest first, each as the time
    /// the output reaches once it has passed the batch.
    in_flight: VecDeque<Time>,
    feed: Feed<R>,
    /// The next epoch to send.
    next: u64,
    /// The run's last epoch (a stop may bring it closer).
    last: u64,
    /// Records this worker sent, the preload's included.
    records_in: u64,
    /// The records counted in `records_in` by the logical time they were sent at, for the
    /// times the output has not passed: a stop may end the run before some of them
    /// (another process's worker ran ahead of worker 0's clock), and records past the
    /// run's last epoch are not the run's (no output of theirs counts).
    unsettled: VecDeque<(Time, u64)>,
    /// Why the input stopped short, if it did: the run ends there as at the input's end (the
    /// records before it go in, their outputs are written), then stops with it.
    failed: Option<InputError>,
}

impl<R: Clone + Send + 'static> Epochs<R> {
    /// The epochs of `config`'s run after a preload of `base` times and `preloaded` records,
    /// with the records of `feed`.
    pub(super) fn new(config: &RunConfig, base: Time, preloaded: u64, feed: Feed<R>) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Epochs {
            base,
            len: config.epoch,
            pace: config.pace,
            idle: config.idle,
            parks: config.pace == Pace::Max && config.workers > cores,
            adaptive: config.epoch_mode == EpochMode::Adaptive,
            in_flight: VecDeque::new(),
            feed,
            next: 1,
            last: config.epoch.in_duration(config.duration),
            records_in: preloaded,
            unsettled: VecDeque::new(),
            failed: None,
        }
    }

    /// Starts at the first epoch at or after logical time `from` (a restarted computation
    /// sends its records again from the committed frontier).
    pub(super) fn resume_from(&mut self, from: Time) {
        self.next = self.next.max(from.saturating_sub(self.base));
        // The records before it count as this run's too: the computation before sent them.
        self.records_in += self.feed.resume_at(self.next);
    }

    /// Counts the records of a read input before the epoch this computation resumed at
    /// (the computation before sent them), reading past them: the epochs it sends do so as
    /// they go, but a computation restarted at the end of a run may send none. Whether they
    /// are all counted (else the input thread has not read them yet).
    pub(super) fn count_before_resume(&mut self) -> bool {
        let before = self.next.saturating_sub(1);
        // Nothing is sent: the records at `before` and earlier are before the resume point.
        let fill = self.feed.fill(before, self.time_of(before), &mut |_| {});
        self.records_in += self.feed.take_skipped();
        match fill {
            Ok(Fill::Waiting) => false,
            Ok(Fill::Complete) => true,
            Err(e) => {
                self.failed.get_or_insert(e);
                true
            }
        }
    }

    /// The logical time of measured epoch `epoch`.
    pub(super) fn time_of(&self, epoch: u64) -> Time {
        self.base + epoch
    }

    /// The logical time of the next epoch to send: the input is advanced to it.
    pub(super) fn next_time(&self) -> Time {
        self.time_of(self.next)
    }

    /// The next epoch to send.
    pub(super) fn next(&self) -> u64 {
        self.next
    }

    pub(super) fn last(&self) -> u64 {
        self.last
    }

    pub(super) fn records_in(&self) -> u64 {
        self.records_in
    }

    /// Ends the run at `epoch` at the latest; records already sent at later times no
    /// longer count as the run's.
    pub(super) fn end_by(&mut self, epoch: u64) {
        self.last = self.last.min(epoch);
        let end = self.time_of(self.last);
        while let Some(&(time, count)) = self.unsettled.back()
            && time > end
        {
            self.records_in -= count;
            self.unsettled.pop_back();
        }
    }

    /// Whether every epoch of the run was sent.
    pub(super) fn all_sent(&self) -> bool {
        self.next > self.last
    }

    /// The epoch a stop requested at `now` has reached: open loop, the one due now; as fast
    /// as it goes, past every epoch another worker may have sent (up to `MAX_PACE_AHEAD`
    /// past this one's, as the output cannot pass its input).
    pub(super) fn reached(&self, now: Duration) -> u64 {
        match self.pace {
            Pace::OpenLoop => self.len.in_duration(now),
            Pace::Max => self.next - 1 + MAX_PACE_AHEAD,
        }
    }

    /// The last epoch due at `now`, with the output at `output`: open loop, every epoch
    /// whose interval has passed; as fast as it goes, the epochs the output has passed and
    /// a few more (while a plan runs, one more, so that its steps, each complete once the
    /// output passes it, take a few epochs each rather than `MAX_PACE_AHEAD`). With
    /// adaptive epochs, none while a batch is out, unless `MAX_BATCH_SPAN` of epochs are
    /// due; and never more than that span.
    pub(super) fn due(&mut self, now: Duration, output: Time, plan_running: bool) -> u64 {
        if self.adaptive {
            while self.in_flight.front().is_some_and(|end| output >= *end) {
                self.in_flight.pop_front();
            }
        }
        // A stop never ends the run before a time the output has passed.
        while self.unsettled.front().is_some_and(|(time, _)| *time < output) {
            self.unsettled.pop_front();
        }
        let due = self.due_now(now, output, plan_running);
        if !self.adaptive {
            return due;
        }
        // One batch in flight while the loop keeps up; more (each at most a full batch)
        // once a full batch's epochs are due, so that a loop behind catches up in batches
        // of a bounded size rather than in ever larger ones.
        let full = self.len.in_duration(MAX_BATCH_SPAN).max(1);
        let behind = due.saturating_sub(self.next) + 1 >= full;
        if self.in_flight.is_empty() || (behind && self.in_flight.len() < MAX_BATCHES_IN_FLIGHT) {
            due.min(self.next - 1 + full)
        } else {
            self.next - 1
        }
    }

    /// The last epoch due at `now`, batches aside.
    fn due_now(&self, now: Duration, output: Time, plan_running: bool) -> u64 {
        let due = match self.pace {
            Pace::OpenLoop => self.len.in_duration(now),
            Pace::Max => {
                let ahead = if plan_running { 1 } else { MAX_PACE_AHEAD };
                output.saturating_sub(self.base + 1).saturating_add(ahead)
            }
        };
        due.min(self.last)
    }

    /// The measured run starts now.
    pub(super) fn begin(&mut self, start: std::time::Instant) {
        self.feed.begin(start);
    }

    /// Whether the feed's input ended: no record will come again.
    pub(super) fn input_ended(&self) -> bool {
        self.feed.ended()
    }

    /// Sends this worker's records of every epoch up to `due` and advances the input past
    /// them, up to an epoch whose records are not all read yet: it stays open. With adaptive
    /// epochs they all go in at the first one's time (at or before each record's own). An
    /// input that fails ends there, as if it had ended ([`Epochs::take_failure`]).
    pub(super) fn send(&mut self, data: &mut InputHandleVec<Time, R>, due: u64) {
        if self.next > due {
            return;
        }
        let (first, batch) = (self.next, self.next_time());
        if let Err(e) = self.send_each(data, due, batch) {
            self.failed.get_or_insert(e);
        }
        data.advance_to(self.next_time());
        if self.adaptive && self.next > first {
            self.in_flight.push_back(self.next_time());
        }
    }

    /// Why the input stopped short, if it did (once).
    pub(super) fn take_failure(&mut self) -> Option<InputError> {
        self.failed.take()
    }

    /// Sends the records of epochs up to `due`, up to one whose records are not all read.
    fn send_each(
        &mut self,
        data: &mut InputHandleVec<Time, R>,
        due: u64,
        batch: Time,
    ) -> Result<(), InputError> {
        while self.next <= due {
            let time = self.next_time();
            let at = if self.adaptive { batch } else { time };
            data.advance_to(at);
            let mut sent = 0;
            let fill = self.feed.fill(self.next, time, &mut |record| {
                data.send(record);
                sent += 1;
            });
            let counted = sent + self.feed.take_skipped();
            self.records_in += counted;
            match self.unsettled.back_mut() {
                Some((t, n)) if *t == at => *n += counted,
                _ if counted > 0 => self.unsettled.push_back((at, counted)),
                _ => {}
            }
            if fill? == Fill::Waiting {
                break;
            }
            self.next += 1;
        }
        Ok(())
    }

    /// How long a worker with nothing to do may wait for news (timely wakes it when data or
    /// progress arrives) at `now`; zero to keep stepping. Open loop with `--idle park`: once
    /// every epoch sent is out (waking up on news costs tens of microseconds that an epoch
    /// in flight would pay), until a little before the next epoch is due. As fast as it goes
    /// with more workers than cores: a moment (the next epoch is due when the output moves,
    /// which is news).
    pub(super) fn idle(&self, now: Duration, probe: &ProbeHandle<Time>) -> Duration {
        match self.pace {
            Pace::OpenLoop if self.idle == Idle::Spin || probe.less_than(&self.next_time()) => Duration::ZERO,
            Pace::OpenLoop => self
                .len
                .closes_at(self.next)
                .saturating_sub(now)
                .saturating_sub(PARK_MARGIN),
            Pace::Max if self.parks => MAX_PACE_PARK,
            Pace::Max => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use timely::dataflow::operators::{Input, Inspect, Probe};

    use super::*;

    /// Sends what `epochs` says is due at `now_us` with the output where `probe` is, and
    /// steps until the output has passed it; the (time, record) pairs that went in.
    fn turn(
        worker: &mut timely::worker::Worker,
        epochs: &mut Epochs<u64>,
        data: &mut InputHandleVec<Time, u64>,
        probe: &ProbeHandle<Time>,
        seen: &Rc<RefCell<Vec<(Time, u64)>>>,
        now_us: u64,
        wait: bool,
    ) -> Vec<(Time, u64)> {
        let output = probe.with_frontier(|f| f.first().copied().unwrap_or(Time::MAX));
        let due = epochs.due(Duration::from_micros(now_us), output, false);
        epochs.send(data, due);
        worker.step();
        while wait && probe.less_than(&epochs.next_time()) {
            worker.step();
        }
        std::mem::take(&mut *seen.borrow_mut())
    }

    /// The epochs of a run of `ms` milliseconds at 1M records/s in 10 us epochs: epoch `e`
    /// holds records `10(e-1)..10e`, record `i` due `i` us into the run.
    fn generated(mode: EpochMode, ms: u64) -> Epochs<u64> {
        let len = EpochLen::from_us(10).expect("10 us divides a millisecond");
        let config = RunConfig {
            workers: 1,
            rate: 1_000_000,
            epoch: len,
            epoch_mode: mode,
            duration: Duration::from_millis(ms),
            ..RunConfig::default()
        };
        let feed = Feed::Generated {
            make: Box::new(|i, _| i),
            index: 0,
            peers: 1,
            rate: config.rate,
            len,
        };
        Epochs::new(&config, 0, 0, feed)
    }

    /// 1M records/s in 10 us epochs: epoch `e` holds records `10(e-1)..10e`, record `i`
    /// due `i` us into the run.
    fn run(
        mode: EpochMode,
        check: impl FnOnce(&mut dyn FnMut(u64, bool) -> Vec<(Time, u64)>) + Send + Sync + 'static,
    ) {
        timely::execute_directly(move |worker| {
            let seen = Rc::new(RefCell::new(Vec::new()));
            let mut data = InputHandleVec::new();
            let sink = Rc::clone(&seen);
            let probe = worker.dataflow::<Time, _, _>(|scope| {
                scope
                    .input_from(&mut data)
                    .inspect_core(move |event| {
                        if let Ok((stamp, xs)) = event
                            && let Some(t) = stamp.least()
                        {
                            sink.borrow_mut().extend(xs.iter().map(|x| (*t, *x)));
                        }
                    })
                    .probe()
                    .0
            });
            let mut epochs = generated(mode, 5);
            data.advance_to(epochs.next_time());
            while probe.less_than(&epochs.next_time()) {
                worker.step();
            }
            check(&mut |now_us, wait| turn(worker, &mut epochs, &mut data, &probe, &seen, now_us, wait));
        });
    }

    /// A stop that ends the run before epochs this worker already sent takes their records
    /// out of its count: no output of theirs is the run's. Records sent at a time up to the
    /// end (an adaptive batch stamps later epochs' records with its first time) stay.
    #[test]
    fn a_stop_before_epochs_already_sent_uncounts_their_records() {
        for (mode, kept) in [(EpochMode::Fixed, 20), (EpochMode::Adaptive, 40)] {
            timely::execute_directly(move |worker| {
                let mut data = InputHandleVec::new();
                worker.dataflow::<Time, _, _>(|scope| {
                    scope.input_from(&mut data);
                });
                let mut epochs = generated(mode, 5);
                // 40 us in: epochs 1 to 4 (40 records) go in.
                let due = epochs.due(Duration::from_micros(40), 0, false);
                epochs.send(&mut data, due);
                assert_eq!(epochs.records_in(), 40, "{mode:?}");
                // The stop ends the run at epoch 2.
                epochs.end_by(2);
                assert_eq!(epochs.records_in(), kept, "{mode:?}");
                assert_eq!(epochs.last(), 2);
            });
        }
    }

    #[test]
    fn adaptive_epochs_send_what_is_due_at_its_first_epoch_once_the_last_batch_is_out() {
        run(EpochMode::Adaptive, |turn| {
            // 50 us in: epochs 1 to 5 are due, and go in together at epoch 1's time.
            let first = turn(50, false);
            assert_eq!(first, (0..50).map(|i| (1, i)).collect::<Vec<_>>());
            // While that batch is not out, nothing more goes in, however much is due.
            assert_eq!(turn(80, false), []);
            // Once it is, what came due meanwhile goes in as the next batch, at epoch 6.
            let mut second = turn(80, true);
            second.extend(turn(80, true));
            assert_eq!(second, (50..80).map(|i| (6, i)).collect::<Vec<_>>());
        });
    }

    #[test]
    fn adaptive_epochs_behind_catch_up_in_several_batches_of_a_bounded_span() {
        run(EpochMode::Adaptive, |turn| {
            // 2.5 ms in, 250 epochs are due: the first batch holds 1 ms of them (100).
            let first = turn(2500, false);
            assert_eq!(first, (0..1000).map(|i| (1, i)).collect::<Vec<_>>());
            // A full batch more is due: it goes in while the first is out.
            let second = turn(2500, false);
            assert_eq!(second, (1000..2000).map(|i| (101, i)).collect::<Vec<_>>());
            // Less than a full batch is left: it waits for the output.
            assert_eq!(turn(2500, false), []);
            let mut third = turn(2500, true);
            third.extend(turn(2500, true));
            assert_eq!(third, (2000..2500).map(|i| (201, i)).collect::<Vec<_>>());
        });
    }

    #[test]
    fn adaptive_epochs_far_behind_keep_several_batches_out_without_waiting() {
        let mut epochs = generated(EpochMode::Adaptive, 20);
        // 20 ms in, with the output held at the start (a step between processes holds it):
        // twenty full batches go out one after another, none waiting for the output to
        // pass the ones before it, so one round trip of the output catches the worker up.
        for batch in 0..20u64 {
            let due = epochs.due(Duration::from_millis(20), 0, false);
            assert_eq!(due, (batch + 1) * 100, "batch {batch}");
            // What `send` keeps of a batch it sent.
            epochs.next = due + 1;
            epochs.in_flight.push_back(epochs.next_time());
        }
    }

    #[test]
    fn fixed_epochs_send_each_epoch_at_its_own_time() {
        run(EpochMode::Fixed, |turn| {
            let first = turn(30, false);
            assert_eq!(first, (0..30).map(|i| (i / 10 + 1, i)).collect::<Vec<_>>());
            // Fixed epochs do not wait for the output.
            let second = turn(50, false);
            assert_eq!(second, (30..50).map(|i| (i / 10 + 1, i)).collect::<Vec<_>>());
        });
    }
}
