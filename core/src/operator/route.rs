//! F: routes records by the configuration in force at their time, and ships bins away.
//!
//! Invariants kept:
//! * a record at time `t` leaves F only once the control frontier has passed `t`, so the
//!   configuration at `t` is final, and it goes to every holder of its bin at `t` (the
//!   primary and the standby), tagged with this worker so that both apply it in one order;
//! * the placement at `t` is in the shared history before `Local::control` passes `t`;
//! * a bin whose holders change at `t` leaves (or is copied from) this worker only once this
//!   worker's S has applied every update before `t` (see `Local::done`);
//! * F holds a state-output capability at `t` until it has shipped every such bin, so no
//!   new holder can apply anything at `t` before the state arrived. A failed worker ships
//!   nothing and keeps those capabilities until a `Fail` of itself at or after `t` is final:
//!   until then the rest of the job cannot complete `t` as if the state had been shipped,
//!   which is what lets the driver tell genuine transfers from lost ones.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::StreamVec;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::Capability;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::progress::Antichain;

use super::transfer::{StateChunk, encode};
use super::{Local, StatefulConfig};
use crate::Time;
use crate::bins::Bins;
use crate::config::{ControlInst, NONE, Placement, transfers};

/// Work held back until a frontier passes its time, with a capability for that time.
type Held<T> = BTreeMap<Time, (Capability<Time>, Vec<T>)>;

/// A routed record: `dest` as made by [`dest`], and the record.
pub(crate) type Routed<R> = (u64, R);

/// Bits of a routed record's tag below the destination worker.
pub(crate) const DEST_SHIFT: u32 = 40;
/// Bits of the tag below the bin: the sending worker.
const BIN_SHIFT: u32 = 24;

/// The tag of a record for `worker`'s replica of `bin`, sent by worker `src`. Below the
/// destination it is the record's *order key* (bin, then sender): both replicas of a bin
/// sort a time's records by it, stably, and each sender's channel delivers in order, so
/// both apply them in one order whatever order the exchange interleaved them in.
#[inline]
pub(crate) fn dest(worker: u32, bin: u32, src: u32) -> u64 {
    (u64::from(worker) << DEST_SHIFT) | (u64::from(bin) << BIN_SHIFT) | u64::from(src)
}

/// The order key of a tag (see [`dest`]).
#[inline]
pub(crate) fn order_key(tag: u64) -> u64 {
    tag & ((1 << DEST_SHIFT) - 1)
}

/// The bin of an order key.
#[inline]
pub(crate) fn bin_of_key(key: u64) -> u32 {
    (key >> BIN_SHIFT) as u32
}

/// The order key of `bin` with no sender (records that need no agreed order).
#[inline]
pub(crate) fn bin_key(bin: u32) -> u64 {
    u64::from(bin) << BIN_SHIFT
}

/// What this worker does for one bin whose holders change at some time.
struct Action {
    bin: u32,
    /// New holders this worker sends a copy to.
    to: Vec<u32>,
    /// Whether this worker stops holding the bin.
    drop: bool,
}

