//! S: applies records per time and bin, in time order, and installs arriving bins.
//!
//! Invariants kept:
//! * a time `t` is applied only once the data and state-transfer frontiers have passed it
//!   and its placement is final (`Local::control`), and times are applied in increasing
//!   order;
//! * bins arriving for `t` are installed before any record at `t` is applied;
//! * the records of a (time, bin) are applied in one order on every replica: by sender,
//!   stable within a sender (the order key); or, in a job that can restart after a crash
//!   (whose restart numbers the workers afresh), by their encoding, a function of the
//!   records alone, the same before and after any restart, move or failover;
//! * S holds an output capability for every time it still has work at (records, arriving
//!   bins, scheduled work) or standby outputs undecided at, and tells F through
//!   `Local::done` which times it has applied;
//! * only bins with records or scheduled work at `t` are touched;
//! * outputs leave as `replica` says: the primary's at once with an ack, the standby's once
//!   no ack can come;
//! * a failed worker stops at its next fail point (before a bin), after emitting what it
//!   applied so far with its acks; from then on it holds, applies and emits nothing until
//!   its rejoin is final.

use std::cell::RefCell;
use std::collections::BTreeMap;
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
use timely::dataflow::operators::{Capability, InputCapability};
use timely::progress::{Antichain, frontier::MutableAntichain};

use super::apply::{Applied, Hooks, apply_time};
use super::decode::Decoding;
use super::handoff::{HANDED, Mailbox};
use super::pending::Pending;
use super::replica::{self, Ack, AckBoard, CHECK_REPLICAS, Holding, ack, emitted};
use super::route::{DEST_SHIFT, Routed, Routes, bin_key, bin_of_key, order_key};
use super::transfer::{Assembly, StateChunk};
use super::{Arrival, Bin, Holds, Local, StatefulConfig, TakeoverLog};
use crate::Time;
use crate::config::{NONE, Placement, Role};
use crate::failure::Failures;
use crate::size::StateSize;

/// How far the committed frontier moves (in logical times) before S drops the outputs it
/// kept for the times before it: a trim walks every bin held.
const TRIM_EVERY: Time = 256;

