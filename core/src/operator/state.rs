//! S: applies records per time and bin, in time order, and installs arriving bins.
//!
//! Invariants kept:
//! * a time `t` is applied only once both the data and the state-transfer frontiers have
//!   passed it, and times are applied in increasing order;
//! * bins arriving for `t` are installed before any record at `t` is applied;
//! * S holds an output capability for every time it still has work at (records, arriving
//!   bins, scheduled work), and tells F through `LocalProgress` which times it has applied;
//! * only bins with records or scheduled work at `t` are touched.

use std::rc::Rc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use timely::ExchangeData;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::StreamVec;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::progress::Antichain;

use super::apply::apply_time;
use super::pending::Pending;
use super::route::Routed;
use super::transfer::{Assembly, StateChunk, decode};
use super::{Bin, BinTable, LocalProgress, Observers};
use crate::Time;

/// Everything S must do at one time.
struct Work<R> {
    records: Vec<(u32, R)>,
    scheduled: Vec<u32>,
    /// Bins arriving at this time, still serialized: decoding waits until the time is
    /// applied, so that receiving a bin never holds up the sender's next move.
    installs: Vec<(u32, Vec<Vec<u8>>)>,
}

impl<R> Default for Work<R> {
    fn default() -> Self {
        Work {
            records: Vec::new(),
            scheduled: Vec::new(),
            installs: Vec::new(),
        }
    }
}

/// Builds S. Returns the user output.
pub(crate) fn build<'s, R, S, O, L>(
    name: &str,
    records: StreamVec<'s, Time, Routed<R>>,
    chunks: StreamVec<'s, Time, StateChunk>,
    table: BinTable<S>,
    progress: Rc<LocalProgress>,
    observers: &Observers,
    mut logic: L,
) -> StreamVec<'s, Time, O>
where
    R: ExchangeData + Clone,
    S: Serialize + DeserializeOwned + 'static,
    O: Clone + 'static,
    L: FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>) + 'static,
{
    let scope = records.scope();
    let me = scope.index() as u32;
    let name = name.to_string();
    let mut builder = OperatorBuilder::new(format!("{name}.state"), scope);
    let none = Vec::<(usize, Antichain<Time>)>::new;
    let by_dest = Exchange::new(|r: &Routed<R>| r.0 >> 32);
    let mut records_in = builder.new_input_connection(records, by_dest, none());
    let chunk_dest = Exchange::new(|c: &StateChunk| u64::from(c.dest));
    let mut chunks_in = builder.new_input_connection(chunks, chunk_dest, none());
    let (output, stream) =
        builder.new_output_connection([(0, Antichain::from_elem(0)), (1, Antichain::from_elem(0))]);
    let mut output = OutputBuilder::<_, CapacityContainerBuilder<Vec<O>>>::from(output);

    let mut work: Pending<Work<R>> = Pending::new();
    let busy = observers.busy();
    let mut assembly = Assembly::default();
    let mut batch: Vec<R> = Vec::new();
    let mut produced: Vec<O> = Vec::new();

    builder.build(move |_initial_capabilities| {
        move |frontiers| {
            let _timed = busy.activation();
            records_in.for_each_stamp(|cap, batches| {
                let Some(&time) = cap.least() else { return };
                let entry = work.arrived(time, || cap.delayed(&time, 0));
                for b in batches {
                    entry
                        .records
                        .extend(b.drain(..).map(|(dest, r)| (dest as u32, r)));
                }
            });
            chunks_in.for_each_stamp(|cap, batches| {
                let Some(&time) = cap.least() else { return };
                for b in batches {
                    for chunk in b.drain(..) {
                        if let Some(bin) = assembly.add(time, chunk) {
                            tracing::debug!(
                                target: "megaflux::migration",
                                phase = "received", operator = %name, bin = bin.0, time, worker = me,
                                bytes = bin.1.iter().map(Vec::len).sum::<usize>()
                            );
                            work.arrived(time, || cap.delayed(&time, 0)).installs.push(bin);
                        }
                    }
                }
            });

            let mut output = output.activate();
            while let Some((time, work_now)) =
                work.next(|time| !frontiers[0].less_equal(&time) && !frontiers[1].less_equal(&time))
            {
                let Work {
                    records,
                    mut scheduled,
                    installs,
                } = work_now;
                let mut table = table.borrow_mut();
                for (bin_index, parts) in installs {
                    let bytes: usize = parts.iter().map(Vec::len).sum();
                    let bin: Bin<S> = match decode(parts) {
                        Ok(bin) => bin,
                        Err(e) => panic!("{name}: bin {bin_index} arrived corrupt at worker {me}: {e}"),
                    };
                    // Scheduled work moves with the bin.
                    for at in bin.scheduled.iter().copied() {
                        if at <= time {
                            scheduled.push(bin_index);
                        } else {
                            work.later(at).scheduled.push(bin_index);
                        }
                    }
                    tracing::debug!(
                        target: "megaflux::migration",
                        phase = "installed", operator = %name, bin = bin_index, time, worker = me, bytes
                    );
                    table[bin_index as usize] = Some(bin);
                }
                let applied = apply_time(
                    time,
                    records,
                    scheduled,
                    &mut table,
                    &mut batch,
                    &mut produced,
                    &mut logic,
                    |at, bin| work.later(at).scheduled.push(bin),
                );
                if let Err(bin) = applied {
                    panic!(
                        "{name}: worker {me} got records for bin {bin} at time {time} but does not hold it"
                    );
                }
                if !produced.is_empty()
                    && let Some(cap) = work.capability()
                {
                    output.session(cap).give_container(&mut produced);
                    produced.clear();
                }
            }
            work.settle();

            // Everything before `done` is applied here: no record or bin can still arrive
            // before it, and the loop above applied every time before it.
            let done = frontiers
                .iter()
                .flat_map(|f| f.frontier().iter().copied().min())
                .min()
                .unwrap_or(Time::MAX);
            if done > progress.done.get() {
                progress.done.set(done);
                if let Some(route) = progress.route.borrow().as_ref() {
                    route.activate();
                }
            }
        }
    });

    stream
}
