//! S: applies records per time and bin, in time order, and installs arriving bins.
//!
//! Invariants kept:
//! * a time `t` is applied only once the data and state-transfer frontiers have passed it
//!   and its placement is final (`Local::control`), and times are applied in increasing
//!   order;
//! * bins arriving for `t` are installed before any record at `t` is applied;
//! * the records of a (time, bin) are applied in their order key's order (bin, sender),
//!   stable within a sender, so both replicas of a bin apply them in the same order;
//! * S holds an output capability for every time it still has work at (records, arriving
//!   bins, scheduled work) or standby outputs undecided at, and tells F through
//!   `Local::done` which times it has applied;
//! * only bins with records or scheduled work at `t` are touched;
//! * outputs leave as `replica` says: the primary's at once with an ack, the standby's once
//!   no ack can come;
//! * a failed worker stops at its next fail point (before a bin), after emitting what it
//!   applied so far with its acks; from then on it holds, applies and emits nothing until
//!   its rejoin is final.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use rustc_hash::FxHashSet;
use serde::Serialize;
use serde::de::DeserializeOwned;
use timely::ExchangeData;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::StreamVec;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::progress::Antichain;

use super::apply::{Applied, Hooks, apply_time};
use super::pending::Pending;
use super::replica::{self, AckBoard, Holding, ack};
use super::route::{DEST_SHIFT, Routed, order_key};
use super::transfer::{Assembly, StateChunk, decode};
use super::{Bin, Local, StatefulConfig, TakeoverLog};
use crate::Time;
use crate::config::{NONE, Placement, Role};
use crate::failure::Failures;

