//! Migrateable stateful operators: the F (route) / S (state) pair of Megaphone.
//!
//! `stateful_unary` and `stateful_binary` keep user state per bin. F routes each record by
//! the configuration in force at the record's time and ships bins to their new owners; S
//! applies records per time in time order. Together they keep these invariants:
//!
//! * a record at time `t` is applied by the worker that owns its bin at `t`;
//! * a bin leaves its old owner after exactly the updates before `t` were applied to it
//!   (F ships only once its own worker's S has applied every time before `t`);
//! * its new owner installs it before applying any update at `t` (S applies a time only
//!   once both its data and its state-transfer frontiers have passed it).
//!
//! Hence the output at every time is the same as without migration, for every schedule.
//!
//! With two replicas per bin (`StatefulConfig::replicas`), F sends each record to both
//! holders and S emits each (time, bin)'s outputs exactly once (see `operator/replica.rs`), so the
//! output also stays the same when a worker fails at any point (see `crate::failure`).

mod apply;
mod decode;
mod handoff;
mod load;
mod native;
mod observe;
mod pending;
mod replica;
mod route;
mod seed;
mod serde_check;
mod state;
pub mod transfer;

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use rustc_hash::FxHashSet;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use timely::ExchangeData;
use timely::dataflow::StreamVec;
use timely::dataflow::operators::Concat;
use timely::dataflow::operators::vec::Map;

use crate::Time;
use crate::bins::Bins;
use crate::config::{ControlInst, History, Placement, Role, replicated, single, uniform};
use crate::epoch::EpochLen;
use crate::failure::Failures;
use crate::size::BinState;

pub use handoff::Handoffs;
pub use load::BinLoad;
pub use native::{native_binary, native_unary};
pub use observe::{BinSize, DigestSampler, Frontiers, Holds, Observers, OperatorProbe, Scheduled};
pub use seed::{HandedBin, Handout, Seed, Survived, survivors};
pub use transfer::DEFAULT_CHUNK_BYTES;

/// A bin's user state plus the work it has scheduled for later times.
///
/// Both move together when the bin migrates.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(bound = "S: Serialize + DeserializeOwned")]
pub struct Bin<S> {
    /// The user's state for the keys of this bin.
    pub state: S,
    scheduled: BTreeSet<Time>,
    /// The outputs this copy gave at each time from the committed frontier on, encoded
    /// (kept only when [`StatefulConfig::committed`] is set): what a restart gives again
    /// for the times the sink had not yet committed (see `operator/seed.rs`).
    #[serde(default)]
    kept: std::collections::BTreeMap<Time, Vec<u8>>,
    /// Every update before it is in `state` (set when a restart hands the bin out): S drops
    /// the bin's records before it and gives its kept outputs instead.
    #[serde(default)]
    resume: Time,
    #[serde(skip)]
    fresh: Vec<Time>,
    /// The time being applied, and the run's epoch: what durations are measured from and in.
    #[serde(skip)]
    clock: (Time, EpochLen),
}

impl<S> Bin<S> {
    fn new(state: S) -> Self {
        Bin {
            state,
            scheduled: BTreeSet::new(),
            kept: std::collections::BTreeMap::new(),
            resume: 0,
            fresh: Vec::new(),
            clock: (0, EpochLen::default()),
        }
    }

    /// Asks for the operator logic to run for this bin at `time` (for example a window's
    /// end), even if no record arrives then. Times not after the current time are ignored.
    /// [`Bin::schedule_after`] takes a duration instead.
    pub fn schedule(&mut self, time: Time) {
        if self.scheduled.insert(time) {
            self.fresh.push(time);
        }
    }

    /// Asks for the operator logic to run for this bin `after` the time being applied (in
    /// logical time, rounded up to whole epochs, at least one), and returns that time.
    /// Durations mean the same whatever the run's epoch (`--epoch-us`), where a time plus a
    /// number of epochs would not.
    pub fn schedule_after(&mut self, after: Duration) -> Time {
        let at = self.clock.0.saturating_add(self.ticks(after).max(1));
        self.schedule(at);
        at
    }

