//! Sizing by measured rates, as DS2 does it (Kalavri et al., OSDI 2018): how many workers
//! the offered load needs, from the workers' true rate (records their stateful operators
//! apply per busy second), decided in one step rather than by trial.
//!
//! Hysteresis is in the two thresholds: a set grows when it would run above
//! [`TARGET_UTILISATION`] of its true rate, and shrinks only to a set that would run at most
//! at [`SCALE_IN_UTILISATION`]; after either, the load sits between the two, so a steady
//! load never sees the set grow and shrink in turn.

use crate::balance::{Balanced, Movable, OperatorRate, balanced, imbalance, moved};

/// The share of its true rate a worker is planned to run at: the rest is headroom for the
/// worker's other work (its source, the exchange) and for bursts.
pub const TARGET_UTILISATION: f64 = 0.7;
/// A smaller set is taken only if it would run at most at this share of its true rate.
pub const SCALE_IN_UTILISATION: f64 = 0.5;

/// The number of workers `load` records/s need at `rate` records per busy second each,
/// when `now` of them serve and `live` could: more once `now` would run above
/// [`TARGET_UTILISATION`], fewer once fewer would run at most at [`SCALE_IN_UTILISATION`],
/// else `now`. Always between 1 and `live`.
pub fn workers_needed(load: f64, rate: f64, now: usize, live: usize) -> usize {
    let live = live.max(1);
    let now = now.clamp(1, live);
    if !(load.is_finite() && rate.is_finite() && rate > 0.0 && load >= 0.0) {
        return now;
    }
    let at = |share: f64| ((load / (rate * share)).ceil() as usize).clamp(1, live);
    if load > now as f64 * rate * TARGET_UTILISATION {
        at(TARGET_UTILISATION).max(now)
    } else {
        at(SCALE_IN_UTILISATION).min(now)
    }
}

/// The busy seconds per second the job's stateful operators need at `offered` records per
/// second from the sources, as DS2 sizes a dataflow: each operator's input at that rate (the
/// offered records times its selectivity, the records its routers sent it per record the
/// sources sent) over its true rate (the records it applies per busy second), summed. An
/// operator's input is counted where it is routed, before it queues: one that falls behind
/// is sized by what it must take, not by what it managed. `None` unless some operator was
/// measured applying records while timed; an operator that was not is left out.
pub fn busy_needed(offered: f64, operators: &[OperatorRate]) -> Option<f64> {
    if !(offered.is_finite() && offered > 0.0) {
        return None;
    }
    let needs: Vec<f64> = operators
        .iter()
        .filter(|op| op.applied > 0.0 && op.busy > 0.0 && op.routed.is_finite())
        .map(|op| {
            let selectivity = op.routed / offered;
            let true_rate = op.applied / op.busy;
            offered * selectivity / true_rate
        })
        .collect();
    (!needs.is_empty()).then(|| needs.iter().sum())
}

/// The true rate to size by: the mean of those measured (a worker's is measured when it was
/// timed and busy).
pub fn true_rate(rates: &[Option<f64>]) -> Option<f64> {
    let known: Vec<f64> = rates
        .iter()
        .flatten()
        .copied()
        .filter(|r| r.is_finite() && *r > 0.0)
        .collect();
    (!known.is_empty()).then(|| known.iter().sum::<f64>() / known.len() as f64)
}

/// The workers to serve with `k` of them: those serving now that carry the most load (the
/// fewest bytes move), then idle ones from `idle` in order.
pub fn choose(serving: &[(u32, f64)], idle: &[u32], k: usize) -> Vec<u32> {
    let mut by_load = serving.to_vec();
    by_load.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut chosen: Vec<u32> = by_load.iter().take(k).map(|(w, _)| *w).collect();
    chosen.extend(idle.iter().take(k.saturating_sub(chosen.len())));
    chosen.sort_unstable();
    chosen
}

