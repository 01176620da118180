//! Open-loop latency, per record: the wall time at which the output frontier passed the
//! record's epoch minus the time the record was due (its place in the schedule), in
//! HdrHistograms overall and per window.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer, V2Serializer};
use serde::{Deserialize, Serialize};

use crate::Time;
use crate::epoch::{EpochLen, WINDOW};

mod bounded;

pub use bounded::{HistogramError, MAX_COUNTS_BYTES, MAX_HISTOGRAM_BYTES};

/// Largest latency the histograms track exactly: one minute.
const MAX_TRACKED_NS: u64 = 60_000_000_000;

/// Percentiles of a set of latencies, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// The median, in nanoseconds.
    pub p50: u64,
    /// The 99th percentile, in nanoseconds.
    pub p99: u64,
    /// The 99.9th percentile, in nanoseconds.
    pub p999: u64,
    /// The largest latency, in nanoseconds.
    pub max: u64,
    /// How many latencies (records) the figures are over; 0 leaves them all 0.
    pub count: u64,
}

impl Percentiles {
    /// Percentiles of a histogram (all zero for an empty one).
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            count: h.len(),
        }
    }
}

/// One window of the latency timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowStats {
    /// Start of the window, in seconds since the measured run began.
    pub t_s: f64,
    /// The latency of the records of the window's epochs, in nanoseconds.
    #[serde(flatten)]
    pub latency_ns: Percentiles,
    /// Max / mean of the live workers' records applied in the window, replicas counted
    /// once, by their load reports to worker 0 (absent with `--balance off`, or where a
    /// worker's report is missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imbalance: Option<f64>,
}

/// The first record of measured epoch `epoch` (1-based, `len` each) at `rate` records/s:
/// record `i` is due `i / rate` seconds into the run, and goes in with the first epoch that
/// closes after its due time (a record due exactly as an epoch closes waits for the next).
pub fn first_record(epoch: Time, rate: u64, len: EpochLen) -> u64 {
    (epoch.saturating_sub(1) as u128 * rate as u128 * len.us() as u128).div_ceil(1_000_000) as u64
}

/// When record `i` is due at `rate` records/s, in nanoseconds since the run began.
pub fn due_ns(i: u64, rate: u64) -> u64 {
    let rate = rate.max(1);
    // In u64 while it fits (four hours at a million records/s), which is cheaper.
    match i.checked_mul(1_000_000_000) {
        Some(n) => n / rate,
        None => (i as u128 * 1_000_000_000 / rate as u128) as u64,
    }
}

/// Consecutive measured epochs `first..=last` that completed `at_ns` after the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// The first epoch of the run.
    pub first: Time,
    /// Its last epoch.
    pub last: Time,
    /// When they completed, in nanoseconds after the start.
    pub at_ns: u64,
}

impl Done {
    /// Each epoch of the run with when it completed.
    pub fn each(self) -> impl Iterator<Item = (Time, u64)> {
        (self.first..=self.last).map(move |e| (e, self.at_ns))
    }
}

/// The latency of every record, as its user feels it: from the moment it was due to the
/// moment the output frontier passed its epoch, so the wait for its epoch to close counts
/// (the Megaphone reference measures records from their due time too). It keeps the moment
/// each epoch completed, and expands epochs into their records when asked.
pub struct LatencyRecorder {
    dues: Dues,
    len: EpochLen,
    /// The measured epochs, in order, as runs of consecutive epochs that completed at the
    /// same moment: one entry per turn of the loop that saw the output move, not one per
    /// epoch (at 10 us epochs, 100,000 a second).
    epochs: Vec<Done>,
    /// Epochs recorded.
    count: usize,
    /// The records of every epoch so far, and of the timeline window being filled.
    all: Histogram<u64>,
    window: Histogram<u64>,
}

