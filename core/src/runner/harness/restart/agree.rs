//! Where the bins survived a crash, agreed by every worker of the restarted computation.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;

use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Inspect, Probe};
use timely::dataflow::{InputHandleVec, ProbeHandle};
use timely::worker::Worker;

use crate::Time;
use crate::config::Placement;
use crate::harness::abort::Abort;
use crate::operator::{Survived, survivors};

/// Why the workers of a new computation found no placement.
#[derive(Debug)]
pub(in crate::runner::harness) enum Disagreed {
    /// These bins have no copy left.
    Lost(Vec<u32>),
    /// The computation is being left (another process went away while it formed): the
    /// worker still holds what it was to start with.
    Left,
}

/// What a worker tells the others in place of a bin when it left a computation whose job
/// has stateful operators (its handout names them, with or without bins).
const STATEFUL: u32 = u32::MAX;

/// Where the bins survived, agreed by every worker of a new computation: each sends the
/// bins it holds whole (`roles`: whether as the standby) to all, and whether its job has
/// stateful operators (`stateful`: a worker that starts empty, as one that joins, cannot
/// tell); each then builds the same placement ([`survivors`]). `Ok(None)` when no worker
/// knew of a stateful operator: a job without any (a map, a filter) has no bins to place,
/// and starts afresh.
pub(in crate::runner::harness) fn agree(
    worker: &mut Worker,
    (bins, replicas, per_process): (usize, usize, usize),
    roles: &BTreeMap<u32, bool>,
    stateful: bool,
    abort: &Abort,
) -> Result<Option<(Placement, Survived)>, Disagreed> {
    crate::failpoint::hit(crate::failpoint::Point::Agree);
    let mut input = InputHandleVec::<Time, (u32, u32, bool)>::new();
    let heard: Rc<RefCell<Vec<(u32, u32, bool)>>> = Rc::default();
    let probe = ProbeHandle::new();
    {
        let (heard, probe) = (Rc::clone(&heard), probe.clone());
        let input = &mut input;
        worker.dataflow::<Time, _, _>(move |scope| {
            input
                .to_stream(scope)
                .broadcast()
                .inspect(move |r| heard.borrow_mut().push(*r))
                .probe_with(&probe);
        });
    }
    let me = worker.index() as u32;
    if stateful {
        input.send((me, STATEFUL, false));
    }
    for (bin, standby) in roles {
        input.send((me, *bin, *standby));
    }
    drop(input);
    while !probe.done() {
        // A peer lost now never sends its roles: the wait ends with the computation.
        if abort.is_stopped() {
            return Err(Disagreed::Left);
        }
        if catch_unwind(AssertUnwindSafe(|| worker.step())).is_err() {
            return Err(Disagreed::Left);
        }
    }
    let mut heard = heard.take();
    let before = heard.len();
    heard.retain(|(_, bin, _)| *bin != STATEFUL);
    if heard.len() == before && heard.is_empty() {
        return Ok(None);
    }
    survivors(bins, replicas, per_process, &heard)
        .map(Some)
        .map_err(Disagreed::Lost)
}
