//! Configurations: which workers hold each bin, and how that changes over logical time.
//!
//! A bin has a *primary* and, with replication, a *standby* on another worker (see
//! [`Replicas`]). Both apply every record of the bin; only the primary's outputs leave the
//! operator unless it fails (`operator::replica`). A configuration change names, for a
//! logical time, the new holders; the state transfers it implies follow from the old and
//! new holders alone ([`transfers`]), so every worker derives the same ones.

use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::Time;

/// "No worker": an absent standby, or the primary of a bin that lost every replica.
pub const NONE: u32 = u32::MAX;

/// A bin→worker map of primaries: entry `b` is the worker whose outputs of bin `b` count.
pub type Map = Vec<u32>;

/// The initial map: bin `i` belongs to worker `i mod workers`.
pub fn uniform(bins: usize, workers: usize) -> Map {
    (0..bins).map(|b| (b % workers) as u32).collect()
}

/// The workers that hold one bin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Replicas {
    /// The worker (index in the whole job) whose outputs of the bin count; [`NONE`] once the
    /// bin has lost every replica.
    pub primary: u32,
    /// [`NONE`] without replication, or while the bin is degraded.
    pub standby: u32,
}

/// Which replica of a bin a worker holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The replica whose outputs leave the operator.
    Primary,
    /// The copy on another worker that applies the same records and releases outputs only
    /// when the primary failed before emitting them.
    Standby,
}

impl Replicas {
    /// A bin held by `primary` alone.
    pub fn single(primary: u32) -> Self {
        Replicas {
            primary,
            standby: NONE,
        }
    }

    /// Whether `worker` holds a replica.
    #[inline]
    pub fn holds(&self, worker: u32) -> bool {
        worker != NONE && (self.primary == worker || self.standby == worker)
    }

    /// The holders, primary first.
    pub fn holders(self) -> impl Iterator<Item = u32> {
        [self.primary, self.standby].into_iter().filter(|w| *w != NONE)
    }

    /// The role `worker` plays for this bin, if any.
    #[inline]
    pub fn role(&self, worker: u32) -> Option<Role> {
        match worker {
            NONE => None,
            w if w == self.primary => Some(Role::Primary),
            w if w == self.standby => Some(Role::Standby),
            _ => None,
        }
    }

    /// Whether no replica is left.
    pub fn is_lost(&self) -> bool {
        self.primary == NONE
    }

    /// Whether the bin has fewer replicas than it had (a primary but no standby).
    pub fn is_degraded(&self) -> bool {
        self.primary != NONE && self.standby == NONE
    }

    /// Without `worker`: a primary that leaves is replaced by the standby.
    pub fn without(self, worker: u32) -> Self {
        if worker == NONE {
            self
        } else if self.primary == worker {
            Replicas::single(self.standby)
        } else if self.standby == worker {
            Replicas::single(self.primary)
        } else {
            self
        }
    }

    /// With `worker` as primary: a standby that becomes primary swaps roles with the old
    /// primary (no state moves); any other worker takes the primary's place.
    pub fn with_primary(self, worker: u32) -> Self {
        if worker == self.primary {
            self
        } else if worker == self.standby {
            Replicas {
                primary: worker,
                standby: self.primary,
            }
        } else {
            Replicas {
                primary: worker,
                standby: self.standby,
            }
        }
    }
}

/// Traces and placement events spell holders `P/S` (primary and standby), `P` (no standby)
/// or `-` (no replica left).
impl std::fmt::Display for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.primary, self.standby) {
            (NONE, _) => f.write_str("-"),
            (p, NONE) => write!(f, "{p}"),
            (p, s) => write!(f, "{p}/{s}"),
        }
    }
}

/// The holders of every bin.
pub type Placement = Vec<Replicas>;

/// The placement with `map`'s primaries and no standbys.
pub fn single(map: &Map) -> Placement {
    map.iter().map(|w| Replicas::single(*w)).collect()
}

/// The worker that holds the standby of a bin whose primary is `primary`, chained as in
/// Flux: the same worker index on the next process when the job has several processes
/// (so that a process's failure never takes both replicas), the next worker otherwise.
/// Workers that `usable` refuses are skipped, and a worker of the primary's own process is
/// taken only when no other process has a usable one; `NONE` if no other worker is usable.
pub fn chained(primary: u32, workers: usize, per_process: usize, usable: impl Fn(u32) -> bool) -> u32 {
    let n = workers as u32;
    let step = if per_process < workers {
        per_process as u32
    } else {
        1
    };
    let across = (1..n).map(|i| (primary + i * step) % n);
    let next = (1..n).map(|i| (primary + i) % n);
    let candidates = || {
        across
            .clone()
            .chain(next.clone())
            .filter(|w| *w != primary && usable(*w))
    };
    // One process: every worker is the primary's own, and looking for another process
    // would scan every worker for each bin.
    if per_process >= workers {
        return candidates().next().unwrap_or(NONE);
    }
    candidates()
        .find(|w| !same_process(*w, primary, per_process))
        .or_else(|| candidates().next())
        .unwrap_or(NONE)
}

