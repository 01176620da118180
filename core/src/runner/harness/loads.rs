//! Load reports: every worker, of every process, tells worker 0 what its bins cost it, on a
//! stream of their own, so that worker 0's control plane knows each bin's load and size
//! wherever the bin is ([`Board`]), for the `balance` target and the balancer.
//!
//! A report covers one [`REPORT_EVERY`] of a worker's run: per bin whose primary it holds,
//! the records its operators applied to the bin and the bin's bytes. The board adds them
//! up in windows of [`WINDOW`] and keeps the last whole one: a worker's load is its records
//! over the time its own reports covered (not over worker 0's window, which a report landing
//! across its tick would stretch or shrink), a bin's load its records over the time of its
//! reporter's reports. A report whose interval began before the board last started afresh
//! (a plan ended) is not counted: it may hold work from before the bins moved. Memory is a
//! few numbers per bin and worker, whatever the run's length.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use timely::dataflow::operators::{Exchange, Inspect};
use timely::dataflow::{InputHandleVec, Scope};

use crate::Time;
use crate::balance::Loads;
use crate::operator::{BinLoad, BinSize, Observers};

/// How often a worker reports its bins' load to worker 0: once per latency window, so that
/// each window's imbalance is known.
pub const REPORT_EVERY: Duration = crate::epoch::WINDOW;
/// The window a bin's load is measured over.
pub const WINDOW: Duration = Duration::from_secs(1);

/// One worker's report: what its primaries cost it over `interval_ns`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// The reporting worker.
    pub worker: u32,
    /// The latency window (of [`REPORT_EVERY`], on the worker's clock of the run) the report
    /// closes: it covers the time since the worker's last report.
    pub window: u64,
    /// The report's interval, in nanoseconds.
    pub interval_ns: u64,
    /// When the interval ended, in nanoseconds on the worker's clock of the run.
    #[serde(default)]
    pub ended_ns: u64,
    /// Time the worker's operators were busy in it (0 unless timed).
    pub busy_ns: u64,
    /// Records the worker's source sent in it: the load offered, which what the workers
    /// apply falls short of when they cannot keep up.
    #[serde(default)]
    pub sent: u64,
    /// Per bin whose primary the worker holds and that had work: (bin, records, bytes).
    pub bins: Vec<(u32, u64, u64)>,
    /// Per bin whose standby the worker holds and that had work: (bin, records). A standby
    /// applies every record its primary does: work of the worker's, no load of the bin's.
    #[serde(default)]
    pub standbys: Vec<(u32, u64)>,
}

/// Reads one worker's counters into reports (the differences since the last one).
pub(super) struct Meter {
    worker: u32,
    observers: Observers,
    /// Per bin, the records this worker's operators applied to it so far, as primary or
    /// standby (a standby promoted to primary reports only what came after).
    last: Vec<u64>,
    busy_before: u64,
    sent_before: u64,
    /// Per bin, this report's totals and bytes, and whether the worker holds its primary.
    now: Vec<(u64, u64, bool)>,
    scratch: Vec<BinLoad>,
    sizes: Vec<BinSize>,
}

impl Meter {
    pub(super) fn new(worker: u32, observers: Observers, bins: usize) -> Self {
        let mut meter = Meter {
            worker,
            observers,
            last: vec![0; bins],
            busy_before: 0,
            sent_before: 0,
            now: vec![(0, 0, false); bins],
            scratch: Vec::new(),
            sizes: Vec::new(),
        };
        // What came before (a preload) is no load of the run's.
        meter.report(Duration::ZERO, Duration::ZERO, 0, 0);
        meter
    }

