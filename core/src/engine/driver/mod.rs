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
//!   a rejoin rebalances onto the worker that came back once nothing else runs;
//! * what it keeps is bounded whatever clients send: the first [`KEPT_PLANS`] finished
//!   migrations and [`KEPT_FAILURES`] failures in detail, the rest as totals, the last
//!   [`RECENT_PLANS`] finished plans for worker 0's loop, a target as a short description
//!   ([`TARGET_CHARS`]), at most one waiting rebalance; and nothing it does on a turn of
//!   worker 0's loop walks that history.

use std::collections::VecDeque;

use crate::Time;
use crate::balance::{BalanceLog, Balanced, Loads, balanced, balanced_replicas};
use crate::bins::{cut, describe, list};
use crate::config::{ControlInst, Map, NONE, Placement, Replicas, colocated, same_process, single};
use crate::control::Command;
use crate::error::CommandError;
use crate::failover::Placements;
use crate::plan::{self, Change, Schedule, Strategy, Target};

mod failures;
mod operator;
mod placing;
mod records;

pub use records::{
    FailureHistory, FailureRecord, FailureTotals, KEPT_FAILURES, KEPT_PLANS, MigrationRecord, PlanHistory,
    PlanTotals, RECENT_PLANS, TARGET_CHARS,
};

/// What the record of a rebalance placed by the measured load says it did.
pub const REBALANCED_BY_LOAD: &str = "balanced by load over the live workers";

/// A failure or rejoin taken and not yet issued, with when it was taken.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Urgent {
    Fail(u32, f64),
    Rejoin(u32, f64),
}

/// A failure as plans and queues refer to it: its index among the run's failures (it is
/// kept in detail if below [`KEPT_FAILURES`]) and the worker that failed.
#[derive(Clone, Copy, Debug, PartialEq)]
struct FailureRef {
    index: usize,
    worker: u32,
}

