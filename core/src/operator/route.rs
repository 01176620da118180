//! F: routes records by the configuration in force at their time, and ships bins away.
//!
//! Invariants kept:
//! * a record at time `t` leaves F only once the control frontier has passed `t`, so the
//!   configuration at `t` is final, and it goes to the owner of its bin at `t`;
//! * a bin that changes owner at `t` leaves this worker (its old owner) only once this
//!   worker's S has applied every update before `t` (see `LocalProgress`);
//! * F holds a state-output capability at `t` until it has shipped every such bin, so the
//!   new owner cannot apply anything at `t` before the state arrived.

use std::collections::BTreeMap;
use std::rc::Rc;

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
use super::{BinTable, LocalProgress, StatefulConfig};
use crate::Time;
use crate::config::{ControlInst, History, Map};

/// Work held back until a frontier passes its time, with a capability for that time.
type Held<T> = BTreeMap<Time, (Capability<Time>, Vec<T>)>;

/// A routed record: destination worker in the high 32 bits, bin in the low 32 bits.
pub(crate) type Routed<R> = (u64, R);

#[inline]
fn dest(worker: u32, bin: u32) -> u64 {
    (u64::from(worker) << 32) | u64::from(bin)
}

/// Builds F. Returns the routed records and the outgoing state chunks.
pub(crate) fn build<'s, R, S, K>(
    name: &str,
    data: StreamVec<'s, Time, R>,
    control: StreamVec<'s, Time, ControlInst>,
    config: &StatefulConfig,
    bin_key: K,
    table: BinTable<S>,
    progress: Rc<LocalProgress>,
) -> (StreamVec<'s, Time, Routed<R>>, StreamVec<'s, Time, StateChunk>)
where
    R: Clone + 'static,
    S: Serialize + DeserializeOwned + 'static,
    K: Fn(&R) -> u64 + 'static,
{
    let scope = data.scope();
    let me = scope.index() as u32;
    let peers = scope.peers();
    let bins = config.bins;
    let chunk_bytes = config.chunk_bytes;
    let transfers = Rc::clone(&config.transfers);
    let name = name.to_string();
    let mut builder = OperatorBuilder::new(format!("{name}.route"), scope);
    progress
        .route
        .replace(Some(scope.activator_for(builder.operator_info().address)));
    let none = Vec::<(usize, Antichain<Time>)>::new;
    let mut data_in = builder.new_input_connection(data, Pipeline, none());
    let mut control_in = builder.new_input_connection(control, Pipeline, none());
    let (records_out, records) = builder.new_output_connection([(0, Antichain::from_elem(0))]);
    let (chunks_out, chunks) = builder.new_output_connection([(1, Antichain::from_elem(0))]);
    let mut records_out = OutputBuilder::<_, CapacityContainerBuilder<Vec<Routed<R>>>>::from(records_out);
    let mut chunks_out = OutputBuilder::<_, CapacityContainerBuilder<Vec<StateChunk>>>::from(chunks_out);

    let mut history = History::new(config.initial.clone());
    // Control changes not yet final, by time, with a capability to ship state at that time.
    let mut pending_control: Held<ControlInst> = BTreeMap::new();
    // Records whose time the control frontier has not passed yet.
    let mut held: Held<R> = BTreeMap::new();
    // Bins to ship, by the time from which they belong to their new owner.
    let mut outgoing: Held<(u32, u32)> = BTreeMap::new();

    let busy = config.observers.busy();
    builder.build(move |_initial_capabilities| {
        move |frontiers| {
            let _timed = busy.activation();
            let (data_frontier, control_frontier) = (&frontiers[0], &frontiers[1]);
            progress
                .control
                .set(control_frontier.frontier().first().copied().unwrap_or(Time::MAX));

            control_in.for_each_stamp(|cap, batches| {
                let Some(&time) = cap.least() else { return };
                let entry = pending_control
                    .entry(time)
                    .or_insert_with(|| (cap.delayed(&time, 1), Vec::new()));
                for batch in batches {
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
                let old = history.latest();
                let mut new: Map = (**old).clone();
                for inst in &insts {
                    inst.apply(&mut new, peers);
                }
                let leaving: Vec<(u32, u32)> = old
                    .iter()
                    .zip(&new)
                    .enumerate()
                    .filter(|(_, (from, to))| **from == me && **to != me)
                    .map(|(bin, (_, to))| (bin as u32, *to))
                    .collect();
                if !leaving.is_empty() {
                    outgoing.insert(time, (cap, leaving));
                }
                history.push(time, new);
            }

            let mut records_handle = records_out.activate();
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
                    let map = history.at(time);
                    let mut session = records_handle.session(&cap);
                    for batch in batches {
                        for r in batch.drain(..) {
                            let bin = bins.bin_of(bin_key(&r));
                            session.give((dest(map[bin as usize], bin), r));
                        }
                    }
                }
            });
            while let Some(entry) = held.first_entry() {
                let time = *entry.key();
                if control_frontier.less_equal(&time) {
                    break;
                }
                let (cap, records) = entry.remove();
                let map = history.at(time);
                let mut session = records_handle.session(&cap);
                for r in records {
                    let bin = bins.bin_of(bin_key(&r));
                    session.give((dest(map[bin as usize], bin), r));
                }
            }
            drop(records_handle);

            // Ship bins whose updates before their move time have all been applied.
            let mut chunks_handle = chunks_out.activate();
            while let Some(entry) = outgoing.first_entry() {
                let time = *entry.key();
                if time > progress.done.get() {
                    break;
                }
                let (cap, leaving) = entry.remove();
                let mut session = chunks_handle.session(&cap);
                let mut table = table.borrow_mut();
                for (bin, to) in leaving {
                    let Some(state) = table[bin as usize].take() else {
                        panic!("{name}: worker {me} must ship bin {bin} at time {time} but does not hold it");
                    };
                    let parts = encode(&state, chunk_bytes);
                    drop(state);
                    let total = parts.len() as u32;
                    let bytes: usize = parts.iter().map(Vec::len).sum();
                    tracing::debug!(
                        target: "megaflux::migration",
                        phase = "extracted", operator = %name, bin, time, from = me, to, bytes, chunks = total
                    );
                    let mut log = transfers.borrow_mut();
                    let totals = log.entry(time).or_default();
                    totals.bins += 1;
                    totals.bytes += bytes as u64;
                    totals.chunks += u64::from(total);
                    drop(log);
                    for (seq, bytes) in parts.into_iter().enumerate() {
                        session.give(StateChunk {
                            dest: to,
                            bin,
                            seq: seq as u32,
                            total,
                            bytes,
                        });
                    }
                }
            }

            // Maps older than anything F may still route are no longer needed.
            let oldest = held
                .keys()
                .next()
                .copied()
                .into_iter()
                .chain(data_frontier.frontier().iter().copied())
                .min();
            if let Some(oldest) = oldest {
                history.forget_before(oldest);
            }
        }
    });

    (records, chunks)
}
