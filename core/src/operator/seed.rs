//! Bins a worker starts a computation with, handed out by a computation that stopped: the
//! first piece of a restart, which takes the surviving replicas of a crashed cluster into a
//! new timely computation instead of starting from empty state.
//!
//! A stateful operator hands out every bin it holds ([`super::OperatorProbe::handout`]:
//! each bin encoded as it would travel, its scheduled work included) and takes its seeded
//! bins back when it is built ([`super::StatefulConfig::seed`]), before anything runs, so
//! that F ships a seeded bin whatever the time of its first move. The invariant a restart
//! keeps with it: a bin handed out by a worker whose S had applied exactly the times before
//! `at`, seeded into an operator whose inputs start at `at`, gives the same outputs from `at`
//! on as the computation that was not stopped.

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
    /// The first time the new computation applies: every bin here holds exactly the updates
    /// before it.
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
                Ok(decoded) => (*bin, decoded),
                Err(e) => panic!("{operator}: seeded bin {bin} does not decode: {e}"),
            })
            .collect()
    }
}

/// Worker `me`'s table of `operator`'s bins as the job starts (each bin its initial
/// placement puts here, seeded or empty), and the times of the seeded bins' scheduled work.
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
    let times = scheduled(&seeded, at);
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

/// The times of seeded bins' scheduled work, from `at` on (work scheduled before `at` was
/// due while the old computation still ran; a time not yet fired then fires at `at`).
fn scheduled<S>(bins: &BTreeMap<u32, Bin<S>>, at: Time) -> Vec<(Time, u32)> {
    let mut times: Vec<(Time, u32)> = bins
        .iter()
        .flat_map(|(bin, b)| b.scheduled.iter().map(move |t| ((*t).max(at), *bin)))
        .collect();
    times.sort_unstable();
    times.dedup();
    times
}