/// Whether workers `a` and `b` run in the same process, for a job of `per_process` workers
/// in each.
pub fn same_process(a: u32, b: u32, per_process: usize) -> bool {
    let per = per_process.max(1) as u32;
    a / per == b / per
}

/// Bins whose two replicas are in one process, in a job of `workers` workers with
/// `per_process` in each (none when the job has one process).
pub fn colocated(placement: &Placement, workers: usize, per_process: usize) -> usize {
    if per_process >= workers {
        return 0;
    }
    placement
        .iter()
        .filter(|r| r.standby != NONE && r.primary != NONE && same_process(r.primary, r.standby, per_process))
        .count()
}

/// `map`'s primaries, each with a chained standby (see [`chained`]).
pub fn replicated(map: &Map, workers: usize, per_process: usize) -> Placement {
    map.iter()
        .map(|p| Replicas {
            primary: *p,
            standby: chained(*p, workers, per_process, |_| true),
        })
        .collect()
}

/// One copy of a bin's state, made when its holders change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The worker that sends the state (a worker's index in the whole job).
    pub from: u32,
    /// The worker that receives it.
    pub to: u32,
}

/// The copies that turn the holders `old` into `new`: each new holder gets the state from
/// an old holder that leaves (a move), else from one that stays (a copy: the source keeps
/// serving), primaries first. A new holder with no old holder to copy from gets nothing.
pub fn transfers(old: Replicas, new: Replicas) -> impl Iterator<Item = Transfer> {
    let leaving: Vec<u32> = old.holders().filter(|w| !new.holds(*w)).collect();
    let staying = old.holders().find(|w| new.holds(*w));
    new.holders()
        .filter(move |w| !old.holds(*w))
        .enumerate()
        .filter_map(move |(i, to)| {
            let from = leaving.get(i).copied().or(staying).or(leaving.first().copied())?;
            Some(Transfer { from, to })
        })
}

/// The placement after `insts`, the instructions of one logical time, applied in their
/// fixed order (they arrive in any order): every worker and the driver derive placements
/// and transfers through this one function.
pub fn next_placement(placement: &Placement, insts: &mut [ControlInst], workers: usize) -> Placement {
    insts.sort_unstable();
    let mut next = placement.clone();
    for inst in insts.iter() {
        inst.apply(&mut next, workers);
    }
    next
}

/// The state transfers between two placements, by bin.
pub fn all_transfers<'a>(
    old: &'a Placement,
    new: &'a Placement,
) -> impl Iterator<Item = (u32, Transfer)> + 'a {
    old.iter()
        .zip(new)
        .enumerate()
        .filter(|(_, (was, now))| was != now)
        .flat_map(|(bin, (was, now))| transfers(*was, *now).map(move |t| (bin as u32, t)))
}

/// One change to the configuration, in force from the logical time it is stamped with.
///
/// Several changes at one time are applied in this type's order (failures first, then
/// rejoins, whole maps, moves, placements and drops, each by bin and worker), whatever order
/// they arrived in, so that every worker derives the same placement.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ControlInst {
    /// Worker `worker` failed: it holds no replica from now on (standbys of the bins it was
    /// primary of become their primaries).
    Fail {
        /// The failed worker's index in the whole job.
        worker: u32,
    },
    /// A failed worker serves again, empty.
    Rejoin {
        /// The rejoining worker's index in the whole job.
        worker: u32,
    },
    /// Replace every bin's primary (see [`Replicas::with_primary`]).
    Map(Map),
    /// Bin `bin`'s primary is `worker`.
    Move {
        /// The bin that moves.
        bin: u32,
        /// Its new primary: a worker's index in the whole job.
        worker: u32,
    },
    /// Bin `bin` is held by exactly `replicas`.
    Place {
        /// The bin placed.
        bin: u32,
        /// Its holders from this time on.
        replicas: Replicas,
    },
    /// Worker `worker` no longer holds bin `bin`.
    Drop {
        /// The bin whose replica is dropped.
        bin: u32,
        /// The worker (index in the whole job) that stops holding it; a dropped primary is
        /// replaced by the standby.
        worker: u32,
    },
}