/// Everything S must do at one time.
struct Work<R> {
    /// Records with their order keys.
    records: Vec<(u64, R)>,
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
    local: Rc<Local<S>>,
    config: &StatefulConfig,
    mut logic: L,
) -> StreamVec<'s, Time, O>
where
    R: ExchangeData + Clone,
    S: Serialize + DeserializeOwned + 'static,
    O: Clone + 'static,
    L: FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>) + 'static,
{
    let scope = records.scope();
    let me = local.me;
    let name = name.to_string();
    let replicated = config.replicas > 1;
    let mut builder = OperatorBuilder::new(format!("{name}.state"), scope);
    local
        .state
        .replace(Some(scope.activator_for(builder.operator_info().address)));
    let none = Vec::<(usize, Antichain<Time>)>::new;
    let by_dest = Exchange::new(|r: &Routed<R>| r.0 >> DEST_SHIFT);
    let mut records_in = builder.new_input_connection(records, by_dest, none());
    let chunk_dest = Exchange::new(|c: &StateChunk| u64::from(c.dest));
    let mut chunks_in = builder.new_input_connection(chunks, chunk_dest, none());
    let both = || [(0, Antichain::from_elem(0)), (1, Antichain::from_elem(0))];
    let (output, stream) = builder.new_output_connection(both());
    let mut output = OutputBuilder::<_, CapacityContainerBuilder<Vec<O>>>::from(output);
    let (mut acks_out, board) = if replicated {
        let (acks, ack_stream) = builder.new_output_connection(both());
        let board = Rc::new(AckBoard::new());
        let wake = Rc::clone(&local);
        replica::receive(&name, ack_stream, Rc::clone(&board), move || wake.wake_state());
        (
            Some(OutputBuilder::<_, CapacityContainerBuilder<Vec<u64>>>::from(acks)),
            Some(board),
        )
    } else {
        (None, None)
    };
    let ports = if replicated { 2 } else { 1 };

    let mut work: Pending<Work<R>> = Pending::new();
    let mut holding: Holding<O> = Holding::new();
    let mut assembly = Assembly::default();
    let mut batch: Vec<R> = Vec::new();
    let mut produced: Vec<O> = Vec::new();
    let mut acks: Vec<u64> = Vec::new();
    let mut seen = Seen::default();
    let failures = Arc::clone(&config.failures);
    let takeovers = Rc::clone(&config.takeovers);
    let busy = config.observers.busy();

    builder.build(move |_initial_capabilities| {
        move |frontiers| {
            let _timed = busy.activation();
            records_in.for_each_stamp(|cap, batches| {
                let Some(&time) = cap.least() else { return };
                let entry = work.arrived(time, || (0..ports).map(|p| cap.delayed(&time, p)).collect());
                for b in batches {
                    entry
                        .records
                        .extend(b.drain(..).map(|(tag, r)| (order_key(tag), r)));
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
                            work.arrived(time, || (0..ports).map(|p| cap.delayed(&time, p)).collect())
                                .installs
                                .push(bin);
                        }
                    }
                }
            });
            if let Some(board) = &board {
                holding.take_acks(board);
            }
            if !local.dead.get() && failures.is_failed(me) {
                stop(&name, &local, &mut work, &mut holding, &mut assembly, &mut seen);
            }
            seen.round(&local);

            let mut output = output.activate();
            let mut acks_handle = acks_out.as_mut().map(|o| o.activate());
            let ready = |time: Time| {
                !frontiers[0].less_equal(&time) && !frontiers[1].less_equal(&time) && time < local.control.get()
            };
            while let Some((time, Work { records, mut scheduled, installs })) = work.next(ready) {
                if local.dead.get() {
                    match local.revive_at.get() {
                        Some(from) if time >= from => {
                            local.dead.set(false);
                            local.revive_at.set(None);
                            tracing::info!(target: "megaflux::replica", phase = "rejoined", operator = %name, worker = me, time);
                        }
                        // Dead: what arrives is dropped.
                        _ => continue,
                    }
                }
                let placement = Rc::clone(local.history.borrow().at(time));
                let mut table = local.table.borrow_mut();
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
                    seen.missing.remove(&bin_index);
                    table[bin_index as usize] = Some(bin);
                }
                let mut hooks = StateHooks {
                    name: &name,
                    me,
                    time,
                    placement: &placement,
                    failures: &failures,
                    work: &mut work,
                    holding: &mut holding,
                    acks: &mut acks,
                    seen: &mut seen,
                    local: &local,
                    takeovers: &takeovers,
                };
                let applied = apply_time(
                    time,
                    records,
                    scheduled,
                    &mut table,
                    &mut batch,
                    &mut produced,
                    &mut logic,
                    &mut hooks,
                );
                drop(table);
                // What was applied leaves, with its acks, even if the worker stopped after it.
                if !produced.is_empty()
                    && let Some(cap) = work.capability(0)
                {
                    output.session(cap).give_container(&mut produced);
                }
                produced.clear();
                if let (Some(handle), Some(cap)) = (acks_handle.as_mut(), work.capability(1))
                    && !acks.is_empty()
                {
                    handle.session(cap).give_container(&mut acks);
                }
                acks.clear();
                match applied {
                    Ok(Applied::All) => {}
                    Ok(Applied::Stopped) => stop(&name, &local, &mut work, &mut holding, &mut assembly, &mut seen),
                    Err(bin) => panic!(
                        "{name}: worker {me} got records for bin {bin} at time {time} but does not hold it"
                    ),
                }
            }
            work.settle();

            if let Some(board) = &board {
                let applied = local.done.get();
                holding.settle(board, applied, |cap, mut released, bins| {
                    for bin in bins {
                        seen.took_over(&name, *bin, cap.time(), me, true, &local, &takeovers);
                    }
                    if !released.is_empty() {
                        output.session(cap).give_container(&mut released);
                    }
                });
            }

            // Everything before `done` is applied here: no record or bin can still arrive
            // before it, and the loop above applied every time before it that had work.
            let done = frontiers
                .iter()
                .flat_map(|f| f.frontier().iter().copied().min())
                .chain(work.first_time())
                .min()
                .unwrap_or(Time::MAX);
            if done > local.done.get() {
                local.done.set(done);
                local.wake_route();
            }
        }
    });

    stream
}

/// What this worker's S has noticed about its bins since its last failure.
#[derive(Default)]
struct Seen {
    /// Bins this worker should hold but whose state never arrived (a sender failed).
    missing: FxHashSet<u32>,
    /// Bins taken over in the current round of failures, and that round.
    taken: FxHashSet<u32>,
    round: u64,
}