    /// What the worker's primaries cost since the last report, `interval` ago (it is
    /// `ended` into the run), as the report that closes latency window `window`; its source
    /// has sent `sent` records so far.
    pub(super) fn report(
        &mut self,
        interval: Duration,
        ended: Duration,
        window: u64,
        sent: u64,
    ) -> LoadReport {
        let (now, scratch, sizes) = (&mut self.now, &mut self.scratch, &mut self.sizes);
        now.fill((0, 0, false));
        self.observers.each(|op| {
            scratch.clear();
            (op.loads)(scratch);
            for l in scratch.iter() {
                if let Some(n) = now.get_mut(l.bin as usize) {
                    n.0 += l.records;
                    n.2 |= !l.standby;
                }
            }
            sizes.clear();
            (op.sizes)(sizes);
            for s in sizes.iter().filter(|s| !s.standby) {
                if let Some(n) = now.get_mut(s.bin as usize) {
                    n.1 += s.bytes;
                }
            }
        });
        let (bins, standbys) = work_since(now, &mut self.last);
        let busy = self.observers.busy_ns();
        let busy_ns = busy.saturating_sub(self.busy_before);
        self.busy_before = busy;
        let sent_since = sent.saturating_sub(self.sent_before);
        self.sent_before = sent;
        LoadReport {
            worker: self.worker,
            window,
            interval_ns: interval.as_nanos() as u64,
            ended_ns: ended.as_nanos().try_into().unwrap_or(u64::MAX),
            busy_ns,
            sent: sent_since,
            bins,
            standbys,
        }
    }
}

/// A report's primaries `(bin, records, bytes)` and standbys `(bin, records)`.
type Work = (Vec<(u32, u64, u64)>, Vec<(u32, u64)>);

/// The (bin, records, bytes) of each bin whose primary the worker holds and that had work
/// since `last`, and the (bin, records) of each whose standby it holds, from this report's
/// per-bin `(records so far, bytes, primary)`; `last` is brought up to date for every bin,
/// whatever the role (a standby's work is no load of a primary's, before or after a
/// promotion).
fn work_since(now: &[(u64, u64, bool)], last: &mut [u64]) -> Work {
    let (mut bins, mut standbys) = (Vec::new(), Vec::new());
    for (bin, (&(total, bytes, primary), last)) in now.iter().zip(last.iter_mut()).enumerate() {
        // A bin that left and came back counts from where its counters stand.
        let records = total.saturating_sub(*last);
        *last = total;
        if records > 0 {
            if primary {
                bins.push((bin as u32, records, bytes));
            } else {
                standbys.push((bin as u32, records));
            }
        }
    }
    (bins, standbys)
}

/// Every worker's end of the reports stream: worker 0 hears them all.
pub(super) struct LoadReports {
    input: InputHandleVec<Time, LoadReport>,
    heard: Rc<RefCell<Vec<LoadReport>>>,
}

impl LoadReports {
    pub(super) fn new() -> Self {
        LoadReports {
            input: InputHandleVec::new(),
            heard: Rc::default(),
        }
    }

    /// Adds the stream to the dataflow being built. Nothing waits on its frontier: its input
    /// stays at its first time until the run ends.
    pub(super) fn build(&mut self, scope: Scope<'_, Time>) {
        let heard = Rc::clone(&self.heard);
        // The first inspect makes an operator's output, which hands each batch on at the end
        // of its activation (see `end.rs`).
        self.input
            .to_stream(scope)
            .inspect(|_| {})
            .exchange(|_| 0)
            .inspect(move |report| heard.borrow_mut().push(report.clone()));
    }

    /// Sends worker 0 this worker's report.
    pub(super) fn send(&mut self, report: LoadReport) {
        self.input.send(report);
        self.input.flush();
    }

    /// On worker 0: the reports that arrived since the last call.
    pub(super) fn take(&self) -> Vec<LoadReport> {
        std::mem::take(&mut self.heard.borrow_mut())
    }
}

/// `s` seconds as nanoseconds (0 for a negative time).
fn secs_to_ns(s: f64) -> u64 {
    (s.max(0.0) * 1e9) as u64
}

/// The latency window a worker's clock of the run is in.
pub(super) fn window_at(now: Duration) -> u64 {
    (now.as_nanos() / REPORT_EVERY.as_nanos()) as u64
}

/// Windows behind the latest reported after which a window not every live worker reported
/// is given up (a worker whose loop stalled reports two windows as one).
const WINDOWS_PENDING: u64 = 8;

