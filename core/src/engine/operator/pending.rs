//! The work an operator still has to do, by logical time, under a single capability per
//! output port.
//!
//! Invariant: the held capabilities are at or before the earliest time with work, and there
//! are none exactly when no work is left. One capability instead of one per time keeps
//! timely's progress tracking independent of how many future times have work (each bin's
//! next scheduled time, and the times of records waiting for their inputs' frontiers).

use std::collections::BTreeMap;

use timely::dataflow::operators::Capability;

use crate::Time;

pub(crate) struct Pending<W> {
    work: BTreeMap<Time, W>,
    /// One capability per output port, all at the same time.
    held: Option<Vec<Capability<Time>>>,
}

impl<W: Default> Pending<W> {
    pub(crate) fn new() -> Self {
        Pending {
            work: BTreeMap::new(),
            held: None,
        }
    }

    /// The time the capabilities are at, if any are held.
    fn held_time(&self) -> Option<Time> {
        self.held
            .as_ref()
            .and_then(|caps| caps.first())
            .map(|c| *c.time())
    }

    /// The work at `time`, which arrived on an input: `caps` makes the capabilities (one per
    /// output port) for it if `time` is earlier than any work held so far.
    pub(crate) fn arrived(&mut self, time: Time, caps: impl FnOnce() -> Vec<Capability<Time>>) -> &mut W {
        if self.held_time().is_none_or(|held| time < held) {
            self.held = Some(caps());
        }
        self.work.entry(time).or_default()
    }

    /// The work at `time`, at or after the time last taken by [`Pending::next`].
    pub(crate) fn later(&mut self, time: Time) -> &mut W {
        debug_assert!(self.held_time().is_some_and(|held| held <= time));
        self.work.entry(time).or_default()
    }

    /// Takes the earliest work if `ready` says its time can be applied, with the capability
    /// downgraded to that time for the output it produces.
    pub(crate) fn next(&mut self, ready: impl Fn(Time) -> bool) -> Option<(Time, W)> {
        let entry = self.work.first_entry()?;
        let time = *entry.key();
        if !ready(time) {
            return None;
        }
        let work = entry.remove();
        for cap in self.held.iter_mut().flatten() {
            cap.downgrade(&time);
        }
        Some((time, work))
    }

    /// The capability for output `port` at the time last taken by [`Pending::next`].
    pub(crate) fn capability(&self, port: usize) -> Option<&Capability<Time>> {
        self.held.as_ref().and_then(|caps| caps.get(port))
    }

    /// Moves the capabilities up to the earliest remaining work, or releases them.
    pub(crate) fn settle(&mut self) {
        match (self.work.keys().next(), self.held.as_mut()) {
            (Some(first), Some(held)) => {
                for cap in held {
                    cap.downgrade(first);
                }
            }
            _ => self.held = None,
        }
    }

    /// The earliest time with work.
    pub(crate) fn first_time(&self) -> Option<Time> {
        self.work.keys().next().copied()
    }

    /// Drops all work and the capabilities.
    pub(crate) fn clear(&mut self) {
        self.work.clear();
        self.held = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_taken_in_time_order_and_merged_per_time() {
        // No capabilities outside a dataflow: `arrived` with none stands in for `later`.
        let mut pending = Pending::<Vec<u32>>::new();
        pending.arrived(9, Vec::new).push(2);
        pending.arrived(5, Vec::new).push(1);
        pending.arrived(5, Vec::new).push(2);
        assert_eq!(pending.first_time(), Some(5));
        assert_eq!(pending.next(|_| true), Some((5, vec![1, 2])));
        assert_eq!(pending.next(|_| true), Some((9, vec![2])));
        assert_eq!(pending.next(|_| true), None);
    }
}
