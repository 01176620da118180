//! Bins a worker starts a computation with, handed out by a computation that stopped: what
//! a restart takes the surviving replicas of a crashed cluster into a new timely computation
//! with, instead of starting from empty state.
//!
//! A stateful operator hands out every bin it holds ([`super::OperatorProbe::handout`]:
//! each bin encoded as it would travel, its scheduled work and kept outputs included, and
//! marked with its resume point, the time its worker's S had applied up to) and takes its seeded bins back when it is
//! built ([`super::StatefulConfig::seed`]), before anything runs, so that F ships a seeded
//! bin whatever the time of its first move.
//!
//! **Exactly once across a restart.** The invariant: with the outputs of every time before
//! the committed frontier `C` written once (the sink commits per time) and nothing at or
//! after `C` counted, a new computation whose inputs replay every record from `C` on and
//! whose operators are seeded with bins handed out at resume points `a >= C` gives each
//! (time, bin) its outputs exactly once. It holds because
//! * every copy of a bin keeps the outputs it gave at each time from `C` on
//!   ([`super::Bin`]'s kept outputs, which travel with the bin when it moves), so a bin
//!   handed out at `a` holds exactly the updates before `a` and the outputs of `[C, a)`;
//! * the seeded S gives the kept outputs again at their times before `a` (through the same
//!   replica hooks as applied outputs: a primary's leave with their acks, a standby's wait
//!   for them) and drops the records it is sent for those times, which its state already
//!   holds; from `a` on it applies records as usual. The resume point travels with the
//!   bin, so this holds wherever the bin moves after the restart;
//! * F ships a bin moving at `t` only once its S is done before `t`, and the kept outputs'
//!   times are S's pending work: a bin leaves only after those before `t` were given.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;

use std::cell::RefCell;
use std::rc::Rc;

use super::transfer::decode;
use super::{Bin, BinTable, Local, StatefulConfig, encoded};
use crate::Time;
use crate::config::Role;
use crate::size::BinState;

/// One bin as a stopped computation hands it out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandedBin {
    /// Whether the worker that hands it out held it as the bin's standby.
    pub standby: bool,
    /// The bin, encoded as it travels, marked with its resume point.
    pub bytes: Vec<u8>,
}

impl HandedBin {
    /// A bin its worker held as the primary (or only) copy.
    pub(crate) fn primary(bytes: Vec<u8>) -> Self {
        HandedBin {
            standby: false,
            bytes,
        }
    }
}

/// One worker's bins from a stopped computation, by operator name and bin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seed {
    /// The first time the new computation's inputs carry (the committed frontier `C`):
    /// every bin's resume point is at or after it.
    pub at: Time,
    /// Encoded bins ([`super::OperatorProbe::handout`]) by operator name, then bin.
    pub bins: BTreeMap<String, BTreeMap<u32, Vec<u8>>>,
}

impl Seed {
    /// `operator`'s seeded bins, decoded; panics naming the bin if one does not decode (a
    /// seed is handed from one build of the job to the same build).
    pub(crate) fn take<S: Serialize + DeserializeOwned>(&self, operator: &str) -> BTreeMap<u32, Bin<S>> {
        let Some(bins) = self.bins.get(operator) else {
            return BTreeMap::new();
        };
        bins.iter()
            .map(|(bin, bytes)| match bincode::deserialize::<Bin<S>>(bytes) {
                Ok(mut decoded) => {
                    decoded.resume = decoded.resume.max(self.at);
                    (*bin, decoded)
                }
                Err(e) => panic!("{operator}: seeded bin {bin} does not decode: {e}"),
            })
            .collect()
    }
}

/// Worker `me`'s table of `operator`'s bins as the job starts (each bin its initial
/// placement puts here, seeded or empty), and the times of the seeded bins' work (scheduled
/// work, and the kept outputs to give again).
pub(crate) fn table<S: Serialize + DeserializeOwned + Default>(
    config: &StatefulConfig,
    operator: &str,
    me: u32,
) -> (BinTable<S>, Vec<(Time, u32)>) {
    let mut seeded = config
        .seed
        .as_ref()
        .map(|s| s.take::<S>(operator))
        .unwrap_or_default();
    let at = config.seed.as_ref().map_or(0, |s| s.at);
    let times = work_times(&mut seeded, at);
    let bins = config
        .initial
        .iter()
        .enumerate()
        .map(|(b, r)| {
            r.holds(me).then(|| {
                seeded
                    .remove(&(b as u32))
                    .unwrap_or_else(|| Bin::new(S::default()))
            })
        })
        .collect();
    assert!(
        seeded.is_empty(),
        "{operator}: worker {me} was seeded with bins {:?}, which the initial placement does not place there",
        seeded.keys().collect::<Vec<_>>()
    );
    (Rc::new(RefCell::new(bins)), times)
}

/// The times seeded bins have work at: their scheduled work from `at` on (work scheduled
/// before `at` was due while the old computation still ran; a time not yet fired then
/// fires at `at`), and the times in `[at, resume)` whose kept outputs are given again,
/// which become scheduled work of the bin so that S visits it then.
fn work_times<S>(bins: &mut BTreeMap<u32, Bin<S>>, at: Time) -> Vec<(Time, u32)> {
    let mut times = Vec::new();
    for (bin, b) in bins.iter_mut() {
        let again: Vec<Time> = b.kept.range(at..b.resume).map(|(t, _)| *t).collect();
        b.scheduled.extend(again);
        times.extend(b.scheduled.iter().map(|t| ((*t).max(at), *bin)));
    }
    times.sort_unstable();
    times.dedup();
    times
}

/// What `operator` hands out on one worker (see [`super::OperatorProbe::handout`]): the bins
/// in its table, which hold every update before the time its S applied up to, and the bins
/// that arrived and wait to be installed at their move time, which hold exactly the updates
/// before that time (a crash in the middle of a migration leaves the moving bins there);
/// each with its role in the placement in force at its resume point.
pub(crate) fn handout<S: BinState>(operator: &str, local: &Local<S>) -> BTreeMap<u32, HandedBin> {
    let applied = local.applied.get().max(local.done.get());
    let history = local.history.borrow();
    let standby = |bin: u32, at: Time| history.at(at)[bin as usize].role(local.me) == Some(Role::Standby);
    for (index, held) in local.table.borrow_mut().iter_mut().enumerate() {
        if let Some(bin) = held {
            bin.resume = bin.resume.max(applied);
            super::pack_kept(&local.kept, index as u32, bin, false);
        }
    }
    let mut out: BTreeMap<u32, HandedBin> = encoded(operator, &local.table)
        .map(|(bin, bytes)| {
            let standby = standby(bin, applied);
            (bin, HandedBin { standby, bytes })
        })
        .collect();
    for ((time, bin), parts) in local.arriving.borrow().iter() {
        let mut arrived: Bin<S> = match decode(parts.clone()) {
            Ok(b) => b,
            Err(e) => panic!(
                "{operator}: bin {bin} arrived corrupt at worker {}: {e}",
                local.me
            ),
        };
        arrived.resume = arrived.resume.max(*time);
        let bytes = match bincode::serialize(&arrived) {
            Ok(bytes) => bytes,
            Err(e) => panic!("{operator}: serializing bin {bin} failed: {e}"),
        };
        let standby = standby(*bin, *time);
        out.insert(*bin, HandedBin { standby, bytes });
    }
    out
}
