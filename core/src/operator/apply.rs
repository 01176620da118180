//! Applying one logical time to a worker's bins: shared by S and by the native twin.

use super::Bin;
use super::route::bin_of_key;
use crate::Time;

/// What the caller of [`apply_time`] decides per bin.
pub(crate) trait Hooks<O> {
    /// Called before each bin: `false` stops the time here (the worker failed).
    fn proceed(&mut self, _bin: u32) -> bool {
        true
    }
    /// Records arrived for a bin this worker does not hold: `true` if that is expected (its
    /// state was lost with a failed sender), `false` for a routing bug.
    fn missing(&mut self, _bin: u32) -> bool {
        false
    }
    /// The bin has new work scheduled at `at`.
    fn later(&mut self, at: Time, bin: u32);
    /// `logic` ran for the bin; its outputs are `out[from..]`.
    fn emitted(&mut self, _bin: u32, _out: &mut Vec<O>, _from: usize) {}
}

/// How far a time got.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Every bin with work was applied.
    All,
    /// `Hooks::proceed` stopped it before some bin.
    Stopped,
}

/// Runs `logic` once for every bin that has records or due scheduled work at `time`, in bin
/// order, with that bin's records in order-key order (stable: records with equal keys keep
/// their arrival order). Outputs go to `out`, where [`Hooks::emitted`] may take them.
///
/// Returns `Err(bin)` if records arrived for a bin this worker does not hold and the hooks
/// did not expect it (a routing bug: the caller stops with context). Scheduled work of bins
/// that moved away is skipped.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply_time<R, S, O, L, H>(
    time: Time,
    mut records: Vec<(u64, R)>,
    mut scheduled: Vec<u32>,
    table: &mut [Option<Bin<S>>],
    batch: &mut Vec<R>,
    out: &mut Vec<O>,
    logic: &mut L,
    hooks: &mut H,
) -> Result<Applied, u32>
where
    L: FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>),
    H: Hooks<O>,
{
    records.sort_by_key(|(key, _)| *key);
    scheduled.sort_unstable();
    scheduled.dedup();
    let mut records = records.into_iter().peekable();
    let mut scheduled = scheduled.into_iter().peekable();
    loop {
        let bin_index = match (
            records.peek().map(|(k, _)| bin_of_key(*k)),
            scheduled.peek().copied(),
        ) {
            (None, None) => return Ok(Applied::All),
            (Some(r), Some(s)) => r.min(s),
            (Some(r), None) => r,
            (None, Some(s)) => s,
        };
        if !hooks.proceed(bin_index) {
            return Ok(Applied::Stopped);
        }
        let mut due = false;
        while scheduled.next_if_eq(&bin_index).is_some() {
            due = true;
        }
        while let Some((_, r)) = records.next_if(|(k, _)| bin_of_key(*k) == bin_index) {
            batch.push(r);
        }
        let Some(bin) = table[bin_index as usize].as_mut() else {
            if batch.is_empty() {
                continue;
            }
            batch.clear();
            if hooks.missing(bin_index) {
                continue;
            }
            return Err(bin_index);
        };
        if due {
            // Popping costs only the due entries; `split_off` would walk the later ones.
            due = false;
            while bin.scheduled.first().is_some_and(|at| *at <= time) {
                bin.scheduled.pop_first();
                due = true;
            }
        }
        if batch.is_empty() && !due {
            continue;
        }
        let from = out.len();
        logic(time, bin, batch, out);
        batch.clear();
        for at in bin.fresh.drain(..) {
            if at <= time {
                bin.scheduled.remove(&at);
            } else {
                hooks.later(at, bin_index);
            }
        }
        hooks.emitted(bin_index, out, from);
    }
}
