//! Exactly-once outputs from two replicas per bin: Flux's process pairs, on (time, bin).
//!
//! Invariant: for every (time, bin), the outputs of exactly one replica leave the operator.
//! * Both replicas apply the same records of a (time, bin) in the same order to the same
//!   state (`route::dest`), so with deterministic logic they produce the same outputs. That
//!   is the operators' determinism contract (see `stateful_unary`): logic whose outputs
//!   depend on anything else (a hash map's iteration order, which differs between replicas
//!   and after every move or recovery copy; the clock; a random draw) makes replicas diverge,
//!   and the standby then releases outputs the primary never had, or drops ones it lacks.
//!   Debug builds catch it: the primary acks every (time, bin) it applied with the number
//!   of outputs it emitted and a hash of them, and the standby stops the job when its own
//!   differ.
//! * The primary at `t` emits its outputs of (t, b) and, in the same step (no fail point
//!   between them), sends an *ack* (t, b) to the standby at `t`.
//! * The standby keeps its outputs of (t, b), under a capability at `t`, until the ack
//!   arrives (it drops them) or the *ack frontier* passes `t` without one (it releases
//!   them: the primary stopped before emitting them). The ack frontier passes `t` only once
//!   every worker has applied `t` or failed, and a failed worker sends nothing more, so
//!   "no ack by then" means "never emitted, and never will be".
//!
//! In steady state this costs one small ack per (time, bin) with outputs and, at the
//! standby, holding its outputs until the ack arrives; outputs of the primary are not
//! delayed by it, but the time completes only once the standby has dropped its copy.
//!
//! The acks travel on a second output of S to a separate operator (a loop from S to itself
//! would need a timestamp increment); that operator hands them to S through an
//! [`AckBoard`] on the same worker.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use rustc_hash::FxHashMap;
use timely::dataflow::StreamVec;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::Capability;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;

use crate::Time;

/// Whether the primary acks every (time, bin) it applied, outputs or not, and the standby
/// checks that it emitted as many: in debug builds (an ack per bin with records costs).
pub(crate) const CHECK_REPLICAS: bool = cfg!(debug_assertions);

/// An ack for the standby of a bin at the time of the message carrying it: the standby's
/// worker and the bin (`worker << 32 | bin`), and what the primary emitted.
pub(crate) type Ack = (u64, Emitted);

/// What a replica emitted for a (time, bin): how many outputs, and (in debug builds, else
/// 0) an order-independent hash of them.
pub(crate) type Emitted = (u32, u64);

/// What `outputs` are, as an ack tells them.
pub(crate) fn emitted<O: serde::Serialize>(outputs: &[O]) -> Emitted {
    let count = u32::try_from(outputs.len()).unwrap_or(u32::MAX);
    if !CHECK_REPLICAS {
        return (count, 0);
    }
    let hash = outputs.iter().fold(0u64, |sum, o| {
        let bytes = bincode::serialize(o).unwrap_or_default();
        sum.wrapping_add(xxhash_rust::xxh3::xxh3_64(&bytes))
    });
    (count, hash)
}

/// The ack for the standby `worker` of `bin`, whose primary emitted `outputs`.
#[inline]
pub(crate) fn ack(worker: u32, bin: u32, outputs: Emitted) -> Ack {
    ((u64::from(worker) << 32) | u64::from(bin), outputs)
}

/// Acks that arrived at one worker, and how far they are complete.
pub(crate) struct AckBoard {
    arrived: RefCell<Vec<(Time, Vec<Ack>)>>,
    /// Every ack before this time has arrived.
    frontier: Cell<Time>,
}

impl AckBoard {
    pub(crate) fn new() -> Self {
        AckBoard {
            arrived: RefCell::new(Vec::new()),
            frontier: Cell::new(0),
        }
    }

    /// Whether every ack at `time` has arrived.
    pub(crate) fn complete(&self, time: Time) -> bool {
        time < self.frontier.get()
    }
}

/// Builds the operator that receives acks for this worker's standbys and posts them on
/// `board`, waking S (`wake`) whenever something changed.
pub(crate) fn receive<'s>(
    name: &str,
    acks: StreamVec<'s, Time, Ack>,
    board: Rc<AckBoard>,
    wake: impl Fn() + 'static,
) {
    let mut builder = OperatorBuilder::new(format!("{name}.acks"), acks.scope());
    let mut input = builder.new_input(acks, Exchange::new(|a: &Ack| a.0 >> 32));
    builder.build(move |_| {
        move |frontiers| {
            let mut changed = false;
            input.for_each_stamp(|cap, batches| {
                let Some(&time) = cap.least() else { return };
                let mut arrived = board.arrived.borrow_mut();
                for b in batches {
                    arrived.push((time, std::mem::take(b)));
                }
                changed = true;
            });
            let frontier = frontiers[0].frontier().first().copied().unwrap_or(Time::MAX);
            if frontier != board.frontier.get() {
                board.frontier.set(frontier);
                changed = true;
            }
            if changed {
                wake();
            }
        }
    });
}

/// One time's standby outputs not decided yet.
struct Held<O> {
    cap: Capability<Time>,
    outputs: Vec<O>,
    /// Each bin and the end of its outputs in `outputs`, in bin order.
    bins: Vec<(u32, usize)>,
}