    /// The logical time being applied (the `time` the logic is called with).
    pub fn now(&self) -> Time {
        self.clock.0
    }

    /// Logical time in `span`, in this run's epochs, rounded up: `time + bin.ticks(gap)` is
    /// the first time at least `gap` after `time`.
    pub fn ticks(&self, span: Duration) -> Time {
        self.clock.1.ticks(span)
    }

    /// How much logical time lies between `since` and the time being applied (zero for a
    /// later `since`).
    pub fn since(&self, since: Time) -> Duration {
        self.clock.1.closes_at(self.clock.0.saturating_sub(since))
    }

    /// The times this bin has scheduled work for, earliest first.
    pub fn scheduled(&self) -> impl Iterator<Item = Time> + '_ {
        self.scheduled.iter().copied()
    }

    /// Its size in memory, as observers see it: the state's, and its scheduled times.
    pub(crate) fn held_bytes(&self) -> usize
    where
        S: crate::size::StateSize,
    {
        self.state.bytes() + self.scheduled.len() * std::mem::size_of::<Time>()
    }
}

/// Settings shared by every migrateable operator of a job.
#[derive(Clone, Debug)]
pub struct StatefulConfig {
    /// How many bins keys hash into (a power of two).
    pub bins: Bins,
    /// The placement in force before any control command.
    pub initial: Placement,
    /// Replicas per bin: 1, or 2 for a primary and a standby.
    pub replicas: usize,
    /// The largest state message, in bytes.
    pub chunk_bytes: usize,
    /// What this worker's operators shipped, by move time.
    pub transfers: TransferLog,
    /// Where this worker's operators register for observers.
    pub observers: Observers,
    /// Which workers have failed: shared by every worker of the process (one per job
    /// process; a fresh one per worker sees only that worker's own failures).
    pub failures: Arc<Failures>,
    /// When this worker's replicas first gave outputs in place of a failed primary.
    pub takeovers: TakeoverLog,
    /// The bins this worker starts with, from a computation that stopped (a restart): each
    /// must be one `initial` places here. `None`: every bin starts empty.
    pub seed: Option<Arc<Seed>>,
    /// The committed frontier of a job that can restart after a crash: every output at a
    /// time before it is written for good. `Some`: every copy of a bin keeps its outputs
    /// from this time on, for a restart to give again; `None`: outputs are not kept.
    pub committed: Option<Arc<AtomicU64>>,
    /// Where bins moving between workers of one process wait for their receiver, as they
    /// are (see `operator/handoff.rs`): one per process, shared by all its workers. `None`:
    /// every bin travels encoded.
    pub handoffs: Option<Arc<Handoffs>>,
    /// The run's epoch, the unit of logical time: what [`Bin::schedule_after`] and the
    /// other durations of a bin are counted in.
    pub epoch: EpochLen,
    /// Round-trip the first record, output and bin state of every operator on every worker
    /// through the encoding they cross processes in, and stop the job if one does not come
    /// back the same (debug builds always; `--check-serde` in release).
    pub check_serde: bool,
}

/// A replica's first work in place of a failed one (its takeover): when, and the bin.
pub type TakeoverLog = Rc<RefCell<Vec<(Instant, u32)>>>;

/// Totals of the bins one worker shipped at one time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferTotals {
    /// Bin copies shipped (a bin sent to two new holders counts twice).
    pub bins: u64,
    /// Their size, in bytes: serialized for those that travelled encoded, in memory for
    /// those handed over as they are.
    pub bytes: u64,
    /// The state messages the encoded ones were cut into.
    pub chunks: u64,
    /// Of `bins`, those handed to a worker of the same process as they are (see
    /// `operator/handoff.rs`): neither encoded nor cut into chunks.
    #[serde(default)]
    pub handed: u64,
}

impl std::ops::AddAssign for TransferTotals {
    fn add_assign(&mut self, other: Self) {
        self.bins += other.bins;
        self.bytes += other.bytes;
        self.chunks += other.chunks;
        self.handed += other.handed;
    }
}

