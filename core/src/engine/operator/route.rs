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
//!   which is what lets the driver tell genuine transfers from lost ones;
//! * in a job that can restart after a crash, a bin shipped away for good stays here
//!   (`Local::shipped`) until the committed frontier passes its move: a crash drops what is
//!   in flight, and until then this may be the bin's last whole copy;
//! * a bin moving for good to one worker of this process is handed over as it is, through
//!   the operator's mailbox (see `operator/handoff.rs`); every other one travels encoded.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::StreamVec;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::{Capability, InputCapability};
use timely::progress::{Antichain, frontier::MutableAntichain};

use super::handoff::Mailbox;
use super::transfer::{Encoded, StateChunk, encode};
use super::{Holds, Local, StatefulConfig, TransferLog};
use crate::Time;
use crate::bins::Bins;
use crate::config::{ControlInst, NONE, Placement, Role, all_transfers, next_placement};
use crate::failure::Failures;
use crate::size::StateSize;

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

/// F's output streams: the routed records and the outgoing state chunks, with the mailbox
/// of bins handed over in this process (when the job has one).
pub(crate) type Routes<'s, R, S> = (
    StreamVec<'s, Time, Routed<R>>,
    StreamVec<'s, Time, StateChunk>,
    Option<Arc<Mailbox<S>>>,
);

/// Builds F.
pub(crate) fn build<'s, R, S, K>(
    name: &str,
    data: StreamVec<'s, Time, R>,
    control: StreamVec<'s, Time, (u64, ControlInst)>,
    config: &StatefulConfig,
    bin_key: K,
    local: Rc<Local<S>>,
) -> Routes<'s, R, S>
where
    R: Clone + 'static,
    S: Serialize + DeserializeOwned + StateSize + Send + 'static,
    K: Fn(&R) -> u64 + 'static,
{
    let scope = data.scope();
    let peers = scope.peers();
    assert!(peers < 1 << BIN_SHIFT, "{name}: at most 2^24 workers");
    let mut builder = OperatorBuilder::new(format!("{name}.route"), scope);
    let address = builder.operator_info().address;
    let handoff = config.handoffs.as_ref().map(|h| h.mailbox::<S>(&address));
    local.route.replace(Some(scope.activator_for(address)));
    let none = Vec::<(usize, Antichain<Time>)>::new;
    let mut data_in = builder.new_input_connection(data, Pipeline, none());
    // Each control change comes addressed to every worker (see `addressed`): the exchange
    // delivers each copy to its worker.
    let to_worker = Exchange::new(|(worker, _): &(u64, ControlInst)| *worker);
    let mut control_in = builder.new_input_connection(control, to_worker, none());
    let (records_out, records) = builder.new_output_connection([(0, Antichain::from_elem(0))]);
    let (chunks_out, chunks) = builder.new_output_connection([(1, Antichain::from_elem(0))]);
    let mut records_out = OutputBuilder::<_, CapacityContainerBuilder<Vec<Routed<R>>>>::from(records_out);
    let mut chunks_out = OutputBuilder::<_, CapacityContainerBuilder<Vec<StateChunk>>>::from(chunks_out);
    let mut router = Router {
        name: name.to_string(),
        me: local.me,
        peers,
        bins: config.bins,
        chunk_bytes: config.chunk_bytes,
        handoff: handoff.clone(),
        transfers: Rc::clone(&config.transfers),
        failures: Arc::clone(&config.failures),
        local,
        bin_key,
        pending_control: BTreeMap::new(),
        held: BTreeMap::new(),
        outgoing: BTreeMap::new(),
        fail_final: None,
        fail_seen: None,
    };
    let busy = config.observers.busy();
    builder.build(move |_initial_capabilities| {
        move |frontiers| {
            let _timed = busy.activation();
            let (data_frontier, control_frontier) = (&frontiers[0], &frontiers[1]);
            control_in.for_each(|cap, batch| router.hear(&cap, batch));
            router.finalize(control_frontier);

            let mut records = records_out.activate();
            // Held records first, and every input message in arrival order: each worker's
            // records leave in the order it sent them.
            for (cap, batch) in router.released(control_frontier) {
                let mut session = records.session(&cap);
                router.route(*cap.time(), batch.into_iter(), |r| session.give(r));
            }
            data_in.for_each(|cap, batch| {
                let Some(&time) = cap.least() else { return };
                if control_frontier.less_equal(&time) {
                    router.hold(time, &cap, batch);
                } else {
                    let mut session = records.session(&cap);
                    router.route(time, batch.drain(..), |r| session.give(r));
                }
            });
            drop(records);

            let mut chunks = chunks_out.activate();
            router.ship(|cap, chunk| chunks.session(cap).give(chunk));
            router.forget(data_frontier);
            router.note_holds();
        }
    });

    (records, chunks, handoff)
}