/// Everything S must do at one time.
struct Work<R> {
    /// Records with their order keys.
    records: Vec<(u64, R)>,
    /// Bins whose earliest scheduled work is at this time (see `apply_time`). Some may
    /// have moved away since, their work with them: applying skips those.
    scheduled: Vec<u32>,
    /// Bins arriving at this time: they wait in `Local::arriving` (those from another
    /// process decoding off the worker, see `operator/decode.rs`; a restart hands them out
    /// from there).
    installs: Vec<u32>,
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
    (records, chunks, handoff): Routes<'s, R, S>,
    local: Rc<Local<S>>,
    config: &StatefulConfig,
    seeded: Vec<(Time, u32)>,
    logic: L,
) -> StreamVec<'s, Time, O>
where
    R: ExchangeData + Clone,
    S: Serialize + DeserializeOwned + StateSize + Send + 'static,
    O: Clone + Serialize + DeserializeOwned + 'static,
    L: FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>) + 'static,
{
    let logic = resuming(logic);
    let kept: Option<Rc<RefCell<Kept<O>>>> = config.committed.as_ref().map(|_| Rc::default());
    if let Some(kept) = &kept {
        local.kept.replace(Some(Box::new(Rc::clone(kept))));
        local.shipped.replace(Some(Default::default()));
    }
    let scope = records.scope();
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
            Some(OutputBuilder::<_, CapacityContainerBuilder<Vec<Ack>>>::from(acks)),
            Some(board),
        )
    } else {
        (None, None)
    };
    let holding = Holding::new(&name);
    let mut state = State {
        name,
        ports: if replicated { 2 } else { 1 },
        failures: Arc::clone(&config.failures),
        takeovers: Rc::clone(&config.takeovers),
        local,
        logic,
        work: Pending::new(),
        holding,
        assembly: Assembly::default(),
        handoff,
        batch: Vec::new(),
        produced: Vec::new(),
        acks: Vec::new(),
        seen: Seen::default(),
        committed: config.committed.clone(),
        trimmed: 0,
        kept,
    };
    let busy = config.observers.busy();
    builder.build(move |initial_capabilities| {
        // Seeded bins' scheduled work, under capabilities kept from the start.
        if let Some(&(first, _)) = seeded.first() {
            let caps = initial_capabilities.iter().map(|c| c.delayed(&first)).collect();
            state.work.arrived(first, || caps);
            for (time, bin) in seeded {
                state.work.later(time).scheduled.push(bin);
            }
        }
        move |frontiers| {
            let timed = busy.activation();
            // In arrival order: each sender's channel delivers in order, and the records of a
            // time must keep it (for_each_stamp may reorder messages of one time).
            records_in.for_each(|cap, batch| state.receive_records(&cap, batch));
            chunks_in.for_each(|cap, batch| state.receive_chunks(&cap, batch));
            if let Some(board) = &board {
                state.holding.take_acks(board);
            }
            state.note_failures();
            state.trim_kept();

            let mut output = output.activate();
            let mut acks = acks_out.as_mut().map(|o| o.activate());
            let control = Rc::clone(&state.local);
            let ready = |time: Time| {
                !frontiers[0].less_equal(&time)
                    && !frontiers[1].less_equal(&time)
                    && time < control.control.get()
            };
            while let Some((time, work)) = state.work.next(ready) {
                busy.applied(work.records.len());
                state.apply(time, work);
                state.local.applied.set(time.saturating_add(1));
                // What was applied leaves, with its acks, even if the worker stopped after it.
                if let Some(cap) = state.work.capability(0)
                    && !state.produced.is_empty()
                {
                    output.session(cap).give_container(&mut state.produced);
                }
                if let (Some(handle), Some(cap)) = (acks.as_mut(), state.work.capability(1))
                    && !state.acks.is_empty()
                {
                    handle.session(cap).give_container(&mut state.acks);
                }
                state.produced.clear();
                state.acks.clear();
            }
            state.work.settle();
            if let Some(board) = &board {
                state.settle(board, |cap, released| {
                    output.session(cap).give_container(released)
                });
            }
            state.report_done(frontiers);
            let holds = Holds {
                pending_work: state.work.first_time(),
                standby_held: state.holding.first_time(),
                ..state.local.holds.get()
            };
            state.local.holds.set(holds);
            state.local.loads.attribute(timed.end());
        }
    });

    stream
}

/// S's state on one worker.
struct State<R, O, S, L> {
    name: String,
    /// Output ports S holds capabilities for: outputs, and acks when replicated.
    ports: usize,
    failures: Arc<Failures>,
    takeovers: TakeoverLog,
    local: Rc<Local<S>>,
    logic: L,
    work: Pending<Work<R>>,
    holding: Holding<O>,
    assembly: Assembly,
    /// Where bins handed over by workers of this process wait (see `operator/handoff.rs`).
    handoff: Option<Arc<Mailbox<S>>>,
    batch: Vec<R>,
    /// The outputs and acks of the time being applied.
    produced: Vec<O>,
    acks: Vec<Ack>,
    seen: Seen,
    /// The committed frontier, if outputs are kept for a restart, and the one bins' kept
    /// outputs were last trimmed to.
    committed: Option<Arc<std::sync::atomic::AtomicU64>>,
    trimmed: Time,
    /// The outputs kept for a restart, by bin and time (when the job keeps them).
    kept: Option<Rc<RefCell<Kept<O>>>>,
}

/// The outputs S keeps for a restart, as made: by bin, then time.
pub(crate) struct Kept<O> {
    outputs: rustc_hash::FxHashMap<u32, BTreeMap<Time, Vec<O>>>,
}

impl<O> Default for Kept<O> {
    fn default() -> Self {
        Kept {
            outputs: rustc_hash::FxHashMap::default(),
        }
    }
}

impl<O: Serialize> super::KeptOutputs for Rc<RefCell<Kept<O>>> {
    fn encoded(&mut self, bin: u32, take: bool) -> BTreeMap<Time, Vec<u8>> {
        let encode = |times: &BTreeMap<Time, Vec<O>>| -> BTreeMap<Time, Vec<u8>> {
            times
                .iter()
                .map(|(time, outs)| match bincode::serialize(outs) {
                    Ok(bytes) => (*time, bytes),
                    Err(e) => panic!("keeping the outputs of bin {bin} at time {time} failed: {e}"),
                })
                .collect()
        };
        let mut kept = self.borrow_mut();
        let encoded = if take {
            kept.outputs.remove(&bin).map(|times| encode(&times))
        } else {
            kept.outputs.get(&bin).map(encode)
        };
        encoded.unwrap_or_default()
    }
}