impl ControlInst {
    /// Applies the change to `placement` of a job with `workers` workers. Changes naming a
    /// bin or worker that does not exist, or a map of the wrong length, are ignored, the
    /// same way on every worker (the control handle rejects them before they get here).
    pub fn apply(&self, placement: &mut Placement, workers: usize) {
        if !self.is_valid(placement.len(), workers) {
            return;
        }
        match self {
            ControlInst::Fail { worker } => {
                for r in placement.iter_mut() {
                    *r = r.without(*worker);
                }
            }
            ControlInst::Rejoin { .. } => {}
            ControlInst::Map(map) => {
                for (r, w) in placement.iter_mut().zip(map) {
                    *r = r.with_primary(*w);
                }
            }
            ControlInst::Move { bin, worker } => {
                let r = &mut placement[*bin as usize];
                *r = r.with_primary(*worker);
            }
            ControlInst::Place { bin, replicas } => placement[*bin as usize] = *replicas,
            ControlInst::Drop { bin, worker } => {
                let r = &mut placement[*bin as usize];
                *r = r.without(*worker);
            }
        }
    }

    /// Whether the change is one `apply` takes for a job of `bins` bins and `workers` workers.
    pub fn is_valid(&self, bins: usize, workers: usize) -> bool {
        let worker = |w: &u32| (*w as usize) < workers;
        let bin = |b: &u32| (*b as usize) < bins;
        match self {
            ControlInst::Fail { worker: w } | ControlInst::Rejoin { worker: w } => worker(w),
            ControlInst::Map(m) => m.len() == bins && m.iter().all(worker),
            ControlInst::Move { bin: b, worker: w } | ControlInst::Drop { bin: b, worker: w } => {
                bin(b) && worker(w)
            }
            ControlInst::Place { bin: b, replicas } => {
                bin(b)
                    && worker(&replicas.primary)
                    && (replicas.standby == NONE
                        || (worker(&replicas.standby) && replicas.standby != replicas.primary))
            }
        }
    }
}

/// The configurations in force from each time on, oldest first.
///
/// Invariant: times strictly increase, and an entry is only added once the control
/// frontier has passed its time, so an entry never changes after it is added.
#[derive(Debug)]
pub struct History {
    entries: Vec<(Time, Rc<Placement>)>,
}

impl History {
    /// A history whose placement at every time is `initial`.
    pub fn new(initial: Placement) -> Self {
        History {
            entries: vec![(0, Rc::new(initial))],
        }
    }

    /// The most recent placement.
    pub fn latest(&self) -> &Rc<Placement> {
        &self.entries[self.entries.len() - 1].1
    }

    /// The placement in force at `time`.
    pub fn at(&self, time: Time) -> &Rc<Placement> {
        let pos = self.entries.partition_point(|(t, _)| *t <= time);
        &self.entries[pos.saturating_sub(1)].1
    }

    /// Records `placement` as in force from `time` on; `time` must not precede any earlier
    /// entry's. One at the same time as the latest entry replaces it (a change at time 0
    /// replaces the initial placement).
    pub fn push(&mut self, time: Time, placement: Placement) {
        match self.entries.last_mut() {
            Some((t, m)) if *t == time => *m = Rc::new(placement),
            last => {
                debug_assert!(last.is_none_or(|(t, _)| *t < time));
                self.entries.push((time, Rc::new(placement)));
            }
        }
    }

    /// Forgets placements that no time at or after `time` can need.
    pub fn forget_before(&mut self, time: Time) {
        let keep_from = self.entries.partition_point(|(t, _)| *t <= time);
        if keep_from > 1 {
            self.entries.drain(..keep_from - 1);
        }
    }

