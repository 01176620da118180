//! What each bin costs the worker that applies it: the records applied, and the time of the
//! activations that applied them shared out by records (no clock read per record or per
//! bin: an activation is timed once, and its bins split its time by the records each took).
//! Counters only grow; whoever reads them (the sampler, the balancer) keeps the last reading
//! and takes the difference.

use std::cell::RefCell;

/// One bin's cost on one worker, so far: what [`BinLoads::read`] gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinLoad {
    /// The bin's index.
    pub bin: u32,
    /// Records applied to it here.
    pub records: u64,
    /// Its share of the busy time of the activations that applied them, in nanoseconds (0
    /// while activations are not timed).
    pub busy_ns: u64,
    /// The worker holds the bin's standby (its work is the primary's, done again).
    pub standby: bool,
}

/// One operator's per-bin counters on one worker.
#[derive(Debug, Default)]
pub(crate) struct BinLoads {
    /// Per bin: records applied, busy ns.
    totals: RefCell<Vec<(u64, u64)>>,
    /// The bins the current activation applied, each with its records (at least 1: a run
    /// for scheduled work alone costs too).
    touched: RefCell<Vec<(u32, u64)>>,
}

impl BinLoads {
    /// Counters for `bins` bins.
    pub(crate) fn new(bins: usize) -> Self {
        BinLoads {
            totals: RefCell::new(vec![(0, 0); bins]),
            touched: RefCell::default(),
        }
    }

    /// The logic ran for `bin` with `records` records.
    pub(crate) fn applied(&self, bin: u32, records: usize) {
        let weight = (records as u64).max(1);
        if let Some(t) = self.totals.borrow_mut().get_mut(bin as usize) {
            t.0 += records as u64;
        }
        self.touched.borrow_mut().push((bin, weight));
    }

    /// The activation that applied the bins since the last call took `ns` (if it was timed):
    /// each bin gets its share by records.
    pub(crate) fn attribute(&self, ns: Option<u64>) {
        let mut touched = self.touched.borrow_mut();
        if let Some(ns) = ns {
            let weight: u64 = touched.iter().map(|(_, w)| w).sum();
            let mut totals = self.totals.borrow_mut();
            for (bin, w) in touched.iter() {
                if let Some(t) = totals.get_mut(*bin as usize) {
                    t.1 += (u128::from(ns) * u128::from(*w) / u128::from(weight.max(1))) as u64;
                }
            }
        }
        touched.clear();
    }

    /// Appends every bin that ever had work here, with its totals; `standby` says which
    /// this worker holds the standby of.
    pub(crate) fn read(&self, standby: impl Fn(u32) -> bool, out: &mut Vec<BinLoad>) {
        for (bin, (records, busy_ns)) in self.totals.borrow().iter().enumerate() {
            if *records > 0 || *busy_ns > 0 {
                out.push(BinLoad {
                    bin: bin as u32,
                    records: *records,
                    busy_ns: *busy_ns,
                    standby: standby(bin as u32),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_activations_time_is_shared_out_by_records() {
        let loads = BinLoads::new(4);
        loads.applied(1, 30);
        loads.applied(3, 10);
        loads.attribute(Some(4_000));
        loads.applied(3, 0);
        loads.attribute(None);
        // Scheduled work alone weighs one record.
        loads.applied(2, 0);
        loads.attribute(Some(500));
        let mut got = Vec::new();
        loads.read(|b| b == 3, &mut got);
        let totals: Vec<(u32, u64, u64, bool)> = got
            .iter()
            .map(|l| (l.bin, l.records, l.busy_ns, l.standby))
            .collect();
        assert_eq!(
            totals,
            vec![(1, 30, 3_000, false), (2, 0, 500, false), (3, 10, 1_000, true)]
        );
    }
}
