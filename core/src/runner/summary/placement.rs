//! Where the bins were at the end of a run, per worker: what an operator checks after a
//! drain, a balancer's plans or a recovery.

use serde::{Deserialize, Serialize};

use crate::config::{NONE, Placement};

/// One worker's replicas at the end of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerPlacement {
    /// The worker (numbered in the computation that ended the run: afresh among the
    /// survivors after a crash restart).
    pub worker: u32,
    /// Its timely process.
    pub process: u32,
    /// Bins whose primary it held.
    pub primaries: usize,
    /// Bins whose standby it held.
    pub standbys: usize,
}

/// Every worker's count of primaries and standbys under `placement`, for a job of
/// `workers` workers, `per_process` per process.
pub(crate) fn per_worker(placement: &Placement, workers: usize, per_process: usize) -> Vec<WorkerPlacement> {
    let mut each: Vec<WorkerPlacement> = (0..workers as u32)
        .map(|w| WorkerPlacement {
            worker: w,
            process: w / per_process.max(1) as u32,
            primaries: 0,
            standbys: 0,
        })
        .collect();
    for r in placement {
        if r.primary != NONE
            && let Some(p) = each.get_mut(r.primary as usize)
        {
            p.primaries += 1;
        }
        if r.standby != NONE
            && let Some(s) = each.get_mut(r.standby as usize)
        {
            s.standbys += 1;
        }
    }
    each
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Replicas;

    #[test]
    fn each_worker_counts_its_primaries_and_standbys() {
        let r = |primary, standby| Replicas { primary, standby };
        let placement = vec![r(0, 1), r(1, 2), r(0, NONE), r(NONE, NONE)];
        let each = per_worker(&placement, 3, 2);
        let counts: Vec<(u32, usize, usize)> = each
            .iter()
            .map(|p| (p.process, p.primaries, p.standbys))
            .collect();
        assert_eq!(counts, [(0, 2, 0), (0, 1, 1), (1, 0, 1)]);
    }
}
