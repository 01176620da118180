//! What each bin costs the worker that applies it: the records applied, and the time of the
//! activations that applied them shared out by records (no clock read per record or per
//! bin: an activation is timed once, and its bins split its time by the records each took).
//! Counters only grow; whoever reads them (the sampler, the balancer) keeps the last reading
//! and takes the difference.

use std::cell::{Cell, RefCell};

/// One bin's cost on one worker, so far: what `BinLoads::read` gives.
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

/// One operator's per-bin counters on one worker, and the records its router here sent it
/// (each replica's copy counted): what arrives at the operator, whether or not it keeps up.
#[derive(Debug)]
pub(crate) struct BinLoads {
    inner: RefCell<Counters>,
    routed: Cell<u64>,
}

#[derive(Debug)]
struct Counters {
    /// Per bin: records applied, busy ns.
    totals: Vec<(u64, u64)>,
    /// The bins the current activation applied, each with its records (at least 1: a run
    /// for scheduled work alone costs too); kept only while activations are timed.
    touched: Vec<(u32, u64)>,
    /// Whether the last activation was timed: the next is taken to be too (timing is
    /// turned on once and stays on, so only the first timed activation goes unshared).
    timed: bool,
}

impl BinLoads {
    /// Counters for `bins` bins.
    pub(crate) fn new(bins: usize) -> Self {
        BinLoads {
            inner: RefCell::new(Counters {
                totals: vec![(0, 0); bins],
                touched: Vec::new(),
                timed: true,
            }),
            routed: Cell::new(0),
        }
    }

    /// The router sent the operator `n` more records.
    pub(crate) fn routed(&self, n: u64) {
        self.routed.set(self.routed.get() + n);
    }

    /// Records the router here sent the operator so far.
    pub(crate) fn routed_total(&self) -> u64 {
        self.routed.get()
    }

    /// The logic ran for `bin` with `records` records.
    pub(crate) fn applied(&self, bin: u32, records: usize) {
        let mut c = self.inner.borrow_mut();
        if let Some(t) = c.totals.get_mut(bin as usize) {
            t.0 += records as u64;
        }
        if c.timed {
            c.touched.push((bin, (records as u64).max(1)));
        }
    }

    /// The activation that applied the bins since the last call took `ns` (if it was timed):
    /// each bin gets its share by records.
    pub(crate) fn attribute(&self, ns: Option<u64>) {
        let c = &mut *self.inner.borrow_mut();
        if let Some(ns) = ns {
            let weight: u64 = c.touched.iter().map(|(_, w)| w).sum();
            for (bin, w) in c.touched.iter() {
                if let Some(t) = c.totals.get_mut(*bin as usize) {
                    t.1 += (u128::from(ns) * u128::from(*w) / u128::from(weight.max(1))) as u64;
                }
            }
        }
        c.touched.clear();
        c.timed = ns.is_some();
    }

    /// Appends every bin that ever had work here, with its totals; `standby` says which
    /// this worker holds the standby of.
    pub(crate) fn read(&self, standby: impl Fn(u32) -> bool, out: &mut Vec<BinLoad>) {
        for (bin, (records, busy_ns)) in self.inner.borrow().totals.iter().enumerate() {
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
        // After an untimed activation the next is not shared out (timing just came on).
        loads.applied(3, 5);
        loads.attribute(Some(9_999));
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
            vec![(1, 30, 3_000, false), (2, 0, 500, false), (3, 15, 1_000, true)]
        );
    }
}
