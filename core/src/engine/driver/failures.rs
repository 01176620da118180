//! The driver's side of failures and rejoins: each is taken at once and issued alone at
//! the next free logical time, then the recovery of the bins it left with one replica, or the
//! rebalance onto the worker that came back.

use super::{FailureRef, PlanDriver, Purpose, Urgent};
use crate::Time;
use crate::bins::list;
use crate::config::{ControlInst, Replicas};
use crate::error::CommandError;

use super::records::{FailureRecord, KEPT_FAILURES};

impl PlanDriver {
    /// Whether `worker` will have failed once what was taken is issued.
    pub(super) fn will_be_failed(&self, worker: u32) -> bool {
        self.will_fail.get(worker as usize).copied().unwrap_or(false)
    }

    /// Takes `urgent`, to be issued alone at the next free time.
    fn take_urgent(&mut self, urgent: Urgent) {
        let (worker, failed) = match urgent {
            Urgent::Fail(w, _) => (w, true),
            Urgent::Rejoin(w, _) => (w, false),
        };
        if let Some(f) = self.will_fail.get_mut(worker as usize) {
            *f = failed;
        }
        self.urgent.push_back(urgent);
    }

    /// `worker` failed (by command, or noticed) `now_s` into the run: its instructions go
    /// out alone at the next free time; then the running plan is cancelled, and a recovery
    /// starts if a live worker can take the degraded bins' standbys.
    pub fn fail(&mut self, worker: u32, now_s: f64) -> Result<(), CommandError> {
        if self.will_be_failed(worker) {
            return Err(CommandError::WorkerFailed(worker as usize));
        }
        self.take_urgent(Urgent::Fail(worker, now_s));
        Ok(())
    }

    /// `worker` serves again, empty: the rejoin goes out alone at the next free time; bins
    /// then rebalance onto it once nothing else runs.
    pub fn rejoin(&mut self, worker: u32, now_s: f64) -> Result<(), CommandError> {
        if !self.will_be_failed(worker) {
            return Err(CommandError::NotFailed(worker as usize));
        }
        self.take_urgent(Urgent::Rejoin(worker, now_s));
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
        let failure = FailureRef {
            index: self.failed,
            worker,
        };
        self.failed += 1;
        self.lost.extend_from_slice(&outcome.lost);
        let record = FailureRecord {
            worker,
            at_s,
            time,
            promoted: outcome.promoted.len(),
            degraded: outcome.degraded.len(),
            suspects: outcome.suspects.len(),
            lost: outcome.lost,
            recovery: None,
            rejoined_s: None,
        };
        let needs_recovery = record.needs_recovery();
        if self.failures.len() < KEPT_FAILURES {
            self.failures.push(record);
        } else {
            // Counted as it is now: only its rejoin is still to come, and that is counted
            // when it does.
            self.unlisted_failures.add(&record);
        }
        self.down.retain(|f| f.worker != worker);
        self.down.push(failure);
        if needs_recovery {
            self.unrecovered = Some(failure);
            self.recover(at_s);
        }
        outcome.insts
    }

    /// Plans standbys for every bin left with one copy (a computation restarted after a
    /// crash starts so), on a live worker of another process where there is one, with the
    /// recovery's schedule; `why` names the plan. Nothing if a plan runs or no bin needs one.
    pub fn restore_standbys(&mut self, why: &str, now_s: f64) {
        if self.active.is_some() {
            return;
        }
        let standbys = self.recovery_standbys();
        if standbys.is_empty() {
            return;
        }
        let mut goal = self.placement().clone();
        for (bin, replicas) in standbys {
            goal[bin as usize] = replicas;
        }
        self.plan(Purpose::Migration, self.recovery, why.to_string(), &goal, now_s);
    }

    /// Plans the bins spread over every live worker, each with a standby in another process
    /// (`PlanDriver::balanced`: a computation restarted to take in a process that joined
    /// starts so), with the recovery's schedule; `why` names the plan. Nothing if a plan
    /// runs.
    pub fn rebalance(&mut self, why: &str, now_s: f64) {
        if self.active.is_some() {
            return;
        }
        let goal = self.balanced();
        self.plan(Purpose::Migration, self.recovery, why.to_string(), &goal, now_s);
    }

    /// Starts the recovery of the newest failure awaiting one, if any, if nothing else runs
    /// and a live worker can take a standby; otherwise it waits (for the running plan's
    /// end, or a rejoin).
    pub(super) fn recover(&mut self, now_s: f64) {
        let Some(failure) = self.unrecovered else {
            return;
        };
        if self.active.is_some() {
            return;
        }
        let mut goal = self.placement().clone();
        let standbys = self.recovery_standbys();
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
        self.supersede(failure);
        self.plan(
            Purpose::Recovery(failure),
            self.recovery,
            format!("standbys lost with worker {}", failure.worker),
            &goal,
            now_s,
        );
    }

    /// A new attempt at restoring the replicas of `failure` starts: an earlier one (cut
    /// short) is no longer its recovery, and counts in the totals instead, so that the
    /// record of a failure holds one plan however often it was retried.
    fn supersede(&mut self, failure: FailureRef) {
        if let Some(replaced) = self
            .failures
            .get_mut(failure.index)
            .and_then(|f| f.recovery.take())
        {
            self.unlisted_plans.add(&replaced, true);
        }
    }

    /// Issues the rejoin of `worker` (taken at `now_s`) at `time`.
    pub(super) fn issue_rejoin(&mut self, worker: u32, now_s: f64, time: Time) -> ControlInst {
        let inst = self.placements.rejoin(worker, time);
        tracing::info!(target: "megaflux::replica", phase = "rejoin", worker, time);
        if let Some(at) = self.down.iter().position(|f| f.worker == worker) {
            let failure = self.down.swap_remove(at);
            match self.failures.get_mut(failure.index) {
                Some(f) => f.rejoined_s = Some(now_s),
                None => self.unlisted_failures.rejoined += 1,
            }
        }
        // The failure whose replicas no recovery restored, if any (not the one whose
        // recovery runs).
        let running = self.active.as_ref().map(|a| a.purpose);
        let unrecovered = self
            .unrecovered
            .filter(|f| running != Some(Purpose::Recovery(*f)));
        self.queue_rebalance(unrecovered);
        self.start_queued(now_s);
        inst
    }

    /// Queues a rebalance for when nothing else runs, merged with the one waiting if any
    /// (see `queued`): it restores the replicas of the newest failure either was for.
    pub(super) fn queue_rebalance(&mut self, failure: Option<FailureRef>) {
        let waiting = self.queued.flatten();
        self.queued = Some(failure.or(waiting));
    }

    /// Starts the waiting rebalance, if any, if nothing else runs.
    pub(super) fn start_queued(&mut self, now_s: f64) {
        if self.active.is_some() {
            return;
        }
        let Some(failure) = self.queued.take() else {
            return;
        };
        // A failure restored (or superseded) since the rebalance was queued keeps the
        // recovery it has: this is an ordinary rebalance.
        let failure = failure.filter(|f| self.unrecovered == Some(*f));
        if let Some(f) = failure {
            self.supersede(f);
        }
        let goal = self.balanced();
        self.plan(
            Purpose::Rebalance(failure),
            self.recovery,
            self.rebalance_why(),
            &goal,
            now_s,
        );
    }
}
