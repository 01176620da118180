//! The epoch driver: which measured epochs are due, their records, and how long a worker
//! with nothing to do may wait for the next.
//!
//! Measured epoch `e` (1-based, closing `e` epoch lengths after the start) has logical time
//! `base + e`, where the preload's times come before `base`. Every worker sends its feed's
//! records of each epoch (its share of a generator's, or, on worker 0, those it reads) and
//! advances its input past it once they are all in.

use std::time::Duration;

use timely::dataflow::{InputHandleVec, ProbeHandle};

use super::{Idle, MAX_PACE_AHEAD, Pace, RunConfig};
use crate::Time;
use crate::epoch::EpochLen;
use crate::source::{Feed, Fill, InputError};

/// How long before its next epoch is due an idle open-loop worker stops waiting and spins,
/// so that waking late does not delay the epoch.
const PARK_MARGIN: Duration = Duration::from_micros(100);
/// The longest a worker of a [`Pace::Max`] run waits for news with nothing to do.
const MAX_PACE_PARK: Duration = Duration::from_millis(1);

/// One worker's measured epochs.
pub(super) struct Epochs<R> {
    base: Time,
    len: EpochLen,
    pace: Pace,
    idle: Idle,
    /// More workers than cores in a [`Pace::Max`] run: waiting a moment beats spinning.
    parks: bool,
    feed: Feed<R>,
    /// The next epoch to send.
    next: u64,
    /// The run's last epoch (a stop may bring it closer).
    last: u64,
    /// Records this worker sent, the preload's included.
    records_in: u64,
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
            feed,
            next: 1,
            last: config.epoch.in_duration(config.duration),
            records_in: preloaded,
        }
    }

    /// Starts at the first epoch at or after logical time `from` (a restarted computation
    /// sends its records again from the committed frontier).
    pub(super) fn resume_from(&mut self, from: Time) {
        self.next = self.next.max(from.saturating_sub(self.base));
        // The records before it count as this run's too: the computation before sent them.
        self.records_in += self.feed.resume_at(self.next);
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

    /// Ends the run at `epoch` at the latest.
    pub(super) fn end_by(&mut self, epoch: u64) {
        self.last = self.last.min(epoch);
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
    /// output passes it, take a few epochs each rather than `MAX_PACE_AHEAD`).
    pub(super) fn due(&self, now: Duration, output: Time, plan_running: bool) -> u64 {
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
    /// them, up to an epoch whose records are not all read yet: it stays open.
    pub(super) fn send(&mut self, data: &mut InputHandleVec<Time, R>, due: u64) -> Result<(), InputError> {
        if self.next > due {
            return Ok(());
        }
        while self.next <= due {
            let time = self.next_time();
            data.advance_to(time);
            let mut sent = 0;
            let fill = self.feed.fill(self.next, time, &mut |record| {
                data.send(record);
                sent += 1;
            });
            self.records_in += sent + self.feed.take_skipped();
            if fill? == Fill::Waiting {
                break;
            }
            self.next += 1;
        }
        data.advance_to(self.next_time());
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
