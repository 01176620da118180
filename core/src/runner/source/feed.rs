//! One worker's feed of records into its epochs: its share of a generator's indices, or, on
//! worker 0, the records an input thread reads and parses, each given to the epoch its due
//! time falls in.
//!
//! An epoch's records are all sent before the input moves past it (the epoch of a record is
//! fixed by its due time, whatever the wall clock), so a reader that falls behind holds its
//! epoch open ([`Fill::Waiting`]) rather than letting records slip into a later one. Records
//! that arrive on a stream are the exception: they are due when they arrive, and go in with
//! the epoch that is open then.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::time::Instant;

use super::bounds::{LineCap, READ_AHEAD_BYTES, ReadAhead};
use super::{EventTime, Input, InputError, ReadSource, first_index};
use crate::Time;
use crate::epoch::EpochLen;
use crate::latency::{Dues, ListedDues, first_record};

/// Records the input thread parses before it hands them over (files: it reads ahead).
const BATCH: usize = 1024;
/// Batches (or stream records) the input thread may hold ready before it waits (and at most
/// [`READ_AHEAD_BYTES`] of their lines).
const READ_AHEAD: usize = 64;
const STREAM_READ_AHEAD: usize = 1 << 16;

/// Whether an epoch's records are all sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fill {
    /// Every record of the epoch went in: the input may move past it.
    Complete,
    /// The input thread has not read them all yet: the epoch stays open.
    Waiting,
}

/// How read records are due.
pub(crate) enum Timing<R> {
    /// Record `i` at `i / rate`.
    Rate(u64),
    /// At its event time less the first record's, divided by `speed`.
    EventTime {
        time_ms: EventTime<R>,
        speed: f64,
        first: Option<u64>,
        latest: u64,
    },
    /// When it arrived (a stream).
    Arrival,
}

/// What the input thread hands over.
enum Msg<R> {
    /// Records, and the bytes of input they were read from.
    Records(Vec<(R, Option<Instant>)>, u64),
    End,
    Failed(InputError),
}

/// One worker's feed.
pub(crate) enum Feed<R> {
    /// Records made by global index: this worker's share, at `rate`.
    Generated {
        make: Box<dyn FnMut(u64, Time) -> R>,
        index: usize,
        peers: usize,
        rate: u64,
        len: EpochLen,
    },
    /// Records read from an input (worker 0).
    Read(Box<Reading<R>>),
    /// Nothing: another worker reads.
    Nothing,
}

/// Records read by the input thread, and where the feed is in them.
pub(crate) struct Reading<R> {
    incoming: Receiver<Msg<R>>,
    /// What the input thread read and this feed has not yet taken.
    unread: Arc<ReadAhead>,
    ready: VecDeque<(R, Option<Instant>)>,
    /// A record read ahead that belongs to a later epoch, with its due time.
    ahead: Option<(R, u64)>,
    timing: Timing<R>,
    len: EpochLen,
    /// Records taken so far (sent or skipped).
    taken: u64,
    /// The first epoch whose records are sent: a restarted computation reads the file
    /// again from its start and skips the records of earlier epochs, which the computation
    /// before it had sent and the sink committed.
    from_epoch: u64,
    /// Records skipped (before `from_epoch`) since the feed last said how many.
    skipped: u64,
    /// The due times of every record sent, for the latency of those not due by rate.
    dues: Option<Rc<RefCell<ListedDues>>>,
    /// Records read by rate: how many there were, once the input ended.
    total: Option<Rc<Cell<u64>>>,
    start: Option<Instant>,
    ended: bool,
}

