//! Placement by measured load when bins have standbys: a standby applies every record its
//! primary does, so a worker's work is the load of every bin it holds a replica of, and a
//! move that only swaps a bin's primary and standby moves no work.
//!
//! [`balanced_replicas`] moves replicas (a primary as a primary, a standby as a standby)
//! from the busiest worker to the least busy one that holds no replica of the bin, each
//! time the one whose load is nearest half their gap, until no such move lowers the
//! busier one: the same greedy assignment as [`super::balanced`], over replicas (past a
//! busiest worker none of whose replicas can move, pinned bins staying, within the byte
//! budget). Invariants:
//! a bin's two replicas are never on one worker, nor moved into one process while a live
//! worker of another process could hold one of them; every move strictly lowers the larger
//! of the two workers' work, so the result's maximum is never above the input's.

use super::{Balanced, Movable, argmax_of, argmin, imbalance, weight};
use crate::config::{NONE, Placement, same_process};

/// One replica a worker holds: (load, bytes, bin, whether it is the primary).
type Held = (f64, u64, u32, bool);

/// The placement of replicas over the workers `alive` (a job of `per_process` workers per
/// process) that brings max / mean work nearest 1 from `current`, where bin `b` costs each
/// of its holders `load[b]` and has `bytes[b]` bytes, and only bins `movable` lets move do.
/// Replicas on workers not in `alive` stay where they are.
pub fn balanced_replicas(
    current: &Placement,
    load: &[f64],
    bytes: &[u64],
    alive: &[u32],
    per_process: usize,
    movable: &Movable,
) -> Balanced {
    let slot = |w: u32| alive.iter().position(|a| *a == w);
    let weight = |b: usize| weight(load, b);
    let size = |b: usize| bytes.get(b).copied().unwrap_or(0);
    let mut held: Vec<Vec<Held>> = vec![Vec::new(); alive.len()];
    let mut total = vec![0.0f64; alive.len()];
    for (b, r) in current.iter().enumerate() {
        for (w, primary) in [(r.primary, true), (r.standby, false)] {
            if w == NONE {
                continue;
            }
            if let Some(i) = slot(w) {
                total[i] += weight(b);
                if weight(b) > 0.0 && movable.can_move(b) {
                    held[i].push((weight(b), size(b), b as u32, primary));
                }
            }
        }
    }
    let before = imbalance(&total);
    let mut goal = current.clone();
    let across = |w: u32| alive.iter().any(|a| !same_process(*a, w, per_process));
    let mut budget = movable.max_bytes;
    // The busiest worker still open gives; one that has nothing it can give is left as it is.
    let mut open = vec![true; alive.len()];
    for _ in 0..current.len().saturating_mul(4).saturating_add(alive.len()).max(1) {
        let (Some(hi), Some(lo)) = (argmax_of(&total, &open), argmin(&total)) else {
            break;
        };
        let gap = total[hi] - total[lo];
        let to = alive[lo];
        // A replica may go to `to` if `to` holds none of the bin, and its other replica is
        // not in `to`'s process while another process could keep them apart.
        let allowed = |&(_, _, bin, primary): &Held| {
            let r = goal[bin as usize];
            let other = if primary { r.standby } else { r.primary };
            r.primary != to
                && r.standby != to
                && size(bin as usize) <= budget
                && (other == NONE || !same_process(other, to, per_process) || !across(other))
        };
        let Some(k) = best_move(&held[hi], gap, allowed) else {
            open[hi] = false;
            continue;
        };
        let replica = held[hi].remove(k);
        let (l, moved_bytes, bin, primary) = replica;
        budget = budget.saturating_sub(moved_bytes);
        total[hi] -= l;
        total[lo] += l;
        held[lo].push(replica);
        let r = &mut goal[bin as usize];
        if primary {
            r.primary = to;
        } else {
            r.standby = to;
        }
    }
    let moved: Vec<u32> = (0..current.len() as u32)
        .filter(|b| goal[*b as usize] != current[*b as usize])
        .collect();
    let bytes = moved.iter().map(|b| size(*b as usize)).sum();
    Balanced {
        map: goal.iter().map(|r| r.primary).collect(),
        moved,
        bytes,
        before,
        after: imbalance(&total),
        workers: None,
        placement: Some(goal),
    }
}

/// The replica of `held` that `allowed` lets move whose move from the busiest worker to the
/// least busy, `gap` apart, lowers their larger work the most: the load nearest `gap / 2`,
/// below `gap`; of two alike, the smaller, then a standby (moving it delays no output).
fn best_move(held: &[Held], gap: f64, allowed: impl Fn(&Held) -> bool) -> Option<usize> {
    let gain = |l: f64| l.min(gap - l);
    (0..held.len())
        .filter(|k| {
            let l = held[*k].0;
            l < gap && gain(l) > gap * 1e-9 && allowed(&held[*k])
        })
        .max_by(|a, b| {
            let (x, y) = (&held[*a], &held[*b]);
            gain(x.0)
                .total_cmp(&gain(y.0))
                .then(y.1.cmp(&x.1))
                .then(y.3.cmp(&x.3))
                .then(y.2.cmp(&x.2))
        })
}

