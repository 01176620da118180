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
//!   times are the bin's scheduled work (S enters the first, and each next as the bin runs,
//!   so one of them is always S's pending work): a bin leaves only after those before `t`
//!   were given.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;

use std::cell::RefCell;
use std::rc::Rc;

use super::{Bin, BinTable, Local, StatefulConfig, encoded};
use crate::Time;
use crate::config::{NONE, Placement, Replicas, Role};
use crate::size::BinState;

/// One bin as a stopped computation hands it out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandedBin {
    /// Whether the worker that hands it out held it as the bin's standby.
    pub standby: bool,
    /// The move time at which F shipped this copy away, if it did: the copy holds exactly
    /// the updates before it, and counts only for a restart from at or before it (from a
    /// later time, the move's receiver has it, with more).
    pub shipped: Option<Time>,
    /// The bin, encoded as it travels, marked with its resume point.
    pub bytes: Vec<u8>,
}

impl HandedBin {
    /// A bin its worker held as the primary (or only) copy.
    pub(crate) fn primary(bytes: Vec<u8>) -> Self {
        HandedBin {
            standby: false,
            shipped: None,
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

/// What one worker handed out when its computation stopped: every operator's bins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Handout {
    /// By operator name, then bin.
    pub bins: BTreeMap<String, BTreeMap<u32, HandedBin>>,
}

impl Handout {
    /// The bins this worker can start a computation at `from` with, each with whether it
    /// held the standby: those every operator hands out here, in one role, and not shipped
    /// away before `from`. Such a copy (it left long enough ago that it arrived elsewhere)
    /// misses updates the inputs will not carry again; a bin only some operators hand out
    /// here (a move cut while its state was in flight) is whole elsewhere or nowhere. Every
    /// other copy holds every update before `from`: the sink committed `from`, so every
    /// operator everywhere had applied every record before it.
    pub fn roles(&self, from: Time) -> BTreeMap<u32, bool> {
        let mut operators = self.bins.values().map(|bins| {
            bins.iter()
                .filter(|(_, h)| h.shipped.is_none_or(|t| t >= from))
                .map(|(bin, h)| (*bin, h.standby))
                .collect::<BTreeMap<u32, bool>>()
        });
        let Some(mut roles) = operators.next() else {
            return BTreeMap::new();
        };
        for other in operators {
            roles.retain(|bin, standby| other.get(bin) == Some(standby));
        }
        roles
    }

    /// The seed of a computation that starts at `from`: this worker's copies of the bins
    /// `placed` puts here (among the usable ones of [`Handout::roles`]).
    pub fn seed(self, from: Time, placed: impl Fn(u32) -> bool) -> Seed {
        let usable = self.roles(from);
        let keep = |bin: &u32| usable.contains_key(bin) && placed(*bin);
        let bins = self
            .bins
            .into_iter()
            .map(|(operator, bins)| {
                let bins = bins
                    .into_iter()
                    .filter(|(bin, _)| keep(bin))
                    .map(|(bin, h)| (bin, h.bytes))
                    .collect();
                (operator, bins)
            })
            .collect();
        Seed { at: from, bins }
    }
}

/// How a restart found the bins: how many lost their primary (a standby was promoted) and
/// how many are left with one copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Survived {
    /// Bins whose standby is now their primary.
    pub promoted: usize,
    /// Bins with one copy.
    pub degraded: usize,
}

/// The placement of `bins` bins with `replicas` copies each that the surviving copies
/// `heard` (worker, bin, whether it was the standby) give, on workers `per_process` to a
/// process: per bin, a primary copy stays primary (a lone standby is promoted), two copies
/// of one role (a move cut in the middle) are ordered by worker, and with replicas the
/// standby is the first other copy in another process than the primary's, if any. `Err`
/// names the bins with no copy left.
pub fn survivors(
    bins: usize,
    replicas: usize,
    per_process: usize,
    heard: &[(u32, u32, bool)],
) -> Result<(Placement, Survived), Vec<u32>> {
    let mut copies: Vec<Vec<(bool, u32)>> = vec![Vec::new(); bins];
    let mut lost = Vec::new();
    for &(worker, bin, standby) in heard {
        match copies.get_mut(bin as usize) {
            Some(c) => c.push((standby, worker)),
            None => lost.push(bin),
        }
    }
    let process = |w: u32| w as usize / per_process.max(1);
    let mut placement = Vec::with_capacity(bins);
    let mut survived = Survived::default();
    for (bin, mut c) in copies.into_iter().enumerate() {
        c.sort_unstable();
        c.dedup();
        let Some(&(promoted, primary)) = c.first() else {
            lost.push(bin as u32);
            continue;
        };
        let others = || c[1..].iter().map(|(_, w)| *w).filter(|_| replicas > 1);
        let standby = others()
            .find(|w| process(*w) != process(primary))
            .or_else(|| others().next())
            .unwrap_or(NONE);
        survived.promoted += usize::from(promoted);
        survived.degraded += usize::from(replicas > 1 && standby == NONE);
        placement.push(Replicas { primary, standby });
    }
    lost.sort_unstable();
    lost.dedup();
    if lost.is_empty() {
        Ok((placement, survived))
    } else {
        Err(lost)
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

/// The time each seeded bin's work starts at: its earliest scheduled work, or `at` if that
/// was due before (work scheduled before `at` was due while the old computation still ran;
/// a time not yet fired then fires at `at`). The times in `[at, resume)` whose kept outputs
/// are given again become scheduled work of the bin so that S visits it then. Only the
/// first time is entered: `apply_time` enters each next one as the bin runs.
fn work_times<S>(bins: &mut BTreeMap<u32, Bin<S>>, at: Time) -> Vec<(Time, u32)> {
    let mut times = Vec::new();
    for (bin, b) in bins.iter_mut() {
        let again: Vec<Time> = b.kept.range(at..b.resume).map(|(t, _)| *t).collect();
        b.scheduled.extend(again);
        times.extend(b.scheduled.first().map(|t| ((*t).max(at), *bin)));
    }
    times.sort_unstable();
    times.dedup();
    times
}

/// What `operator` hands out on one worker (see [`super::OperatorProbe::handout`]): the bins
/// in its table, which hold every update before the time its S applied up to; the bins
/// that arrived and wait to be installed at their move time, and those F shipped away and
/// the committed frontier has not passed, which hold exactly the updates before their move
/// time (a crash in the middle of a migration leaves the moving bins there, and drops what
/// was in flight: a bin's sender may then hold its only surviving copy). Each with its role
/// in the placement in force at its resume point; a bin held twice goes out in its latest
/// form.
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
            let held = HandedBin {
                standby: standby(bin, applied),
                shipped: None,
                bytes,
            };
            (bin, held)
        })
        .collect();
    for ((time, bin), arrival) in local.arriving.borrow_mut().iter_mut() {
        let standby = standby(*bin, *time);
        let bytes = match arrival.decoded() {
            Ok(arrived) => moved(operator, *bin, *time, arrived),
            Err(e) => panic!(
                "{operator}: bin {bin} arrived corrupt at worker {}: {e}",
                local.me
            ),
        };
        out.insert(
            *bin,
            HandedBin {
                standby,
                shipped: None,
                bytes,
            },
        );
    }
    if let Some(shipped) = local.shipped.borrow_mut().as_mut() {
        for ((time, bin), (standby, left)) in shipped.iter_mut().rev() {
            if !out.contains_key(bin) {
                let bytes = moved(operator, *bin, *time, left);
                let standby = *standby;
                out.insert(
                    *bin,
                    HandedBin {
                        standby,
                        shipped: Some(*time),
                        bytes,
                    },
                );
            }
        }
    }
    out
}

