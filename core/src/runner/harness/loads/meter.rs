//! A worker's meter: its bins' counters read into load reports, the differences since the
//! last one.

use std::time::Duration;

use super::{LoadReport, OperatorWork};
use crate::operator::{BinLoad, BinSize, Observers};

/// Reads one worker's counters into reports (the differences since the last one).
pub(crate) struct Meter {
    worker: u32,
    observers: Observers,
    /// Per bin, the records this worker's operators applied to it so far, as primary or
    /// standby (a standby promoted to primary reports only what came after), and its busy
    /// nanoseconds so far.
    last: Vec<(u64, u64)>,
    busy_before: u64,
    sent_before: u64,
    /// Per bin, this report's totals, and whether the worker holds its primary.
    now: Vec<Totals>,
    /// Per bin, the bytes last said of it as an idle bin (0: none said).
    idle_said: Vec<u64>,
    /// Per operator, its totals so far (this report's, then the last one's).
    operators: Vec<OperatorWork>,
    operators_last: Vec<OperatorWork>,
    scratch: Vec<BinLoad>,
    sizes: Vec<BinSize>,
}

impl Meter {
    pub(crate) fn new(worker: u32, observers: Observers, bins: usize) -> Self {
        let mut meter = Meter {
            worker,
            observers,
            last: vec![(0, 0); bins],
            busy_before: 0,
            sent_before: 0,
            now: vec![Totals::default(); bins],
            idle_said: vec![0; bins],
            operators: Vec::new(),
            operators_last: Vec::new(),
            scratch: Vec::new(),
            sizes: Vec::new(),
        };
        // What came before (a preload) is no load of the run's; its bins' sizes are the
        // first report's to say.
        meter.report(Duration::ZERO, Duration::ZERO, 0, 0);
        meter.idle_said.fill(0);
        meter
    }

    /// What the worker's primaries cost since the last report, `interval` ago (it is
    /// `ended` into the run), as the report that closes latency window `window`; its source
    /// has sent `sent` records so far.
    pub(crate) fn report(
        &mut self,
        interval: Duration,
        ended: Duration,
        window: u64,
        sent: u64,
    ) -> LoadReport {
        let (now, scratch, sizes) = (&mut self.now, &mut self.scratch, &mut self.sizes);
        now.fill(Totals::default());
        let operators = &mut self.operators;
        operators.clear();
        self.observers.each(|op| {
            scratch.clear();
            (op.loads)(scratch);
            operators.push(OperatorWork {
                routed: (op.routed)(),
                applied: scratch.iter().map(|l| l.records).sum(),
                busy_ns: scratch.iter().map(|l| l.busy_ns).sum(),
            });
            for l in scratch.iter() {
                if let Some(n) = now.get_mut(l.bin as usize) {
                    n.records += l.records;
                    n.busy_ns += l.busy_ns;
                    n.primary |= !l.standby;
                }
            }
            sizes.clear();
            (op.sizes)(sizes);
            for s in sizes.iter().filter(|s| !s.standby) {
                if let Some(n) = now.get_mut(s.bin as usize) {
                    n.bytes += s.bytes;
                    n.primary = true;
                }
            }
        });
        let timed = self.observers.timed();
        let work = work_since(now, &mut self.last);
        let idle = idle_changed(now, &work, &mut self.idle_said);
        let operators = operators_since(&self.operators, &mut self.operators_last);
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
            bins: work.bins,
            standbys: work.standbys,
            bins_busy_ns: if timed { work.bins_busy_ns } else { Vec::new() },
            standbys_busy_ns: if timed { work.standbys_busy_ns } else { Vec::new() },
            idle,
            operators,
        }
    }
}

/// Each operator's work since `last` (brought up to date), from its totals `now`.
fn operators_since(now: &[OperatorWork], last: &mut Vec<OperatorWork>) -> Vec<OperatorWork> {
    last.resize(now.len(), OperatorWork::default());
    now.iter()
        .zip(last.iter_mut())
        .map(|(n, l)| {
            let since = OperatorWork {
                routed: n.routed.saturating_sub(l.routed),
                applied: n.applied.saturating_sub(l.applied),
                busy_ns: n.busy_ns.saturating_sub(l.busy_ns),
            };
            *l = *n;
            since
        })
        .collect()
}

/// One bin's counters on this worker as one report reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Totals {
    records: u64,
    busy_ns: u64,
    bytes: u64,
    /// The worker holds its primary.
    primary: bool,
}

