//! The control plane on worker 0: commands from the control handle, the run's timed
//! migrations, failures and rejoins, and the plan driver, turned into instructions on the
//! control input.

use std::collections::VecDeque;
use std::sync::Arc;

use timely::dataflow::InputHandleVec;

use super::balancer::{BalanceMode, Balancer};
use super::loads::LoadReport;
use super::{RunConfig, Scripted};
use crate::Time;
use crate::config::{ControlInst, Placement};
use crate::control::{Command, ControlHandle};
use crate::driver::PlanDriver;
use crate::error::CommandError;
use crate::failure::Failures;
use crate::plan::MigrationSpec;

/// Longest reason a rejected command is logged with, in characters: a reason may quote
/// whatever the command held.
const REASON_CHARS: usize = 160;

/// A failure or a rejoin at a point in the run.
#[derive(Clone, Copy, Debug)]
enum Timed {
    Fail(usize),
    Rejoin(usize),
}

pub(crate) struct ControlPlane {
    driver: PlanDriver,
    input: InputHandleVec<Time, ControlInst>,
    migrations: VecDeque<MigrationSpec>,
    timed: VecDeque<(f64, Timed)>,
    /// Recorded commands not taken yet, by epoch; and plans that came due while another ran,
    /// with the cancels and moves recorded after them.
    script: VecDeque<Scripted>,
    plans_due: VecDeque<Command>,
    /// The logical time of measured epoch 0 (the preload's times come before it), once the
    /// preload is over.
    base: Option<Time>,
    failures: Arc<Failures>,
    /// Workers of this process (the first ones of the job).
    local: usize,
    /// A rebalance to start once the output has reached a time, and why.
    deferred: Option<(String, Time)>,
    /// Measures the load, and under `--balance suggest` or `auto` acts on it (none for the
    /// native twin, which has no bins).
    balancer: Option<Balancer>,
}

impl ControlPlane {
    pub(crate) fn new(
        config: &RunConfig,
        initial: Placement,
        peers: usize,
        input: InputHandleVec<Time, ControlInst>,
        failures: Arc<Failures>,
    ) -> Self {
        let mut migrations = config.migrations.clone();
        migrations.sort_by(|a, b| a.at_secs.total_cmp(&b.at_secs));
        let mut timed: Vec<(f64, Timed)> = config
            .failures
            .iter()
            .map(|f| (f.at_secs, Timed::Fail(f.worker)))
            .chain(
                config
                    .rejoins
                    .iter()
                    .map(|r| (r.at_secs, Timed::Rejoin(r.worker))),
            )
            .collect();
        timed.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut driver = PlanDriver::new(initial, peers, config.workers, config.replicas, config.recovery)
            .with_step_gap(config.epoch.per_ms());
        driver.set_elastic(config.elastic());
        driver.set_balancing(config.balance.mode != BalanceMode::Off && !config.native);
        driver.set_max_bytes(config.balance.max_bytes);
        if config.even_rebalances {
            driver.keep_rebalances_even();
        }
        driver.report_placement(*input.time());
        ControlPlane {
            driver,
            input,
            migrations: migrations.into(),
            timed: timed.into(),
            script: config.script.clone().into(),
            plans_due: VecDeque::new(),
            base: None,
            failures,
            local: config.workers,
            deferred: None,
            balancer: (!config.native)
                .then(|| Balancer::new(config.balance, config.elastic(), config.bins.count(), peers)),
        }
    }

    /// Takes the workers' load reports `now_s` into the measured run: the balancer's turn.
    pub(crate) fn loads(&mut self, reports: Vec<LoadReport>, now_s: f64) {
        if let Some(balancer) = self.balancer.as_mut() {
            balancer.turn(reports, &mut self.driver, now_s);
        }
        // A plan the balancer started is logged as the command it amounts to, for a re-run
        // to take at the same time.
        if let Some((schedule, target)) = self.driver.take_balanced() {
            let request = Command::StartPlan { schedule, target }.request();
            tracing::info!(
                target: "megaflux::command",
                outcome = "applied", time = self.time(), command = %format!("{schedule} plan to balance"),
                request = %request, source = "balancer"
            );
        }
    }