/// Per-worker log of shipped state, by the time of the move.
pub type TransferLog = Rc<RefCell<std::collections::BTreeMap<Time, TransferTotals>>>;

impl StatefulConfig {
    /// `bins` bins spread uniformly over `workers` workers, one replica each.
    pub fn uniform(bins: Bins, workers: usize) -> Self {
        StatefulConfig {
            bins,
            initial: single(&uniform(bins.count(), workers)),
            replicas: 1,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            transfers: TransferLog::default(),
            observers: Observers::default(),
            failures: Arc::new(Failures::new(workers)),
            takeovers: TakeoverLog::default(),
            seed: None,
            committed: None,
            handoffs: None,
            epoch: EpochLen::default(),
            check_serde: cfg!(debug_assertions),
        }
    }

    /// Primaries spread uniformly over `workers` workers (`per_process` in each process),
    /// each bin with a standby chained to the next process (or worker).
    pub fn replicated(bins: Bins, workers: usize, per_process: usize) -> Self {
        StatefulConfig {
            initial: replicated(&uniform(bins.count(), workers), workers, per_process),
            replicas: 2,
            ..StatefulConfig::uniform(bins, workers)
        }
    }
}

/// The per-worker table of bins this worker currently holds, shared by its F and S.
pub(crate) type BinTable<S> = Rc<RefCell<Vec<Option<Bin<S>>>>>;

/// The outputs the copies of bins on one worker gave from the committed frontier on (see
/// `operator/seed.rs`), kept as they were made; encoded only when a bin leaves (it takes
/// its kept outputs along) or is handed out.
pub(crate) trait KeptOutputs {
    /// `bin`'s kept outputs, encoded by time; removed from here with `take` (it leaves).
    fn encoded(&mut self, bin: u32, take: bool) -> std::collections::BTreeMap<Time, Vec<u8>>;
}

/// Puts `bin`'s outputs kept in `store` into its own `kept` (taking them out of the store
/// with `take`), so that they travel with it.
pub(crate) fn pack_kept<S>(
    store: &RefCell<Option<Box<dyn KeptOutputs>>>,
    index: u32,
    bin: &mut Bin<S>,
    take: bool,
) {
    if let Some(store) = store.borrow_mut().as_mut() {
        bin.kept.extend(store.encoded(index, take));
    }
}

/// Bins that arrived on a worker and wait to be installed, by install time and bin.
pub(crate) type Arriving<S> = std::collections::BTreeMap<(Time, u32), Arrival<S>>;

/// A bin that arrived: from another process, being decoded (with its encoding's length), or
/// the bin itself (handed over by a worker of this process).
pub(crate) enum Arrival<S> {
    Decoding(decode::Decoding<S>, usize),
    Handed(Bin<S>),
}

impl<S: Serialize + DeserializeOwned + Send + 'static> Arrival<S> {
    /// The bin, waiting for its decoding if it is still decoding (it stays here, decoded).
    pub(crate) fn decoded(&mut self) -> Result<&mut Bin<S>, String> {
        if let Arrival::Decoding(decoding, _) = self {
            *self = Arrival::Handed(decoding.take()?);
        }
        match self {
            Arrival::Handed(bin) => Ok(bin),
            Arrival::Decoding(..) => Err("the bin was taken already".to_string()),
        }
    }
}

/// Bins shipped away, by move time and bin, with whether each left as a standby.
pub(crate) type Shipped<S> = std::collections::BTreeMap<(Time, u32), (bool, Bin<S>)>;