impl<R: Send + 'static> Feed<R> {
    /// Starts reading `input` with `source`'s format on a thread of its own; records are due
    /// by `timing`, and no line may be longer than `max_line` bytes. The thread connects or
    /// opens the input first: an input that cannot be opened is the first thing the feed
    /// reports.
    pub(crate) fn read(
        input: &Input,
        source: &ReadSource<R>,
        (timing, max_line): (Timing<R>, usize),
        len: EpochLen,
        dues: &Dues,
    ) -> Result<Self, InputError> {
        let stream = matches!(timing, Timing::Arrival);
        let (tx, rx) = sync_channel(if stream { STREAM_READ_AHEAD } else { READ_AHEAD });
        let (input, format) = (input.clone(), Arc::clone(&source.format));
        let ahead = Arc::new(ReadAhead::default());
        let reader = Reader {
            stream,
            max_line,
            ahead: Arc::clone(&ahead),
        };
        std::thread::Builder::new()
            .name("megaflux-input".into())
            .spawn(move || reader.read(&input, &format, &tx))
            .map_err(|e| InputError::of("the input thread", e.to_string()))?;
        Ok(Feed::Read(Box::new(Reading {
            incoming: rx,
            unread: ahead,
            ready: VecDeque::new(),
            ahead: None,
            timing,
            len,
            taken: 0,
            from_epoch: 1,
            skipped: 0,
            dues: match dues {
                Dues::Listed(listed) => Some(Rc::clone(listed)),
                Dues::Rate { .. } => None,
            },
            total: match dues {
                Dues::Rate { total, .. } => Some(Rc::clone(total)),
                Dues::Listed(_) => None,
            },
            start: None,
            ended: false,
        })))
    }

    /// Sends records from measured epoch `epoch` on: a generator makes them by index
    /// anyway; a read input skips those before it (see [`Reading::from_epoch`]). Returns
    /// this worker's share of the generated records before `epoch`, which the computation
    /// before sent (a read input counts those it skips as it skips them:
    /// [`Feed::take_skipped`]).
    pub(crate) fn resume_at(&mut self, epoch: u64) -> u64 {
        match self {
            Feed::Read(r) => {
                r.from_epoch = r.from_epoch.max(epoch);
                0
            }
            Feed::Generated {
                index,
                peers,
                rate,
                len,
                ..
            } => super::share(first_record(epoch, *rate, *len), *index, *peers),
            Feed::Nothing => 0,
        }
    }

    /// The records skipped since the last call (see [`Feed::resume_at`]).
    pub(crate) fn take_skipped(&mut self) -> u64 {
        match self {
            Feed::Read(r) => std::mem::take(&mut r.skipped),
            _ => 0,
        }
    }

    /// The measured run starts now: arrivals count from here.
    pub(crate) fn begin(&mut self, start: Instant) {
        if let Feed::Read(r) = self {
            r.start = Some(start);
        }
    }

    /// Whether no record will ever come again.
    pub(crate) fn ended(&self) -> bool {
        match self {
            Feed::Read(r) => r.ended && r.ready.is_empty() && r.ahead.is_none(),
            _ => false,
        }
    }

    /// Sends this worker's records of measured epoch `epoch` (logical time `time`) with
    /// `send`; returns whether all of them went.
    pub(crate) fn fill(
        &mut self,
        epoch: u64,
        time: Time,
        send: &mut dyn FnMut(R),
    ) -> Result<Fill, InputError> {
        match self {
            Feed::Generated {
                make,
                index,
                peers,
                rate,
                len,
            } => {
                let (lo, hi) = (
                    first_record(epoch, *rate, *len),
                    first_record(epoch + 1, *rate, *len),
                );
                let mut i = first_index(lo, *index, *peers);
                while i < hi {
                    send(make(i, time));
                    i += *peers as u64;
                }
                Ok(Fill::Complete)
            }
            Feed::Read(r) => r.fill(epoch, send),
            Feed::Nothing => Ok(Fill::Complete),
        }
    }
}

impl<R> Reading<R> {
    /// The next record read and not yet taken, if the thread has one ready.
    fn next(&mut self) -> Result<Option<(R, Option<Instant>)>, InputError> {
        loop {
            if let Some(r) = self.ready.pop_front() {
                return Ok(Some(r));
            }
            if self.ended {
                return Ok(None);
            }
            match self.incoming.try_recv() {
                Ok(Msg::Records(batch, bytes)) => {
                    self.unread.took(bytes);
                    self.ready.extend(batch);
                }
                Ok(Msg::End) | Err(TryRecvError::Disconnected) => {
                    self.ended = true;
                    if let Some(total) = &self.total {
                        total.set(self.taken);
                    }
                }
                Ok(Msg::Failed(e)) => {
                    self.ended = true;
                    return Err(e);
                }
                Err(TryRecvError::Empty) => return Ok(None),
            }
        }
    }