/// A report's bins: primaries `(bin, records, bytes)` and standbys `(bin, records)`, each
/// with its busy nanoseconds.
#[derive(Debug, Default, PartialEq)]
struct Work {
    bins: Vec<(u32, u64, u64)>,
    bins_busy_ns: Vec<u64>,
    standbys: Vec<(u32, u64)>,
    standbys_busy_ns: Vec<u64>,
}

/// The work of each bin whose primary or standby the worker holds and that had work since
/// `last` (records or busy time), from this report's per-bin totals; `last` is brought up
/// to date for every bin, whatever the role (a standby's work is no load of a primary's,
/// before or after a promotion).
fn work_since(now: &[Totals], last: &mut [(u64, u64)]) -> Work {
    let mut work = Work::default();
    for (bin, (t, last)) in now.iter().zip(last.iter_mut()).enumerate() {
        // A bin that left and came back counts from where its counters stand.
        let records = t.records.saturating_sub(last.0);
        let busy = t.busy_ns.saturating_sub(last.1);
        *last = (t.records, t.busy_ns);
        if records > 0 || busy > 0 {
            if t.primary {
                work.bins.push((bin as u32, records, t.bytes));
                work.bins_busy_ns.push(busy);
            } else {
                work.standbys.push((bin as u32, records));
                work.standbys_busy_ns.push(busy);
            }
        }
    }
    work
}

/// The (bin, bytes) of each bin whose primary the worker holds that had no work in this
/// report and whose bytes differ from what `said` holds (brought up to date): an idle bin's
/// size is said once, and again when it changes.
fn idle_changed(now: &[Totals], work: &Work, said: &mut [u64]) -> Vec<(u32, u64)> {
    let mut idle = Vec::new();
    let mut worked = work.bins.iter().map(|(b, _, _)| *b).peekable();
    for (bin, (t, said)) in now.iter().zip(said.iter_mut()).enumerate() {
        let bin = bin as u32;
        // `work.bins` is in bin order.
        if worked.next_if_eq(&bin).is_some() {
            *said = t.bytes;
            continue;
        }
        if t.primary && t.bytes != *said {
            idle.push((bin, t.bytes));
            *said = t.bytes;
        }
    }
    idle
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_promoted_standby_reports_only_its_work_as_primary() {
        let t = |records, busy_ns, bytes, primary| Totals {
            records,
            busy_ns,
            bytes,
            primary,
        };
        let mut last = vec![(0, 0); 3];
        // Bin 1 is a standby here: its work is the worker's, not the bin's load.
        let first = work_since(
            &[t(10, 50, 5, true), t(400, 900, 7, false), t(0, 0, 0, false)],
            &mut last,
        );
        assert_eq!(first.bins, vec![(0, 10, 5)]);
        assert_eq!(first.bins_busy_ns, vec![50]);
        assert_eq!(first.standbys, vec![(1, 400)]);
        assert_eq!(first.standbys_busy_ns, vec![900]);
        // Bin 1 is promoted: only the 30 records (and 60 ns) since count.
        let second = work_since(
            &[t(10, 50, 5, true), t(430, 960, 7, true), t(0, 0, 0, false)],
            &mut last,
        );
        assert_eq!(second.bins, vec![(1, 30, 7)]);
        assert_eq!(second.bins_busy_ns, vec![60]);
        assert!(second.standbys.is_empty());
        assert_eq!(last, vec![(10, 50), (430, 960), (0, 0)]);
    }

    #[test]
    fn an_idle_bins_size_is_said_once_and_again_when_it_changes() {
        let t = |records, bytes, primary| Totals {
            records,
            busy_ns: 0,
            bytes,
            primary,
        };
        let (mut last, mut said) = (vec![(0, 0); 3], vec![0; 3]);
        // Bin 0 works, bin 1 is an idle primary of 500 bytes, bin 2 an idle standby.
        let now = [t(10, 100, true), t(0, 500, true), t(0, 700, false)];
        let work = work_since(&now, &mut last);
        assert_eq!(idle_changed(&now, &work, &mut said), vec![(1, 500)]);
        let work = work_since(&now, &mut last);
        assert_eq!(idle_changed(&now, &work, &mut said), vec![], "said already");
        let now = [t(10, 100, true), t(0, 600, true), t(0, 700, false)];
        let work = work_since(&now, &mut last);
        assert_eq!(idle_changed(&now, &work, &mut said), vec![(1, 600)]);
    }
}