/// F's state on one worker.
struct Router<R, S, K> {
    name: String,
    me: u32,
    peers: usize,
    bins: Bins,
    chunk_bytes: usize,
    handoff: Option<Arc<Mailbox<S>>>,
    transfers: TransferLog,
    failures: Arc<Failures>,
    local: Rc<Local<S>>,
    bin_key: K,
    /// Control changes not yet final, by time, with a capability to ship state at that time.
    pending_control: Held<ControlInst>,
    /// Records whose time the control frontier has not passed yet.
    held: Held<R>,
    /// What to ship or drop, by the time from which the new holders hold the bins.
    outgoing: Held<Action>,
    /// The latest time at which a failure of this worker is final.
    fail_final: Option<Time>,
    /// The latest time of a failure of this worker heard of on the control input.
    fail_seen: Option<Time>,
}

impl<R, S, K> Router<R, S, K>
where
    R: Clone,
    S: Serialize + DeserializeOwned + StateSize,
    K: Fn(&R) -> u64,
{
    /// Takes control changes as they arrive. A failure of this worker takes effect here, at
    /// once, wherever it is; one of another worker starts a round of takeovers.
    fn hear(&mut self, cap: &InputCapability<Time>, batch: &mut Vec<(u64, ControlInst)>) {
        let Some(&time) = cap.least() else { return };
        for (_, inst) in batch.iter() {
            if let ControlInst::Fail { worker } = inst {
                if *worker == self.me {
                    self.failures.fail_at(self.me, time);
                    self.fail_seen = self.fail_seen.max(Some(time));
                    // A rejoin not yet served is void: the worker failed again.
                    self.local.revive_at.set(None);
                } else {
                    self.local.begin_takeovers();
                }
            }
        }
        let entry = self
            .pending_control
            .entry(time)
            .or_insert_with(|| (cap.delayed(&time, 1), Vec::new()));
        entry.1.extend(batch.drain(..).map(|(_, inst)| inst));
    }

    /// Control changes become final once the control frontier has passed them: each final
    /// time's placement goes into the history, and what this worker must ship or drop at it
    /// into `outgoing`.
    fn finalize(&mut self, control_frontier: &MutableAntichain<Time>) {
        while let Some(entry) = self.pending_control.first_entry() {
            let time = *entry.key();
            if control_frontier.less_equal(&time) {
                break;
            }
            let (cap, mut insts) = entry.remove();
            let old = Rc::clone(self.local.history.borrow().latest());
            let new = next_placement(&old, &mut insts, self.peers);
            for inst in &insts {
                match inst {
                    ControlInst::Fail { worker } if *worker == self.me => self.fail_final = Some(time),
                    ControlInst::Fail { worker } => self.local.await_takeovers(&old, *worker),
                    // Back empty from `time` on, unless a later failure is already known.
                    ControlInst::Rejoin { worker }
                        if *worker == self.me && self.fail_seen.is_none_or(|f| f < time) =>
                    {
                        self.local.revive_at.set(Some(time));
                        self.failures.revive(self.me, time);
                        if let Some(ended) = self.failures.ended_by(self.me, time) {
                            self.local.ended.set(ended);
                        }
                    }
                    _ => {}
                }
            }
            let lost: Vec<u32> = old
                .iter()
                .zip(new.iter())
                .enumerate()
                .filter(|(_, (was, now))| now.is_lost() && !was.is_lost())
                .map(|(bin, _)| bin as u32)
                .collect();
            if !lost.is_empty() {
                self.failures.lose(&lost, time);
            }
            let mut actions: Vec<Action> = Vec::new();
            for (bin, t) in all_transfers(&old, &new).filter(|(_, t)| t.from == self.me) {
                match actions.last_mut() {
                    Some(a) if a.bin == bin => a.to.push(t.to),
                    _ => actions.push(Action {
                        bin,
                        to: vec![t.to],
                        drop: false,
                    }),
                }
            }
            for (bin, (was, now)) in old.iter().zip(new.iter()).enumerate() {
                if was.holds(self.me) && !now.holds(self.me) {
                    match actions.iter_mut().find(|a| a.bin == bin as u32) {
                        Some(a) => a.drop = true,
                        None => actions.push(Action {
                            bin: bin as u32,
                            to: Vec::new(),
                            drop: true,
                        }),
                    }
                }
            }
            if !actions.is_empty() {
                // Taken from the back: bin order.
                actions.sort_unstable_by_key(|a| std::cmp::Reverse(a.bin));
                self.outgoing.insert(time, (cap, actions));
            }
            self.local.history.borrow_mut().push(time, new);
        }
        let control = control_frontier.frontier().first().copied().unwrap_or(Time::MAX);
        if control > self.local.control.get() {
            self.local.control.set(control);
            self.local.wake_state();
        }
    }

    /// Held records whose time the control frontier has now passed, oldest first.
    fn released(&mut self, control_frontier: &MutableAntichain<Time>) -> Vec<(Capability<Time>, Vec<R>)> {
        let mut out = Vec::new();
        while let Some(entry) = self.held.first_entry() {
            if control_frontier.less_equal(entry.key()) {
                break;
            }
            out.push(entry.remove());
        }
        out
    }

    /// Keeps records at `time` until the control frontier has passed it.
    fn hold(&mut self, time: Time, cap: &InputCapability<Time>, batch: &mut Vec<R>) {
        let entry = self
            .held
            .entry(time)
            .or_insert_with(|| (cap.delayed(&time, 0), Vec::new()));
        entry.1.append(batch);
    }

    /// Sends each record at `time` to every holder of its bin at `time`.
    fn route(&self, time: Time, records: impl Iterator<Item = R>, mut give: impl FnMut(Routed<R>)) {
        let history = self.local.history.borrow();
        // Each replica's copy counts: it is work of the operator's, as its applies are.
        let mut routed = 0u64;
        route(
            history.at(time),
            self.bins,
            &self.bin_key,
            self.me,
            records,
            |r| {
                routed += 1;
                give(r)
            },
        );
        self.local.loads.routed(routed);
    }

    /// Notes what F holds capabilities for, for a stuck job's report.
    fn note_holds(&self) {
        let holds = Holds {
            outgoing: self.outgoing.keys().next().copied(),
            pending_control: self.pending_control.keys().next().copied(),
            held_records: self.held.keys().next().copied(),
            fail_final: self.fail_final,
            fail_seen: self.fail_seen,
            ..self.local.holds.get()
        };
        self.local.holds.set(holds);
    }

    /// Ships (and drops) bins whose updates before their move time have all been applied
    /// here, through `give` with the capability of their time.
    ///
    /// At most about one chunk's worth of encoded state leaves per activation (and at least
    /// one bin), then F asks to run again: timely sends an operator's output when its
    /// activation ends, so a step of many bins goes out as many messages the receiver can
    /// take in one by one, rather than as one message of every bin that must be written,
    /// sent, read and decoded whole (128 MB for half of a 16M-key count) before S sees any.
    fn ship(&mut self, mut give: impl FnMut(&Capability<Time>, StateChunk)) {
        let mut encoded_here = 0u64;
        let budget = self.chunk_bytes.max(1) as u64;
        while let Some(mut entry) = self.outgoing.first_entry() {
            let time = *entry.key();
            if time > self.local.done.get() {
                break;
            }
            if !self.local.alive_at(time, &self.failures) {
                // Nothing to ship from here any more; the capability waits until the failure
                // is final (or no more control can come). The bins given away go now: S may
                // not stop before this worker's rejoin is final too (it stops when it next
                // runs), and must not find them here when it serves again.
                let closed = self.local.control.get() == Time::MAX;
                if self.fail_final.is_some_and(|f| f >= time) || closed {
                    let (_, actions) = entry.remove();
                    let mut table = self.local.table.borrow_mut();
                    for action in actions.iter().filter(|a| a.drop) {
                        table[action.bin as usize] = None;
                    }
                    continue;
                }
                break;
            }
            let (cap, actions) = entry.get_mut();
            let mut table = self.local.table.borrow_mut();
            while let Some(action) = actions.pop() {
                if encoded_here >= budget {
                    actions.push(action);
                    self.local.wake_route();
                    crate::failpoint::hit(crate::failpoint::Point::Shipping);
                    break;
                }
                // A fail point between two bins of a step.
                self.failures.tick(self.me);
                if !self.local.alive_at(time, &self.failures) {
                    actions.push(action);
                    break;
                }
                let Some(state) = table[action.bin as usize].as_mut() else {
                    // Never arrived here (its sender failed): nothing to send.
                    continue;
                };
                // Its kept outputs go along (and stay here too if this copy stays).
                super::pack_kept(&self.local.kept, action.bin, state, action.drop);
                if let Some((mailbox, to)) = handing(self.handoff.as_ref(), &self.local, &action)
                    && let Some(bin) = table[action.bin as usize].take()
                {
                    let size = Encoded {
                        chunks: 0,
                        bytes: bin.held_bytes() as u64,
                    };
                    give(cap, mailbox.hand(time, action.bin, to, bin));
                    log_extracted(&self.transfers, &self.name, self.me, time, &action, size, true);
                    continue;
                }
                let Some(state) = table[action.bin as usize].as_ref() else {
                    continue;
                };
                if let Some((last, others)) = action.to.split_last() {
                    let encoded = encode(state, self.chunk_bytes, |seq, total, bytes| {
                        let chunk = |dest: u32, bytes: Vec<u8>| StateChunk {
                            dest,
                            bin: action.bin,
                            seq,
                            total,
                            bytes,
                        };
                        for to in others {
                            give(cap, chunk(*to, bytes.clone()));
                        }
                        give(cap, chunk(*last, bytes));
                    });
                    encoded_here += encoded.bytes * action.to.len() as u64;
                    log_extracted(
                        &self.transfers,
                        &self.name,
                        self.me,
                        time,
                        &action,
                        encoded,
                        false,
                    );
                }
                if action.drop
                    && let Some(bin) = table[action.bin as usize].take()
                {
                    let mut shipped = self.local.shipped.borrow_mut();
                    if let Some(shipped) = shipped.as_mut() {
                        let history = self.local.history.borrow();
                        let holders = history.at(time)[action.bin as usize];
                        let standby = action.to.iter().all(|w| holders.role(*w) == Some(Role::Standby));
                        shipped.insert((time, action.bin), (standby, bin));
                    }
                }
            }
            drop(table);
            if actions.is_empty() {
                entry.remove();
            } else {
                break;
            }
        }
    }

    /// Forgets placements older than anything F may still route or S still apply.
    fn forget(&self, data_frontier: &MutableAntichain<Time>) {
        let oldest = self
            .held
            .keys()
            .next()
            .copied()
            .into_iter()
            .chain(data_frontier.frontier().iter().copied())
            .chain([self.local.done.get()])
            .min();
        if let Some(oldest) = oldest {
            self.local.history.borrow_mut().forget_before(oldest);
        }
    }
}