/// Each worker's work under `placement`: the load of every bin it holds a replica of.
#[cfg(test)]
pub(crate) fn work(placement: &Placement, load: &[f64], workers: usize) -> Vec<f64> {
    let mut t = vec![0.0; workers];
    for (b, r) in placement.iter().enumerate() {
        for w in [r.primary, r.standby] {
            if w != NONE {
                t[w as usize] += load[b];
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::config::Replicas;

    fn chained(bins: usize, workers: u32) -> Placement {
        (0..bins as u32)
            .map(|b| Replicas {
                primary: b % workers,
                standby: (b + 1) % workers,
            })
            .collect()
    }

    #[test]
    fn two_workers_holding_every_bin_cannot_be_helped() {
        let current = chained(8, 2);
        let load = [90.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        let b = balanced_replicas(&current, &load, &[1; 8], &[0, 1], 2, &Movable::default());
        assert!(b.moved.is_empty(), "{b:?}");
        assert_eq!((b.before, b.after), (1.0, 1.0), "both apply every record");
    }

    #[test]
    fn hot_bins_standbys_count_and_move() {
        // Four workers: the two hot bins' primaries on 0 and standbys on 1 (each applies
        // 100 records/s), the cold ones on 2 and 3.
        let r = |primary, standby| Replicas { primary, standby };
        let current = vec![r(0, 1), r(0, 1), r(2, 3), r(3, 2)];
        let load = [50.0, 50.0, 1.0, 1.0];
        let b = balanced_replicas(&current, &load, &[1; 4], &[0, 1, 2, 3], 4, &Movable::default());
        assert!((b.before - 100.0 / 51.0).abs() < 1e-9, "{b:?}");
        let goal = b.placement.clone().expect("a placement");
        let after = work(&goal, &load, 4);
        // One hot replica per worker: 50 or 51 each.
        assert!(after.iter().all(|w| *w <= 51.0), "{after:?}: {b:?}");
        assert!((imbalance(&after) - b.after).abs() < 1e-9);
        assert!(goal.iter().all(|r| r.primary != r.standby), "{b:?}");
        assert_eq!(b.map, goal.iter().map(|r| r.primary).collect::<Vec<_>>());
    }

    proptest! {
        /// Whatever the placement and loads: replicas stay apart (and in two processes where
        /// they were), each bin keeps its replicas, the busiest worker's work never grows,
        /// and the predicted imbalance is the placement's.
        #[test]
        fn replicas_stay_apart_and_the_busiest_never_gains(
            primaries in prop::collection::vec(0u32..4, 1..120),
            shift in prop::collection::vec(1u32..4, 120),
            seed in any::<u64>(),
        ) {
            let workers = 4u32;
            let current: Placement = primaries
                .iter()
                .enumerate()
                .map(|(b, p)| Replicas { primary: *p, standby: (p + shift[b]) % workers })
                .collect();
            let load: Vec<f64> = (0..current.len())
                .map(|b| (crate::bins::mix64(seed ^ b as u64) % 1000) as f64)
                .collect();
            let per_process = 2;
            let pinned: Vec<bool> = (0..current.len()).map(|b| crate::bins::mix64(seed ^ !(b as u64)).is_multiple_of(5)).collect();
            let max_bytes = if seed.is_multiple_of(2) { u64::MAX } else { seed % 60 };
            let movable = Movable { pinned: &pinned, max_bytes };
            let b = balanced_replicas(&current, &load, &[1; 120], &[0, 1, 2, 3], per_process, &movable);
            let goal = b.placement.clone().expect("a placement");
            let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
            let (before, after) = (work(&current, &load, 4), work(&goal, &load, 4));
            prop_assert!(max(&after) <= max(&before) + 1e-6);
            prop_assert!((imbalance(&after) - b.after).abs() < 1e-6);
            prop_assert!(b.bytes <= max_bytes, "{} bytes over the budget of {max_bytes}", b.bytes);
            for (bin, (was, now)) in current.iter().zip(&goal).enumerate() {
                prop_assert!(!pinned[bin] || was == now, "pinned bin {bin} moved: {was:?} -> {now:?}");
                prop_assert_ne!(now.primary, now.standby);
                let apart = |r: &Replicas| !same_process(r.primary, r.standby, per_process);
                prop_assert!(!apart(was) || apart(now), "{was:?} -> {now:?}");
            }
        }
    }
}