/// What F and S of one operator on one worker share.
///
/// `done` is what S has applied: every update at a time before it. S raises it and wakes F;
/// F ships a bin moving at `t` once `t <= done`. It still waits for every record and every
/// bin in flight before `t`, on any worker. What it does not wait for is the other workers'
/// S applying them: a bin only needs its own worker's S to be done, and waiting for S
/// everywhere (the reference's feedback of S's output frontier) chained each move behind the
/// previous move's decoding and application on the receiving worker.
///
/// `control` is F's control frontier: the history holds the final placement of every time
/// before it, and S applies a time only once it is final there (S needs its roles).
pub(crate) struct Local<S> {
    pub(crate) me: u32,
    pub(crate) table: BinTable<S>,
    pub(crate) history: RefCell<History>,
    pub(crate) done: Cell<Time>,
    /// Every time before it was applied here: raised as soon as S applied a time, before
    /// its outputs leave (a restart hands out this, with `done`, as the resume point: a
    /// crash can interrupt S between applying a time and reporting it done).
    pub(crate) applied: Cell<Time>,
    pub(crate) control: Cell<Time>,
    pub(crate) route: RefCell<Option<timely::scheduling::Activator>>,
    pub(crate) state: RefCell<Option<timely::scheduling::Activator>>,
    /// S on this worker stopped at a failure: it holds nothing and applies nothing.
    pub(crate) dead: Cell<bool>,
    /// The time from which a dead worker serves again (its rejoin is final); cleared when F
    /// hears a newer failure of this worker.
    pub(crate) revive_at: Cell<Option<Time>>,
    /// How many of this worker's failures S has stopped for ([`Failures::times_failed`] when
    /// it last stopped). The operator's own account, not the process's shared flag: another
    /// operator's rejoin may clear that flag before this S ever saw it set.
    pub(crate) stopped: Cell<u64>,
    /// How many of this worker's failures a final rejoin ended, as F saw it.
    pub(crate) ended: Cell<u64>,
    /// Bins whose primary failed while this worker held their standby: their first work
    /// from here is the takeover. `takeover_round` counts the failures heard of.
    pub(crate) awaiting: RefCell<FxHashSet<u32>>,
    pub(crate) takeover_round: Cell<u64>,
    /// Bins that arrived here, by the time S installs them and bin.
    pub(crate) arriving: RefCell<Arriving<S>>,
    /// Bins F shipped away for good, by move time and bin, each with whether it leaves as a
    /// standby (`None` unless the job can restart): kept until the committed frontier
    /// passes their move time, because until then their state may be nowhere else. A
    /// restart that tears the computation down drops the messages in flight, and the
    /// receiver may never have read the bin.
    pub(crate) shipped: RefCell<Option<Shipped<S>>>,
    /// The outputs S keeps for a restart (when the job keeps them).
    pub(crate) kept: RefCell<Option<Box<dyn KeptOutputs>>>,
    /// What F and S last held capabilities for (each sets its own fields at the end of its
    /// activations), for the report of a job that stopped making progress.
    pub(crate) holds: Cell<Holds>,
    /// What each bin cost S here.
    pub(crate) loads: Rc<load::BinLoads>,
}

impl<S> Local<S> {
    fn new(me: u32, initial: &Placement, table: BinTable<S>) -> Self {
        Local {
            me,
            table,
            history: RefCell::new(History::new(initial.clone())),
            done: Cell::new(0),
            applied: Cell::new(0),
            control: Cell::new(0),
            route: RefCell::new(None),
            state: RefCell::new(None),
            dead: Cell::new(false),
            revive_at: Cell::new(None),
            stopped: Cell::new(0),
            ended: Cell::new(0),
            awaiting: RefCell::default(),
            takeover_round: Cell::new(0),
            arriving: RefCell::default(),
            shipped: RefCell::new(None),
            kept: RefCell::new(None),
            holds: Cell::default(),
            loads: Rc::new(load::BinLoads::new(initial.len())),
        }
    }

    /// What this operator may hold capabilities for on this worker, with its failure state.
    pub(crate) fn holds(&self, failures: &Failures) -> Holds {
        let done = self.done.get();
        Holds {
            done,
            control: self.control.get(),
            dead: self.dead.get(),
            revive_at: self.revive_at.get(),
            alive_at_done: self.alive_at(done, failures),
            flagged: failures.is_failed(self.me),
            failed: (
                failures.times_failed(self.me),
                self.stopped.get(),
                self.ended.get(),
            ),
            ..self.holds.get()
        }
    }

