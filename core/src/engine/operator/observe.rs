//! What observers can read of each stateful operator on a worker: its frontiers and the
//! size of every bin it holds. The harness samples these and reports them as `tracing`
//! events; the operators only keep the cells current.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;
use std::time::Instant;

use crate::Time;

/// One bin's size on the worker that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinSize {
    /// The bin's index.
    pub bin: u32,
    /// Keys (entries) in its state ([`crate::size::StateSize::keys`]).
    pub keys: u64,
    /// Estimated bytes in memory: the state's shallow estimate
    /// ([`crate::size::StateSize::bytes`]) plus its scheduled times.
    pub bytes: u64,
    /// The worker holds the bin's standby (not its primary).
    pub standby: bool,
}

/// An operator's frontiers on this worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frontiers {
    /// Every update before this time has been applied here.
    pub applied: Time,
    /// The control frontier F has seen (`None` for native operators, which have no control).
    pub control: Option<Time>,
}

/// Appends the size of every bin a worker holds, in bin order.
pub type SizeSampler = Box<dyn Fn(&mut Vec<BinSize>)>;

/// Appends what each bin cost a worker so far (see [`super::BinLoad`]).
pub type LoadSampler = Box<dyn Fn(&mut Vec<super::BinLoad>)>;

/// Appends, for every bin a worker holds, a hash of its encoded state (its user state and
/// scheduled work): equal hashes on two workers mean byte-identical replicas.
pub type DigestSampler = Box<dyn Fn(&mut Vec<(u32, u64)>)>;

/// The first time of everything an operator may hold a capability for on one worker, and
/// the failure state that decides when it lets go: what a job that stopped making progress
/// is asked for. `None`: nothing of that kind is held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Holds {
    /// F: the first time with bins to ship or drop.
    pub outgoing: Option<Time>,
    /// F: the first control change not yet final.
    pub pending_control: Option<Time>,
    /// F: the first time of records held until the control frontier passes it.
    pub held_records: Option<Time>,
    /// F: the latest time at which a failure of this worker is final.
    pub fail_final: Option<Time>,
    /// F: the latest time of a failure of this worker heard of.
    pub fail_seen: Option<Time>,
    /// S: the first time with records, state or scheduled work to apply.
    pub pending_work: Option<Time>,
    /// S: the first time of a standby's outputs held for the primary's ack.
    pub standby_held: Option<Time>,
    /// S: every update before this time is applied here.
    pub done: Time,
    /// F's control frontier.
    pub control: Time,
    /// S stopped at a failure and holds nothing.
    pub dead: bool,
    /// The time from which a dead worker serves again.
    pub revive_at: Option<Time>,
    /// Whether the worker serves its bins at `done`.
    pub alive_at_done: bool,
    /// The process's shared failure flag for this worker.
    pub flagged: bool,
    /// Failures of this worker so far, those S stopped for, and those a rejoin ended.
    pub failed: (u64, u64, u64),
}

/// The work an operator has scheduled for later times on one worker: how many bins it is
/// primary of have some, and the earliest time of any. What a drain waits for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Scheduled {
    /// Bins with scheduled work (counted on their primary: a standby's copy is the same
    /// work).
    pub bins: u64,
    /// The earliest time with scheduled work, if any bin has some.
    pub next: Option<Time>,
}

