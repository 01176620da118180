//! Configurations: which worker owns each bin, and how that changes over logical time.

use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::Time;

/// A bin→worker map: entry `b` is the worker that owns bin `b`.
pub type Map = Vec<u32>;

/// The initial map: bin `i` belongs to worker `i mod workers`.
pub fn uniform(bins: usize, workers: usize) -> Map {
    (0..bins).map(|b| (b % workers) as u32).collect()
}

/// One change to the configuration, in force from the logical time it is stamped with.
///
/// Several changes at one time are applied in this type's order (whole maps first, then
/// moves by bin and worker), whatever order they arrived in, so that every worker derives
/// the same map.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ControlInst {
    /// Replace the whole map.
    Map(Map),
    /// Bin `bin` belongs to worker `worker`.
    Move { bin: u32, worker: u32 },
}

impl ControlInst {
    /// Applies the change to `map` of a job with `workers` workers. Changes naming a bin or
    /// worker that does not exist, or a map of the wrong length, are ignored, the same way
    /// on every worker (the control handle rejects them before they get here).
    pub fn apply(&self, map: &mut Map, workers: usize) {
        let valid = |w: &u32| (*w as usize) < workers;
        match self {
            ControlInst::Move { bin, worker } if valid(worker) => {
                if let Some(owner) = map.get_mut(*bin as usize) {
                    *owner = *worker;
                }
            }
            ControlInst::Map(new) if new.len() == map.len() && new.iter().all(valid) => map.clone_from(new),
            _ => {}
        }
    }

    /// Whether the change is one `apply` takes for a job of `bins` bins and `workers` workers.
    pub fn is_valid(&self, bins: usize, workers: usize) -> bool {
        match self {
            ControlInst::Move { bin, worker } => (*bin as usize) < bins && (*worker as usize) < workers,
            ControlInst::Map(m) => m.len() == bins && m.iter().all(|w| (*w as usize) < workers),
        }
    }
}

/// The configurations in force from each time on, oldest first.
///
/// Invariant: times strictly increase, and an entry is only added once the control
/// frontier has passed its time, so an entry never changes after it is added.
#[derive(Debug)]
pub struct History {
    entries: Vec<(Time, Rc<Map>)>,
}

impl History {
    /// A history whose map at every time is `initial`.
    pub fn new(initial: Map) -> Self {
        History {
            entries: vec![(0, Rc::new(initial))],
        }
    }

    /// The most recent map.
    pub fn latest(&self) -> &Rc<Map> {
        &self.entries[self.entries.len() - 1].1
    }

    /// The map in force at `time`.
    pub fn at(&self, time: Time) -> &Rc<Map> {
        let pos = self.entries.partition_point(|(t, _)| *t <= time);
        &self.entries[pos.saturating_sub(1)].1
    }

    /// Records `map` as in force from `time` on; `time` must not precede any earlier
    /// entry's. A map at the same time as the latest entry replaces it (a change at time 0
    /// replaces the initial map).
    pub fn push(&mut self, time: Time, map: Map) {
        match self.entries.last_mut() {
            Some((t, m)) if *t == time => *m = Rc::new(map),
            last => {
                debug_assert!(last.is_none_or(|(t, _)| *t < time));
                self.entries.push((time, Rc::new(map)));
            }
        }
    }

    /// Forgets maps that no time at or after `time` can need.
    pub fn forget_before(&mut self, time: Time) {
        let keep_from = self.entries.partition_point(|(t, _)| *t <= time);
        if keep_from > 1 {
            self.entries.drain(..keep_from - 1);
        }
    }

    /// Number of maps held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the history is empty (never: it always holds the initial map).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_by_time() {
        let mut h = History::new(uniform(4, 2));
        h.push(5, vec![0, 0, 0, 0]);
        h.push(9, vec![1, 1, 1, 1]);
        assert_eq!(**h.at(0), vec![0, 1, 0, 1]);
        assert_eq!(**h.at(4), vec![0, 1, 0, 1]);
        assert_eq!(**h.at(5), vec![0, 0, 0, 0]);
        assert_eq!(**h.at(100), vec![1, 1, 1, 1]);
        h.forget_before(6);
        assert_eq!(h.len(), 2);
        assert_eq!(**h.at(6), vec![0, 0, 0, 0]);
    }

    #[test]
    fn apply_ignores_out_of_range() {
        let mut m = uniform(4, 2);
        for bad in [
            ControlInst::Move { bin: 9, worker: 0 },
            ControlInst::Move { bin: 0, worker: 2 },
            ControlInst::Map(vec![0]),
            ControlInst::Map(vec![0, 1, 2, 0]),
        ] {
            assert!(!bad.is_valid(4, 2));
            bad.apply(&mut m, 2);
        }
        assert_eq!(m, vec![0, 1, 0, 1]);
        ControlInst::Move { bin: 1, worker: 0 }.apply(&mut m, 2);
        assert_eq!(m, vec![0, 0, 0, 1]);
    }

    #[test]
    fn same_time_changes_apply_in_a_fixed_order() {
        let mut insts = vec![
            ControlInst::Move { bin: 0, worker: 1 },
            ControlInst::Map(vec![0, 0, 0, 0]),
            ControlInst::Move { bin: 0, worker: 0 },
        ];
        insts.sort();
        let mut m = uniform(4, 2);
        for i in &insts {
            i.apply(&mut m, 2);
        }
        // The map first, then the moves by bin and worker: bin 0 ends on worker 1.
        assert_eq!(m, vec![1, 0, 0, 0]);
    }
}