/// Per latency window, each worker's records applied as primary and the time its reports
/// covered, until every worker counted reported it: then the window's imbalance is known.
/// Holds at most a few windows.
#[derive(Debug, Default)]
pub(super) struct WindowSums {
    pending: std::collections::BTreeMap<u64, Vec<Option<(u64, u64)>>>,
}

impl WindowSums {
    /// Takes a report (one of a worker the job does not have is ignored).
    pub(super) fn take(&mut self, report: &LoadReport, workers: usize) {
        let w = report.worker as usize;
        if w >= workers {
            return;
        }
        let sums = self
            .pending
            .entry(report.window)
            .or_insert_with(|| vec![None; workers]);
        // Every record the worker applied, its standbys' too.
        let records: u64 = report.bins.iter().map(|(_, r, _)| r).sum::<u64>()
            + report.standbys.iter().map(|(_, r)| r).sum::<u64>();
        let (r, ns) = sums[w].unwrap_or((0, 0));
        sums[w] = Some((r + records, ns + report.interval_ns));
    }

    /// The windows now known, with their imbalance over the workers `counted` (max / mean of
    /// their records per second: a worker whose loop stalled reports several windows in
    /// one; a window with no records has no figure), in window order.
    pub(super) fn settle(&mut self, counted: &[u32]) -> Vec<(u64, f64)> {
        let latest = self.pending.keys().next_back().copied().unwrap_or(0);
        let mut known = Vec::new();
        while let Some((&window, sums)) = self.pending.first_key_value() {
            let each: Option<Vec<f64>> = counted
                .iter()
                .map(|w| {
                    let (records, ns) = sums.get(*w as usize).copied().flatten()?;
                    Some(records as f64 / (ns.max(1) as f64 / 1e9))
                })
                .collect();
            match each {
                Some(each) => {
                    if each.iter().sum::<f64>() > 0.0 {
                        known.push((window, crate::balance::imbalance(&each)));
                    }
                }
                None if window + WINDOWS_PENDING < latest => {}
                None => break,
            }
            self.pending.remove(&window);
        }
        known
    }
}

/// What worker 0 knows of every bin's and worker's load.
#[derive(Clone, Debug)]
pub struct Board {
    workers: usize,
    /// The window being filled: records per bin, per worker, and the bins' bytes.
    filling: Window,
    /// The last whole window, if one is.
    last: Option<Window>,
    /// When the window being filled began, in seconds into the run.
    began_s: f64,
    /// Reports whose interval began before this (ns into the run: the last reset) are
    /// not counted.
    since_ns: u64,
}

/// One window's sums.
#[derive(Clone, Debug)]
struct Window {
    records: Vec<u64>,
    bytes: Vec<u64>,
    /// Per bin, the worker that reported its records (its primary's holder).
    reporter: Vec<u32>,
    per_worker: Vec<u64>,
    /// Per worker, the records its standbys applied.
    standby_per_worker: Vec<u64>,
    busy_ns: Vec<u64>,
    /// Records each worker's source sent.
    sent: Vec<u64>,
    /// Nanoseconds of reports per worker (a worker that reported nothing is unknown).
    reported_ns: Vec<u64>,
}

impl Window {
    fn new(bins: usize, workers: usize) -> Self {
        Window {
            records: vec![0; bins],
            bytes: vec![0; bins],
            reporter: vec![0; bins],
            per_worker: vec![0; workers],
            standby_per_worker: vec![0; workers],
            busy_ns: vec![0; workers],
            sent: vec![0; workers],
            reported_ns: vec![0; workers],
        }
    }
}

impl Board {
    /// An empty board for `bins` bins and `workers` workers, from `now_s`.
    pub fn new(bins: usize, workers: usize, now_s: f64) -> Self {
        Board {
            workers,
            filling: Window::new(bins, workers),
            last: None,
            began_s: now_s,
            since_ns: secs_to_ns(now_s),
        }
    }