/// The placement of primaries on exactly the workers `active`: every bin of another worker
/// moves to the least loaded of them (the busiest bins first, pinned ones too: a worker
/// that stops serving keeps none), then [`balanced`] evens them out as `movable` lets it.
/// `before` is the imbalance over the workers serving now, `after` over `active`.
pub fn onto(current: &[u32], load: &[f64], bytes: &[u64], active: &[u32], movable: &Movable) -> Balanced {
    let weight = |b: usize| {
        load.get(b)
            .copied()
            .filter(|l| l.is_finite() && *l > 0.0)
            .unwrap_or(0.0)
    };
    let mut serving: Vec<u32> = current.to_vec();
    serving.sort_unstable();
    serving.dedup();
    let per = |workers: &[u32], map: &[u32]| -> Vec<f64> {
        workers
            .iter()
            .map(|w| (0..map.len()).filter(|b| map[*b] == *w).map(weight).sum())
            .collect()
    };
    let before = imbalance(&per(&serving, current));
    let mut map = current.to_vec();
    if !active.is_empty() {
        let mut totals = per(active, &map);
        let mut homeless: Vec<usize> = (0..map.len()).filter(|b| !active.contains(&map[*b])).collect();
        homeless.sort_by(|a, b| weight(*b).total_cmp(&weight(*a)).then(a.cmp(b)));
        for b in homeless {
            let least = (0..active.len())
                .min_by(|x, y| totals[*x].total_cmp(&totals[*y]))
                .unwrap_or(0);
            totals[least] += weight(b);
            map[b] = active[least];
        }
    }
    let even = balanced(&map, load, bytes, active, movable);
    let (moved, bytes) = moved(current, &even.map, bytes);
    Balanced {
        map: even.map,
        moved,
        bytes,
        before,
        after: even.after,
        workers: None,
        placement: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_are_sized_by_their_own_input_and_true_rate() {
        // 10k records/s offered. A window operator takes every record (selectivity 1) at
        // 50k per busy second; a join downstream takes 3 per record (30k/s) at 20k per busy
        // second, and falls behind: it applied 12k/s in 0.6 busy seconds. It needs 1.5 busy
        // seconds per second, not the 0.6 it managed.
        let ops = [
            OperatorRate {
                routed: 10_000.0,
                applied: 10_000.0,
                busy: 0.2,
            },
            OperatorRate {
                routed: 30_000.0,
                applied: 12_000.0,
                busy: 0.6,
            },
        ];
        let need = busy_needed(10_000.0, &ops).unwrap();
        assert!((need - 1.7).abs() < 1e-9, "{need}");
        // At 70 % each: three workers, where the records the workers applied (22k/s at
        // their mean true rate of 27.5k) say two.
        assert_eq!(workers_needed(need, 1.0, 1, 4), 3);
        assert_eq!(workers_needed(22_000.0, 27_500.0, 1, 4), 2);
        // Nothing measured: nothing to size by.
        assert_eq!(busy_needed(10_000.0, &[OperatorRate::default()]), None);
        assert_eq!(busy_needed(0.0, &ops), None);
    }

    #[test]
    fn a_set_grows_above_the_target_and_shrinks_well_below_it() {
        // One worker applies 1M records per busy second.
        let rate = 1e6;
        // 2M/s on one: needs ceil(2 / 0.7) = 3 of 4.
        assert_eq!(workers_needed(2e6, rate, 1, 4), 3);
        // Capped by the live workers.
        assert_eq!(workers_needed(2e6, rate, 1, 2), 2);
        // 1.2M/s on two runs at 0.6: between the thresholds, stays.
        assert_eq!(workers_needed(1.2e6, rate, 2, 4), 2);
        // 0.4M/s on two: one would run at 0.4, at most 0.5: shrinks.
        assert_eq!(workers_needed(0.4e6, rate, 2, 4), 1);
        // Nothing measured: stays.
        assert_eq!(workers_needed(0.4e6, f64::NAN, 2, 4), 2);
        assert_eq!(workers_needed(0.0, rate, 3, 4), 1);
    }

    #[test]
    fn sizing_a_steady_load_again_keeps_the_size() {
        for load in [1e5, 4e5, 7e5, 1e6, 1.5e6, 2.2e6, 3.9e6] {
            for now in 1..=4 {
                let k = workers_needed(load, 1e6, now, 4);
                assert_eq!(workers_needed(load, 1e6, k, 4), k, "load {load} from {now}");
            }
        }
    }

    #[test]
    fn the_busiest_serving_workers_stay_and_idle_ones_join() {
        let serving = [(0, 5.0), (2, 9.0), (3, 1.0)];
        assert_eq!(choose(&serving, &[1], 2), vec![0, 2]);
        assert_eq!(choose(&serving, &[1], 4), vec![0, 1, 2, 3]);
        assert_eq!(true_rate(&[Some(2.0), None, Some(4.0)]), Some(3.0));
        assert_eq!(true_rate(&[None, Some(f64::NAN)]), None);
    }

    #[test]
    fn packing_moves_every_bin_of_the_workers_left_out() {
        // Four bins on two workers; onto worker 0 alone.
        let current = [0, 1, 0, 1];
        let load = [1.0, 2.0, 1.0, 0.0];
        let bytes = [10, 20, 30, 40];
        let packed = onto(&current, &load, &bytes, &[0], &Movable::default());
        assert_eq!(packed.map, vec![0, 0, 0, 0]);
        assert_eq!(packed.moved, vec![1, 3]);
        assert_eq!(packed.bytes, 60);
        assert_eq!(packed.after, 1.0);
        // And out again onto two: even, from one serving worker.
        let spread = onto(
            &[0, 0, 0, 0],
            &[1.0, 1.0, 1.0, 1.0],
            &bytes,
            &[0, 1],
            &Movable::default(),
        );
        assert_eq!(spread.before, 1.0);
        assert_eq!(spread.after, 1.0);
        assert_eq!(spread.moved.len(), 2);
    }
}
