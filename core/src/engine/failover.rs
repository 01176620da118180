//! What the control plane knows of placements, and what it does when a worker fails.
//!
//! [`Placements`] follows every instruction worker 0 issues, so it knows the placement the
//! workers derive at every time and the state transfers each change implies. When a worker
//! fails it answers, at the time the failure is issued:
//! * the failed worker holds nothing from then on (standbys of its primaries take over);
//! * every holder that was *sent* state by the failed worker at a time the job had not
//!   completed when the failure was noticed may never have received it, and neither may
//!   anyone it passed the bin on to since: those holders are dropped too. This is sound
//!   because a failed worker keeps the capabilities of the transfers it did not make until
//!   its failure is final (`operator::route`), so no transfer of its completes falsely;
//! * bins left with no holder are *lost*: the job must stop, loudly;
//! * bins left with one holder are *degraded*: [`Placements::recovery`] picks new standbys.
//!
//! A single failure never loses a bin as long as a bin has at most one change in flight
//! ([`Placements::busy`]): the driver issues no change for a bin whose last one has not
//! completed. (Two changes in flight could, for example, move the bin's one good copy onto
//! a worker that already failed while the other copy was still on its way.)

use std::collections::{BTreeSet, VecDeque};

use rustc_hash::FxHashMap;

use crate::Time;
use crate::config::{
    ControlInst, NONE, Placement, Replicas, Transfer, all_transfers, chained, next_placement,
};

/// The placements issued so far, and the transfers that may not have happened yet.
#[derive(Clone, Debug)]
pub struct Placements {
    current: Placement,
    workers: usize,
    per_process: usize,
    failed: Vec<bool>,
    /// Transfers issued at times the job has not completed, oldest first.
    in_flight: VecDeque<(Time, u32, Transfer)>,
    /// How many of them each bin has (for [`Placements::busy`] in O(1)).
    busy: FxHashMap<u32, usize>,
}

/// The consequences of one failure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailureOutcome {
    /// What to send on the control input at the failure's time.
    pub insts: Vec<ControlInst>,
    /// Bins whose primary failed and whose standby took its place.
    pub promoted: Vec<u32>,
    /// (bin, worker): holders dropped because their copy may never have left the failed
    /// worker.
    pub suspects: Vec<(u32, u32)>,
    /// Bins left with one holder.
    pub degraded: Vec<u32>,
    /// Bins left with none.
    pub lost: Vec<u32>,
}

impl Placements {
    /// Starts from `initial`, for a job of `workers` workers, `per_process` in each process.
    pub fn new(initial: Placement, workers: usize, per_process: usize) -> Self {
        Placements {
            current: initial,
            workers,
            per_process: per_process.max(1),
            failed: vec![false; workers],
            in_flight: VecDeque::new(),
            busy: FxHashMap::default(),
        }
    }

    /// The placement after everything issued so far.
    pub fn current(&self) -> &Placement {
        &self.current
    }

    /// The workers in the job.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Whether `worker` failed and has not rejoined.
    pub fn is_failed(&self, worker: u32) -> bool {
        self.failed.get(worker as usize).copied().unwrap_or(false)
    }