/// A histogram as a window carries it: HdrHistogram's V2 format, base64-encoded.
pub fn encode(h: &Histogram<u64>) -> Result<String, String> {
    let mut bytes = Vec::new();
    V2Serializer::new()
        .serialize(h, &mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(BASE64.encode(&bytes))
}

/// A histogram [`encode`] wrote (or its DEFLATE-compressed form). Encodings come from
/// traces, which are untrusted: the serialized header is checked before anything is
/// allocated for it, and one that claims more bytes than are present, more than
/// [`MAX_HISTOGRAM_BYTES`], or a range and precision whose counts would take more than
/// [`MAX_COUNTS_BYTES`], is refused with what is wrong.
pub fn decode(encoded: &str) -> Result<Histogram<u64>, HistogramError> {
    bounded::decode(encoded)
}

/// Per-record latencies of the histogram `encoded` ([`encode`]'s form) counted into buckets:
/// one count per bound of `bounds_ns` (ascending), of the records above the bound before and
/// at most this one, then one of those above every bound; with the records' sum in ns (each
/// at its HdrHistogram bucket's value) and their count. `None` if it does not decode.
pub fn bucket_counts(encoded: &str, bounds_ns: &[u64]) -> Option<(Vec<u64>, f64, u64)> {
    let h = decode(encoded).ok()?;
    let mut counts = vec![0u64; bounds_ns.len() + 1];
    let mut sum = 0.0;
    for v in h.iter_recorded() {
        let (value, n) = (v.value_iterated_to(), v.count_at_value());
        let bucket = bounds_ns.partition_point(|&b| b < value);
        counts[bucket] = counts[bucket].saturating_add(n);
        sum += value as f64 * n as f64;
    }
    Some((counts, sum, h.len()))
}

/// `acc` (encoded, or nothing yet) and the encoded window `more` merged: the merged
/// histogram encoded, and its percentiles. `None` if either does not decode or they do not
/// merge; then `acc` is unchanged.
pub fn merge_encoded(acc: Option<&str>, more: &str) -> Option<(String, Percentiles)> {
    let more = decode(more).ok()?;
    let merged = match acc {
        None => more,
        Some(acc) => {
            let mut acc = decode(acc).ok()?;
            acc.add(&more).ok()?;
            acc
        }
    };
    Some((encode(&merged).ok()?, Percentiles::of(&merged)))
}

fn histogram() -> Histogram<u64> {
    // Three significant digits up to one minute: the bounds are constants, so this cannot fail.
    match Histogram::new_with_bounds(1, MAX_TRACKED_NS, 3) {
        Ok(h) => h,
        Err(e) => unreachable!("constant histogram bounds rejected: {e}"),
    }
}

impl LatencyRecorder {
    /// A recorder for a run of `rate` records per second in epochs of `len`.
    pub fn new(rate: u64, len: EpochLen) -> Self {
        Self::with_dues(Dues::rate(rate), len)
    }

    /// A recorder for records due as `dues` says, in epochs of `len`.
    pub fn with_dues(dues: Dues, len: EpochLen) -> Self {
        LatencyRecorder {
            dues,
            len,
            epochs: Vec::new(),
            count: 0,
            all: histogram(),
            window: histogram(),
        }
    }

    /// Records that epoch `epoch` completed `done_ns` after the run began: each of its
    /// records waited from its due time until then. `windowed`: the window being filled
    /// (for [`LatencyRecorder::report_window`]) takes them too. Epochs are recorded in
    /// increasing order (the output passes them in order), which `between` relies on.
    pub fn record(&mut self, epoch: Time, done_ns: u64, windowed: bool) {
        debug_assert!(self.epochs.last().is_none_or(|d| d.last < epoch));
        match self.epochs.last_mut() {
            Some(d) if d.last + 1 == epoch && d.at_ns == done_ns => d.last = epoch,
            _ => self.epochs.push(Done {
                first: epoch,
                last: epoch,
                at_ns: done_ns,
            }),
        }
        self.count += 1;
        add_epoch(&mut self.all, &self.dues, self.len, epoch, done_ns);
        if windowed {
            add_epoch(&mut self.window, &self.dues, self.len, epoch, done_ns);
        }
    }

    /// Every epoch recorded, as runs of consecutive epochs that completed together (each
    /// with the nanoseconds after the start at which they did), in order.
    pub fn epochs(&self) -> &[Done] {
        &self.epochs
    }

    /// Number of epochs recorded.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.epochs.is_empty()
    }

    /// Percentiles over the records of epochs `from..=to`.
    pub fn between(&self, from: Time, to: Time) -> Percentiles {
        let mut h = histogram();
        // Epochs are recorded in order: find the range, do not scan the run.
        let first = self.epochs.partition_point(|d| d.last < from);
        let end = self.epochs.partition_point(|d| d.first <= to);
        for d in self.epochs.get(first..end).unwrap_or_default() {
            for e in d.first.max(from)..=d.last.min(to) {
                add_epoch(&mut h, &self.dues, self.len, e, d.at_ns);
            }
        }
        Percentiles::of(&h)
    }

    /// Reports window `window` (the epochs closing in its [`WINDOW`] of the run,
    /// the epochs recorded since the last report) as a `megaflux::latency` event: the
    /// percentiles of its records and their histogram, serialized with HdrHistogram's V2
    /// format and base64-encoded.
    pub fn report_window(&mut self, window: u64) {
        let h = std::mem::replace(&mut self.window, histogram());
        let p = Percentiles::of(&h);
        let encoded = match encode(&h) {
            Ok(encoded) => encoded,
            Err(e) => {
                tracing::warn!(target: "megaflux::latency", window, error = %e, "histogram not serialized");
                String::new()
            }
        };
        tracing::info!(
            target: "megaflux::latency",
            window, t_s = window as f64 * WINDOW.as_secs_f64(), count = p.count, p50 = p.p50, p99 = p.p99,
            max = p.max, histogram = %encoded
        );
    }

    /// Percentiles over every record.
    pub fn overall(&self) -> Percentiles {
        Percentiles::of(&self.all)
    }

    /// The complementary CDF of all records' latencies: (latency, fraction of records
    /// slower), at quantiles dense enough for a log-scale plot down to one in 100,000.
    pub fn ccdf(&self) -> Vec<(u64, f64)> {
        let h = &self.all;
        if h.is_empty() {
            return Vec::new();
        }
        let mut quantiles: Vec<f64> = (0..10).map(|i| i as f64 / 10.0).collect();
        for nines in 1..=5 {
            let tail = 10f64.powi(-nines);
            quantiles.extend((1..10).rev().map(|k| 1.0 - tail * k as f64));
        }
        quantiles.push(1.0);
        quantiles.sort_by(f64::total_cmp);
        quantiles.dedup();
        quantiles
            .into_iter()
            .map(|q| (h.value_at_quantile(q), 1.0 - q))
            .collect()
    }

    /// The timeline, one entry per [`WINDOW`] of the run, over its epochs' records.
    pub fn timeline(&self) -> Vec<WindowStats> {
        let Some(last) = self.epochs.last().map(|d| d.last) else {
            return Vec::new();
        };
        let per_window = self.len.per_window();
        let windows = last.div_ceil(per_window) as usize;
        let mut stats = vec![Percentiles::default(); windows];
        // One histogram at a time (an hour has 14,400 windows of a few hundred KB each);
        // the epochs are in order, so each window's epochs are together.
        let mut h = histogram();
        let mut current = None;
        for (e, done) in self.epochs.iter().flat_map(|d| d.each()) {
            let w = (e.saturating_sub(1) / per_window) as usize;
            if current != Some(w) {
                if let Some(c) = current {
                    stats[c] = Percentiles::of(&h);
                }
                h.reset();
                current = Some(w);
            }
            add_epoch(&mut h, &self.dues, self.len, e, done);
        }
        if let Some(c) = current {
            stats[c] = Percentiles::of(&h);
        }
        stats
            .into_iter()
            .enumerate()
            .map(|(i, latency_ns)| WindowStats {
                t_s: i as f64 * WINDOW.as_secs_f64(),
                latency_ns,
                imbalance: None,
            })
            .collect()
    }
}