/// The mailbox and receiver when `action` hands its bin over as it is: the bin leaves this
/// worker for good, for one worker of this process, and no shipped copy stays behind.
fn handing<'a, S>(
    handoff: Option<&'a Arc<Mailbox<S>>>,
    local: &Local<S>,
    action: &Action,
) -> Option<(&'a Arc<Mailbox<S>>, u32)> {
    let mailbox = handoff?;
    match action.to.as_slice() {
        [to] if action.drop && local.shipped.borrow().is_none() && mailbox.same_process(local.me, *to) => {
            Some((mailbox, *to))
        }
        _ => None,
    }
}

/// Counts one bin's copies in the worker's transfer log, and reports them (a bin `handed`
/// over in this process counts no chunks, and its size in memory).
fn log_extracted(
    log: &TransferLog,
    name: &str,
    me: u32,
    time: Time,
    action: &Action,
    encoded: Encoded,
    handed: bool,
) {
    let Encoded { chunks, bytes } = encoded;
    let chunks = u64::from(chunks);
    let mut log = log.borrow_mut();
    let totals = log.entry(time).or_default();
    for to in &action.to {
        tracing::debug!(
            target: "megaflux::migration",
            phase = "extracted", operator = %name, bin = action.bin, time, from = me, to = *to, bytes, chunks, copy = !action.drop
        );
        totals.bins += 1;
        totals.bytes += bytes;
        totals.chunks += chunks;
        totals.handed += u64::from(handed);
    }
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