/// `logic` as S runs it: a bin's times before its resume point (see `operator/seed.rs`)
/// give the outputs it kept for them instead of applying records its state already holds.
fn resuming<R, S, O, L>(mut logic: L) -> impl FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>)
where
    O: DeserializeOwned,
    L: FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>),
{
    move |time, bin, records, out| {
        if time < bin.resume {
            records.clear();
            if let Some(bytes) = bin.kept.get(&time) {
                match bincode::deserialize::<Vec<O>>(bytes) {
                    Ok(kept) => out.extend(kept),
                    Err(e) => panic!("the outputs a bin kept for time {time} do not decode: {e}"),
                }
            }
            return;
        }
        logic(time, bin, records, out);
    }
}

impl<R: Serialize, O: Clone + Serialize, S, L> State<R, O, S, L>
where
    S: Serialize + DeserializeOwned + StateSize + Send + 'static,
    L: FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>),
{
    fn receive_records(&mut self, cap: &InputCapability<Time>, batch: &mut Vec<Routed<R>>) {
        let Some(&time) = cap.least() else { return };
        let ports = self.ports;
        let entry = self.work.arrived(time, || capabilities(cap, time, ports));
        // Ordered by content, the sender does not count.
        let by_content = self.committed.is_some();
        entry.records.extend(batch.drain(..).map(|(tag, r)| {
            let key = order_key(tag);
            (if by_content { bin_key(bin_of_key(key)) } else { key }, r)
        }));
    }

    fn receive_chunks(&mut self, cap: &InputCapability<Time>, batch: &mut Vec<StateChunk>) {
        let Some(&time) = cap.least() else { return };
        let me = self.local.me;
        for chunk in batch.drain(..) {
            let (bin, arrival, bytes) = if chunk.total == HANDED {
                let Some(bin) = self.handoff.as_ref().and_then(|m| m.take(time, chunk.bin, me)) else {
                    panic!(
                        "{}: bin {} was handed to worker {me} at time {time} but is not in the mailbox \
                         (the workers of a process must share one StatefulConfig::handoffs)",
                        self.name, chunk.bin
                    );
                };
                let bytes = bin.held_bytes();
                (chunk.bin, Arrival::Handed(bin), bytes)
            } else {
                let Some((bin, parts)) = self.assembly.add(time, chunk) else {
                    continue;
                };
                let bytes = parts.iter().map(Vec::len).sum::<usize>();
                (bin, Arrival::Decoding(Decoding::start(parts), bytes), bytes)
            };
            tracing::debug!(
                target: "megaflux::migration",
                phase = "received", operator = %self.name, bin, time, worker = me, bytes
            );
            let ports = self.ports;
            self.work
                .arrived(time, || capabilities(cap, time, ports))
                .installs
                .push(bin);
            self.local.arriving.borrow_mut().insert((time, bin), arrival);
        }
    }

    /// Stops here if this worker failed since the last activation, and starts a new round
    /// of takeovers if another worker's failure was heard of.
    fn note_failures(&mut self) {
        if self.local.must_stop(&self.failures) {
            self.stop();
        }
        self.seen.round(&self.local);
    }

    /// Drops the kept outputs of times the sink has committed, from every bin held here,
    /// each time the committed frontier moves.
    fn trim_kept(&mut self) {
        let Some(committed) = &self.committed else {
            return;
        };
        let now = committed.load(std::sync::atomic::Ordering::Acquire);
        if let Some(shipped) = self.local.shipped.borrow_mut().as_mut() {
            while shipped.first_key_value().is_some_and(|((t, _), _)| *t < now) {
                shipped.pop_first();
            }
        }
        // Not at every move of the frontier (every epoch): each trim walks every bin held.
        if now < self.trimmed.saturating_add(TRIM_EVERY) {
            return;
        }
        self.trimmed = now;
        for bin in self.local.table.borrow_mut().iter_mut().flatten() {
            if bin.kept.first_key_value().is_some_and(|(t, _)| *t < now) {
                bin.kept = bin.kept.split_off(&now);
            }
        }
        if let Some(kept) = &self.kept {
            let mut kept = kept.borrow_mut();
            for times in kept.outputs.values_mut() {
                if times.first_key_value().is_some_and(|(t, _)| *t < now) {
                    *times = times.split_off(&now);
                }
            }
            kept.outputs.retain(|_, times| !times.is_empty());
        }
    }

    /// Applies one ready time: installs, then the bins with work, into `produced` and
    /// `acks`; stops the worker at the fail point where it failed.
    fn apply(&mut self, time: Time, work: Work<R>) {
        let me = self.local.me;
        if self.local.dead.get() {
            let ended = self.failures.times_failed(me) <= self.local.ended.get();
            match self.local.revive_at.get() {
                Some(from) if time >= from && ended => {
                    self.local.dead.set(false);
                    self.local.revive_at.set(None);
                    tracing::info!(target: "megaflux::replica", phase = "rejoined", operator = %self.name, worker = me, time);
                }
                // Dead: what arrives is dropped.
                _ => return,
            }
        }
        let Work {
            mut records,
            mut scheduled,
            installs,
        } = work;
        if self.committed.is_some() {
            // A job that restarts orders each (time, bin)'s records by their encoding
            // (`apply_time`'s stable sort by bin keeps it): a restart numbers the workers
            // afresh, so the order of senders would differ between a bin's replicas and
            // from the run before.
            records.sort_by_cached_key(|(key, r)| (*key, bincode::serialize(r).unwrap_or_default()));
        }
        let placement = Rc::clone(self.local.history.borrow().at(time));
        let mut table = self.local.table.borrow_mut();
        for bin_index in installs {
            let Some(arrival) = self.local.arriving.borrow_mut().remove(&(time, bin_index)) else {
                continue;
            };
            let (bin, bytes): (Bin<S>, usize) = match arrival {
                Arrival::Handed(bin) => {
                    let bytes = bin.held_bytes();
                    (bin, bytes)
                }
                Arrival::Decoding(decoding, bytes) => match decoding.take() {
                    Ok(bin) => (bin, bytes),
                    Err(e) => panic!(
                        "{}: bin {bin_index} arrived corrupt at worker {me}: {e}",
                        self.name
                    ),
                },
            };
            // Scheduled work moves with the bin: its earliest time is entered (`apply_time`
            // enters each next one as the bin runs).
            if let Some(at) = bin.scheduled.first().copied() {
                if at <= time {
                    scheduled.push(bin_index);
                } else {
                    self.work.later(at).scheduled.push(bin_index);
                }
            }
            tracing::debug!(
                target: "megaflux::migration",
                phase = "installed", operator = %self.name, bin = bin_index, time, worker = me, bytes
            );
            self.seen.missing.remove(&bin_index);
            table[bin_index as usize] = Some(bin);
        }
        let mut hooks = StateHooks {
            name: &self.name,
            me,
            time,
            placement: &placement,
            failures: &self.failures,
            work: &mut self.work,
            holding: &mut self.holding,
            acks: &mut self.acks,
            seen: &mut self.seen,
            local: &self.local,
            takeovers: &self.takeovers,
            kept: self.kept.as_deref(),
        };
        let applied = apply_time(
            time,
            records,
            scheduled,
            &mut table,
            &mut self.batch,
            &mut self.produced,
            &mut self.logic,
            &mut hooks,
        );
        drop(table);
        match applied {
            Ok(Applied::All) => {}
            // The caller emits what was applied before the stop, with its capability.
            Ok(Applied::Stopped) => self.stop_after_time(),
            Err(bin) => panic!(
                "{}: worker {me} got records for bin {bin} at time {time} but does not hold it",
                self.name
            ),
        }
    }

    /// Decides the standby outputs the acks or the ack frontier can decide; releases go
    /// through `release` with their capability.
    fn settle(&mut self, board: &AckBoard, mut release: impl FnMut(&Capability<Time>, &mut Vec<O>)) {
        let (name, me, local, takeovers) = (&self.name, self.local.me, &self.local, &self.takeovers);
        let seen = &mut self.seen;
        self.holding
            .settle(board, local.done.get(), |cap, mut released, bins| {
                for bin in bins {
                    seen.took_over(name, *bin, cap.time(), me, true, local, takeovers);
                }
                if !released.is_empty() {
                    release(cap, &mut released);
                }
            });
    }

    /// Tells F what is applied here: every update before the earliest input frontier or
    /// pending time. No record or bin can still arrive before it, and every time before it
    /// that had work was applied.
    fn report_done(&mut self, frontiers: &[MutableAntichain<Time>]) {
        let done = frontiers
            .iter()
            .flat_map(|f| f.frontier().iter().copied().min())
            .chain(self.work.first_time())
            .min()
            .unwrap_or(Time::MAX);
        if done > self.local.done.get() {
            self.local.done.set(done);
            self.assembly.forget_before(done);
            self.local.wake_route();
        }
    }

    /// Stops this worker's S at a failure: its state, pending work, undecided standby
    /// outputs and partial arrivals are dropped, with their capabilities.
    fn stop(&mut self) {
        self.stop_after_time();
        self.work.clear();
    }

    /// Like [`State::stop`], but keeps the pending work's capabilities until the time being
    /// applied has emitted what it applied (the work is dropped as dead at once after).
    fn stop_after_time(&mut self) {
        let local = &self.local;
        local.stopped.set(self.failures.times_failed(local.me));
        let held = local.table.borrow().iter().filter(|b| b.is_some()).count();
        local.table.borrow_mut().iter_mut().for_each(|b| *b = None);
        self.holding.clear();
        self.assembly = Assembly::default();
        local.arriving.borrow_mut().clear();
        if let Some(kept) = &self.kept {
            kept.borrow_mut().outputs.clear();
        }
        self.seen.missing.clear();
        local.awaiting.borrow_mut().clear();
        // A rejoin already final stays: F clears it when it hears a newer failure.
        if !local.dead.replace(true) {
            tracing::warn!(target: "megaflux::replica", phase = "stopped", operator = %self.name, worker = local.me, bins = held);
        }
        local.wake_route();
    }
}