/// Adds the latency of each record of `epoch`, completed `done_ns` into the run, to `h`.
fn add_epoch(h: &mut Histogram<u64>, dues: &Dues, len: EpochLen, epoch: Time, done_ns: u64) {
    // A record is never done before it is due; 1 ns keeps it in the histogram.
    match dues {
        Dues::Rate { rate, total } => {
            let end = first_record(epoch + 1, *rate, len).min(total.get());
            for i in first_record(epoch, *rate, len)..end {
                h.saturating_record(done_ns.saturating_sub(due_ns(i, *rate)).max(1));
            }
        }
        Dues::Listed(listed) => {
            for &(due, n) in listed.borrow().of(epoch) {
                let _ = h.record_n(done_ns.saturating_sub(due).max(1).min(h.high()), u64::from(n));
            }
        }
    }
}

/// When the records of a run were due.
pub enum Dues {
    /// Record `i` at `i / rate` seconds: generated records, and files read by rate, which
    /// say how many records there were once they end (`total`).
    Rate {
        /// Records per second.
        rate: u64,
        /// The number of records, once known (`u64::MAX` until then).
        total: Rc<Cell<u64>>,
    },
    /// As listed, epoch by epoch, by the feed that sent them (files read by event time,
    /// streams by arrival).
    Listed(Rc<RefCell<ListedDues>>),
}