    /// Whether this worker serves its bins at `time`: every failure of it so far was ended
    /// by a rejoin at or before `time`, and S stopped for each (or it never failed).
    pub(crate) fn alive_at(&self, time: Time, failures: &Failures) -> bool {
        let failed = failures.times_failed(self.me);
        if failed > self.ended.get() {
            return false;
        }
        let serving = !self.dead.get() && self.stopped.get() == failed;
        serving || self.revive_at.get().is_some_and(|r| time >= r)
    }

    /// Whether S must stop: the worker failed since S last stopped.
    pub(crate) fn must_stop(&self, failures: &Failures) -> bool {
        failures.times_failed(self.me) > self.stopped.get()
    }

    /// A failure of another worker was heard of: a new round of takeovers starts.
    pub(crate) fn begin_takeovers(&self) {
        self.awaiting.borrow_mut().clear();
        self.takeover_round.set(self.takeover_round.get() + 1);
    }

    /// Worker `failed`'s failure is final: the bins whose standby was here in `placement`
    /// (the one before it) await their takeover.
    pub(crate) fn await_takeovers(&self, placement: &Placement, failed: u32) {
        self.awaiting.borrow_mut().extend(
            placement
                .iter()
                .enumerate()
                .filter(|(_, r)| r.primary == failed && r.standby == self.me)
                .map(|(b, _)| b as u32),
        );
    }

    pub(crate) fn wake_state(&self) {
        if let Some(a) = self.state.borrow().as_ref() {
            a.activate();
        }
    }

    pub(crate) fn wake_route(&self) {
        if let Some(a) = self.route.borrow().as_ref() {
            a.activate();
        }
    }
}

/// A stateful operator on one input whose state can migrate between workers.
///
/// `bin_key` gives each record's bin key (see [`crate::bins`]); `logic` is called once per
/// time and bin that has records or scheduled work, in time order, with that time's records
/// of the bin, and pushes its outputs for that time into the vector it is given.
/// `control` carries configuration changes; every worker's F gets each of them.
///
/// **Determinism contract.** `logic` must give the same outputs (the same multiset) whenever
/// it is called with the same bin state, time and records in the same order: with two
/// replicas both apply every (time, bin), and only one replica's outputs of each leave, so
/// outputs that depend on anything else differ between the replicas and come out wrong or
/// twice after a failure. Iterating a `HashMap` to decide what to emit breaks it (its order
/// differs between replicas, and after every move or recovery copy: use a `BTreeMap`, or
/// sort), and so do the clock and unseeded random draws. Debug builds check that both
/// replicas emit the same outputs for each (time, bin) (their number and a hash of them), and
/// stop the job naming the operator,
/// bin and time when they do not.
///
/// Bin state travels encoded with bincode 1, so its type must not need `deserialize_any`
/// (no `serde_json::Value`, `#[serde(flatten)]` or untagged enums): such a bin would fail to
/// decode at its new owner, which stops the job with a panic naming the bin.
pub fn stateful_unary<'s, R, S, O, K, L>(
    data: StreamVec<'s, Time, R>,
    control: StreamVec<'s, Time, ControlInst>,
    config: &StatefulConfig,
    name: &str,
    bin_key: K,
    logic: L,
) -> StreamVec<'s, Time, O>
where
    R: ExchangeData + Clone,
    S: BinState,
    O: Clone + Serialize + DeserializeOwned + 'static,
    K: Fn(&R) -> u64 + 'static,
    L: FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>) + 'static,
{
    let scope = data.scope();
    let me = scope.index() as u32;
    let peers = scope.peers();
    assert!(
        config.initial.len() == config.bins.count()
            && config
                .initial
                .iter()
                .all(|r| r.holders().all(|w| (w as usize) < peers) && r.primary != r.standby),
        "{name}: the initial placement must name one or two of the {peers} workers for each of the {} bins",
        config.bins.count()
    );
    let logic = serde_check::checked(config.check_serde, name, clocked(config.epoch, logic));
    let (table, scheduled) = seed::table::<S>(config, name, me);
    let local = Rc::new(Local::new(me, &config.initial, Rc::clone(&table)));
    let frontiers = {
        let local = Rc::clone(&local);
        move || Frontiers {
            applied: local.done.get(),
            control: Some(local.control.get()),
        }
    };
    let standby = {
        let local = Rc::clone(&local);
        move |bin: u32| local.history.borrow().latest()[bin as usize].role(me) == Some(Role::Standby)
    };
    let holds = {
        let (local, failures) = (Rc::clone(&local), Arc::clone(&config.failures));
        move || local.holds(&failures)
    };
    let handout = {
        let (local, name) = (Rc::clone(&local), name.to_string());
        move || seed::handout(&name, &local)
    };
    observe_table(
        config,
        name,
        (&table, &local.loads),
        frontiers,
        standby,
        holds,
        handout,
    );
    let routes = route::build(
        name,
        data,
        addressed(control, peers),
        config,
        bin_key,
        Rc::clone(&local),
    );
    state::build(name, routes, local, config, scheduled, logic)
}