    /// The epoch a record due `due_ns` into the run goes in: the first that closes after it.
    fn epoch_of(&self, due_ns: u64) -> u64 {
        due_ns / (self.len.us() * 1000) + 1
    }

    fn fill(&mut self, epoch: u64, send: &mut dyn FnMut(R)) -> Result<Fill, InputError> {
        if let Timing::Rate(rate) = self.timing {
            let skip = first_record(self.from_epoch, rate, self.len);
            while self.taken < skip {
                match self.next()? {
                    Some(_) => {
                        self.taken += 1;
                        self.skipped += 1;
                    }
                    None if self.ended => return Ok(Fill::Complete),
                    None => return Ok(Fill::Waiting),
                }
            }
            let last = first_record(epoch + 1, rate, self.len);
            while self.taken < last {
                match self.next()? {
                    Some((record, _)) => {
                        send(record);
                        self.taken += 1;
                    }
                    None if self.ended => return Ok(Fill::Complete),
                    None => return Ok(Fill::Waiting),
                }
            }
            return Ok(Fill::Complete);
        }
        loop {
            let (record, due) = match self.ahead.take() {
                Some(ahead) => ahead,
                None => match self.next()? {
                    Some((record, arrived)) => {
                        let due = self.due(&record, arrived);
                        (record, due)
                    }
                    None if self.ended || matches!(self.timing, Timing::Arrival) => {
                        return Ok(Fill::Complete);
                    }
                    None => return Ok(Fill::Waiting),
                },
            };
            if self.epoch_of(due) > epoch {
                self.ahead = Some((record, due));
                return Ok(Fill::Complete);
            }
            if self.epoch_of(due) < self.from_epoch {
                self.taken += 1;
                self.skipped += 1;
                continue;
            }
            if let Some(dues) = &self.dues {
                dues.borrow_mut().push(epoch, due);
            }
            send(record);
            self.taken += 1;
        }
    }

    /// When a record is due, in nanoseconds since the run began.
    fn due(&mut self, record: &R, arrived: Option<Instant>) -> u64 {
        match &mut self.timing {
            Timing::Rate(rate) => crate::latency::due_ns(self.taken, *rate),
            Timing::EventTime {
                time_ms,
                speed,
                first,
                latest,
            } => {
                let t = time_ms(record);
                let first = *first.get_or_insert(t);
                *latest = (*latest).max(t.saturating_sub(first));
                (*latest as f64 * 1e6 / *speed) as u64
            }
            Timing::Arrival => match (arrived, self.start) {
                // Whole microseconds: records that arrive together share a due time.
                (Some(at), Some(start)) => at.saturating_duration_since(start).as_micros() as u64 * 1000,
                _ => 0,
            },
        }
    }
}

impl<R> Drop for Reading<R> {
    fn drop(&mut self) {
        // An input thread waiting for room stops waiting.
        self.unread.close();
    }
}

/// How the input thread reads.
struct Reader {
    /// A stream: records go one at a time, each as it arrives.
    stream: bool,
    max_line: usize,
    ahead: Arc<ReadAhead>,
}