/// Capabilities at `time` for each of the first `ports` outputs.
fn capabilities(cap: &InputCapability<Time>, time: Time, ports: usize) -> Vec<Capability<Time>> {
    (0..ports).map(|p| cap.delayed(&time, p)).collect()
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

/// S's decisions per bin while it applies one time.
struct StateHooks<'a, R, O, S> {
    name: &'a str,
    me: u32,
    time: Time,
    placement: &'a Placement,
    failures: &'a Failures,
    work: &'a mut Pending<Work<R>>,
    holding: &'a mut Holding<O>,
    acks: &'a mut Vec<Ack>,
    seen: &'a mut Seen,
    local: &'a Local<S>,
    takeovers: &'a TakeoverLog,
    kept: Option<&'a RefCell<Kept<O>>>,
}

impl<R, O: Clone + Serialize, S> Hooks<O> for StateHooks<'_, R, O, S> {
    fn proceed(&mut self, _bin: u32) -> bool {
        self.failures.tick(self.me);
        !self.local.must_stop(self.failures)
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

    fn applied(&mut self, bin: u32, records: usize) {
        self.local.loads.applied(bin, records);
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
        let produced = out.len() - from;
        if produced == 0 && !CHECK_REPLICAS {
            return;
        }
        // Both copies keep what they made, before the standby's copy is dropped below.
        if let Some(kept) = self.kept
            && produced > 0
        {
            let mut kept = kept.borrow_mut();
            let at = kept.outputs.entry(bin).or_default().entry(self.time).or_default();
            at.clear();
            at.extend(out[from..].iter().cloned());
        }
        let holders = self.placement[bin as usize];
        match holders.role(self.me) {
            Some(Role::Primary) => {
                if holders.standby != NONE {
                    self.acks.push(ack(holders.standby, bin, emitted(&out[from..])));
                }
            }
            Some(Role::Standby) if let Some(primary) = self.holding.acked(self.time, bin) => {
                self.holding.agree(self.time, bin, primary, emitted(&out[from..]));
                out.truncate(from);
            }
            Some(Role::Standby) => {
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
