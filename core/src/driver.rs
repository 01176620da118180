//! The plan driver on worker 0: turns commands, plans, failures and rejoins into
//! configuration changes on the control input, one step at a time, and keeps the record of
//! what became of each.
//!
//! Rules it keeps:
//! * one set of instructions per logical time: a failure's or rejoin's go out alone, at a
//!   time nothing else was sent at, one per time (so that every worker and [`Placements`]
//!   apply the same instructions in the same order and derive the same transfers);
//! * a bin is changed only once its previous change completed ([`Placements::busy`]), so
//!   that one failure can never lose a bin;
//! * a failure cancels the running plan, and starts a recovery (new standbys for the bins
//!   left with one replica, under the recovery strategy) when a live worker can take them;
//!   a rejoin rebalances onto the worker that came back once nothing else runs.

use std::collections::VecDeque;

use serde::Serialize;

use crate::Time;
use crate::bins::list;
use crate::config::{ControlInst, NONE, Placement, Replicas, chained, single, uniform};
use crate::control::Command;
use crate::error::CommandError;
use crate::failover::Placements;
use crate::plan::{self, Change, Schedule, Strategy, Target};

/// What became of a migration or a recovery (a plan or a hand-made move).
#[derive(Clone, Debug, Serialize)]
pub struct MigrationRecord {
    pub strategy: String,
    pub target: String,
    /// Wall-clock seconds since the start of the measured run.
    pub issued_s: f64,
    pub completed_s: Option<f64>,
    /// Steps and bin changes the plan was made of.
    pub steps: usize,
    pub bins_planned: usize,
    /// Bin changes issued (fewer than planned if the plan was cancelled or the run ended).
    pub bins_moved: usize,
    /// The logical time of every issued step.
    pub step_times: Vec<Time>,
    pub cancelled: bool,
}

/// What became of a failure.
#[derive(Clone, Debug, Serialize)]
pub struct FailureRecord {
    pub worker: u32,
    /// When the driver failed the worker (or noticed it failed), on the run's clock.
    pub at_s: f64,
    /// The logical time of the failure's instructions.
    pub time: Time,
    /// Bins whose standby became primary.
    pub promoted: Vec<u32>,
    /// Bins left with one replica.
    pub degraded: Vec<u32>,
    /// Holders dropped because the state they were sent may never have left the worker.
    pub suspects: usize,
    /// Bins left with no replica.
    pub lost: Vec<u32>,
    /// The plan that gave the degraded bins new standbys (after a rejoin, if no live
    /// worker could take them before).
    pub recovery: Option<MigrationRecord>,
    pub rejoined_s: Option<f64>,
}

/// A failure or rejoin taken and not yet issued, with when it was taken.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Urgent {
    Fail(u32, f64),
    Rejoin(u32, f64),
}

impl FailureRecord {
    /// Whether its degraded bins still wait for a recovery (none ran, none is needed when it
    /// degraded nothing, and none can help when it lost bins).
    fn needs_recovery(&self) -> bool {
        self.recovery.is_none() && self.lost.is_empty() && !self.degraded.is_empty()
    }
}

/// Why a plan runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Purpose {
    Migration,
    /// Restores the replicas lost in the failure with this index.
    Recovery(usize),
    /// Spreads bins onto a worker that rejoined; restores the replicas of the failure with
    /// this index if no recovery did.
    Rebalance(Option<usize>),
}

struct ActivePlan {
    purpose: Purpose,
    record: MigrationRecord,
    /// The bins changed so far.
    bins: Vec<u32>,
    pipelined: bool,
    remaining: VecDeque<Vec<Change>>,
    /// Issued steps whose time the output frontier has not passed yet.
    in_flight: VecDeque<(Time, Vec<Change>)>,
}

/// Issues plan steps, failures and rejoins on worker 0.
pub struct PlanDriver {
    placements: Placements,
    workers: usize,
    per_process: usize,
    replicas: usize,
    recovery: Schedule,
    /// Failures and rejoins taken, to be issued each alone at the next free time.
    urgent: VecDeque<Urgent>,
    /// The last time instructions went out at.
    last_issued: Option<Time>,
    active: Option<ActivePlan>,
    /// Rebalances waiting for the running plan to finish.
    queued: VecDeque<Option<usize>>,
    migrations: Vec<MigrationRecord>,
    failures: Vec<FailureRecord>,
}

