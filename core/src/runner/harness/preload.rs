//! The preload: every key once (or the events that open the NEXMark auctions) before the
//! measured run, so that it starts with its steady state.

use timely::dataflow::{InputHandleVec, ProbeHandle};
use timely::worker::Worker;

use super::plane::ControlPlane;
use super::worker::{Shared, Stopped};
use crate::Time;
use crate::source::{Generator, first_index, share};

/// Keys preloaded per logical time.
const PRELOAD_PER_TIME: u64 = 1 << 18;
/// Preload times that may be unfinished at once.
const PRELOAD_IN_FLIGHT: u64 = 4;

/// Preloads `PRELOAD_PER_TIME` keys per logical time, with at most `PRELOAD_IN_FLIGHT`
/// times unfinished, so that the preload never piles up in memory. A stop during the
/// preload ends it early (the measured loop then ends the run). Returns the logical times
/// it took and the records this worker sent. Only generated records are preloaded. A
/// restarted computation preloads only the times from the one it starts from.
pub(super) fn preload<R: timely::ExchangeData + Clone>(
    worker: &mut Worker,
    shared: &Shared,
    generator: Option<&dyn Generator<R>>,
    data: &mut InputHandleVec<Time, R>,
    mut plane: Option<&mut ControlPlane>,
    probe: &ProbeHandle<Time>,
) -> Result<(Time, u64), Stopped> {
    let (index, peers) = (worker.index(), worker.peers());
    let Some(generator) = generator.filter(|_| shared.config.preload) else {
        return Ok((0, 0));
    };
    let len = generator.preload_len();
    let times = len.div_ceil(PRELOAD_PER_TIME);
    let mut source = generator.preload(index, peers);
    let first = shared.generation.from.min(times);
    // The records of the times before count as sent: the computation before sent them.
    let mut sent = share((first * PRELOAD_PER_TIME).min(len), index, peers);
    for t in first..times {
        if shared.control.stop_requested() {
            break;
        }
        while probe.less_than(&t.saturating_sub(PRELOAD_IN_FLIGHT)) {
            shared.step(worker)?;
        }
        data.advance_to(t);
        shared.reached.fetch_max(t, std::sync::atomic::Ordering::AcqRel);
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