    /// Workers that serve bins: not failed.
    pub fn live(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.workers as u32).filter(|w| !self.is_failed(*w))
    }

    /// Records instructions sent at `time` (applied in the same order the workers apply
    /// them), and the transfers they imply.
    pub fn issue(&mut self, time: Time, insts: &[ControlInst]) {
        let mut insts = insts.to_vec();
        let next = next_placement(&self.current, &mut insts, self.workers);
        for inst in &insts {
            match inst {
                ControlInst::Fail { worker } => self.set_failed(*worker, true),
                ControlInst::Rejoin { worker } => self.set_failed(*worker, false),
                _ => {}
            }
        }
        for (bin, t) in all_transfers(&self.current, &next) {
            self.in_flight.push_back((time, bin, t));
            *self.busy.entry(bin).or_default() += 1;
        }
        self.current = next;
    }

    /// Every time before `frontier` is complete: its transfers happened.
    pub fn completed(&mut self, frontier: Time) {
        while self.in_flight.front().is_some_and(|(t, _, _)| *t < frontier) {
            if let Some((_, bin, _)) = self.in_flight.pop_front() {
                self.settled(bin);
            }
        }
    }

    /// Whether a change of `bin` is still in flight: the driver must wait for it to complete
    /// before changing the bin again.
    pub fn busy(&self, bin: u32) -> bool {
        self.busy.contains_key(&bin)
    }

    /// `worker` failed, noticed while the job had completed every time before `frontier`;
    /// the failure is issued at `time`. Returns what to send and what it did to the bins.
    pub fn fail(&mut self, worker: u32, frontier: Time, time: Time) -> FailureOutcome {
        self.completed(frontier);
        // Holders (bin, worker) whose state may not have arrived.
        let mut suspect: BTreeSet<(u32, u32)> = BTreeSet::new();
        for (_, bin, t) in &self.in_flight {
            if t.from == worker || suspect.contains(&(*bin, t.from)) {
                suspect.insert((*bin, t.to));
            }
        }
        let mut out = FailureOutcome::default();
        out.insts.push(ControlInst::Fail { worker });
        for (bin, holder) in &suspect {
            if *holder != worker && self.current[*bin as usize].holds(*holder) {
                out.insts.push(ControlInst::Drop {
                    bin: *bin,
                    worker: *holder,
                });
                out.suspects.push((*bin, *holder));
            }
        }
        // Transfers from the failed worker or to a dropped holder will never matter again.
        let void = |(_, bin, t): &(Time, u32, Transfer)| {
            t.from == worker || t.to == worker || suspect.contains(&(*bin, t.to))
        };
        let voided: Vec<u32> = self.in_flight.iter().filter(|e| void(e)).map(|e| e.1).collect();
        self.in_flight.retain(|e| !void(e));
        for bin in voided {
            self.settled(bin);
        }
        let before = self.current.clone();
        self.issue(time, &out.insts);
        for (bin, (was, now)) in before.iter().zip(&self.current).enumerate() {
            let bin = bin as u32;
            if was.primary == worker && now.primary == was.standby && now.primary != NONE {
                out.promoted.push(bin);
            }
            if now.is_lost() && !was.is_lost() {
                out.lost.push(bin);
            } else if now.is_degraded() && !was.is_degraded() {
                out.degraded.push(bin);
            }
        }
        out
    }

    /// `worker` serves again (empty): the instruction to send.
    pub fn rejoin(&mut self, worker: u32, time: Time) -> ControlInst {
        let inst = ControlInst::Rejoin { worker };
        self.issue(time, std::slice::from_ref(&inst));
        inst
    }

    /// New holders for every degraded bin: its primary and a standby chained among the live
    /// workers (none for a bin no live worker can take). Bins in `bin` order.
    pub fn recovery(&self) -> Vec<(u32, Replicas)> {
        self.current
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_degraded())
            .filter_map(|(bin, r)| {
                let standby = chained(r.primary, self.workers, self.per_process, |w| !self.is_failed(w));
                (standby != NONE).then_some((
                    bin as u32,
                    Replicas {
                        primary: r.primary,
                        standby,
                    },
                ))
            })
            .collect()
    }

    /// One transfer of `bin` is no longer in flight.
    fn settled(&mut self, bin: u32) {
        if let Some(n) = self.busy.get_mut(&bin) {
            *n -= 1;
            if *n == 0 {
                self.busy.remove(&bin);
            }
        }
    }

    fn set_failed(&mut self, worker: u32, failed: bool) {
        if let Some(f) = self.failed.get_mut(worker as usize) {
            *f = failed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{replicated, uniform};

    fn pair(primary: u32, standby: u32) -> Replicas {
        Replicas { primary, standby }
    }

    #[test]
    fn a_failure_promotes_and_degrades() {
        let mut p = Placements::new(replicated(&uniform(6, 3), 3, 3), 3, 3);
        let out = p.fail(1, 0, 5);
        assert_eq!(out.insts, vec![ControlInst::Fail { worker: 1 }]);
        // Bins 1 and 4 had primary 1 (standby 2); bins 0 and 3 had standby 1.
        assert_eq!(out.promoted, vec![1, 4]);
        assert_eq!(out.degraded, vec![0, 1, 3, 4]);
        assert!(out.lost.is_empty());
        // Standbys go to the one live worker that is not the primary.
        assert_eq!(
            p.recovery(),
            vec![(0, pair(0, 2)), (1, pair(2, 0)), (3, pair(0, 2)), (4, pair(2, 0))]
        );
        assert!(p.is_failed(1));
        p.rejoin(1, 9);
        assert!(!p.is_failed(1));
    }

    #[test]
    fn recovery_keeps_replicas_in_different_processes() {
        // Two processes of two workers (0 and 1, 2 and 3); worker 2 fails.
        let mut p = Placements::new(replicated(&uniform(8, 4), 4, 2), 4, 2);
        p.fail(2, 0, 5);
        let standbys = p.recovery();
        assert!(!standbys.is_empty());
        for (bin, r) in standbys {
            assert!(
                !crate::config::same_process(r.primary, r.standby, 2),
                "bin {bin}: {r:?} in one process while worker 3 is live"
            );
        }
    }

    #[test]
    fn holders_sent_state_by_the_failed_worker_are_dropped_until_complete() {
        let mut p = Placements::new(replicated(&uniform(4, 3), 3, 3), 3, 3);
        // Bin 1 is [1, 2]. At 10 its primary moves from worker 1 to worker 0: worker 1 ships.
        p.issue(10, &[ControlInst::Move { bin: 1, worker: 0 }]);
        // Worker 1 fails before time 10 completed: worker 0's copy is suspect.
        let out = p.fail(1, 10, 20);
        assert_eq!(out.suspects, vec![(1, 0)]);
        assert!(out.insts.contains(&ControlInst::Drop { bin: 1, worker: 0 }));
        assert_eq!(p.current()[1], Replicas::single(2));
        // Had time 10 completed, the move would be trusted.
        let mut q = Placements::new(replicated(&uniform(4, 3), 3, 3), 3, 3);
        q.issue(10, &[ControlInst::Move { bin: 1, worker: 0 }]);
        let out = q.fail(1, 11, 20);
        assert!(out.suspects.is_empty());
        assert_eq!(q.current()[1], pair(0, 2));
    }

    #[test]
    fn suspicion_follows_the_bin_and_loss_is_reported() {
        let mut p = Placements::new(replicated(&uniform(4, 4), 4, 4), 4, 4);
        // Bin 0: [0, 1]. Worker 0 moves it to 2 at 5; worker 2 moves it to 3 at 6.
        p.issue(5, &[ControlInst::Move { bin: 0, worker: 2 }]);
        p.issue(6, &[ControlInst::Move { bin: 0, worker: 3 }]);
        let out = p.fail(0, 5, 7);
        assert_eq!(out.suspects, vec![(0, 3)]);
        assert_eq!(p.current()[0], Replicas::single(1));
        // Its last holder fails too: lost.
        let out = p.fail(1, 8, 9);
        assert!(out.lost.contains(&0));
    }
}