impl Scheduled {
    /// Both together: bins add up, the earliest time is the earlier one's.
    pub fn and(self, other: Scheduled) -> Scheduled {
        let next = match (self.next, other.next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Scheduled {
            bins: self.bins + other.bins,
            next,
        }
    }
}

/// One operator as observers see it.
pub struct OperatorProbe {
    /// The operator's name as the job gave it (the `operator` of trace events).
    pub name: String,
    /// Reads the operator's current frontiers on this worker.
    pub frontiers: Box<dyn Fn() -> Frontiers>,
    /// Reads the size of every bin it holds here.
    pub sizes: SizeSampler,
    /// Reads the hash of every bin it holds here.
    pub digests: DigestSampler,
    /// Reads what it may hold capabilities for here (see [`Holds`]).
    pub holds: Box<dyn Fn() -> Holds>,
    /// Reads the work its bins here have scheduled for later times (see [`Scheduled`]).
    pub scheduled: Box<dyn Fn() -> Scheduled>,
    /// Appends what each bin cost here so far (see [`super::BinLoad`]).
    pub loads: LoadSampler,
    /// Records this worker's router sent the operator so far (each replica's copy counted).
    pub routed: Box<dyn Fn() -> u64>,
    /// Every bin it holds here or that arrived here and waits to be installed, encoded as it
    /// would travel (scheduled work and kept outputs included), each marked with its resume
    /// point, with its role: what a restart seeds a new computation with
    /// ([`super::Seed`]). Call it once the worker no longer steps the computation.
    pub handout: Box<dyn Fn() -> std::collections::BTreeMap<u32, super::HandedBin>>,
}

/// The operators of one worker, in the order they were built, and the time they spent
/// working (measured from when [`Observers::time_operators`] is called).
#[derive(Clone, Default)]
pub struct Observers {
    probes: Rc<RefCell<Vec<OperatorProbe>>>,
    busy: Rc<Busy>,
}

/// Nanoseconds this worker's stateful operators spent in their activations, and the
/// records they applied.
#[derive(Default)]
pub(crate) struct Busy {
    on: Cell<bool>,
    ns: Cell<u64>,
    applied: Cell<u64>,
}

/// Times one operator activation into the worker's busy time (when timing is on).
pub(crate) struct Activation<'a> {
    busy: &'a Busy,
    started: Option<Instant>,
}

impl Activation<'_> {
    /// Ends the activation now: its time counts, and is returned (if timed).
    pub(crate) fn end(mut self) -> Option<u64> {
        let ns = self.started.take().map(|s| s.elapsed().as_nanos() as u64);
        if let Some(ns) = ns {
            self.busy.ns.set(self.busy.ns.get() + ns);
        }
        ns
    }
}

impl Drop for Activation<'_> {
    fn drop(&mut self) {
        if let Some(started) = self.started {
            self.busy
                .ns
                .set(self.busy.ns.get() + started.elapsed().as_nanos() as u64);
        }
    }
}

impl Observers {
    pub(crate) fn register(&self, probe: OperatorProbe) {
        self.probes.borrow_mut().push(probe);
    }

    /// Calls `f` with every registered operator.
    pub fn each(&self, mut f: impl FnMut(&OperatorProbe)) {
        for probe in self.probes.borrow().iter() {
            f(probe);
        }
    }

    /// The work every operator here has scheduled for later times.
    pub fn scheduled(&self) -> Scheduled {
        self.probes
            .borrow()
            .iter()
            .fold(Scheduled::default(), |all, p| all.and((p.scheduled)()))
    }

    /// Makes the operators time their activations from now on (two clock reads each).
    pub fn time_operators(&self) {
        self.busy.on.set(true);
    }

    /// Whether the operators time their activations.
    pub fn timed(&self) -> bool {
        self.busy.on.get()
    }

    /// Nanoseconds the operators spent working so far.
    pub fn busy_ns(&self) -> u64 {
        self.busy.ns.get()
    }

    /// Records the worker's stateful operators applied so far (a replica's included; a
    /// record two operators apply counts twice).
    pub fn applied(&self) -> u64 {
        self.busy.applied.get()
    }

    /// The worker's busy-time counter, for an operator to hold.
    pub(crate) fn busy(&self) -> Rc<Busy> {
        Rc::clone(&self.busy)
    }
}

impl Busy {
    /// Counts `n` records applied.
    pub(crate) fn applied(&self, n: usize) {
        self.applied.set(self.applied.get() + n as u64);
    }

    /// Starts timing an activation; the time counts when the guard drops.
    pub(crate) fn activation(&self) -> Activation<'_> {
        Activation {
            busy: self,
            started: self.on.get().then(Instant::now),
        }
    }
}

impl fmt::Debug for Observers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.probes.borrow().iter().map(|p| p.name.clone()).collect();
        f.debug_tuple("Observers").field(&names).finish()
    }
}