    /// Number of placements held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the history is empty (never: it always holds the initial placement).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn primaries(p: &Placement) -> Map {
        p.iter().map(|r| r.primary).collect()
    }

    #[test]
    fn lookup_by_time() {
        let mut h = History::new(single(&uniform(4, 2)));
        h.push(5, single(&vec![0, 0, 0, 0]));
        h.push(9, single(&vec![1, 1, 1, 1]));
        assert_eq!(primaries(h.at(0)), vec![0, 1, 0, 1]);
        assert_eq!(primaries(h.at(4)), vec![0, 1, 0, 1]);
        assert_eq!(primaries(h.at(5)), vec![0, 0, 0, 0]);
        assert_eq!(primaries(h.at(100)), vec![1, 1, 1, 1]);
        h.forget_before(6);
        assert_eq!(h.len(), 2);
        assert_eq!(primaries(h.at(6)), vec![0, 0, 0, 0]);
    }

    #[test]
    fn apply_ignores_out_of_range() {
        let mut m = single(&uniform(4, 2));
        for bad in [
            ControlInst::Move { bin: 9, worker: 0 },
            ControlInst::Move { bin: 0, worker: 2 },
            ControlInst::Map(vec![0]),
            ControlInst::Map(vec![0, 1, 2, 0]),
            ControlInst::Fail { worker: 2 },
            ControlInst::Place {
                bin: 0,
                replicas: Replicas {
                    primary: 1,
                    standby: 1,
                },
            },
        ] {
            assert!(!bad.is_valid(4, 2));
            bad.apply(&mut m, 2);
        }
        assert_eq!(primaries(&m), vec![0, 1, 0, 1]);
        ControlInst::Move { bin: 1, worker: 0 }.apply(&mut m, 2);
        assert_eq!(primaries(&m), vec![0, 0, 0, 1]);
    }

    #[test]
    fn same_time_changes_apply_in_a_fixed_order() {
        let mut insts = vec![
            ControlInst::Move { bin: 0, worker: 1 },
            ControlInst::Map(vec![0, 0, 0, 0]),
            ControlInst::Move { bin: 0, worker: 0 },
        ];
        insts.sort();
        let mut m = single(&uniform(4, 2));
        for i in &insts {
            i.apply(&mut m, 2);
        }
        // The map first, then the moves by bin and worker: bin 0 ends on worker 1.
        assert_eq!(primaries(&m), vec![1, 0, 0, 0]);
    }

    #[test]
    fn standbys_are_chained_across_processes() {
        // One process: the next worker.
        assert_eq!(chained(3, 4, 4, |_| true), 0);
        // Two processes of two workers: the same index on the other process.
        assert_eq!(chained(0, 4, 2, |_| true), 2);
        assert_eq!(chained(3, 4, 2, |_| true), 1);
        // Skips workers that cannot hold it, to another process while one has room, and
        // gives up when none can.
        assert_eq!(chained(0, 4, 2, |w| w != 2), 3);
        assert_eq!(chained(5, 6, 2, |w| w != 1), 3);
        assert_eq!(chained(0, 4, 2, |w| w < 2), 1);
        assert_eq!(
            colocated(
                &vec![Replicas {
                    primary: 0,
                    standby: 1
                }],
                4,
                2
            ),
            1
        );
        assert_eq!(
            colocated(
                &vec![Replicas {
                    primary: 0,
                    standby: 1
                }],
                2,
                2
            ),
            0
        );
        assert_eq!(chained(0, 2, 2, |w| w != 1), NONE);
        let p = replicated(&uniform(4, 2), 2, 2);
        assert!(p.iter().all(|r| r.standby == 1 - r.primary));
    }

    #[test]
    fn failures_promote_standbys() {
        let mut p = replicated(&uniform(4, 3), 3, 3);
        ControlInst::Fail { worker: 1 }.apply(&mut p, 3);
        assert_eq!(p[1], Replicas::single(2));
        assert_eq!(p[0], Replicas::single(0));
        assert_eq!(
            p[2],
            Replicas {
                primary: 2,
                standby: 0
            }
        );
        assert!(p[1].is_degraded() && !p[2].is_degraded());
        ControlInst::Fail { worker: 2 }.apply(&mut p, 3);
        assert!(p[1].is_lost());
    }

    #[test]
    fn holders_are_spelled_as_traces_spell_them() {
        let spelled: Vec<String> = [
            Replicas {
                primary: 0,
                standby: 1,
            },
            Replicas::single(2),
            Replicas::single(NONE),
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(spelled, ["0/1", "2", "-"]);
    }

    #[test]
    fn moves_to_the_standby_swap_roles() {
        let r = Replicas {
            primary: 0,
            standby: 1,
        };
        assert_eq!(
            r.with_primary(1),
            Replicas {
                primary: 1,
                standby: 0
            }
        );
        assert_eq!(
            r.with_primary(2),
            Replicas {
                primary: 2,
                standby: 1
            }
        );
        assert_eq!(transfers(r, r.with_primary(1)).count(), 0);
    }

    #[test]
    fn transfers_prefer_leaving_sources() {
        let t = |old, new| transfers(old, new).collect::<Vec<_>>();
        let pair = |primary, standby| Replicas { primary, standby };
        // A move: the leaving primary ships.
        assert_eq!(t(pair(0, 1), pair(2, 1)), vec![Transfer { from: 0, to: 2 }]);
        // A recovery copy: the survivor ships and keeps serving.
        assert_eq!(
            t(Replicas::single(0), pair(0, 2)),
            vec![Transfer { from: 0, to: 2 }]
        );
        // Both replicas move: each leaving holder ships to one new holder.
        assert_eq!(
            t(pair(0, 1), pair(2, 3)),
            vec![Transfer { from: 0, to: 2 }, Transfer { from: 1, to: 3 }]
        );
        // One holder becomes two new ones: it ships twice.
        assert_eq!(
            t(Replicas::single(0), pair(1, 2)),
            vec![Transfer { from: 0, to: 1 }, Transfer { from: 0, to: 2 }]
        );
        // Nothing to copy from.
        assert_eq!(t(Replicas::single(NONE), pair(1, 2)), vec![]);
    }
}
