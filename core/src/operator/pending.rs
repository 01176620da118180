//! The work an operator still has to do, by logical time, under a single capability.
//!
//! Invariant: the held capability is at or before the earliest time with work, and there is
//! none exactly when no work is left. One capability instead of one per time keeps timely's
//! progress tracking independent of how many future times have work: Q4 schedules each
//! open auction's closing at its own millisecond, ~10^5 distinct times ahead.

use std::collections::BTreeMap;

use timely::dataflow::operators::Capability;

use crate::Time;

pub(crate) struct Pending<W> {
    work: BTreeMap<Time, W>,
    held: Option<Capability<Time>>,
}

impl<W: Default> Pending<W> {
    pub(crate) fn new() -> Self {
        Pending {
            work: BTreeMap::new(),
            held: None,
        }
    }

    /// The work at `time`, which arrived on an input: `cap` makes the capability for it if
    /// `time` is earlier than any work held so far.
    pub(crate) fn arrived(&mut self, time: Time, cap: impl FnOnce() -> Capability<Time>) -> &mut W {
        if self.held.as_ref().is_none_or(|held| time < *held.time()) {
            self.held = Some(cap());
        }
        self.work.entry(time).or_default()
    }

    /// The work at `time`, at or after the time last taken by [`Pending::next`].
    pub(crate) fn later(&mut self, time: Time) -> &mut W {
        debug_assert!(self.held.as_ref().is_some_and(|held| *held.time() <= time));
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
        if let Some(held) = self.held.as_mut() {
            held.downgrade(&time);
        }
        Some((time, work))
    }

    /// The capability at the time last taken by [`Pending::next`].
    pub(crate) fn capability(&self) -> Option<&Capability<Time>> {
        self.held.as_ref()
    }

    /// Moves the capability up to the earliest remaining work, or releases it.
    pub(crate) fn settle(&mut self) {
        match (self.work.keys().next(), self.held.as_mut()) {
            (Some(first), Some(held)) => held.downgrade(first),
            _ => self.held = None,
        }
    }
}
