//! The driver's side of failures and rejoins: each is taken at once and issued alone at
//! the next free logical time, then the recovery of the bins it left with one replica, or the
//! rebalance onto the worker that came back.

use super::{PlanDriver, Purpose, Urgent};
use crate::Time;
use crate::bins::list;
use crate::config::{ControlInst, NONE, Placement, Replicas, chained, uniform};
use crate::error::CommandError;

use super::records::FailureRecord;

impl PlanDriver {
    /// Whether `worker` will have failed once what was taken is issued.
    pub(super) fn will_be_failed(&self, worker: u32) -> bool {
        self.urgent
            .iter()
            .fold(self.placements.is_failed(worker), |failed, u| match u {
                Urgent::Fail(w, _) if *w == worker => true,
                Urgent::Rejoin(w, _) if *w == worker => false,
                _ => failed,
            })
    }

    /// `worker` failed (by command, or noticed) `now_s` into the run: its instructions go
    /// out alone at the next free time; then the running plan is cancelled, and a recovery
    /// starts if a live worker can take the degraded bins' standbys.
    pub fn fail(&mut self, worker: u32, now_s: f64) -> Result<(), CommandError> {
        if self.will_be_failed(worker) {
            return Err(CommandError::WorkerFailed(worker as usize));
        }
        self.urgent.push_back(Urgent::Fail(worker, now_s));
        Ok(())
    }

    /// `worker` serves again, empty: the rejoin goes out alone at the next free time; bins
    /// then rebalance onto it once nothing else runs.
    pub fn rejoin(&mut self, worker: u32, now_s: f64) -> Result<(), CommandError> {
        if !self.will_be_failed(worker) {
            return Err(CommandError::NotFailed(worker as usize));
        }
        self.urgent.push_back(Urgent::Rejoin(worker, now_s));
        Ok(())
    }

    /// Issues the failure of `worker` (taken at `at_s`) at `time`, with the output
    /// frontier at `frontier`.
    pub(super) fn issue_failure(
        &mut self,
        worker: u32,
        at_s: f64,
        time: Time,
        frontier: Time,
    ) -> Vec<ControlInst> {
        let outcome = self.placements.fail(worker, frontier, time);
        tracing::warn!(
            target: "megaflux::replica",
            phase = "failed", worker, time, promoted = outcome.promoted.len(), degraded = outcome.degraded.len(),
            suspects = outcome.suspects.len(), lost = %list(&outcome.lost)
        );
        self.report_placement(time);
        if let Some(active) = self.active.as_mut() {
            active.remaining.clear();
            active.record.cancelled = true;
        }
        let index = self.failures.len();
        self.failures.push(FailureRecord {
            worker,
            at_s,
            time,
            promoted: outcome.promoted,
            degraded: outcome.degraded,
            suspects: outcome.suspects.len(),
            lost: outcome.lost,
            recovery: None,
            rejoined_s: None,
        });
        self.recover(index, at_s);
        outcome.insts
    }

    /// Starts the recovery of failure `index` if nothing else runs and a live worker can
    /// take a standby; otherwise it waits (for the running plan's end, or a rejoin).
    pub(super) fn recover(&mut self, index: usize, now_s: f64) {
        if self.active.is_some() || !self.failures[index].needs_recovery() {
            return;
        }
        let mut goal = self.placement().clone();
        let standbys = self.placements.recovery();
        if standbys.is_empty() {
            if goal.iter().any(Replicas::is_degraded) {
                tracing::warn!(
                    target: "megaflux::replica",
                    phase = "degraded", bins = goal.iter().filter(|r| r.is_degraded()).count(),
                    reason = "no live worker can hold their standbys until a worker rejoins"
                );
            }
            return;
        }
        for (bin, replicas) in standbys {
            goal[bin as usize] = replicas;
        }
        let worker = self.failures[index].worker;
        self.plan(
            Purpose::Recovery(index),
            self.recovery,
            format!("standbys lost with worker {worker}"),
            &goal,
            now_s,
        );
    }

    /// Issues the rejoin of `worker` (taken at `now_s`) at `time`.
    pub(super) fn issue_rejoin(&mut self, worker: u32, now_s: f64, time: Time) -> ControlInst {
        let inst = self.placements.rejoin(worker, time);
        tracing::info!(target: "megaflux::replica", phase = "rejoin", worker, time);
        let failure = self
            .failures
            .iter()
            .rposition(|f| f.worker == worker && f.rejoined_s.is_none());
        if let Some(f) = failure {
            self.failures[f].rejoined_s = Some(now_s);
        }
        // The failure whose replicas no recovery restored, if any.
        let unrecovered = self
            .failures
            .iter()
            .rposition(FailureRecord::needs_recovery)
            .filter(
                |i| !matches!(self.active.as_ref().map(|a| a.purpose), Some(Purpose::Recovery(r)) if r == *i),
            );
        self.queued.push_back(unrecovered);
        self.start_queued(now_s);
        inst
    }

    pub(super) fn start_queued(&mut self, now_s: f64) {
        if self.active.is_some() {
            return;
        }
        let Some(failure) = self.queued.pop_front() else {
            return;
        };
        let goal = self.balanced();
        self.plan(
            Purpose::Rebalance(failure),
            self.recovery,
            "balanced over the live workers".to_string(),
            &goal,
            now_s,
        );
    }

    /// Primaries spread over the live workers as the job started (`bin mod workers` when all
    /// are live), each with a chained standby when the job has two replicas.
    pub(super) fn balanced(&self) -> Placement {
        let live: Vec<u32> = self.placements.live().collect();
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