/// The standby side: outputs kept until their primary's ack or the ack frontier decides.
pub(crate) struct Holding<O> {
    /// The operator's name, for the message when replicas diverge.
    name: String,
    held: BTreeMap<Time, Held<O>>,
    /// Per time, the bins acked and what their primary emitted.
    acked: BTreeMap<Time, FxHashMap<u32, Emitted>>,
}

impl<O: serde::Serialize> Holding<O> {
    pub(crate) fn new(name: &str) -> Self {
        Holding {
            name: name.to_string(),
            held: BTreeMap::new(),
            acked: BTreeMap::new(),
        }
    }

    /// Takes the acks posted on `board`.
    pub(crate) fn take_acks(&mut self, board: &AckBoard) {
        for (time, acks) in board.arrived.borrow_mut().drain(..) {
            let map = self.acked.entry(time).or_default();
            map.extend(acks.into_iter().map(|(a, n)| (a as u32, n)));
        }
    }

    /// What the primary emitted for (time, bin), if its outputs are known to have left.
    pub(crate) fn acked(&self, time: Time, bin: u32) -> Option<Emitted> {
        self.acked.get(&time).and_then(|m| m.get(&bin)).copied()
    }

    /// Checks, in debug builds, that the primary emitted the same outputs for (time, bin)
    /// as this standby did: replicas of deterministic logic always agree.
    pub(crate) fn agree(&self, time: Time, bin: u32, primary: Emitted, standby: Emitted) {
        diverged(&self.name, time, bin, primary, standby);
    }

    /// Keeps `out[from..]`, the outputs of (time, bin); `cap` makes a capability at `time`.
    pub(crate) fn hold(
        &mut self,
        time: Time,
        bin: u32,
        out: &mut Vec<O>,
        from: usize,
        cap: impl FnOnce() -> Capability<Time>,
    ) {
        let held = self.held.entry(time).or_insert_with(|| Held {
            cap: cap(),
            outputs: Vec::new(),
            bins: Vec::new(),
        });
        held.outputs.extend(out.drain(from..));
        held.bins.push((bin, held.outputs.len()));
    }

    /// Decides what can be: drops outputs whose ack arrived, and releases through `release`
    /// (with the capability and the bins they came from) those whose time the ack frontier
    /// passed without an ack. Forgets acks nobody can need: for times before `applied` with
    /// nothing held.
    pub(crate) fn settle(
        &mut self,
        board: &AckBoard,
        applied: Time,
        mut release: impl FnMut(&Capability<Time>, Vec<O>, &[u32]),
    ) {
        let mut decided = Vec::new();
        for (time, held) in self.held.iter_mut() {
            let acked = self.acked.get(time);
            let pending = |bin: &u32| acked.is_none_or(|s| !s.contains_key(bin));
            if CHECK_REPLICAS && let Some(acked) = acked {
                let mut start = 0;
                for (bin, end) in &held.bins {
                    if let Some(primary) = acked.get(bin) {
                        diverged(
                            &self.name,
                            *time,
                            *bin,
                            *primary,
                            emitted(&held.outputs[start..*end]),
                        );
                    }
                    start = *end;
                }
            }
            if !held.bins.iter().any(|(b, _)| pending(b)) {
                decided.push(*time);
            } else if board.complete(*time) {
                let mut outputs = std::mem::take(&mut held.outputs).into_iter();
                let mut released = Vec::new();
                let mut bins = Vec::new();
                let mut start = 0;
                for (bin, end) in &held.bins {
                    let part = outputs.by_ref().take(end - start);
                    if pending(bin) {
                        released.extend(part);
                        // Bins held with no outputs (to check them against their ack) took
                        // nothing over.
                        if *end > start {
                            bins.push(*bin);
                        }
                    } else {
                        part.for_each(drop);
                    }
                    start = *end;
                }
                release(&held.cap, released, &bins);
                decided.push(*time);
            }
        }
        for time in decided {
            self.held.remove(&time);
            self.acked.remove(&time);
        }
        let held = &self.held;
        self.acked.retain(|t, _| *t >= applied || held.contains_key(t));
    }

    /// Forgets everything (the worker failed).
    /// The first time with outputs held, if any.
    pub(crate) fn first_time(&self) -> Option<Time> {
        self.held.keys().next().copied()
    }

    pub(crate) fn clear(&mut self) {
        self.held.clear();
        self.acked.clear();
    }
}

/// Stops the job, in debug builds, if the replicas of `bin` emitted different outputs at
/// `time` (their numbers or their hashes differ).
fn diverged(name: &str, time: Time, bin: u32, primary: Emitted, standby: Emitted) {
    if CHECK_REPLICAS && primary != standby {
        let what = if primary.0 == standby.0 {
            format!("both emitted {} outputs, but not the same ones", primary.0)
        } else {
            format!(
                "the primary emitted {} outputs, the standby {}",
                primary.0, standby.0
            )
        };
        panic!(
            "{name}: the replicas of bin {bin} diverged at time {time}: {what}. \
             The operator's logic must give the same outputs for the same state and records in the same order \
             (no hash map iteration order, clock or random draw in what it emits): see the determinism contract of stateful_unary"
        );
    }
}
