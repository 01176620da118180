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

mod apply;
mod native;
mod observe;
mod pending;
mod route;
mod state;
pub mod transfer;

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use timely::ExchangeData;
use timely::dataflow::StreamVec;
use timely::dataflow::operators::Concat;
use timely::dataflow::operators::vec::{Broadcast, Map};

use crate::Time;
use crate::bins::Bins;
use crate::config::{ControlInst, Map as BinMap, uniform};
use crate::size::{BinState, StateSize};

pub use native::{native_binary, native_unary};
pub use observe::{BinSize, Frontiers, Observers, OperatorProbe};
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
    #[serde(skip)]
    fresh: Vec<Time>,
}

impl<S> Bin<S> {
    fn new(state: S) -> Self {
        Bin {
            state,
            scheduled: BTreeSet::new(),
            fresh: Vec::new(),
        }
    }

    /// Asks for the operator logic to run for this bin at `time` (for example a window's
    /// end), even if no record arrives then. Times not after the current time are ignored.
    pub fn schedule(&mut self, time: Time) {
        if self.scheduled.insert(time) {
            self.fresh.push(time);
        }
    }

    /// The times this bin has scheduled work for, earliest first.
    pub fn scheduled(&self) -> impl Iterator<Item = Time> + '_ {
        self.scheduled.iter().copied()
    }
}

/// Settings shared by every migrateable operator of a job.
#[derive(Clone, Debug)]
pub struct StatefulConfig {
    pub bins: Bins,
    /// The map in force before any control command.
    pub initial: BinMap,
    /// The largest state message, in bytes.
    pub chunk_bytes: usize,
    /// What this worker's operators shipped, by move time.
    pub transfers: TransferLog,
    /// Where this worker's operators register for observers.
    pub observers: Observers,
}

/// Totals of the bins one worker shipped at one time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferTotals {
    pub bins: u64,
    pub bytes: u64,
    pub chunks: u64,
}

/// Per-worker log of shipped state, by the time of the move.
pub type TransferLog = Rc<RefCell<std::collections::BTreeMap<Time, TransferTotals>>>;

impl StatefulConfig {
    /// `bins` bins spread uniformly over `workers` workers.
    pub fn uniform(bins: Bins, workers: usize) -> Self {
        StatefulConfig {
            bins,
            initial: uniform(bins.count(), workers),
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            transfers: TransferLog::default(),
            observers: Observers::default(),
        }
    }
}

/// The per-worker table of bins this worker currently holds, shared by its F and S.
pub(crate) type BinTable<S> = Rc<RefCell<Vec<Option<Bin<S>>>>>;

/// What S on this worker has applied: every update at a time before `done`. S raises it and
/// wakes F; F ships a bin moving at `t` once `t <= done`.
///
/// `done` is S's input frontier, so it still waits for every record and every bin in flight
/// before `t`, on any worker. What it does not wait for is the other workers' S applying
/// them: a bin only needs its own worker's S to be done, and waiting for S everywhere (the
/// reference's feedback of S's output frontier) chained each move behind the previous
/// move's decoding and application on the receiving worker.
pub(crate) struct LocalProgress {
    pub(crate) done: Cell<Time>,
    /// The control frontier F last saw (for observers).
    pub(crate) control: Cell<Time>,
    pub(crate) route: RefCell<Option<timely::scheduling::Activator>>,
}

/// A stateful operator on one input whose state can migrate between workers.
///
/// `bin_key` gives each record's bin key (see [`crate::bins`]); `logic` is called once per
/// time and bin that has records or scheduled work, in time order, with that time's records
/// of the bin, and pushes its outputs for that time into the vector it is given.
/// `control` carries configuration changes; it is broadcast to every worker here.
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
    O: Clone + 'static,
    K: Fn(&R) -> u64 + 'static,
    L: FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>) + 'static,
{
    let scope = data.scope();
    let me = scope.index() as u32;
    let peers = scope.peers();
    assert!(
        config.initial.len() == config.bins.count() && config.initial.iter().all(|w| (*w as usize) < peers),
        "{name}: the initial map must name one of the {peers} workers for each of the {} bins",
        config.bins.count()
    );
    let table: BinTable<S> = Rc::new(RefCell::new(
        config
            .initial
            .iter()
            .map(|w| (*w == me).then(|| Bin::new(S::default())))
            .collect(),
    ));
    let progress = Rc::new(LocalProgress {
        done: Cell::new(0),
        control: Cell::new(0),
        route: RefCell::new(None),
    });
    observe_table(config, name, &table, {
        let progress = Rc::clone(&progress);
        move || Frontiers {
            applied: progress.done.get(),
            control: Some(progress.control.get()),
        }
    });
    let (routed, chunks) = route::build(
        name,
        data,
        control.broadcast(),
        config,
        bin_key,
        Rc::clone(&table),
        Rc::clone(&progress),
    );
    state::build(name, routed, chunks, table, progress, &config.observers, logic)
}

/// Registers an operator's bin table and frontiers with the job's observers.
pub(crate) fn observe_table<S: StateSize + 'static>(
    config: &StatefulConfig,
    name: &str,
    table: &BinTable<S>,
    frontiers: impl Fn() -> Frontiers + 'static,
) {
    let table = Rc::clone(table);
    config.observers.register(OperatorProbe {
        name: name.to_string(),
        frontiers: Box::new(frontiers),
        sizes: Box::new(move |out| {
            for (bin, held) in table.borrow().iter().enumerate() {
                if let Some(b) = held {
                    out.push(BinSize {
                        bin: bin as u32,
                        keys: b.state.keys() as u64,
                        bytes: (b.state.bytes() + b.scheduled.len() * std::mem::size_of::<Time>()) as u64,
                    });
                }
            }
        }),
    });
}

/// A record of either input of a binary operator.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Side<A, B> {
    Left(A),
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
    O: Clone + 'static,
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
