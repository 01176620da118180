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

use crate::Time;
use crate::bins::list;
use crate::config::{ControlInst, NONE, Placement, Replicas, single};
use crate::control::Command;
use crate::error::CommandError;
use crate::failover::Placements;
use crate::plan::{self, Change, Schedule, Strategy, Target};

mod failures;
mod records;

pub use records::{FailureRecord, MigrationRecord};

/// A failure or rejoin taken and not yet issued, with when it was taken.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Urgent {
    Fail(u32, f64),
    Rejoin(u32, f64),
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
    id: u64,
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
    /// The least logical time between two steps of a pipelined plan.
    step_gap: Time,
    /// The time the control input stands at (as of the last poll or `set_time`).
    time: Time,
    /// Plans made so far (their ids).
    plans: u64,
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
            step_gap: 1,
            time: 0,
            plans: 0,
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

    /// Spaces the steps of pipelined plans `gap` logical times apart (one by default). A
    /// run gives one millisecond of epochs, so that a plan's pace does not depend on the
    /// epoch length: a step per 100 µs epoch piles the moves up as one all-at-once step.
    pub fn with_step_gap(mut self, gap: Time) -> Self {
        self.step_gap = gap.max(1);
        self
    }

    /// The placement as of the last issued instruction.
    pub fn placement(&self) -> &Placement {
        self.placements.current()
    }

    /// Whether failures or rejoins were taken and not issued yet.
    pub fn urgent(&self) -> bool {
        !self.urgent.is_empty()
    }

    /// Tells the driver where the control input stands (plans record it as their start).
    pub fn set_time(&mut self, time: Time) {
        self.time = self.time.max(time);
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
        let id = self.plans;
        self.plans += 1;
        tracing::info!(
            target: "megaflux::plan",
            phase = "planned", id, time = self.time, strategy = %schedule, target = %target, steps = steps.len(), bins = bins_planned, purpose = kind,
            run_s = now_s
        );
        self.active = Some(ActivePlan {
            id,
            purpose,
            record: MigrationRecord {
                id,
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

    /// The full placement as an event, for observers (after failures and rejoins).
    pub fn report_placement(&self, time: Time) {
        let holders: Vec<String> = self.placement().iter().map(ToString::to_string).collect();
        tracing::info!(target: "megaflux::replica", phase = "placement", time, holders = %holders.join(" "));
    }

    /// Called by worker 0 while its control input is open at `time`, with the output
    /// frontier at `frontier`: the instructions to send at `time`, and whether to seal
    /// `time` at once. Sends a failure's or rejoin's instructions alone; otherwise issues
    /// at most one plan step per time.
    pub fn poll(&mut self, time: Time, frontier: Time, now_s: f64) -> (Vec<ControlInst>, bool) {
        self.set_time(time);
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
                Some(&t) if active.pipelined => time - t >= self.step_gap,
                Some(&t) => t < frontier,
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
                phase = "completed", id = finished.id, strategy = %finished.record.strategy, steps = finished.record.step_times.len(),
                seconds = now_s - finished.record.issued_s, cancelled = finished.record.cancelled, run_s = now_s
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

    /// Every plan that finished (migrations, rebalances and recoveries), in no order.
    pub fn finished(&self) -> impl Iterator<Item = &MigrationRecord> {
        let recoveries = self.failures.iter().filter_map(|f| f.recovery.as_ref());
        self.migrations.iter().chain(recoveries)
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
mod tests;