impl PlanDriver {
    /// A driver for a job of `workers` workers (`per_process` per process) starting from
    /// `initial`, with `replicas` per bin; recoveries run under `recovery`.
    pub fn new(
        initial: Placement,
        workers: usize,
        per_process: usize,
        replicas: usize,
        recovery: Schedule,
    ) -> Self {
        PlanDriver {
            placements: Placements::new(initial, workers, per_process),
            workers,
            per_process,
            replicas,
            recovery,
            urgent: VecDeque::new(),
            last_issued: None,
            active: None,
            queued: VecDeque::new(),
            migrations: Vec::new(),
            failures: Vec::new(),
        }
    }

    /// A driver with one replica per bin, starting from `map`, that never recovers.
    pub fn single(map: &[u32], workers: usize) -> Self {
        let recovery = Schedule {
            strategy: Strategy::AllAtOnce,
            pipelined: false,
        };
        PlanDriver::new(single(&map.to_vec()), workers, workers, 1, recovery)
    }

    /// The placement as of the last issued instruction.
    pub fn placement(&self) -> &Placement {
        self.placements.current()
    }

    /// Whether a plan is running.
    pub fn busy(&self) -> bool {
        self.active.is_some()
    }

    /// Whether the running plan waits for each step to complete before the next. Its steps
    /// may then be sealed (the control input advanced past them) as soon as they are issued.
    pub fn waits_for_steps(&self) -> bool {
        self.active.as_ref().is_some_and(|a| !a.pipelined)
    }

    /// Takes a command `now_s` into the run, or says why not. What it changes goes out on
    /// the control input at later polls.
    pub fn command(&mut self, command: Command, now_s: f64) -> Result<(), CommandError> {
        match command {
            Command::MoveBins {
                bins,
                worker,
                standby,
            } => self.move_bins(&bins, worker, standby, now_s),
            Command::StartPlan { schedule, target } => self.start(schedule, &target, now_s),
            Command::CancelPlan => match self.active.as_mut() {
                Some(p) if p.purpose == Purpose::Migration => {
                    p.remaining.clear();
                    p.record.cancelled = true;
                    Ok(())
                }
                Some(_) => Err(CommandError::Restoring),
                None => Err(CommandError::NoPlan),
            },
            Command::Fail { worker } => self.fail(self.worker(worker)?, now_s),
            Command::Rejoin { worker } => self.rejoin(self.worker(worker)?, now_s),
        }
    }

