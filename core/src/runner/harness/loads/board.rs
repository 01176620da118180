//! Worker 0's board of the workers' reports: each bin's and worker's load over the last
//! whole window ([`Board`]), and each latency window's imbalance ([`WindowSums`]).

use super::{LoadReport, OperatorWork, WINDOW};
use crate::balance::{Loads, OperatorRate};

/// `s` seconds as nanoseconds (0 for a negative time).
fn secs_to_ns(s: f64) -> u64 {
    (s.max(0.0) * 1e9) as u64
}

/// Windows behind the latest reported after which a window not every live worker reported
/// is given up (a worker whose loop stalled reports two windows as one).
const WINDOWS_PENDING: u64 = 8;

/// Per latency window, each worker's records applied (as primary or standby) and the time
/// its reports covered, until every worker counted reported it: then the window's imbalance
/// is known. Records, not busy time: a 250 ms window of busy time on a shared machine is
/// mostly scheduling noise (the one-second windows the balancer judges by are busy time).
/// Holds at most a few windows.
#[derive(Debug, Default)]
pub(crate) struct WindowSums {
    pending: std::collections::BTreeMap<u64, Vec<Option<(u64, u64)>>>,
}

impl WindowSums {
    /// Takes a report (one of a worker the job does not have is ignored).
    pub(crate) fn take(&mut self, report: &LoadReport, workers: usize) {
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
    pub(crate) fn settle(&mut self, counted: &[u32]) -> Vec<(u64, f64)> {
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
    /// The window being filled: records and busy time per bin and per worker.
    filling: Window,
    /// The last whole window, if one is.
    last: Option<Window>,
    /// Per bin, its bytes as its primary last said them (a size does not depend on the
    /// window: kept through resets).
    bytes: Vec<u64>,
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
    /// Per bin, its primary's busy nanoseconds.
    busy: Vec<u64>,
    /// Every report in the window was timed.
    timed: bool,
    /// Per bin, the worker that reported its records (its primary's holder).
    reporter: Vec<u32>,
    per_worker: Vec<u64>,
    /// Per worker, the records its standbys applied.
    standby_per_worker: Vec<u64>,
    /// Per worker, its primaries' and its standbys' busy nanoseconds.
    busy_per_worker: Vec<u64>,
    standby_busy_per_worker: Vec<u64>,
    busy_ns: Vec<u64>,
    /// Records each worker's source sent.
    sent: Vec<u64>,
    /// Nanoseconds of reports per worker (a worker that reported nothing is unknown).
    reported_ns: Vec<u64>,
    /// Per worker, per operator, its work.
    operators: Vec<Vec<OperatorWork>>,
}

impl Window {
    fn new(bins: usize, workers: usize) -> Self {
        Window {
            records: vec![0; bins],
            busy: vec![0; bins],
            timed: true,
            reporter: vec![0; bins],
            per_worker: vec![0; workers],
            standby_per_worker: vec![0; workers],
            busy_per_worker: vec![0; workers],
            standby_busy_per_worker: vec![0; workers],
            busy_ns: vec![0; workers],
            sent: vec![0; workers],
            operators: vec![Vec::new(); workers],
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
            bytes: vec![0; bins],
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
        let timed = report.timed();
        window.timed &= timed;
        for (k, &(bin, records, bytes)) in report.bins.iter().enumerate() {
            if let Some(r) = window.records.get_mut(bin as usize) {
                let busy = report.bins_busy_ns.get(k).copied().filter(|_| timed).unwrap_or(0);
                *r += records;
                window.busy[bin as usize] += busy;
                self.bytes[bin as usize] = bytes;
                window.reporter[bin as usize] = report.worker;
                window.per_worker[w] += records;
                window.busy_per_worker[w] += busy;
            }
        }
        for &(bin, bytes) in &report.idle {
            if let Some(b) = self.bytes.get_mut(bin as usize) {
                *b = bytes;
            }
        }
        window.standby_per_worker[w] += report.standbys.iter().map(|(_, r)| r).sum::<u64>();
        if timed {
            window.standby_busy_per_worker[w] += report.standbys_busy_ns.iter().sum::<u64>();
        }
        window.busy_ns[w] += report.busy_ns;
        let ops = &mut window.operators[w];
        if ops.len() < report.operators.len() {
            ops.resize(report.operators.len(), OperatorWork::default());
        }
        for (sum, op) in ops.iter_mut().zip(&report.operators) {
            sum.routed += op.routed;
            sum.applied += op.applied;
            sum.busy_ns += op.busy_ns;
        }
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
    /// worker's counts over the time its own reports covered. Loads are busy time when
    /// every report was timed and some work was, records otherwise.
    pub fn loads(&self) -> Option<Loads> {
        let w = self.last.as_ref()?;
        if w.reported_ns.contains(&0) {
            return None;
        }
        let secs_of = |worker: usize| w.reported_ns[worker] as f64 / 1e9;
        let busy = w.timed
            && w.busy_per_worker
                .iter()
                .chain(&w.standby_busy_per_worker)
                .any(|b| *b > 0);
        let (bins, workers, standbys) = if busy {
            (&w.busy, &w.busy_per_worker, &w.standby_busy_per_worker)
        } else {
            (&w.records, &w.per_worker, &w.standby_per_worker)
        };
        // Busy nanoseconds as busy seconds.
        let unit = if busy { 1e-9 } else { 1.0 };
        let per_s = |v: &[u64], unit: f64| -> Vec<f64> {
            (0..self.workers)
                .map(|k| v[k] as f64 * unit / secs_of(k))
                .collect()
        };
        Some(Loads {
            bins: bins
                .iter()
                .zip(&w.reporter)
                .map(|(r, by)| *r as f64 * unit / secs_of(*by as usize))
                .collect(),
            bytes: self.bytes.clone(),
            workers: per_s(workers, unit),
            standbys: per_s(standbys, unit),
            busy,
            applied: per_s(&w.per_worker, 1.0),
            operators: operator_rates(&w.operators, secs_of),
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

/// Each operator's rates, all workers together: each worker's work over the time its own
/// reports covered, summed.
fn operator_rates(per_worker: &[Vec<OperatorWork>], secs_of: impl Fn(usize) -> f64) -> Vec<OperatorRate> {
    let count = per_worker.iter().map(Vec::len).max().unwrap_or(0);
    let mut rates = vec![OperatorRate::default(); count];
    for (w, ops) in per_worker.iter().enumerate() {
        let secs = secs_of(w);
        for (rate, op) in rates.iter_mut().zip(ops) {
            rate.routed += op.routed as f64 / secs;
            rate.applied += op.applied as f64 / secs;
            rate.busy += op.busy_ns as f64 / 1e9 / secs;
        }
    }
    rates
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
            bins,
            ..LoadReport::default()
        }
    }

    /// As [`report`], timed: each bin took `busy_ns` of the worker's time per record.
    fn timed(worker: u32, bins: Vec<(u32, u64, u64)>, ns_per_record: u64) -> LoadReport {
        LoadReport {
            bins_busy_ns: bins.iter().map(|(_, r, _)| r * ns_per_record).collect(),
            ..report(worker, bins)
        }
    }

    /// A worker that keeps up with only half its records at 1 ms each is saturated; its
    /// peer, at 0.1 ms each, applies twice the records in a fifth of the time. By records
    /// the peer looks busier; by busy time it is the saturated one.
    #[test]
    fn a_saturated_worker_is_weighed_by_its_busy_time_and_untimed_reports_by_records() {
        let mut board = Board::new(2, 2, 0.0);
        board.take(&timed(0, vec![(0, 250, 1)], 1_000_000));
        board.take(&timed(1, vec![(1, 500, 1)], 100_000));
        assert!(board.tick(1.0));
        let loads = board.loads().unwrap();
        assert!(loads.busy);
        // Busy seconds per second, over 0.25 s of reports each.
        assert_eq!(loads.workers, vec![1.0, 0.2]);
        assert_eq!(loads.bins, vec![1.0, 0.2]);
        assert_eq!(loads.applied, vec![1000.0, 2000.0], "records stay for sizing");
        // The latency windows' imbalance is of records: 2000 / 1500.
        let mut sums = WindowSums::default();
        sums.take(&timed(0, vec![(0, 250, 1)], 1_000_000), 2);
        sums.take(&timed(1, vec![(1, 500, 1)], 100_000), 2);
        assert_eq!(sums.settle(&[0, 1]), vec![(0, 2000.0 / 1500.0)]);
        // One report not timed: the window goes by records.
        board.take(&timed(0, vec![(0, 250, 1)], 1_000_000));
        board.take(&report(1, vec![(1, 500, 1)]));
        assert!(board.tick(2.0));
        let loads = board.loads().unwrap();
        assert!(!loads.busy);
        assert_eq!(loads.workers, vec![1000.0, 2000.0]);
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
        // An idle bin's size, said once, is known through resets and windows without work.
        board.take(&LoadReport {
            idle: vec![(3, 4096)],
            ended_ns: 1_500_000_000,
            ..report(1, vec![(1, 100, 30)])
        });
        board.take(&LoadReport {
            ended_ns: 1_500_000_000,
            ..report(0, vec![(0, 100, 11)])
        });
        assert!(board.tick(2.2));
        assert_eq!(board.loads().unwrap().bytes, vec![11, 30, 20, 4096]);
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
    fn each_operators_rates_add_up_over_the_workers() {
        let op = |routed, applied, busy_ns| OperatorWork {
            routed,
            applied,
            busy_ns,
        };
        let mut board = Board::new(2, 2, 0.0);
        board.take(&LoadReport {
            operators: vec![op(100, 100, 10_000_000), op(300, 120, 60_000_000)],
            ..report(0, vec![(0, 220, 1)])
        });
        board.take(&LoadReport {
            operators: vec![op(50, 50, 5_000_000)],
            ..report(1, vec![(1, 50, 1)])
        });
        assert!(board.tick(1.0));
        let ops = board.loads().unwrap().operators;
        // Over 0.25 s of reports each.
        assert_eq!(ops.len(), 2);
        assert_eq!((ops[0].routed, ops[0].applied), (600.0, 600.0));
        assert!((ops[0].busy - 0.06).abs() < 1e-9, "{ops:?}");
        assert_eq!((ops[1].routed, ops[1].applied), (1200.0, 480.0));
        assert!((ops[1].busy - 0.24).abs() < 1e-9, "{ops:?}");
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