impl Dues {
    /// Records at `rate` per second, with no end.
    pub fn rate(rate: u64) -> Self {
        Dues::Rate {
            rate,
            total: Rc::new(Cell::new(u64::MAX)),
        }
    }
}

/// The due times of the records of every epoch, in runs of records due at the same
/// nanosecond: a file read by event time in milliseconds has about one run per epoch, a
/// stream one per microsecond in which records arrived. Kept for the whole run, like the
/// epochs' completion times, so that the latency during any span can be told at the end.
#[derive(Debug, Default)]
pub struct ListedDues {
    /// Where in `runs` each epoch's begin, for epochs 1, 2, ...
    starts: Vec<usize>,
    runs: Vec<(u64, u32)>,
}

impl ListedDues {
    /// A record of epoch `epoch` was due `due_ns` into the run. Epochs come in order.
    pub fn push(&mut self, epoch: Time, due_ns: u64) {
        let epoch = epoch.max(1) as usize;
        while self.starts.len() < epoch {
            self.starts.push(self.runs.len());
        }
        let started = self.runs.len() > self.starts[epoch - 1];
        match self.runs.last_mut() {
            Some((due, n)) if started && *due == due_ns && *n < u32::MAX => *n += 1,
            _ => self.runs.push((due_ns, 1)),
        }
    }