impl Reader {
    /// The input thread: opens the input, parses its records and hands them over in batches
    /// (one at a time from a stream, which may pause for as long as it likes), until the
    /// end, an error, or the feed goes away; at most [`READ_AHEAD_BYTES`] of input ahead of
    /// the feed.
    fn read<R>(&self, input: &Input, format: &super::Format<R>, tx: &SyncSender<Msg<R>>) {
        let opened = match input.open() {
            Ok(opened) => opened,
            Err(e) => {
                let _ = tx.send(Msg::Failed(e));
                return;
            }
        };
        let read = Arc::new(AtomicU64::new(0));
        let capped = LineCap::new(opened, self.max_line, Arc::clone(&read));
        let mut records = format(Box::new(capped), input.name());
        let batch_len = if self.stream { 1 } else { BATCH };
        let mut batch = Vec::with_capacity(batch_len);
        let mut handed = 0;
        // Hands the batch on with the bytes read since the last; false once the feed is gone.
        let mut hand = |batch: Vec<(R, Option<Instant>)>| {
            let now = read.load(Ordering::Relaxed);
            let bytes = now - handed;
            handed = now;
            self.ahead.hold(bytes, READ_AHEAD_BYTES) && tx.send(Msg::Records(batch, bytes)).is_ok()
        };
        loop {
            match records.next_record() {
                Some(Ok(record)) => {
                    batch.push((record, self.stream.then(Instant::now)));
                    if batch.len() == batch_len
                        && !hand(std::mem::replace(&mut batch, Vec::with_capacity(batch_len)))
                    {
                        return;
                    }
                }
                Some(Err(e)) => {
                    hand(batch);
                    let _ = tx.send(Msg::Failed(e));
                    return;
                }
                None => {
                    hand(batch);
                    let _ = tx.send(Msg::End);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::source::Source;

    /// What `feed` sends for epoch `epoch`, once the input thread has read it.
    fn filled(feed: &mut Feed<u64>, epoch: u64) -> Vec<u64> {
        let mut got = Vec::new();
        while feed.fill(epoch, epoch, &mut |r| got.push(r)).unwrap() == Fill::Waiting {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        got
    }

    /// A feed of the numbers 0..100, one per line, resumed at epoch 3 of 1 ms.
    fn resumed(name: &str, timing: impl FnOnce(EventTime<u64>) -> Timing<u64>) -> Feed<u64> {
        let path = std::env::temp_dir().join(format!("megaflux-feed-{name}-{}", std::process::id()));
        let lines: String = (0..100u64).map(|i| format!("{i}\n")).collect();
        std::fs::write(&path, lines).unwrap();
        let Source::Read(source) = Source::lines(|l: &str| l.parse::<u64>()) else {
            unreachable!("lines are read")
        };
        let input: Input = path.display().to_string().parse().unwrap();
        let len = EpochLen::from_us(1000).unwrap();
        let time_ms: EventTime<u64> = Arc::new(|r: &u64| *r);
        let max_line = super::super::bounds::DEFAULT_MAX_LINE_BYTES;
        let mut feed = Feed::read(
            &input,
            &source,
            (timing(time_ms), max_line),
            len,
            &Dues::rate(10_000),
        )
        .unwrap();
        feed.resume_at(3);
        feed
    }

    #[test]
    fn the_generated_records_before_a_restart_are_shared_by_the_workers() {
        let len = EpochLen::from_us(1000).unwrap();
        for peers in 1..5 {
            let shares: u64 = (0..peers)
                .map(|index| {
                    let mut feed: Feed<u64> = Feed::Generated {
                        make: Box::new(|i, _| i),
                        index,
                        peers,
                        rate: 12_345,
                        len,
                    };
                    feed.resume_at(8)
                })
                .sum();
            assert_eq!(shares, first_record(8, 12_345, len), "{peers} workers");
        }
    }

    #[test]
    fn a_resumed_feed_skips_the_records_of_earlier_epochs() {
        // 10 records an epoch: epoch 3 holds records 20..30.
        let mut feed = resumed("rate", |_| Timing::Rate(10_000));
        assert_eq!(filled(&mut feed, 3), (20..30).collect::<Vec<_>>());
        assert_eq!(feed.take_skipped(), 20);
        assert_eq!(filled(&mut feed, 4), (30..40).collect::<Vec<_>>());
        // Record `i` is due at `i` ms, in epoch `i + 1`.
        let mut feed = resumed("event-time", |time_ms| Timing::EventTime {
            time_ms,
            speed: 1.0,
            first: None,
            latest: 0,
        });
        assert_eq!(filled(&mut feed, 3), vec![2]);
        assert_eq!(feed.take_skipped(), 2);
        assert_eq!(filled(&mut feed, 4), vec![3]);
    }
}