impl Seen {
    /// Starts a new takeover round if a failure was heard of since the last.
    fn round<S>(&mut self, local: &Local<S>) {
        if local.takeover_round.get() != self.round {
            self.round = local.takeover_round.get();
            self.taken.clear();
        }
    }

    /// `bin`'s work at `time` is done here in place of a failed primary: `released` outputs
    /// the primary never emitted, or applied the bin while awaiting its takeover. The first
    /// time in a round, that is its takeover.
    #[allow(clippy::too_many_arguments)]
    fn took_over<S>(
        &mut self,
        name: &str,
        bin: u32,
        time: &Time,
        me: u32,
        released: bool,
        local: &Local<S>,
        log: &TakeoverLog,
    ) {
        let awaited = local.awaiting.borrow_mut().remove(&bin);
        if (released || awaited) && self.taken.insert(bin) {
            log.borrow_mut().push((Instant::now(), bin));
            tracing::info!(target: "megaflux::replica", phase = "takeover", operator = %name, bin, time = *time, worker = me);
        }
    }
}

/// Stops this worker's S at a failure: its state, pending work, undecided standby outputs
/// and partial arrivals are dropped, with their capabilities.
fn stop<S, R, O>(
    name: &str,
    local: &Local<S>,
    work: &mut Pending<Work<R>>,
    holding: &mut Holding<O>,
    assembly: &mut Assembly,
    seen: &mut Seen,
) {
    let held = local.table.borrow().iter().filter(|b| b.is_some()).count();
    local.table.borrow_mut().iter_mut().for_each(|b| *b = None);
    work.clear();
    holding.clear();
    *assembly = Assembly::default();
    seen.missing.clear();
    local.awaiting.borrow_mut().clear();
    local.dead.set(true);
    local.revive_at.set(None);
    tracing::warn!(target: "megaflux::replica", phase = "stopped", operator = %name, worker = local.me, bins = held);
    local.wake_route();
}

/// S's decisions per bin while it applies one time.
struct StateHooks<'a, R, O, S> {
    name: &'a str,
    me: u32,
    time: Time,
    placement: &'a Placement,
    failures: &'a Failures,
    work: &'a mut Pending<Work<R>>,
    holding: &'a mut Holding<O>,
    acks: &'a mut Vec<u64>,
    seen: &'a mut Seen,
    local: &'a Local<S>,
    takeovers: &'a TakeoverLog,
}

impl<R, O, S> Hooks<O> for StateHooks<'_, R, O, S> {
    fn proceed(&mut self, _bin: u32) -> bool {
        !self.failures.check(self.me)
    }

    fn missing(&mut self, bin: u32) -> bool {
        if !self.placement[bin as usize].holds(self.me) {
            return false;
        }
        if self.seen.missing.insert(bin) {
            tracing::warn!(
                target: "megaflux::replica",
                phase = "missing", operator = %self.name, bin, time = self.time, worker = self.me
            );
        }
        true
    }

    fn later(&mut self, at: Time, bin: u32) {
        self.work.later(at).scheduled.push(bin);
    }

    fn emitted(&mut self, bin: u32, out: &mut Vec<O>, from: usize) {
        // The first work a replica does for a bin whose primary failed, outputs or not.
        if !self.local.awaiting.borrow().is_empty() {
            self.seen.took_over(
                self.name,
                bin,
                &self.time,
                self.me,
                false,
                self.local,
                self.takeovers,
            );
        }
        if out.len() == from {
            return;
        }
        let holders = self.placement[bin as usize];
        match holders.role(self.me) {
            Some(Role::Primary) => {
                if holders.standby != NONE {
                    self.acks.push(ack(holders.standby, bin));
                }
            }
            Some(Role::Standby) if !self.holding.acked(self.time, bin) => {
                let (time, work) = (self.time, &*self.work);
                self.holding
                    .hold(time, bin, out, from, || match work.capability(0) {
                        Some(cap) => cap.delayed(&time),
                        None => unreachable!("S holds a capability at the time it applies"),
                    });
            }
            // The primary's copy already left; or this worker is no holder at all (F drops
            // a leaving bin before S applies its time, so this cannot be).
            _ => out.truncate(from),
        }
    }
}
