//! The preload: every key once (or the events that open the NEXMark auctions) before the
//! measured run, so that it starts with its steady state.

use timely::dataflow::{InputHandleVec, ProbeHandle};
use timely::worker::Worker;

use super::plane::ControlPlane;
use super::worker::{Shared, Stopped};
use crate::Time;
use crate::workload::Job;

/// Keys preloaded per logical time.
const PRELOAD_PER_TIME: u64 = 1 << 18;
/// Preload times that may be unfinished at once.
const PRELOAD_IN_FLIGHT: u64 = 4;

/// The first index at or after `lo` that worker `index` of `peers` generates.
#[inline]
pub(super) fn first_index(lo: u64, index: usize, peers: usize) -> u64 {
    let peers = peers as u64;
    lo + (index as u64 + peers - lo % peers) % peers
}

/// Preloads `PRELOAD_PER_TIME` keys per logical time, with at most `PRELOAD_IN_FLIGHT`
/// times unfinished, so that the preload never piles up in memory. A stop during the
/// preload ends it early (the measured loop then ends the run). Returns the logical times
/// it took and the records this worker sent.
pub(super) fn preload<J: Job>(
    worker: &mut Worker,
    shared: &Shared,
    job: &J,
    data: &mut InputHandleVec<Time, J::Rec>,
    mut plane: Option<&mut ControlPlane>,
    probe: &ProbeHandle<Time>,
) -> Result<(Time, u64), Stopped> {
    let (index, peers) = (worker.index(), worker.peers());
    let len = if shared.config.preload {
        job.preload_len()
    } else {
        0
    };
    let times = len.div_ceil(PRELOAD_PER_TIME);
    let mut source = job.preload_source(index, peers);
    let mut sent = 0;
    for t in 0..times {
        if shared.control.stop_requested() {
            break;
        }
        while probe.less_than(&t.saturating_sub(PRELOAD_IN_FLIGHT)) {
            shared.step(worker)?;
        }
        data.advance_to(t);
        if let Some(plane) = plane.as_deref_mut() {
            plane.advance(t);
        }
        let (lo, hi) = (t * PRELOAD_PER_TIME, ((t + 1) * PRELOAD_PER_TIME).min(len));
        let mut i = first_index(lo, index, peers);
        while i < hi {
            data.send(source(i, t));
            sent += 1;
            i += peers as u64;
        }
        shared.step(worker)?;
    }
    Ok((times, sent))
}

#[cfg(test)]
mod tests {
    use super::first_index;

    #[test]
    fn workers_split_indices_by_residue() {
        for peers in 1..5 {
            for lo in 0..10 {
                let mut got: Vec<u64> = (0..peers).map(|w| first_index(lo, w, peers)).collect();
                got.sort_unstable();
                let want: Vec<u64> = (lo..lo + peers as u64).collect();
                assert_eq!(got, want, "lo {lo}, {peers} peers");
            }
        }
    }
}