/// `logic` with the bin's clock set first: the time being applied and the run's epoch, for
/// its durations ([`Bin::schedule_after`]).
pub(crate) fn clocked<S, R, O>(
    epoch: EpochLen,
    mut logic: impl FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>) + 'static,
) -> impl FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>) + 'static {
    move |time, bin, records, out| {
        bin.clock = (time, epoch);
        logic(time, bin, records, out)
    }
}

/// Every control change once for each of `peers` workers, with the worker's index (F's
/// control input exchanges on it). One operator, where timely's `broadcast` takes three
/// (a copy per worker, an exchange and a map back): each is scheduled at every time, and an
/// idle time's cost grows with the operators it passes through.
fn addressed<'s>(
    control: StreamVec<'s, Time, ControlInst>,
    peers: usize,
) -> StreamVec<'s, Time, (u64, ControlInst)> {
    let peers = peers as u64;
    control.flat_map(move |inst| (0..peers).map(move |w| (w, inst.clone())))
}

/// Registers an operator's bin table and frontiers with the job's observers.
pub(crate) fn observe_table<S: BinState>(
    config: &StatefulConfig,
    name: &str,
    (table, loads): (&BinTable<S>, &Rc<load::BinLoads>),
    frontiers: impl Fn() -> Frontiers + 'static,
    standby: impl Fn(u32) -> bool + 'static,
    holds: impl Fn() -> Holds + 'static,
    handout: impl Fn() -> std::collections::BTreeMap<u32, HandedBin> + 'static,
) {
    let sized = Rc::clone(table);
    let hashed = Rc::clone(table);
    let planned = Rc::clone(table);
    let standby = Rc::new(standby);
    let is_standby = Rc::clone(&standby);
    let (costs, cost_role) = (Rc::clone(loads), Rc::clone(&standby));
    let sent_to = Rc::clone(loads);
    let label = name.to_string();
    config.observers.register(OperatorProbe {
        name: name.to_string(),
        frontiers: Box::new(frontiers),
        holds: Box::new(holds),
        handout: Box::new(handout),
        loads: Box::new(move |out| costs.read(|bin| cost_role(bin), out)),
        routed: Box::new(move || sent_to.routed_total()),
        scheduled: Box::new(move || {
            let mut all = Scheduled::default();
            for (bin, held) in planned.borrow().iter().enumerate() {
                if let Some(next) = held.as_ref().and_then(|b| b.scheduled.first())
                    && !is_standby(bin as u32)
                {
                    all = all.and(Scheduled {
                        bins: 1,
                        next: Some(*next),
                    });
                }
            }
            all
        }),
        // The digest hashes each bin as it would travel.
        digests: Box::new(move |out| {
            out.extend(encoded(&label, &hashed).map(|(bin, bytes)| (bin, crate::bins::hash_key(&bytes))));
        }),
        sizes: Box::new(move |out| {
            for (bin, held) in sized.borrow().iter().enumerate() {
                if let Some(b) = held {
                    out.push(BinSize {
                        bin: bin as u32,
                        keys: b.state.keys() as u64,
                        bytes: b.held_bytes() as u64,
                        standby: standby(bin as u32),
                    });
                }
            }
        }),
    });
}

