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

use super::{Bin, BinTable, StatefulConfig};
use crate::Time;

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