/// Why a plan runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Purpose {
    Migration,
    /// Restores the replicas lost in this failure.
    Recovery(FailureRef),
    /// Spreads bins onto a worker that rejoined; restores the replicas of this failure if
    /// no recovery did.
    Rebalance(Option<FailureRef>),
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
    /// Per worker, whether it is failed once every failure and rejoin taken is issued: what
    /// the placements say with `urgent` applied, kept so that taking a command does not
    /// walk `urgent`.
    will_fail: Vec<bool>,
    /// The last time instructions went out at.
    last_issued: Option<Time>,
    /// The least logical time between two steps of a pipelined plan.
    step_gap: Time,
    /// The time the control input stands at (as of the last poll or `set_time`).
    time: Time,
    /// Plans made so far (their ids).
    plans: u64,
    active: Option<ActivePlan>,
    /// The rebalance waiting for the running plan to finish, if any, with the failure whose
    /// replicas it restores if no recovery did. One is enough: a rebalance spreads the bins
    /// over the workers live when it starts, so a second one queued behind it would find
    /// nothing to do.
    queued: Option<Option<FailureRef>>,
    /// The newest failure whose degraded bins wait for a recovery (none ran, or a later
    /// failure cut it short). A recovery gives every degraded bin a standby whichever
    /// failure it is for, so older failures never need one of their own.
    unrecovered: Option<FailureRef>,
    /// Failures whose worker has not rejoined: at most one per worker.
    down: Vec<FailureRef>,
    /// The first [`KEPT_PLANS`] finished migrations (and rebalances), in the order they
    /// finished.
    migrations: Vec<MigrationRecord>,
    /// The first [`KEPT_FAILURES`] failures, in order: failure `i` is `failures[i]`.
    failures: Vec<FailureRecord>,
    /// Finished plans in neither list (see [`PlanHistory::unlisted`]).
    unlisted_plans: PlanTotals,
    /// Failures past the first [`KEPT_FAILURES`].
    unlisted_failures: FailureTotals,
    /// Failures issued so far: the next one's index.
    failed: usize,
    /// Bins lost so far, in the order they were (a lost bin stops the run: few).
    lost: Vec<u32>,
    /// The last [`RECENT_PLANS`] finished plans, oldest first, without their step times.
    recent: VecDeque<MigrationRecord>,
    /// The bins' and workers' last measured loads, for the `balance` target.
    loads: Option<Loads>,
    /// The last loads measured, kept while plans run: a bin's load does not depend on where
    /// it lives, so a rebalance after a rejoin places by them.
    known: Option<Loads>,
    /// The balancer is on (not `off`): a rebalance places by the known loads.
    balancing: bool,
    /// Rebalances spread evenly whatever the balancer says (a re-run of a run whose did).
    even_rebalances: bool,
    /// What the balancer measured and decided.
    balance: BalanceLog,
    /// The balancer's standing proposal (`suggest`): what the `balance` target starts.
    proposal: Option<Balanced>,
    /// The last `balance` plan started, until [`PlanDriver::take_balanced`] takes it.
    balanced: Option<(Schedule, Target)>,
    /// The run is elastic (started packed): `balance` keeps to the workers serving.
    elastic: bool,
    /// Per worker, whether the user excluded it (see `operator.rs`).
    excluded: Vec<bool>,
    /// The user cancelled a plan of the balancer's, not yet told to it.
    balance_cancelled: bool,
    /// Per bin, whether the user pinned it where it is (see `operator.rs`).
    pinned: Vec<bool>,
    /// The most bytes one placement by load moves (`--balance-max-bytes`).
    max_bytes: u64,
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
            will_fail: vec![false; workers],
            last_issued: None,
            step_gap: 1,
            time: 0,
            plans: 0,
            active: None,
            queued: None,
            unrecovered: None,
            down: Vec::new(),
            migrations: Vec::new(),
            failures: Vec::new(),
            unlisted_plans: PlanTotals::default(),
            unlisted_failures: FailureTotals::default(),
            failed: 0,
            lost: Vec::new(),
            recent: VecDeque::new(),
            loads: None,
            known: None,
            balancing: false,
            even_rebalances: false,
            balance: BalanceLog::default(),
            proposal: None,
            balanced: None,
            elastic: false,
            excluded: vec![false; workers],
            balance_cancelled: false,
            pinned: Vec::new(),
            max_bytes: u64::MAX,
        }
    }

    /// What the balancer measured and decided, to keep more of it.
    pub fn balance_log(&mut self) -> &mut BalanceLog {
        &mut self.balance
    }

    /// What the balancer measured and decided, for the summary.
    pub fn balance(&self) -> &BalanceLog {
        &self.balance
    }

    /// The workers that serve bins (none failed and not rejoined).
    pub fn live(&self) -> impl Iterator<Item = u32> + '_ {
        self.placements.live()
    }

    /// The run is elastic (see [`crate::scale`]): the `balance` target keeps to the workers
    /// serving rather than spreading onto idle ones.
    pub fn set_elastic(&mut self, elastic: bool) {
        self.elastic = elastic;
    }

    /// The balancer's proposal stands (or, `None`, no longer does): the `balance` target
    /// starts it rather than placing by the loads afresh.
    pub fn propose(&mut self, plan: Option<Balanced>) {
        self.proposal = plan;
    }

    /// The bins' and workers' loads as last measured: what the `balance` target places by.
    pub fn set_loads(&mut self, loads: Option<Loads>) {
        if let Some(l) = loads.as_ref() {
            self.known = Some(l.clone());
        }
        self.loads = loads;
    }

    /// The balancer is on (`suggest` or `auto`), or off: a rebalance after a rejoin places
    /// by the last measured loads when it is on, and spreads uniformly when it is off.
    pub fn set_balancing(&mut self, on: bool) {
        self.balancing = on;
    }

    /// Rebalances spread the bins evenly whatever the balancer's mode (a re-run of a run
    /// whose rebalances did, so that it moves the same bins).
    pub fn keep_rebalances_even(&mut self) {
        self.even_rebalances = true;
    }

    /// The placement of primaries the `balance` target would move to now, over the live
    /// workers: from the last measured loads, or why there is none.
    pub fn by_load(&self) -> Result<Balanced, CommandError> {
        let Some(loads) = self.loads.as_ref() else {
            return Err(CommandError::BadTarget(
                "balance: no load measured yet (a second of every worker's reports is needed, and none while a plan runs)".to_string(),
            ));
        };
        // An elastic run balances within the workers serving; only its balancer sizes them.
        // Neither places bins on a worker the user excluded.
        let alive = if self.elastic {
            self.serving()
        } else {
            self.placeable()
        };
        Ok(self.place_by(loads, &alive))
    }

    /// The placement by `loads` over the workers `alive`: of primaries and standbys when
    /// bins have two replicas (a standby applies every record too), else of primaries.
    pub fn place_by(&self, loads: &Loads, alive: &[u32]) -> Balanced {
        let movable = self.movable();
        if self.replicas > 1 {
            balanced_replicas(
                self.placement(),
                &loads.bins,
                &loads.bytes,
                alive,
                self.per_process,
                &movable,
            )
        } else {
            balanced(&self.primaries(), &loads.bins, &loads.bytes, alive, &movable)
        }
    }

    /// Every bin's primary worker, in bin order.
    pub fn primaries(&self) -> Map {
        self.placement().iter().map(|r| r.primary).collect()
    }

    /// The live workers that hold a primary, in order (one pass over the bins).
    pub fn serving(&self) -> Vec<u32> {
        let mut holds = vec![false; self.workers];
        for r in self.placement().iter() {
            if let Some(h) = holds.get_mut(r.primary as usize) {
                *h = true;
            }
        }
        self.live().filter(|w| holds[*w as usize]).collect()
    }

    /// Starts the `balance` plan as the balancer decided it (`by` names who).
    pub fn start_balance(
        &mut self,
        schedule: Schedule,
        plan: Balanced,
        by: &'static str,
        now_s: f64,
    ) -> Result<(), CommandError> {
        self.start_balanced(schedule, plan, now_s)?;
        if let Some(active) = self.active.as_mut() {
            active.record.by = Some(by);
        }
        Ok(())
    }

    fn start_balanced(&mut self, schedule: Schedule, plan: Balanced, now_s: f64) -> Result<(), CommandError> {
        let description = plan.describe();
        let target = Target::Map(plan.map);
        match plan.placement {
            // Standbys placed too: the plan goes to that placement (a re-run takes it again
            // as the map of its primaries, which places standbys as any target does: the
            // outputs are the same).
            Some(goal) => {
                if self.active.is_some() {
                    return Err(CommandError::PlanRunning);
                }
                let usable =
                    |w: u32| w == NONE || ((w as usize) < self.workers && !self.placements.is_failed(w));
                if goal.len() != self.placement().len()
                    || goal
                        .iter()
                        .any(|r| !usable(r.primary) || !usable(r.standby) || r.primary == NONE)
                {
                    return Err(CommandError::BadTarget(
                        "balance: the proposal names a worker the job no longer has".to_string(),
                    ));
                }
                self.plan(Purpose::Migration, schedule, description, &goal, now_s);
            }
            None => self.start_as(schedule, &target, || description, now_s)?,
        }
        self.balanced = Some((schedule, target));
        Ok(())
    }

    /// The last `balance` plan started, as the plan of a map it is: what a re-run takes
    /// again (its loads would differ). Each is given once.
    pub fn take_balanced(&mut self) -> Option<(Schedule, Target)> {
        self.balanced.take()
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
                    self.balance_cancelled |= p.record.by == Some("balancer");
                    Ok(())
                }
                Some(_) => Err(CommandError::Restoring),
                None => Err(CommandError::NoPlan),
            },
            Command::Fail { worker } => self.fail(self.worker(worker)?, now_s),
            Command::Rejoin { worker } => self.rejoin(self.worker(worker)?, now_s),
            Command::Pin { bins, pinned } => self.pin(&bins, pinned),
            Command::Exclude { worker, excluded } => {
                let w = self.worker(worker)?;
                self.set_excluded(w, excluded);
                Ok(())
            }
            // The control plane's balancer takes it before the driver would.
            Command::Balance { .. } => Err(CommandError::NoBalancer),
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
            // Said as the move, not as the map: a map names a worker for every bin.
            let description = || format!("{} on worker {worker}", describe(bins));
            self.start_as(all_at_once, &Target::Map(target), description, now_s)?;
            self.set_excluded(w, false);
            return Ok(());
        }
        let mut goal = self.placement().clone();
        for &bin in bins {
            let r = goal[bin];
            let reason = if self.replicas < 2 {
                Some("the job has one replica per bin".to_string())
            } else if r.primary == w {
                Some("it holds the primary".to_string())
            } else if same_process(w, r.primary, self.per_process) && self.other_process_live(w) {
                Some(format!(
                    "it is in the process of the primary (worker {}), whose crash would take both; another process has a live worker",
                    r.primary
                ))
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(CommandError::BadStandby { bin, worker, reason });
            }
            goal[bin] = Replicas {
                primary: r.primary,
                standby: w,
            };
        }
        let target = format!("standby of {} on worker {worker}", describe(bins));
        self.plan(Purpose::Migration, all_at_once, target, &goal, now_s);
        Ok(())
    }

    /// Whether a live worker runs in another process than `worker`.
    fn other_process_live(&self, worker: u32) -> bool {
        self.placements
            .live()
            .any(|w| !same_process(w, worker, self.per_process))
    }

    /// Plans a migration from the current placement to `target`.
    pub fn start(&mut self, schedule: Schedule, target: &Target, now_s: f64) -> Result<(), CommandError> {
        if *target == Target::Balance {
            if self.active.is_some() {
                return Err(CommandError::PlanRunning);
            }
            // The proposal goes only once its plan starts: a refused start leaves it standing.
            let plan = match self.proposal.clone() {
                Some(plan) => plan,
                None => self.by_load()?,
            };
            self.start_balanced(schedule, plan, now_s)?;
            self.proposal = None;
            return Ok(());
        }
        self.start_as(schedule, target, || target.to_string(), now_s)?;
        self.heed(target);
        Ok(())
    }

    /// Plans a migration to `target`, described for records and events by `description`
    /// (called only once the plan is made).
    fn start_as(
        &mut self,
        schedule: Schedule,
        target: &Target,
        description: impl FnOnce() -> String,
        now_s: f64,
    ) -> Result<(), CommandError> {
        if self.active.is_some() {
            return Err(CommandError::PlanRunning);
        }
        let live: Vec<bool> = (0..self.workers as u32)
            .map(|w| !self.placements.is_failed(w))
            .collect();
        let goal = target
            .goal(self.placement(), self.workers, self.per_process, &live)
            .map_err(|e| CommandError::BadTarget(e.to_string()))?;
        self.plan(Purpose::Migration, schedule, description(), &goal, now_s);
        Ok(())
    }

    /// Makes the plan from the current placement to `goal` the running one. `target` is cut
    /// to [`TARGET_CHARS`]: the record and the events keep no more, whatever the target.
    fn plan(&mut self, purpose: Purpose, schedule: Schedule, target: String, goal: &Placement, now_s: f64) {
        let target = cut(&target, TARGET_CHARS);
        let together = colocated(goal, self.workers, self.per_process);
        if together > 0 {
            tracing::warn!(
                target: "megaflux::replica",
                phase = "colocated", bins = together, plan = %target,
                reason = "no live worker of another process can hold their standbys: a crash of that process would lose them"
            );
        }
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
                by: None,
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
        self.remember(&finished.record);
        match finished.purpose {
            Purpose::Migration => self.keep(finished.record),
            Purpose::Rebalance(None) => {
                self.keep(finished.record);
                // Cut short by a failure: the workers still deserve their share later.
                if cancelled {
                    self.queue_rebalance(None);
                }
            }
            Purpose::Recovery(failure) | Purpose::Rebalance(Some(failure)) => {
                if !cancelled {
                    let mut bins = finished.bins;
                    bins.sort_unstable();
                    tracing::info!(
                        target: "megaflux::replica",
                        phase = "recovered", worker = failure.worker, bins = %list(&bins)
                    );
                    if self.unrecovered == Some(failure) {
                        self.unrecovered = None;
                    }
                }
                match self.failures.get_mut(failure.index) {
                    Some(f) => {
                        // `supersede` took any earlier attempt when this one started.
                        if let Some(replaced) = f.recovery.replace(finished.record) {
                            self.unlisted_plans.add(&replaced, true);
                        }
                    }
                    None => self.unlisted_plans.add(&finished.record, true),
                }
            }
        }
        // A recovery cut short by a later failure starts again, for every bin still degraded,
        // as the recovery of the newest failure awaiting one; then any waiting rebalance.
        if let Some(failure) = self.unrecovered
            && self.queued != Some(Some(failure))
        {
            self.recover(now_s);
        }
        self.start_queued(now_s);
    }

    /// Keeps a finished migration or rebalance: in detail while fewer than [`KEPT_PLANS`]
    /// are, in the totals after that.
    fn keep(&mut self, record: MigrationRecord) {
        if self.migrations.len() < KEPT_PLANS {
            self.migrations.push(record);
        } else {
            self.unlisted_plans.add(&record, false);
        }
    }

    /// Notes a finished plan among the last [`RECENT_PLANS`], without its step times
    /// ([`PlanDriver::finished`] does not show them, and they are the bulk of a record).
    fn remember(&mut self, record: &MigrationRecord) {
        if self.recent.len() >= RECENT_PLANS {
            self.recent.pop_front();
        }
        self.recent.push_back(MigrationRecord {
            id: record.id,
            strategy: record.strategy.clone(),
            target: record.target.clone(),
            issued_s: record.issued_s,
            completed_s: record.completed_s,
            steps: record.steps,
            bins_planned: record.bins_planned,
            bins_moved: record.bins_moved,
            step_times: Vec::new(),
            cancelled: record.cancelled,
            by: record.by,
        });
    }

    /// The migrations as the summary gives them: the first [`KEPT_PLANS`] to finish (hand-
    /// made moves and rebalances included), then the running one (not completed) if it is a
    /// migration and there is room; every other plan that is not a listed failure's
    /// recovery added up in [`PlanHistory::unlisted`], the running one included.
    pub fn records(&self) -> PlanHistory {
        let mut history = PlanHistory {
            listed: self.migrations.clone(),
            unlisted: self.unlisted_plans,
        };
        if let Some(a) = self.active.as_ref() {
            match a.purpose {
                Purpose::Migration if history.listed.len() < KEPT_PLANS => {
                    history.listed.push(a.record.clone())
                }
                Purpose::Migration | Purpose::Rebalance(None) => history.unlisted.add(&a.record, false),
                // A listed failure's running recovery is in `failures()`.
                Purpose::Recovery(f) | Purpose::Rebalance(Some(f)) => {
                    if f.index >= self.failures.len() {
                        history.unlisted.add(&a.record, true);
                    }
                }
            }
        }
        history
    }

    /// The last [`RECENT_PLANS`] plans that finished (migrations, rebalances and
    /// recoveries), oldest first, without their step times. Worker 0 looks at these on every
    /// turn of its loop (to report the latency during each once it is measured): they are
    /// few whatever the run's length. [`PlanDriver::records`] and
    /// [`PlanDriver::failures`] have the plans in full.
    pub fn finished(&self) -> impl Iterator<Item = &MigrationRecord> {
        self.recent.iter()
    }

    /// The failures as the summary gives them: the first [`KEPT_FAILURES`], each with its
    /// recovery (the running one, not completed, if any), and the rest added up.
    pub fn failures(&self) -> FailureHistory {
        let mut listed = self.failures.clone();
        if let Some(a) = self.active.as_ref()
            && let Purpose::Recovery(f) | Purpose::Rebalance(Some(f)) = a.purpose
            && let Some(failure) = listed.get_mut(f.index)
        {
            failure.recovery = Some(a.record.clone());
        }
        FailureHistory {
            listed,
            unlisted: self.unlisted_failures,
        }
    }

    /// Bins lost so far (no replica left).
    pub fn lost(&self) -> Vec<u32> {
        self.lost.clone()
    }
}

/// A holder for events: -1 for none.
fn holder(worker: u32) -> i64 {
    if worker == NONE { -1 } else { i64::from(worker) }
}

#[cfg(test)]
mod tests;