/// Every bin `table` holds, encoded as it travels (a type whose encoding fails is a bug in
/// the operator's state type).
pub(crate) fn encoded<'a, S: BinState>(
    operator: &'a str,
    table: &'a BinTable<S>,
) -> impl Iterator<Item = (u32, Vec<u8>)> + 'a {
    let table = table.borrow();
    let held: Vec<(u32, Vec<u8>)> = table
        .iter()
        .enumerate()
        .filter_map(|(bin, held)| {
            let b = held.as_ref()?;
            match bincode::serialize(b) {
                Ok(bytes) => Some((bin as u32, bytes)),
                Err(e) => panic!("{operator}: serializing bin {bin} failed: {e}"),
            }
        })
        .collect();
    held.into_iter()
}

/// A record of either input of a binary operator.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Side<A, B> {
    /// A record of the first (`left`) input.
    Left(A),
    /// A record of the second (`right`) input.
    Right(B),
}

/// A stateful operator on two inputs keyed into the same bins (a join, for example).
///
/// Like [`stateful_unary`], with the records of each input handed to `logic` separately.
#[allow(clippy::too_many_arguments)]
pub fn stateful_binary<'s, R1, R2, S, O, K1, K2, L>(
    left: StreamVec<'s, Time, R1>,
    right: StreamVec<'s, Time, R2>,
    control: StreamVec<'s, Time, ControlInst>,
    config: &StatefulConfig,
    name: &str,
    bin_key_left: K1,
    bin_key_right: K2,
    logic: L,
) -> StreamVec<'s, Time, O>
where
    R1: ExchangeData + Clone,
    R2: ExchangeData + Clone,
    S: BinState,
    O: Clone + Serialize + DeserializeOwned + 'static,
    K1: Fn(&R1) -> u64 + 'static,
    K2: Fn(&R2) -> u64 + 'static,
    L: FnMut(Time, &mut Bin<S>, &mut Vec<R1>, &mut Vec<R2>, &mut Vec<O>) + 'static,
{
    let (merged, key, logic) = sides(left, right, bin_key_left, bin_key_right, logic);
    stateful_unary(merged, control, config, name, key, logic)
}

/// A binary operator as a unary one: both inputs merged into one stream of [`Side`]s, the
/// key function of each side, and `logic` fed each side's records separately.
#[allow(clippy::type_complexity)]
pub(crate) fn sides<'s, R1, R2, S, O, K1, K2, L>(
    left: StreamVec<'s, Time, R1>,
    right: StreamVec<'s, Time, R2>,
    bin_key_left: K1,
    bin_key_right: K2,
    mut logic: L,
) -> (
    StreamVec<'s, Time, Side<R1, R2>>,
    impl Fn(&Side<R1, R2>) -> u64 + 'static,
    impl FnMut(Time, &mut Bin<S>, &mut Vec<Side<R1, R2>>, &mut Vec<O>) + 'static,
)
where
    R1: Clone + 'static,
    R2: Clone + 'static,
    S: 'static,
    O: 'static,
    K1: Fn(&R1) -> u64 + 'static,
    K2: Fn(&R2) -> u64 + 'static,
    L: FnMut(Time, &mut Bin<S>, &mut Vec<R1>, &mut Vec<R2>, &mut Vec<O>) + 'static,
{
    let merged = left.map(Side::Left).concat(right.map(Side::Right));
    let key = move |r: &Side<R1, R2>| match r {
        Side::Left(a) => bin_key_left(a),
        Side::Right(b) => bin_key_right(b),
    };
    let (mut lefts, mut rights) = (Vec::new(), Vec::new());
    let split = move |time, bin: &mut Bin<S>, records: &mut Vec<Side<R1, R2>>, out: &mut Vec<O>| {
        for r in records.drain(..) {
            match r {
                Side::Left(a) => lefts.push(a),
                Side::Right(b) => rights.push(b),
            }
        }
        logic(time, bin, &mut lefts, &mut rights, out);
        lefts.clear();
        rights.clear();
    };
    (merged, key, split)
}