    /// Takes a report. A report for a worker or bin the job does not have is ignored, and
    /// so is one whose interval began before the board last started afresh.
    pub fn take(&mut self, report: &LoadReport) {
        let w = report.worker as usize;
        if w >= self.workers || report.ended_ns.saturating_sub(report.interval_ns) < self.since_ns {
            return;
        }
        let window = &mut self.filling;
        for &(bin, records, bytes) in &report.bins {
            if let Some(r) = window.records.get_mut(bin as usize) {
                *r += records;
                window.bytes[bin as usize] = bytes;
                window.reporter[bin as usize] = report.worker;
                window.per_worker[w] += records;
            }
        }
        window.standby_per_worker[w] += report.standbys.iter().map(|(_, r)| r).sum::<u64>();
        window.busy_ns[w] += report.busy_ns;
        window.sent[w] += report.sent;
        window.reported_ns[w] += report.interval_ns;
    }

    /// Closes the window being filled once it is [`WINDOW`] long at `now_s`; returns whether
    /// a new whole window is there to read.
    pub fn tick(&mut self, now_s: f64) -> bool {
        if now_s - self.began_s < WINDOW.as_secs_f64() {
            return false;
        }
        let bins = self.filling.records.len();
        let whole = std::mem::replace(&mut self.filling, Window::new(bins, self.workers));
        self.last = Some(whole);
        self.began_s = now_s;
        true
    }

    /// Forgets what was measured (a plan moved bins: the window straddling it says neither
    /// where they were nor where they are).
    pub fn reset(&mut self, now_s: f64) {
        let bins = self.filling.records.len();
        self.filling = Window::new(bins, self.workers);
        self.last = None;
        self.began_s = now_s;
        self.since_ns = secs_to_ns(now_s);
    }

