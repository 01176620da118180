//! Applying one logical time to a worker's bins: shared by S and by the native twin.

use super::Bin;
use crate::Time;

/// Runs `logic` once for every bin that has records or due scheduled work at `time`, in bin
/// order, with that bin's records. New scheduled work is reported through `later(at, bin)`.
///
/// Returns `Err(bin)` if records arrived for a bin this worker does not hold (a routing bug:
/// the caller stops with context). Scheduled work of bins that moved away is skipped.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply_time<R, S, O, L>(
    time: Time,
    mut records: Vec<(u32, R)>,
    mut scheduled: Vec<u32>,
    table: &mut [Option<Bin<S>>],
    batch: &mut Vec<R>,
    produced: &mut Vec<O>,
    logic: &mut L,
    mut later: impl FnMut(Time, u32),
) -> Result<(), u32>
where
    L: FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>),
{
    records.sort_unstable_by_key(|(bin, _)| *bin);
    scheduled.sort_unstable();
    scheduled.dedup();
    let mut records = records.into_iter().peekable();
    let mut scheduled = scheduled.into_iter().peekable();
    loop {
        let bin_index = match (records.peek().map(|(b, _)| *b), scheduled.peek().copied()) {
            (None, None) => return Ok(()),
            (Some(r), Some(s)) => r.min(s),
            (Some(r), None) => r,
            (None, Some(s)) => s,
        };
        let mut due = false;
        while scheduled.next_if_eq(&bin_index).is_some() {
            due = true;
        }
        while let Some((_, r)) = records.next_if(|(b, _)| *b == bin_index) {
            batch.push(r);
        }
        let Some(bin) = table[bin_index as usize].as_mut() else {
            if batch.is_empty() {
                continue;
            }
            batch.clear();
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
        logic(time, bin, batch, produced);
        batch.clear();
        for at in bin.fresh.drain(..) {
            if at <= time {
                bin.scheduled.remove(&at);
            } else {
                later(at, bin_index);
            }
        }
    }
}