    /// Plans standbys for the bins a crash left with one copy (see
    /// [`PlanDriver::restore_standbys`]).
    pub(crate) fn restore_standbys(&mut self, why: &str, now_s: f64) {
        self.driver.restore_standbys(why, now_s);
    }

    /// Spreads the bins over every live worker ([`PlanDriver::rebalance`]) once the output
    /// has reached `time`.
    pub(crate) fn rebalance_from(&mut self, why: &str, time: Time) {
        self.deferred = Some((why.to_string(), time));
    }

    /// Whether a deferred rebalance has not started yet.
    pub(crate) fn rebalance_waits(&self) -> bool {
        self.deferred.is_some()
    }

    /// The plan driver, to read its records.
    pub(crate) fn driver(&self) -> &PlanDriver {
        &self.driver
    }

    /// Whether a plan runs or waits, or failures or rejoins wait to be issued.
    pub(crate) fn busy(&self) -> bool {
        self.driver.busy() || self.driver.urgent() || !self.plans_due.is_empty()
    }

    /// Whether the control input is held for a recorded command at or before `limit` (the
    /// run must go on until it is taken).
    pub(crate) fn holds_for(&self, limit: Time) -> bool {
        self.base
            .zip(self.script.front())
            .is_some_and(|(base, s)| base + s.epoch <= limit)
    }

    /// The time the control input stands at.
    pub(crate) fn time(&self) -> Time {
        *self.input.time()
    }

    /// The preload is over: measured epoch `e` is logical time `base + e` from now on.
    pub(crate) fn begin(&mut self, base: Time) {
        self.base = Some(base);
    }

    /// Moves the control input on to `to` (never back), but not past the time of the next
    /// recorded command: the next turn takes it at exactly that time.
    pub(crate) fn advance(&mut self, to: Time) {
        let hold = match (self.base, self.script.front()) {
            (Some(base), Some(next)) => base + next.epoch,
            _ => Time::MAX,
        };
        let next = to.min(hold).max(self.time());
        self.input.advance_to(next);
    }

    /// One turn of worker 0's loop, `now_s` into the run, with the output frontier at
    /// `frontier`: takes commands and whatever is due, and sends the instructions.
    pub(crate) fn turn(&mut self, handle: &ControlHandle, now_s: f64, frontier: Time) {
        // It waits for the running plan (a recovery, say) too.
        let idle = !self.driver.busy();
        if let Some((why, _)) = self.deferred.take_if(|(_, at)| idle && frontier >= *at) {
            self.driver.rebalance(&why, now_s);
        }
        let time = self.time();
        for (id, command) in handle.drain() {
            self.take(command, Some(id), now_s, time);
        }
        while let Some(base) = self.base
            && self.script.front().is_some_and(|s| base + s.epoch <= time)
        {
            let Some(Scripted { command, .. }) = self.script.pop_front() else {
                break;
            };
            match command {
                // Failures and rejoins happen at their time whatever the plans do.
                Command::Fail { .. } | Command::Rejoin { .. } => self.take(command, None, now_s, time),
                // Plans wait for the running one, and what came after a waiting plan (a
                // cancel, a move) waits behind it.
                Command::StartPlan { .. } | Command::CancelPlan | Command::MoveBins { .. } => {
                    self.plans_due.push_back(command)
                }
                // The operator's word on placement holds from its time on.
                Command::Balance { .. } | Command::Pin { .. } | Command::Exclude { .. } => {
                    self.take(command, None, now_s, time)
                }
            }
        }
        while self.timed.front().is_some_and(|(at, _)| *at <= now_s) {
            let Some((_, what)) = self.timed.pop_front() else {
                break;
            };
            let command = match what {
                Timed::Fail(worker) => Command::Fail { worker },
                Timed::Rejoin(worker) => Command::Rejoin { worker },
            };
            self.take(command, None, now_s, time);
        }
        // Failures this process saw that nobody commanded (a failure detector's news).
        for worker in self.failures.newly_failed() {
            self.take(
                Command::Fail {
                    worker: worker as usize,
                },
                None,
                now_s,
                time,
            );
        }
        while let Some(command) = self.plans_due.front() {
            if matches!(command, Command::StartPlan { .. }) && self.driver.busy() {
                break;
            }
            if let Some(command) = self.plans_due.pop_front() {
                self.take(command, None, now_s, time);
            }
        }
        while !self.driver.busy() && self.migrations.front().is_some_and(|m| m.at_secs <= now_s) {
            if let Some(m) = self.migrations.pop_front() {
                let command = Command::StartPlan {
                    schedule: m.schedule,
                    target: m.target,
                };
                self.take(command, None, now_s, time);
            }
        }
        self.driver.set_time(time);
        self.issue(time, frontier, now_s);
    }