    /// The last whole window's loads, once one is and every worker reported in it: each
    /// worker's counts over the time its own reports covered.
    pub fn loads(&self) -> Option<Loads> {
        let w = self.last.as_ref()?;
        if w.reported_ns.contains(&0) {
            return None;
        }
        let secs_of = |worker: usize| w.reported_ns[worker] as f64 / 1e9;
        Some(Loads {
            bins: w
                .records
                .iter()
                .zip(&w.reporter)
                .map(|(r, by)| *r as f64 / secs_of(*by as usize))
                .collect(),
            bytes: w.bytes.clone(),
            workers: (0..self.workers)
                .map(|worker| w.per_worker[worker] as f64 / secs_of(worker))
                .collect(),
            standbys: (0..self.workers)
                .map(|worker| w.standby_per_worker[worker] as f64 / secs_of(worker))
                .collect(),
            offered: (0..self.workers)
                .map(|worker| w.sent[worker] as f64 / secs_of(worker))
                .sum(),
            true_rates: w
                .per_worker
                .iter()
                .zip(&w.busy_ns)
                .map(|(r, b)| (*b > 0).then(|| *r as f64 / (*b as f64 / 1e9)))
                .collect(),
            at_s: self.began_s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(worker: u32, bins: Vec<(u32, u64, u64)>) -> LoadReport {
        LoadReport {
            worker,
            window: 0,
            interval_ns: 250_000_000,
            ended_ns: 250_000_000,
            busy_ns: 100_000_000,
            sent: 0,
            bins,
            standbys: Vec::new(),
        }
    }

    #[test]
    fn a_window_adds_up_every_workers_reports() {
        let mut board = Board::new(4, 2, 0.0);
        board.take(&report(0, vec![(0, 300, 10), (2, 100, 20)]));
        board.take(&report(1, vec![(1, 100, 30)]));
        assert!(!board.tick(0.5));
        assert!(board.loads().is_none());
        board.take(&report(0, vec![(0, 300, 11)]));
        assert!(board.tick(1.0));
        let loads = board.loads().unwrap();
        // Each worker's records over the time its own reports covered: worker 0's two
        // reports 0.5 s, worker 1's one 0.25 s.
        assert_eq!(loads.bins, vec![1200.0, 400.0, 200.0, 0.0]);
        assert_eq!(loads.bytes, vec![11, 30, 20, 0]);
        assert_eq!(loads.workers, vec![1400.0, 400.0]);
        // 700 records in 0.2 busy seconds.
        assert_eq!(loads.true_rates[0], Some(3500.0));
        board.reset(1.2);
        assert!(board.loads().is_none());
    }

    /// Worker 0's fifth report of a steady 400 records/s lands after the board's tick was
    /// due, in the same window: weighed by worker 0's own window (1.25 s of reports in a
    /// window read as 1 s) it would look 25 % busier than worker 1.
    #[test]
    fn a_report_that_lands_across_a_tick_is_weighed_by_its_own_interval() {
        let mut board = Board::new(2, 2, 0.0);
        for (worker, reports) in [(0u32, 5u64), (1, 4)] {
            for k in 1..=reports {
                let r = LoadReport {
                    ended_ns: k * 250_000_000,
                    ..report(worker, vec![(worker, 100, 1)])
                };
                board.take(&r);
            }
        }
        assert!(board.tick(1.0));
        let loads = board.loads().unwrap();
        assert_eq!(loads.workers, vec![400.0, 400.0]);
        assert_eq!(crate::balance::imbalance(&loads.workers), 1.0);
    }

    /// A plan ended at 2.0 s: a report whose interval began before it holds work from
    /// before the bins moved, and is not counted.
    #[test]
    fn a_report_begun_before_the_board_started_afresh_is_not_counted() {
        let mut board = Board::new(1, 1, 0.0);
        board.reset(2.0);
        let at = |ended_ns| LoadReport {
            ended_ns,
            ..report(0, vec![(0, 100, 1)])
        };
        board.take(&at(2_100_000_000));
        board.take(&at(2_500_000_000));
        board.take(&at(2_750_000_000));
        assert!(board.tick(3.0));
        assert_eq!(
            board.loads().unwrap().workers,
            vec![400.0],
            "two reports of 0.25 s"
        );
    }

    #[test]
    fn a_promoted_standby_reports_only_its_work_as_primary() {
        let mut last = vec![0; 3];
        // Bin 1 is a standby here: its work is the worker's, not the bin's load.
        let first = work_since(&[(10, 5, true), (400, 7, false), (0, 0, false)], &mut last);
        assert_eq!(first, (vec![(0, 10, 5)], vec![(1, 400)]));
        // Bin 1 is promoted: only the 30 records since count.
        let second = work_since(&[(10, 5, true), (430, 7, true), (0, 0, false)], &mut last);
        assert_eq!(second, (vec![(1, 30, 7)], vec![]));
        assert_eq!(last, vec![10, 430, 0]);
    }

    #[test]
    fn a_latency_window_is_known_once_every_live_worker_reported_it() {
        let mut sums = WindowSums::default();
        let at = |window, r: LoadReport| LoadReport { window, ..r };
        sums.take(&at(3, report(0, vec![(0, 300, 10), (2, 100, 20)])), 3);
        sums.take(&at(3, report(1, vec![(1, 200, 30)])), 3);
        // Worker 2 failed: the live workers are 0 and 1.
        assert_eq!(sums.settle(&[0, 1, 2]), vec![]);
        assert_eq!(sums.settle(&[0, 1]), vec![(3, 400.0 / 300.0)]);
        // A window one worker skipped is given up once far enough behind.
        sums.take(&at(4, report(0, vec![(0, 1, 1)])), 3);
        sums.take(&at(5, report(0, vec![(0, 1, 1)])), 3);
        sums.take(&at(5, report(1, vec![(0, 1, 1)])), 3);
        assert_eq!(sums.settle(&[0, 1]), vec![]);
        sums.take(&at(14, report(0, vec![])), 3);
        assert_eq!(sums.settle(&[0, 1]), vec![(5, 1.0)]);
    }

    #[test]
    fn a_window_a_worker_said_nothing_in_is_not_read() {
        let mut board = Board::new(4, 2, 0.0);
        board.take(&report(0, vec![(0, 300, 10)]));
        board.take(&report(7, vec![(0, 300, 10)]));
        board.take(&report(0, vec![(9, 300, 10)]));
        assert!(board.tick(1.0));
        assert!(board.loads().is_none());
    }
}
