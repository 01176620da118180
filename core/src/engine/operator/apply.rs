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
    /// The bin's earliest scheduled work is now at `at`, after the time being applied.
    fn later(&mut self, at: Time, bin: u32);
    /// `logic` is about to run for the bin with `records` records.
    fn applied(&mut self, _bin: u32, _records: usize) {}
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
/// did not expect it (a routing bug: the caller stops with context).
///
/// Scheduled work is entered one time per bin: a bin held here with scheduled work has an
/// entry (a [`Hooks::later`], or a place in `scheduled` at the time it came due) at its
/// earliest scheduled time, and after each run the bin's next time is entered if it has
/// none. So installing a bin enters one time however many it has scheduled (Q4's bins carry
/// thousands of auction closings), and what the caller keeps per future time stays at most
/// one entry per bin.
///
/// `scheduled` may name bins whose work is not here: a bin that moved away leaves its entry
/// behind (the new owner entered its own). A bin not held is skipped, and a bin held runs
/// only for its own due work (`Bin::scheduled`), so such an entry adds nothing.
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
        let mut listed = false;
        while scheduled.next_if_eq(&bin_index).is_some() {
            listed = true;
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
        let mut due = false;
        if listed {
            // Popping costs only the due entries; `split_off` would walk the later ones.
            while bin.scheduled.first().is_some_and(|at| *at <= time) {
                bin.scheduled.pop_first();
                due = true;
            }
        }
        if batch.is_empty() && !due {
            continue;
        }
        // The entry this run consumed was the bin's only one; otherwise its next time has one.
        let entered = if due { None } else { bin.scheduled.first().copied() };
        let from = out.len();
        hooks.applied(bin_index, batch.len());
        logic(time, bin, batch, out);
        batch.clear();
        for at in bin.fresh.drain(..) {
            if at <= time {
                bin.scheduled.remove(&at);
            }
        }
        if let Some(next) = bin.scheduled.first().copied()
            && Some(next) != entered
        {
            hooks.later(next, bin_index);
        }
        hooks.emitted(bin_index, out, from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Later(Vec<(Time, u32)>);

    impl Hooks<u64> for Later {
        fn later(&mut self, at: Time, bin: u32) {
            self.0.push((at, bin));
        }
    }

    /// Counts its runs in the bin's state.
    fn count(_: Time, bin: &mut Bin<u64>, _: &mut Vec<u64>, _: &mut Vec<u64>) {
        bin.state += 1;
    }

    /// Applies `time` with no records; returns the times entered.
    fn apply(time: Time, scheduled: Vec<u32>, table: &mut [Option<Bin<u64>>]) -> Vec<(Time, u32)> {
        let (mut batch, mut out, mut later) = (Vec::new(), Vec::new(), Later(Vec::new()));
        let applied = apply_time(
            time,
            Vec::new(),
            scheduled,
            table,
            &mut batch,
            &mut out,
            &mut count,
            &mut later,
        );
        assert_eq!(applied, Ok(Applied::All));
        later.0
    }

    #[test]
    fn a_bin_enters_only_its_next_scheduled_time() {
        let mut bin = Bin::new(0);
        bin.scheduled.extend([5, 9, 12]);
        let mut table = vec![Some(bin)];
        assert_eq!(apply(5, vec![0], &mut table), vec![(9, 0)]);
        // Scheduling a time before the next enters it; one after does not.
        let mut runs = |time, scheduled, at| {
            let mut logic =
                |_: Time, bin: &mut Bin<u64>, _: &mut Vec<u64>, _: &mut Vec<u64>| bin.schedule(at);
            let (mut batch, mut out, mut later) = (Vec::new(), Vec::new(), Later(Vec::new()));
            let records = vec![(0, 1)];
            let applied = apply_time(
                time, records, scheduled, &mut table, &mut batch, &mut out, &mut logic, &mut later,
            );
            assert_eq!(applied, Ok(Applied::All));
            later.0
        };
        assert_eq!(runs(6, vec![], 7), vec![(7, 0)]);
        assert_eq!(runs(6, vec![], 10), vec![]);
        // At its due time the bin enters its next, entered or not before.
        assert_eq!(runs(7, vec![0], 11), vec![(9, 0)]);
    }

    #[test]
    fn entries_left_by_departed_bins_run_nothing() {
        // Bin 0 moved away; bin 1 moved away and came back with its own work at 9 only.
        let mut back = Bin::new(0);
        back.scheduled.insert(9);
        let mut table = vec![None, Some(back)];
        assert_eq!(apply(5, vec![0, 1], &mut table), vec![]);
        assert_eq!(table[1].as_ref().map(|b| b.state), Some(0));
        // At 9 the bin runs once, the entry left from before merged with its own.
        assert_eq!(apply(9, vec![1, 1, 0], &mut table), vec![]);
        let back = table[1].as_ref().expect("bin 1 is held");
        assert_eq!((back.state, back.scheduled.len()), (1, 0));
    }
}