    /// Whether `worker` will have failed once what was taken is issued.
    fn will_be_failed(&self, worker: u32) -> bool {
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

    fn worker(&self, worker: usize) -> Result<u32, CommandError> {
        if worker < self.workers {
            Ok(worker as u32)
        } else {
            Err(CommandError::UnknownWorker {
                worker,
                workers: self.workers,
            })
        }
    }

    fn move_bins(
        &mut self,
        bins: &[usize],
        worker: usize,
        standby: bool,
        now_s: f64,
    ) -> Result<(), CommandError> {
        let w = self.worker(worker)?;
        let count = self.placement().len();
        if let Some(&bin) = bins.iter().find(|b| **b >= count) {
            return Err(CommandError::UnknownBin { bin, bins: count });
        }
        if self.active.is_some() {
            return Err(CommandError::PlanRunning);
        }
        if self.placements.is_failed(w) {
            return Err(CommandError::WorkerFailed(worker));
        }
        let all_at_once = Schedule {
            strategy: Strategy::AllAtOnce,
            pipelined: false,
        };
        if !standby {
            let mut target: Vec<u32> = self.placement().iter().map(|r| r.primary).collect();
            for b in bins {
                target[*b] = w;
            }
            return self.start(all_at_once, &Target::Map(target), now_s);
        }
        let mut goal = self.placement().clone();
        for &bin in bins {
            let r = goal[bin];
            let reason = if self.replicas < 2 {
                Some("the job has one replica per bin")
            } else if r.primary == w {
                Some("it holds the primary")
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(CommandError::BadStandby {
                    bin,
                    worker,
                    reason: reason.to_string(),
                });
            }
            goal[bin] = Replicas {
                primary: r.primary,
                standby: w,
            };
        }
        let target = format!(
            "standby of {} on worker {worker}",
            list(&bins.iter().map(|b| *b as u32).collect::<Vec<_>>())
        );
        self.plan(Purpose::Migration, all_at_once, target, &goal, now_s);
        Ok(())
    }

    /// Plans a migration from the current placement to `target`.
    pub fn start(&mut self, schedule: Schedule, target: &Target, now_s: f64) -> Result<(), CommandError> {
        if self.active.is_some() {
            return Err(CommandError::PlanRunning);
        }
        let live: Vec<bool> = (0..self.workers as u32)
            .map(|w| !self.placements.is_failed(w))
            .collect();
        let goal = target
            .goal(self.placement(), self.workers, self.per_process, &live)
            .map_err(|e| CommandError::BadTarget(e.to_string()))?;
        self.plan(Purpose::Migration, schedule, target.to_string(), &goal, now_s);
        Ok(())
    }

    fn plan(&mut self, purpose: Purpose, schedule: Schedule, target: String, goal: &Placement, now_s: f64) {
        let changes = plan::changes(self.placement(), goal);
        let bins_planned = changes.len();
        let steps: VecDeque<Vec<Change>> = plan::steps(schedule.strategy, changes).into();
        let kind = match purpose {
            Purpose::Migration => "migration",
            Purpose::Recovery(_) => "recovery",
            Purpose::Rebalance(_) => "rebalance",
        };
        tracing::info!(
            target: "megaflux::plan",
            phase = "planned", strategy = %schedule, target = %target, steps = steps.len(), bins = bins_planned, purpose = kind
        );
        self.active = Some(ActivePlan {
            purpose,
            record: MigrationRecord {
                strategy: schedule.to_string(),
                target,
                issued_s: now_s,
                completed_s: None,
                steps: steps.len(),
                bins_planned,
                bins_moved: 0,
                step_times: Vec::new(),
                cancelled: false,
            },
            pipelined: schedule.pipelined,
            remaining: steps,
            in_flight: VecDeque::new(),
            bins: Vec::new(),
        });
    }

    /// Issues the failure of `worker` (taken at `at_s`) at `time`, with the output
    /// frontier at `frontier`.
    fn issue_failure(&mut self, worker: u32, at_s: f64, time: Time, frontier: Time) -> Vec<ControlInst> {
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
    fn recover(&mut self, index: usize, now_s: f64) {
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
    fn issue_rejoin(&mut self, worker: u32, now_s: f64, time: Time) -> ControlInst {
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

    fn start_queued(&mut self, now_s: f64) {
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
    fn balanced(&self) -> Placement {
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

    /// The full placement as an event, for observers (after failures and rejoins).
    pub fn report_placement(&self, time: Time) {
        let holders: Vec<String> = self
            .placement()
            .iter()
            .map(|r| match (r.primary, r.standby) {
                (NONE, _) => "-".to_string(),
                (p, NONE) => p.to_string(),
                (p, s) => format!("{p}/{s}"),
            })
            .collect();
        tracing::info!(target: "megaflux::replica", phase = "placement", time, holders = %holders.join(" "));
    }

    /// Called by worker 0 while its control input is open at `time`, with the output
    /// frontier at `frontier`: the instructions to send at `time`, and whether to seal
    /// `time` at once. Sends a failure's or rejoin's instructions alone; otherwise issues
    /// at most one plan step per time.
    pub fn poll(&mut self, time: Time, frontier: Time, now_s: f64) -> (Vec<ControlInst>, bool) {
        self.placements.completed(frontier);
        if let Some(urgent) = self.urgent.front().copied() {
            // Something already went out at `time`: take the next time.
            if self.last_issued == Some(time) {
                return (Vec::new(), true);
            }
            self.urgent.pop_front();
            self.last_issued = Some(time);
            let insts = match urgent {
                Urgent::Fail(worker, at_s) => self.issue_failure(worker, at_s, time, frontier),
                Urgent::Rejoin(worker, at_s) => vec![self.issue_rejoin(worker, at_s, time)],
            };
            return (insts, true);
        }
        let mut out = Vec::new();
        if let Some(active) = self.active.as_mut() {
            let ready = match active.record.step_times.last() {
                None => true,
                Some(&t) if t >= time => false,
                Some(&t) => active.pipelined || t < frontier,
            };
            let free = |step: &Vec<Change>| step.iter().all(|c| !self.placements.busy(c.bin));
            if ready && active.remaining.front().is_some_and(free) {
                let step = active.remaining.pop_front().unwrap_or_default();
                let index = active.record.step_times.len();
                let mut issued = Vec::new();
                for c in step {
                    let current = self.placements.current()[c.bin as usize];
                    // A change planned before a failure or rejoin may no longer apply.
                    if current != c.from || c.to.holders().any(|w| self.placements.is_failed(w)) {
                        continue;
                    }
                    let (from, to) = c.endpoints();
                    tracing::info!(
                        target: "megaflux::migration",
                        phase = "issued", bin = c.bin, from, to, time, step = index,
                        primary = c.to.primary, standby = holder(c.to.standby), copy = c.transfers().any(|t| c.to.holds(t.from))
                    );
                    out.push(ControlInst::Place {
                        bin: c.bin,
                        replicas: c.to,
                    });
                    issued.push(c);
                }
                self.placements.issue(time, &out);
                self.last_issued = Some(time);
                active.bins.extend(issued.iter().map(|c| c.bin));
                active.record.step_times.push(time);
                active.record.bins_moved += issued.len();
                active.in_flight.push_back((time, issued));
            }
        }
        self.retire(frontier, now_s);
        let seal = !out.is_empty() && self.waits_for_steps();
        (out, seal)
    }

    /// Notes the steps whose time the output frontier (at `frontier`) has passed, and
    /// finishes the plan once every step was issued and has completed. Issues nothing: a job
    /// whose control input is closed calls only this.
    pub fn retire(&mut self, frontier: Time, now_s: f64) {
        let Some(active) = self.active.as_mut() else {
            return;
        };
        while let Some((t, step)) = active.in_flight.front()
            && *t < frontier
        {
            for c in step {
                let (from, to) = c.endpoints();
                tracing::info!(
                    target: "megaflux::migration",
                    phase = "completed", bin = c.bin, from, to, time = *t
                );
            }
            active.in_flight.pop_front();
        }
        if active.remaining.is_empty()
            && active.in_flight.is_empty()
            && let Some(mut finished) = self.active.take()
        {
            finished.record.completed_s = Some(now_s);
            tracing::info!(
                target: "megaflux::plan",
                phase = "completed", strategy = %finished.record.strategy, steps = finished.record.step_times.len(), seconds = now_s - finished.record.issued_s
            );
            self.finish(finished, now_s);
        }
    }

    fn finish(&mut self, finished: ActivePlan, now_s: f64) {
        if finished.purpose != Purpose::Migration {
            self.report_placement(finished.record.step_times.last().copied().unwrap_or(0));
        }
        let cancelled = finished.record.cancelled;
        match finished.purpose {
            Purpose::Migration => self.migrations.push(finished.record),
            Purpose::Rebalance(None) => {
                self.migrations.push(finished.record);
                // Cut short by a failure: the workers still deserve their share later.
                if cancelled {
                    self.queued.push_back(None);
                }
            }
            Purpose::Recovery(i) | Purpose::Rebalance(Some(i)) => {
                if !cancelled {
                    let mut bins = finished.bins;
                    bins.sort_unstable();
                    tracing::info!(
                        target: "megaflux::replica",
                        phase = "recovered", worker = self.failures[i].worker, bins = %list(&bins)
                    );
                }
                self.failures[i].recovery = Some(finished.record);
            }
        }
        // A recovery cut short by a later failure starts again, for every bin still degraded,
        // as that later failure's recovery; then any waiting rebalance.
        if let Some(i) = self.failures.iter().rposition(FailureRecord::needs_recovery)
            && !self.queued.iter().any(|q| *q == Some(i))
        {
            self.recover(i, now_s);
        }
        self.start_queued(now_s);
    }

    /// Finished migrations, and the running one (not completed) if any.
    pub fn records(&self) -> Vec<MigrationRecord> {
        let mut all = self.migrations.clone();
        if let Some(a) = self.active.as_ref().filter(|a| a.purpose == Purpose::Migration) {
            all.push(a.record.clone());
        }
        all
    }

    /// Every failure, with its recovery (the running one, not completed, if any).
    pub fn failures(&self) -> Vec<FailureRecord> {
        let mut all = self.failures.clone();
        if let Some(a) = self.active.as_ref()
            && let Purpose::Recovery(i) | Purpose::Rebalance(Some(i)) = a.purpose
        {
            all[i].recovery = Some(a.record.clone());
        }
        all
    }

    /// Bins lost so far (no replica left).
    pub fn lost(&self) -> Vec<u32> {
        self.failures
            .iter()
            .flat_map(|f| f.lost.iter().copied())
            .collect()
    }
}

/// A holder for events: -1 for none.
fn holder(worker: u32) -> i64 {
    if worker == NONE { -1 } else { i64::from(worker) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{replicated, uniform};

    fn schedule(strategy: Strategy, pipelined: bool) -> Schedule {
        Schedule { strategy, pipelined }
    }

    fn primaries(d: &PlanDriver) -> Vec<u32> {
        d.placement().iter().map(|r| r.primary).collect()
    }

    #[test]
    fn waits_for_completion_unless_pipelined() {
        let mut d = PlanDriver::single(&uniform(16, 2), 2);
        d.start(schedule(Strategy::Fluid, false), &Target::Pack(1), 0.0)
            .unwrap();
        assert_eq!(d.poll(5, 0, 0.1).0.len(), 1);
        assert!(d.poll(6, 0, 0.1).0.is_empty());
        assert_eq!(d.poll(7, 6, 0.2).0.len(), 1);
        let mut p = PlanDriver::single(&uniform(16, 2), 2);
        p.start(schedule(Strategy::Fluid, true), &Target::Pack(1), 0.0)
            .unwrap();
        let issued: usize = (1..=8).map(|t| p.poll(t, 0, 0.0).0.len()).sum();
        assert_eq!(issued, 8);
        assert!(p.busy());
        assert!(p.poll(9, 0, 0.0).0.is_empty());
        assert!(p.poll(10, 9, 0.5).0.is_empty());
        assert!(!p.busy());
        let r = &p.records()[0];
        assert_eq!((r.steps, r.bins_moved, r.completed_s), (8, 8, Some(0.5)));
        assert_eq!(primaries(&p), vec![0; 16]);
    }

    #[test]
    fn an_unfinished_plan_reports_only_what_was_issued() {
        let mut d = PlanDriver::single(&uniform(16, 2), 2);
        d.start(schedule(Strategy::Fluid, false), &Target::Pack(1), 0.0)
            .unwrap();
        assert_eq!(d.poll(1, 0, 0.0).0.len(), 1);
        assert_eq!(d.poll(2, 2, 0.0).0.len(), 1);
        // The run ends: the issued steps complete, nothing new is issued.
        d.retire(u64::MAX, 1.0);
        let r = &d.records()[0];
        assert_eq!((r.step_times.len(), r.bins_moved, r.bins_planned), (2, 2, 8));
        assert_eq!(r.completed_s, None);
        assert_eq!(primaries(&d).iter().filter(|w| **w == 0).count(), 10);
    }

    #[test]
    fn rejects_bad_commands_and_keeps_the_placement() {
        let mut d = PlanDriver::single(&uniform(16, 2), 2);
        let before = d.placement().clone();
        let mv = |bins: Vec<usize>, worker| Command::MoveBins {
            bins,
            worker,
            standby: false,
        };
        assert_eq!(
            d.command(mv(vec![16], 0), 0.0),
            Err(CommandError::UnknownBin { bin: 16, bins: 16 })
        );
        assert_eq!(
            d.command(mv(vec![0], 2), 0.0),
            Err(CommandError::UnknownWorker {
                worker: 2,
                workers: 2
            })
        );
        let drain5 = Command::StartPlan {
            schedule: schedule(Strategy::Fluid, false),
            target: Target::Drain(5),
        };
        assert!(d.command(drain5, 0.0).is_err());
        assert_eq!(d.command(Command::CancelPlan, 0.0), Err(CommandError::NoPlan));
        assert_eq!(
            d.command(Command::Rejoin { worker: 1 }, 0.0),
            Err(CommandError::NotFailed(1))
        );
        let standby = Command::MoveBins {
            bins: vec![1],
            worker: 0,
            standby: true,
        };
        assert!(matches!(
            d.command(standby, 0.0),
            Err(CommandError::BadStandby { .. })
        ));
        assert_eq!(d.placement(), &before);
        d.command(mv(vec![1], 0), 0.0).unwrap();
        assert_eq!(d.command(mv(vec![3], 0), 0.0), Err(CommandError::PlanRunning));
        assert_eq!(
            d.poll(3, 0, 0.0).0,
            vec![ControlInst::Place {
                bin: 1,
                replicas: Replicas::single(0)
            }]
        );
    }

    #[test]
    fn a_failure_goes_out_alone_then_recovery_copies_the_degraded_bins() {
        let matched = schedule(Strategy::Matched, false);
        let mut d = PlanDriver::new(replicated(&uniform(6, 3), 3, 3), 3, 3, 2, matched);
        d.start(schedule(Strategy::Fluid, false), &Target::Pack(2), 0.0)
            .unwrap();
        assert_eq!(d.poll(1, 0, 0.0).0.len(), 1);
        d.command(Command::Fail { worker: 1 }, 0.5).unwrap();
        assert_eq!(
            d.command(Command::Fail { worker: 1 }, 0.5),
            Err(CommandError::WorkerFailed(1))
        );
        // The failure's instructions, alone and sealed.
        let (insts, seal) = d.poll(2, 1, 0.5);
        assert!(seal && insts[0] == ControlInst::Fail { worker: 1 });
        // The migration was cancelled; recovery copies one bin per worker pair per step.
        assert!(d.records()[0].cancelled);
        let mut copied = 0;
        for t in 3..40 {
            copied += d.poll(t, t, 1.0).0.len();
        }
        assert!(!d.busy());
        let f = &d.failures()[0];
        let recovery = f.recovery.as_ref().unwrap();
        assert_eq!(recovery.bins_moved, copied);
        assert_eq!(copied, f.degraded.len());
        assert!(d.placement().iter().all(|r| !r.is_degraded() && !r.holds(1)));
        // Worker 1 comes back: the bins rebalance to the initial layout.
        d.command(Command::Rejoin { worker: 1 }, 2.0).unwrap();
        assert_eq!(d.poll(50, 50, 2.0).0, vec![ControlInst::Rejoin { worker: 1 }]);
        for t in 51..200 {
            d.poll(t, t, 3.0);
        }
        assert_eq!(d.placement(), &replicated(&uniform(6, 3), 3, 3));
        assert_eq!(d.failures()[0].rejoined_s, Some(2.0));
    }

    #[test]
    fn without_a_spare_the_rejoin_is_the_recovery() {
        let mut d = PlanDriver::new(
            replicated(&uniform(4, 2), 2, 2),
            2,
            2,
            2,
            schedule(Strategy::AllAtOnce, false),
        );
        d.command(Command::Fail { worker: 0 }, 1.0).unwrap();
        d.poll(10, 10, 1.0);
        assert!(!d.busy());
        assert!(d.placement().iter().all(|r| *r == Replicas::single(1)));
        d.command(Command::Rejoin { worker: 0 }, 2.0).unwrap();
        for t in 20..30 {
            d.poll(t, t, 2.5);
        }
        let f = &d.failures()[0];
        assert_eq!(f.recovery.as_ref().map(|r| r.bins_moved), Some(4));
        assert!(d.records().is_empty());
    }

    #[test]
    fn losing_the_last_replica_is_recorded() {
        let mut d = PlanDriver::single(&uniform(4, 2), 2);
        d.command(Command::Fail { worker: 1 }, 1.0).unwrap();
        d.poll(5, 5, 1.0);
        assert_eq!(d.lost(), vec![1, 3]);
    }

    #[test]
    fn failures_and_rejoins_each_go_out_alone_at_a_time_of_their_own() {
        let pipelined = schedule(Strategy::Fluid, true);
        let mut d = PlanDriver::new(replicated(&uniform(8, 3), 3, 3), 3, 3, 2, pipelined);
        d.start(pipelined, &Target::Pack(2), 0.0).unwrap();
        // A pipelined step goes out at 4 without sealing it...
        let (step, seal) = d.poll(4, 0, 0.1);
        assert!(!step.is_empty() && !seal);
        // ...then a failure and a rejoin of the same worker come in at the same time.
        d.command(Command::Fail { worker: 2 }, 0.2).unwrap();
        d.command(Command::Rejoin { worker: 2 }, 0.2).unwrap();
        assert_eq!(
            d.command(Command::Rejoin { worker: 2 }, 0.2),
            Err(CommandError::NotFailed(2))
        );
        // Time 4 is taken: the failure waits for 5, the rejoin for 6.
        assert_eq!(d.poll(4, 0, 0.2), (Vec::new(), true));
        let (fail, seal) = d.poll(5, 0, 0.2);
        assert!(seal && fail.first() == Some(&ControlInst::Fail { worker: 2 }));
        assert!(
            fail.iter()
                .all(|i| matches!(i, ControlInst::Fail { .. } | ControlInst::Drop { .. }))
        );
        assert_eq!(d.poll(5, 0, 0.2), (Vec::new(), true));
        assert_eq!(d.poll(6, 0, 0.3).0, vec![ControlInst::Rejoin { worker: 2 }]);
    }
}
