//! Where the driver's own plans put bins: a rebalance after a rejoin and a failure's
//! recovery. While the balancer is on and has measured the load, they place by it (the one
//! placement policy: the balancer's greedy placement, and new standbys on the least worked
//! workers); under `off`, before any measure, or in a re-run of a run whose rebalances
//! spread evenly, bins spread evenly and standbys chain.

use super::PlanDriver;
use crate::balance::{Loads, balanced, balanced_replicas, weight};
use crate::config::{NONE, Placement, Replicas, chained, same_process, uniform};

impl PlanDriver {
    /// The loads placements by load go by, if they do.
    fn placing_by(&self) -> Option<&Loads> {
        self.known
            .as_ref()
            .filter(|_| self.balancing && !self.even_rebalances)
    }

    /// New holders for every degraded bin: its primary and a standby. By load, each bin
    /// (the busiest first) takes the least worked worker that may hold it: live, not
    /// excluded by the user, not its primary, in another process while one has a live
    /// worker. Otherwise chained as [`crate::failover::Placements::recovery`] does. Bins in
    /// `bin` order.
    pub(super) fn recovery_standbys(&self) -> Vec<(u32, Replicas)> {
        let mut standbys = self.placements.recovery();
        let Some(loads) = self.placing_by() else {
            return standbys;
        };
        let load = |b: u32| weight(&loads.bins, b as usize);
        let mut work = vec![0.0f64; self.workers];
        for (b, r) in self.placement().iter().enumerate() {
            for w in [r.primary, r.standby] {
                if let Some(k) = work.get_mut(w as usize) {
                    *k += load(b as u32);
                }
            }
        }
        let candidates = self.placeable();
        standbys.sort_by(|a, b| load(b.0).total_cmp(&load(a.0)).then(a.0.cmp(&b.0)));
        for (bin, r) in standbys.iter_mut() {
            let p = r.primary;
            let apart = |w: u32| !same_process(w, p, self.per_process);
            let across = candidates.iter().any(|w| apart(*w));
            let best = candidates
                .iter()
                .copied()
                .filter(|w| *w != p && (!across || apart(*w)))
                .min_by(|a, b| work[*a as usize].total_cmp(&work[*b as usize]).then(a.cmp(b)));
            if let Some(w) = best {
                r.standby = w;
                work[w as usize] += load(*bin);
            }
        }
        standbys.sort_by_key(|(bin, _)| *bin);
        standbys
    }

    /// What a rebalance's record says it did.
    pub(super) fn rebalance_why(&self) -> String {
        if self.placing_by().is_some() {
            super::REBALANCED_BY_LOAD.to_string()
        } else {
            "balanced over the live workers".to_string()
        }
    }

    /// Where a rebalance puts the bins: by the last measured loads when the balancer is
    /// on and has measured some ([`PlanDriver::by_known_load`]), else spread
    /// ([`PlanDriver::spread`]).
    pub(super) fn balanced(&self) -> Placement {
        match self.placing_by() {
            Some(loads) => self.by_known_load(loads),
            None => self.spread(),
        }
    }

    /// From today's placement, every bin with one copy given a standby as a recovery would,
    /// then balanced by `loads` over the workers placements may use (an elastic run's
    /// serving ones): the greedy placement of [`crate::balance`], which moves bins from
    /// the busiest workers onto the one that rejoined until no move helps.
    fn by_known_load(&self, loads: &Loads) -> Placement {
        let mut from = self.placement().clone();
        for (bin, replicas) in self.recovery_standbys() {
            from[bin as usize] = replicas;
        }
        let alive = if self.elastic {
            self.serving()
        } else {
            self.placeable()
        };
        let movable = self.movable();
        if self.replicas > 1 {
            let placed = balanced_replicas(
                &from,
                &loads.bins,
                &loads.bytes,
                &alive,
                self.per_process,
                &movable,
            );
            placed.placement.unwrap_or(from)
        } else {
            let primaries: Vec<u32> = from.iter().map(|r| r.primary).collect();
            balanced(&primaries, &loads.bins, &loads.bytes, &alive, &movable)
                .map
                .into_iter()
                .map(Replicas::single)
                .collect()
        }
    }

    /// Primaries spread over the live workers the user did not exclude as the job started
    /// (`bin mod workers` when all are), each with a chained standby when the job has two
    /// replicas.
    pub(super) fn spread(&self) -> Placement {
        let live: Vec<u32> = self.placeable();
        if live.is_empty() {
            return self.placement().clone();
        }
        let primaries = if live.len() == self.workers {
            uniform(self.placement().len(), self.workers)
        } else {
            (0..self.placement().len())
                .map(|b| live[b % live.len()])
                .collect()
        };
        primaries
            .into_iter()
            .map(|p| Replicas {
                primary: p,
                standby: if self.replicas > 1 {
                    chained(p, self.workers, self.per_process, |w| {
                        !self.placements.is_failed(w)
                    })
                } else {
                    NONE
                },
            })
            .collect()
    }
}