    /// The runs of epoch `epoch`: (due ns, records).
    fn of(&self, epoch: Time) -> &[(u64, u32)] {
        let e = epoch as usize;
        if e == 0 || e > self.starts.len() {
            return &[];
        }
        let hi = self.starts.get(e).copied().unwrap_or(self.runs.len());
        &self.runs[self.starts[e - 1]..hi]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Windows merged through their encodings say what one histogram of all their records
    /// says; what does not decode leaves the merge as it was.
    #[test]
    fn merged_windows_are_one_histogram() {
        let (mut a, mut b, mut all) = (histogram(), histogram(), histogram());
        for v in 1..=1000u64 {
            let h = if v % 3 == 0 { &mut a } else { &mut b };
            h.record(v * 1000).unwrap();
            all.record(v * 1000).unwrap();
        }
        let (a, b) = (encode(&a).unwrap(), encode(&b).unwrap());
        let (first, _) = merge_encoded(None, &a).unwrap();
        let (_, merged) = merge_encoded(Some(&first), &b).unwrap();
        assert_eq!(merged, Percentiles::of(&all));
        assert!(merge_encoded(Some(&first), "not base64!").is_none());
        assert!(merge_encoded(None, "").is_none());
    }

    /// The plain V2 encoding of a histogram of a few latencies, as bytes.
    fn serialized() -> Vec<u8> {
        let mut h = histogram();
        for v in [1_000u64, 2_000, 3_000_000] {
            h.record(v).unwrap();
        }
        BASE64.decode(encode(&h).unwrap()).unwrap()
    }

    /// [`serialized`] with header fields overwritten (offset, big-endian bytes), in base64.
    fn patched(edits: &[(usize, &[u8])]) -> String {
        let mut bytes = serialized();
        for (at, field) in edits {
            bytes[*at..*at + field.len()].copy_from_slice(field);
        }
        BASE64.encode(bytes)
    }

    /// `plain` DEFLATE-compressed as HdrHistogram's V2+DEFLATE format has it, in base64.
    fn compressed(plain: &[u8]) -> String {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(plain).unwrap();
        let body = z.finish().unwrap();
        let mut bytes = 0x1c84_9314u32.to_be_bytes().to_vec();
        bytes.extend((body.len() as u32).to_be_bytes());
        bytes.extend(body);
        BASE64.encode(bytes)
    }

    /// A `latency` line's histogram whose header claims a 4 GiB payload is refused from its
    /// header (hdrhistogram's own deserializer allocates the claimed length first), and so is
    /// one that claims a byte more than follows it.
    #[test]
    fn a_header_claiming_more_payload_than_allowed_or_present_is_refused() {
        let four_gib = patched(&[(4, u32::MAX.to_be_bytes().as_slice())]);
        assert!(
            matches!(
                decode(&four_gib),
                Err(HistogramError::PayloadTooLarge { claimed, max })
                    if claimed == u64::from(u32::MAX) && max == (MAX_HISTOGRAM_BYTES - 40) as u64
            ),
            "{:?}",
            decode(&four_gib).err()
        );
        assert!(merge_encoded(None, &four_gib).is_none());
        let present = (serialized().len() - 40) as u32;
        let one_more = patched(&[(4, (present + 1).to_be_bytes().as_slice())]);
        assert!(
            matches!(
                decode(&one_more),
                Err(HistogramError::PayloadMissing { claimed, present: p })
                    if claimed == u64::from(present) + 1 && p == u64::from(present)
            ),
            "{:?}",
            decode(&one_more).err()
        );
        let error = decode(&one_more).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("claims a payload"), "{error}");
        // The encoding as written still reads.
        assert!(decode(&BASE64.encode(serialized())).is_ok());
    }

    /// A range and precision whose counts array would be huge are refused before the
    /// histogram is made.
    #[test]
    fn ranges_whose_counts_are_huge_are_refused() {
        // Five significant digits over the whole u64 range: about 50 MB of counts.
        let five_digits = patched(&[
            (12, 5u32.to_be_bytes().as_slice()),
            (24, u64::MAX.to_be_bytes().as_slice()),
        ]);
        assert!(
            matches!(
                decode(&five_digits),
                Err(HistogramError::CountsTooLarge { digits: 5, high: u64::MAX, bytes, .. })
                    if bytes > MAX_COUNTS_BYTES
            ),
            "{:?}",
            decode(&five_digits).err()
        );
        let six_digits = patched(&[(12, 6u32.to_be_bytes().as_slice())]);
        assert!(matches!(
            decode(&six_digits),
            Err(HistogramError::Digits { digits: 6 })
        ));
        let low_zero = patched(&[(16, 0u64.to_be_bytes().as_slice())]);
        assert!(matches!(
            decode(&low_zero),
            Err(HistogramError::Range { low: 0, .. })
        ));
        // Three digits over the whole u64 range fit.
        let whole_range = patched(&[(24, u64::MAX.to_be_bytes().as_slice())]);
        assert!(decode(&whole_range).is_ok(), "{:?}", decode(&whole_range).err());
    }