/// `bin`, which moved at `time`, encoded with that time as its resume point.
fn moved<S: BinState>(operator: &str, index: u32, time: Time, bin: &mut Bin<S>) -> Vec<u8> {
    bin.resume = bin.resume.max(time);
    match bincode::serialize(&*bin) {
        Ok(bytes) => bytes,
        Err(e) => panic!("{operator}: serializing bin {index} failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_standby_is_promoted_and_a_bin_with_no_copy_is_named() {
        let heard = [(0, 0, false), (1, 0, true), (1, 1, true), (2, 2, false)];
        let (p, survived) = survivors(3, 2, 1, &heard).unwrap();
        assert_eq!((survived.promoted, survived.degraded), (1, 2));
        assert_eq!((p[0].primary, p[0].standby), (0, 1));
        assert_eq!((p[1].primary, p[1].standby), (1, NONE));
        assert_eq!((p[2].primary, p[2].standby), (2, NONE));
        assert_eq!(survivors(4, 2, 1, &heard).unwrap_err(), vec![3]);
    }

    #[test]
    fn a_third_copy_is_dropped_and_the_standby_goes_to_another_process() {
        // Bin 0 moved from worker 0 to worker 1 (same process) when the crash cut it: both
        // hand it out as primary; the standby on worker 2 is in the other process.
        let heard = [(0, 0, false), (1, 0, false), (2, 0, true)];
        let (p, survived) = survivors(1, 2, 2, &heard).unwrap();
        assert_eq!((p[0].primary, p[0].standby), (0, 2));
        assert_eq!((survived.promoted, survived.degraded), (0, 0));
        let (p, _) = survivors(1, 2, 1, &heard).unwrap();
        assert_eq!((p[0].primary, p[0].standby), (0, 1));
        let (p, survived) = survivors(1, 1, 1, &heard).unwrap();
        assert_eq!((p[0].primary, p[0].standby), (0, NONE));
        assert_eq!(survived.degraded, 0);
    }

    fn held(standby: bool, shipped: Option<Time>) -> HandedBin {
        HandedBin {
            standby,
            shipped,
            bytes: vec![shipped.map_or(0, |t| t as u8)],
        }
    }

    #[test]
    fn only_whole_copies_not_shipped_before_the_restart_point_seed() {
        let mut handout = Handout::default();
        // Bin 0 is held (a table copy says nothing of when it last changed); bin 1 was
        // shipped away at 3; bin 2 is held by one operator only; bin 3 in two roles.
        handout.bins.insert(
            "a".into(),
            BTreeMap::from([
                (0, held(false, None)),
                (1, held(false, Some(3))),
                (2, held(true, None)),
                (3, held(false, None)),
            ]),
        );
        handout.bins.insert(
            "b".into(),
            BTreeMap::from([
                (0, held(false, None)),
                (1, held(false, Some(3))),
                (3, held(true, None)),
            ]),
        );
        assert_eq!(handout.roles(4), BTreeMap::from([(0, false)]));
        assert_eq!(handout.roles(3), BTreeMap::from([(0, false), (1, false)]));
        let seed = handout.clone().seed(4, |_| true);
        assert_eq!(seed.at, 4);
        assert_eq!(seed.bins["a"], BTreeMap::from([(0, vec![0])]));
        assert_eq!(seed.bins["b"], BTreeMap::from([(0, vec![0])]));
        let seed = handout.seed(3, |bin| bin != 0);
        assert_eq!(seed.bins["a"], BTreeMap::from([(1, vec![3])]));
    }
}