/// Builds F. Returns the routed records and the outgoing state chunks.
pub(crate) fn build<'s, R, S, K>(
    name: &str,
    data: StreamVec<'s, Time, R>,
    control: StreamVec<'s, Time, ControlInst>,
    config: &StatefulConfig,
    bin_key: K,
    local: Rc<Local<S>>,
) -> (StreamVec<'s, Time, Routed<R>>, StreamVec<'s, Time, StateChunk>)
where
    R: Clone + 'static,
    S: Serialize + DeserializeOwned + 'static,
    K: Fn(&R) -> u64 + 'static,
{
    let scope = data.scope();
    let me = local.me;
    let peers = scope.peers();
    assert!(peers < 1 << BIN_SHIFT, "{name}: at most 2^24 workers");
    let bins = config.bins;
    let chunk_bytes = config.chunk_bytes;
    let transfers_log = Rc::clone(&config.transfers);
    let failures = Arc::clone(&config.failures);
    let name = name.to_string();
    let mut builder = OperatorBuilder::new(format!("{name}.route"), scope);
    local
        .route
        .replace(Some(scope.activator_for(builder.operator_info().address)));
    let none = Vec::<(usize, Antichain<Time>)>::new;
    let mut data_in = builder.new_input_connection(data, Pipeline, none());
    let mut control_in = builder.new_input_connection(control, Pipeline, none());
    let (records_out, records) = builder.new_output_connection([(0, Antichain::from_elem(0))]);
    let (chunks_out, chunks) = builder.new_output_connection([(1, Antichain::from_elem(0))]);
    let mut records_out = OutputBuilder::<_, CapacityContainerBuilder<Vec<Routed<R>>>>::from(records_out);
    let mut chunks_out = OutputBuilder::<_, CapacityContainerBuilder<Vec<StateChunk>>>::from(chunks_out);

    // Control changes not yet final, by time, with a capability to ship state at that time.
    let mut pending_control: Held<ControlInst> = BTreeMap::new();
    // Records whose time the control frontier has not passed yet.
    let mut held: Held<R> = BTreeMap::new();
    // What to ship or drop, by the time from which the new holders hold the bins.
    let mut outgoing: Held<Action> = BTreeMap::new();
    // The latest time at which a failure of this worker is final.
    let mut fail_final: Option<Time> = None;
    // The latest time of a failure of this worker seen on the control input.
    let mut fail_seen: Option<Time> = None;

    let busy = config.observers.busy();
    builder.build(move |_initial_capabilities| {
        move |frontiers| {
            let _timed = busy.activation();
            let (data_frontier, control_frontier) = (&frontiers[0], &frontiers[1]);

            control_in.for_each_stamp(|cap, batches| {
                let Some(&time) = cap.least() else { return };
                let entry = pending_control
                    .entry(time)
                    .or_insert_with(|| (cap.delayed(&time, 1), Vec::new()));
                for batch in batches {
                    // A failure takes effect where this worker is, as soon as it is heard of.
                    for inst in batch.iter() {
                        if let ControlInst::Fail { worker } = inst {
                            if *worker == me {
                                failures.fail(me);
                                fail_seen = fail_seen.max(Some(time));
                            } else {
                                local.await_takeover(*worker);
                            }
                        }
                    }
                    entry.1.append(batch);
                }
            });

            // Control changes become final once the control frontier has passed them.
            while let Some(entry) = pending_control.first_entry() {
                let time = *entry.key();
                if control_frontier.less_equal(&time) {
                    break;
                }
                let (cap, mut insts) = entry.remove();
                // Arrival order differs between workers; the applied order must not.
                insts.sort_unstable();
                let old = Rc::clone(local.history.borrow().latest());
                let mut new: Placement = (*old).clone();
                for inst in &insts {
                    inst.apply(&mut new, peers);
                    match inst {
                        ControlInst::Fail { worker } if *worker == me => fail_final = Some(time),
                        // Back empty from `time` on, unless a later failure is already known.
                        ControlInst::Rejoin { worker } if *worker == me && fail_seen.is_none_or(|f| f < time) => {
                            local.revive_at.set(Some(time));
                            failures.revive(me);
                        }
                        _ => {}
                    }
                }
                let mut actions = Vec::new();
                let mut lost = Vec::new();
                for (bin, (was, now)) in old.iter().zip(&new).enumerate() {
                    if was == now {
                        continue;
                    }
                    if now.is_lost() && !was.is_lost() {
                        lost.push(bin as u32);
                    }
                    let to: Vec<u32> = transfers(*was, *now).filter(|t| t.from == me).map(|t| t.to).collect();
                    let drop = was.holds(me) && !now.holds(me);
                    if drop || !to.is_empty() {
                        actions.push(Action {
                            bin: bin as u32,
                            to,
                            drop,
                        });
                    }
                }
                if !lost.is_empty() {
                    failures.lose(&lost, time);
                }
                if !actions.is_empty() {
                    // Taken from the back: bin order.
                    actions.reverse();
                    outgoing.insert(time, (cap, actions));
                }
                local.history.borrow_mut().push(time, new);
            }
            let control = control_frontier.frontier().first().copied().unwrap_or(Time::MAX);
            if control > local.control.get() {
                local.control.set(control);
                local.wake_state();
            }

            let mut records_handle = records_out.activate();
            let history = local.history.borrow();
            // Held records first: each sender's records then leave in the order they came.
            while let Some(entry) = held.first_entry() {
                let time = *entry.key();
                if control_frontier.less_equal(&time) {
                    break;
                }
                let (cap, records) = entry.remove();
                let mut session = records_handle.session(&cap);
                route(history.at(time), bins, &bin_key, me, records.into_iter(), |r| session.give(r));
            }
            data_in.for_each_stamp(|cap, batches| {
                let Some(&time) = cap.least() else { return };
                if control_frontier.less_equal(&time) {
                    let entry = held
                        .entry(time)
                        .or_insert_with(|| (cap.delayed(&time, 0), Vec::new()));
                    for batch in batches {
                        entry.1.append(batch);
                    }
                } else {
                    let mut session = records_handle.session(&cap);
                    for batch in batches {
                        route(history.at(time), bins, &bin_key, me, batch.drain(..), |r| session.give(r));
                    }
                }
            });
            drop(records_handle);
            drop(history);

            // Ship bins whose updates before their move time have all been applied.
            let mut chunks_handle = chunks_out.activate();
            while let Some(mut entry) = outgoing.first_entry() {
                let time = *entry.key();
                if time > local.done.get() {
                    break;
                }
                if !local.alive_at(time, &failures) {
                    // Nothing to ship from here any more; the capability waits until the
                    // failure is final (or no more control can come).
                    if fail_final.is_some_and(|f| f >= time) || control == Time::MAX {
                        entry.remove();
                        continue;
                    }
                    break;
                }
                let (cap, actions) = entry.get_mut();
                let mut session = chunks_handle.session(cap);
                let mut table = local.table.borrow_mut();
                while let Some(action) = actions.pop() {
                    // A fail point between two bins of a step.
                    if failures.check(me) {
                        actions.push(action);
                        break;
                    }
                    let Some(state) = table[action.bin as usize].as_ref() else {
                        // Never arrived here (its sender failed): nothing to send.
                        continue;
                    };
                    if !action.to.is_empty() {
                        let parts = encode(state, chunk_bytes);
                        let total = parts.len() as u32;
                        let bytes: usize = parts.iter().map(Vec::len).sum();
                        let mut log = transfers_log.borrow_mut();
                        let totals = log.entry(time).or_default();
                        for to in &action.to {
                            tracing::debug!(
                                target: "megaflux::migration",
                                phase = "extracted", operator = %name, bin = action.bin, time, from = me, to = *to, bytes, chunks = total, copy = !action.drop
                            );
                            totals.bins += 1;
                            totals.bytes += bytes as u64;
                            totals.chunks += u64::from(total);
                        }
                        drop(log);
                        for (seq, bytes) in parts.into_iter().enumerate() {
                            let (last, others) = action.to.split_last().unwrap_or((&NONE, &[]));
                            for to in others {
                                session.give(StateChunk {
                                    dest: *to,
                                    bin: action.bin,
                                    seq: seq as u32,
                                    total,
                                    bytes: bytes.clone(),
                                });
                            }
                            session.give(StateChunk {
                                dest: *last,
                                bin: action.bin,
                                seq: seq as u32,
                                total,
                                bytes,
                            });
                        }
                    }
                    if action.drop {
                        table[action.bin as usize] = None;
                    }
                }
                drop(table);
                drop(session);
                if actions.is_empty() {
                    entry.remove();
                } else {
                    break;
                }
            }

            // Placements older than anything F may still route or S still apply are no
            // longer needed.
            let oldest = held
                .keys()
                .next()
                .copied()
                .into_iter()
                .chain(data_frontier.frontier().iter().copied())
                .chain([local.done.get()])
                .min();
            if let Some(oldest) = oldest {
                local.history.borrow_mut().forget_before(oldest);
            }
        }
    });

    (records, chunks)
}

/// Sends each of `records` at a time with `placement` to every holder of its bin.
#[inline]
fn route<R: Clone, K: Fn(&R) -> u64>(
    placement: &Placement,
    bins: Bins,
    bin_key: &K,
    me: u32,
    records: impl Iterator<Item = R>,
    mut give: impl FnMut(Routed<R>),
) {
    for r in records {
        let bin = bins.bin_of(bin_key(&r));
        let holders = placement[bin as usize];
        match (holders.primary, holders.standby) {
            // Lost: the job is stopping.
            (NONE, _) => {}
            (p, NONE) => give((dest(p, bin, me), r)),
            (p, s) => {
                give((dest(p, bin, me), r.clone()));
                give((dest(s, bin, me), r));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_order_by_bin_then_sender() {
        let a = dest(3, 7, 1);
        let b = dest(0, 7, 2);
        let c = dest(9, 8, 0);
        assert_eq!(a >> DEST_SHIFT, 3);
        assert!(order_key(a) < order_key(b) && order_key(b) < order_key(c));
        assert_eq!(bin_of_key(order_key(c)), 8);
        assert_eq!(bin_of_key(bin_key(65_535)), 65_535);
    }
}