    /// Compressed histograms read; what they inflate to is held to the same bounds, and
    /// inflating stops at [`MAX_HISTOGRAM_BYTES`].
    #[test]
    fn compressed_histograms_are_bounded_when_inflated() {
        let mut h = histogram();
        h.record(5_000).unwrap();
        let mut bytes = Vec::new();
        hdrhistogram::serialization::V2DeflateSerializer::new()
            .serialize(&h, &mut bytes)
            .unwrap();
        let back = decode(&BASE64.encode(&bytes)).expect("a compressed histogram reads");
        assert_eq!(Percentiles::of(&back), Percentiles::of(&h));
        assert_eq!(decode(&compressed(&serialized())).map(|h| h.len()).ok(), Some(3));
        let mut inner = serialized();
        inner[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            decode(&compressed(&inner)),
            Err(HistogramError::PayloadTooLarge { .. })
        ));
        // 64 MiB after a valid header compress to a few KB; they are not inflated whole.
        let mut bomb = serialized();
        bomb.resize(64 << 20, 0);
        assert!(matches!(
            decode(&compressed(&bomb)),
            Err(HistogramError::Inflated { .. })
        ));
        // The compressed length is checked against what follows it too.
        let mut cut = BASE64.decode(compressed(&serialized())).unwrap();
        cut.truncate(cut.len() - 1);
        assert!(matches!(
            decode(&BASE64.encode(&cut)),
            Err(HistogramError::PayloadMissing { .. })
        ));
    }

    /// Other cookies, short input and text that is not base64 are named.
    #[test]
    fn what_is_not_a_histogram_says_why() {
        assert!(matches!(decode(""), Err(HistogramError::Short { got: 0, .. })));
        assert!(matches!(decode("not base64!"), Err(HistogramError::Base64(_))));
        let other = patched(&[(0, 0x1c84_9303u32.to_be_bytes().as_slice())]);
        assert!(matches!(decode(&other), Err(HistogramError::Cookie(0x1c84_9303))));
        let huge = "A".repeat(MAX_HISTOGRAM_BYTES * 2);
        assert!(matches!(decode(&huge), Err(HistogramError::TooLong { .. })));
    }

    proptest::proptest! {
        /// No bytes, and no change to the header of a real histogram, make decoding panic.
        #[test]
        fn no_bytes_make_decoding_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
            edits in proptest::collection::vec((0usize..64, proptest::prelude::any::<u8>()), 0..8),
        ) {
            let _ = decode(&BASE64.encode(&bytes));
            let mut real = serialized();
            for (at, byte) in edits {
                let i = at % real.len();
                real[i] = byte;
            }
            let _ = decode(&BASE64.encode(&real));
            let _ = decode(&compressed(&real));
        }
    }

    #[test]
    fn every_record_counts_from_its_due_time() {
        // 2000 records/s: epoch e holds the records due at e-1 ms and e-0.5 ms.
        let mut r = LatencyRecorder::new(2000, EpochLen::MS);
        for e in 1..=500 {
            let late = if e == 300 { 50_000_000 } else { 0 };
            r.record(e, e * 1_000_000 + late, true);
        }
        let all = r.overall();
        assert_eq!(all.count, 1000);
        // Half the records waited 1 ms for their epoch to close, half 0.5 ms.
        assert!(
            (499_000..=501_000).contains(&r.between(1, 250).p50),
            "{:?}",
            r.between(1, 250)
        );
        assert!(all.p99 >= 999_000 && all.p99 <= 1_001_000, "{all:?}");
        assert!(all.max >= 50_900_000, "{all:?}");
        let tl = r.timeline();
        assert_eq!(tl.len(), 2);
        assert_eq!(tl[0].latency_ns.count, 500);
        assert!(tl[0].latency_ns.max < 1_100_000);
        assert!(tl[1].latency_ns.max >= 50_900_000);
        assert_eq!(r.between(1, 250).count, 500);
    }

    #[test]
    fn records_split_exactly_into_epochs() {
        for us in [1000, 250, 100, 25, 1] {
            let len = EpochLen::from_us(us).unwrap();
            let ns = us * 1000;
            for rate in [1, 7, 999, 1000, 1001, 400_000, 3_333_333] {
                let mut next = 0;
                for e in 1..=2000 {
                    let (lo, hi) = (first_record(e, rate, len), first_record(e + 1, rate, len));
                    assert_eq!(lo, next, "{len}, rate {rate}, epoch {e}");
                    next = hi;
                    for i in lo..hi {
                        // Due within the epoch, closing at its end.
                        let due = due_ns(i, rate);
                        assert!(
                            due < e * ns && due + ns >= e * ns,
                            "{len}, rate {rate}, record {i}"
                        );
                    }
                }
                assert_eq!(next, first_record(2001, rate, len));
                assert_eq!(
                    next,
                    (2000 * rate as u128 * us as u128).div_ceil(1_000_000) as u64
                );
            }
        }
    }

    #[test]
    fn listed_dues_count_every_record_from_its_own_due_time() {
        let listed = Rc::new(RefCell::new(ListedDues::default()));
        {
            let mut l = listed.borrow_mut();
            // Epoch 1: three records due at 0.2 ms (one run), one at 0.5 ms; epoch 2 none;
            // epoch 3 one record due at 2.1 ms.
            for due in [200_000, 200_000, 200_000, 500_000] {
                l.push(1, due);
            }
            l.push(3, 2_100_000);
        }
        let mut r = LatencyRecorder::with_dues(Dues::Listed(listed), EpochLen::MS);
        r.record(1, 1_000_000, true);
        r.record(2, 2_000_000, true);
        r.record(3, 3_000_000, true);
        let all = r.overall();
        assert_eq!(all.count, 5);
        assert!((799_000..=801_000).contains(&all.p50), "{all:?}");
        assert!((899_000..=901_000).contains(&all.max), "{all:?}");
        assert_eq!(r.between(2, 2).count, 0);
        assert_eq!(r.between(3, 3).count, 1);
    }

    #[test]
    fn fine_epochs_wait_less() {
        // 100 us epochs at 20,000 records/s: two records per epoch, due 0 and 50 us into it.
        let len = EpochLen::from_us(100).unwrap();
        let mut r = LatencyRecorder::new(20_000, len);
        for e in 1..=5000 {
            r.record(e, e * 100_000, true);
        }
        let all = r.overall();
        assert_eq!(all.count, 10_000);
        assert!((49_000..=51_000).contains(&all.p50), "{all:?}");
        assert!(all.max <= 100_100, "{all:?}");
        // 500 ms of epochs: two windows of 250 ms, 2500 epochs each.
        let tl = r.timeline();
        assert_eq!(tl.len(), 2);
        assert_eq!(tl[1].t_s, 0.25);
        assert_eq!(tl[0].latency_ns.count, 5000);
    }

    #[test]
    fn epochs_done_together_are_kept_as_one_run_and_read_back_one_by_one() {
        // 10 us epochs at 1M records/s: ten records each. Epochs 1-5 complete together at
        // 60 us (a batch), 6 alone at 70 us, 7-8 together at 100 us.
        let len = EpochLen::from_us(10).unwrap();
        let mut r = LatencyRecorder::new(1_000_000, len);
        for (e, at) in [
            (1, 60_000),
            (2, 60_000),
            (3, 60_000),
            (4, 60_000),
            (5, 60_000),
            (6, 70_000),
            (7, 100_000),
            (8, 100_000),
        ] {
            r.record(e, at, false);
        }
        let runs: Vec<(Time, Time, u64)> = r.epochs().iter().map(|d| (d.first, d.last, d.at_ns)).collect();
        assert_eq!(runs, [(1, 5, 60_000), (6, 6, 70_000), (7, 8, 100_000)]);
        assert_eq!(r.len(), 8);
        assert_eq!(r.overall().count, 80);
        // Epoch 1's records (due 0-9 us) waited up to 60 us; epoch 8's (due 70-79 us) 21 to
        // 30 us.
        let first = r.between(1, 1);
        assert!((59_900..=60_100).contains(&first.max), "{first:?}");
        let last = r.between(8, 8);
        assert_eq!(last.count, 10);
        assert!((29_900..=30_100).contains(&last.max), "{last:?}");
        // A span that cuts runs takes only its own epochs.
        assert_eq!(r.between(5, 7).count, 30);
        assert_eq!(r.timeline()[0].latency_ns.count, 80);
    }
}
