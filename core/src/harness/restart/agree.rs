//! Where the bins survived a crash, agreed by every worker of the restarted computation.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Inspect, Probe};
use timely::dataflow::{InputHandleVec, ProbeHandle};
use timely::worker::Worker;

use crate::Time;
use crate::config::{NONE, Placement, Replicas};

/// Where the bins survived, agreed by every worker of a new computation: each sends the
/// roles it holds to all; each then builds the same placement (a surviving standby whose
/// primary is gone is promoted; a bin left with one copy runs with one). `Err` names the
/// bins with no copy left, or whose operators survived in different places.
pub(in crate::harness) fn agree(
    worker: &mut Worker,
    bins: usize,
    roles: &BTreeMap<u32, bool>,
    mismatched: &[u32],
) -> Result<(Placement, (usize, usize)), Vec<u32>> {
    let mut input = InputHandleVec::<Time, (u32, u32, u8)>::new();
    let heard: Rc<RefCell<Vec<(u32, u32, u8)>>> = Rc::default();
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
    for (bin, standby) in roles {
        input.send((me, *bin, u8::from(*standby)));
    }
    for bin in mismatched {
        input.send((me, *bin, 2));
    }
    drop(input);
    while !probe.done() {
        worker.step();
    }
    let mut heard = heard.take();
    heard.sort_unstable();
    placement(bins, &heard)
}

/// The placement the copies `heard` (worker, bin, 0 primary / 1 standby / 2 mismatched)
/// hold: per bin, a primary copy stays primary, a lone standby is promoted; two copies of
/// one role (a move that changed roles, cut in the middle) are ordered by worker. With it,
/// how many bins were promoted and how many are left with one copy.
fn placement(bins: usize, heard: &[(u32, u32, u8)]) -> Result<(Placement, (usize, usize)), Vec<u32>> {
    let mut copies: Vec<Vec<(u8, u32)>> = vec![Vec::new(); bins];
    let mut bad = Vec::new();
    for &(worker, bin, role) in heard {
        match copies.get_mut(bin as usize) {
            Some(c) if role < 2 => c.push((role, worker)),
            _ => bad.push(bin),
        }
    }
    let mut placement = Vec::with_capacity(bins);
    let (mut promoted, mut degraded) = (0, 0);
    for (bin, mut c) in copies.into_iter().enumerate() {
        c.sort_unstable();
        promoted += usize::from(c.first().is_some_and(|(role, _)| *role == 1));
        degraded += usize::from(c.len() == 1);
        match c.as_slice() {
            [] => bad.push(bin as u32),
            [(_, only)] => placement.push(Replicas {
                primary: *only,
                standby: NONE,
            }),
            [(_, first), (_, second), ..] => placement.push(Replicas {
                primary: *first,
                standby: *second,
            }),
        }
    }
    bad.sort_unstable();
    bad.dedup();
    if bad.is_empty() {
        Ok((placement, (promoted, degraded)))
    } else {
        Err(bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_standby_is_promoted_and_a_bin_with_no_copy_is_named() {
        let heard = [(0, 0, 0), (1, 0, 1), (1, 1, 1), (2, 2, 0)];
        let (p, counts) = placement(3, &heard).unwrap();
        assert_eq!(counts, (1, 2));
        assert_eq!((p[0].primary, p[0].standby), (0, 1));
        assert_eq!((p[1].primary, p[1].standby), (1, NONE));
        assert_eq!((p[2].primary, p[2].standby), (2, NONE));
        assert_eq!(placement(4, &heard).unwrap_err(), vec![3]);
        assert_eq!(
            placement(3, &[(0, 0, 0), (0, 1, 0), (0, 2, 2)]).unwrap_err(),
            vec![2]
        );
    }
}