    /// Sends what the driver issues at `time`. A failure of a worker of this process
    /// (process 0: workers `0..local`) stops it at once, wherever it is; one elsewhere when
    /// the failure reaches it on the control input.
    fn issue(&mut self, time: Time, frontier: Time, now_s: f64) {
        let (insts, seal) = self.driver.poll(time, frontier, now_s);
        for inst in insts {
            if let ControlInst::Fail { worker } = inst
                && (worker as usize) < self.local
            {
                self.failures.fail_at(worker, time);
            }
            self.input.send(inst);
        }
        // Seal at once: the workers learn of the change now rather than when the epoch
        // closes. Pipelined plans issue one step per epoch instead.
        if seal {
            self.input.advance_to(time + 1);
        }
    }

    /// Issues the failures and rejoins taken but not issued yet (at the end of a run: they
    /// may need times past its last epoch). Returns whether some remain.
    pub(crate) fn flush(&mut self, frontier: Time, now_s: f64) -> bool {
        if self.driver.urgent() {
            self.issue(self.time(), frontier, now_s);
        }
        self.driver.urgent()
    }

    /// Takes a command (from the handle with its `id`, or from the run's flags) at logical
    /// time `time`, and logs what became of it with the request, so that a replay can take
    /// the same commands at the same times.
    fn take(&mut self, command: Command, id: Option<u64>, now_s: f64, time: Time) {
        let describe = command.describe();
        let source = if id.is_some() { "handle" } else { "run" };
        // The request is logged compact (bins as ranges), and only when applied: a replay
        // takes applied commands again, and a rejected one may quote anything it was sent.
        let mut request = command.request();
        match self.apply(command, now_s) {
            Ok(()) => {
                // A `balance` plan is logged as the map it moved to: a re-run's loads differ.
                if let Some((schedule, target)) = self.driver.take_balanced() {
                    request = Command::StartPlan { schedule, target }.request();
                }
                tracing::info!(
                    target: "megaflux::command",
                    outcome = "applied", id, time, command = %describe, request = %request, source
                )
            }
            Err(e) => {
                let reason = crate::bins::cut(&e.to_string(), REASON_CHARS);
                tracing::warn!(
                    target: "megaflux::command",
                    outcome = "rejected", id, time, command = %describe, source, reason = %reason
                )
            }
        }
    }

    fn apply(&mut self, command: Command, now_s: f64) -> Result<(), CommandError> {
        if let Command::Balance { mode } = command {
            let balancer = self.balancer.as_mut().ok_or(CommandError::NoBalancer)?;
            balancer.set_mode(mode, &mut self.driver, now_s);
            return Ok(());
        }
        let failing = match command {
            Command::Fail { worker } => Some(worker),
            _ => None,
        };
        self.driver.command(command, now_s)?;
        // The driver knows: no failure detector needs to tell it.
        if let Some(worker) = failing.filter(|w| *w < self.local) {
            self.failures.mark_reported(worker as u32);
        }
        Ok(())
    }

    /// Notes completed steps once the control input is closed (no more instructions).
    pub(crate) fn retire(&mut self, frontier: Time, now_s: f64) {
        self.driver.retire(frontier, now_s);
    }

    /// Closes the control input.
    pub(crate) fn close(self) -> PlanDriver {
        drop(self.input);
        self.driver
    }
}
