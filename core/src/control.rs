//! Commands from outside the dataflow, and the plan driver that turns them into
//! timestamped configuration changes on worker 0's control input.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::Time;
use crate::config::{ControlInst, Map};
use crate::error::CommandError;
use crate::plan::{self, Move, Schedule, Target};

/// A request to change where bins live.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Move these bins to this worker, in one step, now.
    MoveBins { bins: Vec<usize>, worker: usize },
    /// Plan a migration to `target` and run it step by step.
    StartPlan { schedule: Schedule, target: Target },
    /// Drop the steps of the running plan that were not issued yet.
    CancelPlan,
}

/// A thread-safe way into the dataflow: commands sent here are taken by worker 0 and
/// become control instructions at its next epoch. Cloning shares the queue.
///
/// Each command gets an id; the `megaflux::command` event that says whether it was applied
/// or rejected carries it, so that whoever sent it can match the answer.
#[derive(Clone, Debug)]
pub struct ControlHandle {
    queue: Arc<Mutex<VecDeque<(u64, Command)>>>,
    next_id: Arc<AtomicU64>,
    /// Asked to end the run early.
    stop: Arc<AtomicBool>,
    /// The measured epoch (ms) the run ends at, once worker 0 has chosen it; `u64::MAX`
    /// until then. Every worker of the process reads it, so they all end at the same epoch.
    end_ms: Arc<AtomicU64>,
    /// Commands queued and not yet drained: worker 0 polls this on every loop turn, so the
    /// common empty case must not take the lock.
    pending: Arc<AtomicUsize>,
}

impl Default for ControlHandle {
    fn default() -> Self {
        ControlHandle {
            queue: Arc::default(),
            next_id: Arc::default(),
            pending: Arc::default(),
            stop: Arc::default(),
            end_ms: Arc::new(AtomicU64::new(u64::MAX)),
        }
    }
}

impl ControlHandle {
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the run to end soon (a few epochs ahead, at the same epoch on every worker of
    /// this process). Other processes of a cluster are not told.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Whether [`ControlHandle::stop`] was called.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Worker 0 fixes the epoch the run ends at (once).
    pub(crate) fn set_end(&self, end_ms: u64) {
        let _ = self
            .end_ms
            .compare_exchange(u64::MAX, end_ms, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The epoch the run ends at, if it was cut short.
    pub(crate) fn end(&self) -> Option<u64> {
        Some(self.end_ms.load(Ordering::Acquire)).filter(|e| *e != u64::MAX)
    }

    /// Queues a command and returns its id; it never blocks on the dataflow.
    pub fn send(&self, command: Command) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // A poisoned queue means a worker panicked; the job is over either way.
        if let Ok(mut q) = self.queue.lock() {
            q.push_back((id, command));
            self.pending.fetch_add(1, Ordering::Release);
        }
        id
    }

    /// Takes every queued command, with its id.
    pub fn drain(&self) -> Vec<(u64, Command)> {
        if self.pending.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        self.queue
            .lock()
            .map(|mut q| {
                self.pending.fetch_sub(q.len(), Ordering::Release);
                q.drain(..).collect()
            })
            .unwrap_or_default()
    }
}

/// What became of a migration (a plan or a hand-made move).
#[derive(Clone, Debug, Serialize)]
pub struct MigrationRecord {
    pub strategy: String,
    pub target: String,
    /// Wall-clock seconds since the start of the measured run.
    pub issued_s: f64,
    pub completed_s: Option<f64>,
    /// Steps and bin moves the plan was made of.
    pub steps: usize,
    pub bins_planned: usize,
    /// Bin moves issued (fewer than planned if the plan was cancelled or the run ended).
    pub bins_moved: usize,
    /// The logical time of every issued step.
    pub step_times: Vec<Time>,
    pub cancelled: bool,
}

struct ActivePlan {
    record: MigrationRecord,
    pipelined: bool,
    remaining: VecDeque<Vec<Move>>,
    /// Issued steps whose time the output frontier has not passed yet.
    in_flight: VecDeque<(Time, Vec<Move>)>,
}

/// Issues plan steps on worker 0. It knows the map as of the last issued step.
pub struct PlanDriver {
    map: Map,
    workers: usize,
    active: Option<ActivePlan>,
    finished: Vec<MigrationRecord>,
}

impl PlanDriver {
    pub fn new(initial: Map, workers: usize) -> Self {
        PlanDriver {
            map: initial,
            workers,
            active: None,
            finished: Vec::new(),
        }
    }

    /// The map as of the last issued instruction.
    pub fn map(&self) -> &Map {
        &self.map
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

    /// Applies a command, or says why not.
    pub fn command(&mut self, command: Command, now_s: f64) -> Result<(), CommandError> {
        match command {
            Command::MoveBins { bins, worker } => {
                if worker >= self.workers {
                    return Err(CommandError::UnknownWorker {
                        worker,
                        workers: self.workers,
                    });
                }
                if let Some(&bin) = bins.iter().find(|b| **b >= self.map.len()) {
                    return Err(CommandError::UnknownBin {
                        bin,
                        bins: self.map.len(),
                    });
                }
                if self.active.is_some() {
                    return Err(CommandError::PlanRunning);
                }
                let mut target = self.map.clone();
                for b in bins {
                    target[b] = worker as u32;
                }
                self.start(
                    Schedule {
                        strategy: plan::Strategy::AllAtOnce,
                        pipelined: false,
                    },
                    &Target::Map(target),
                    now_s,
                )
            }
            Command::StartPlan { schedule, target } => self.start(schedule, &target, now_s),
            Command::CancelPlan => match self.active.as_mut() {
                Some(p) => {
                    p.remaining.clear();
                    p.record.cancelled = true;
                    Ok(())
                }
                None => Err(CommandError::NoPlan),
            },
        }
    }

    /// Plans a migration from the current map to `target`.
    pub fn start(&mut self, schedule: Schedule, target: &Target, now_s: f64) -> Result<(), CommandError> {
        if self.active.is_some() {
            return Err(CommandError::PlanRunning);
        }
        let goal = target
            .resolve(&self.map, self.workers)
            .map_err(|e| CommandError::BadTarget(e.to_string()))?;
        let moves = plan::moves(&self.map, &goal);
        let bins_planned = moves.len();
        let steps: VecDeque<Vec<Move>> = plan::steps(schedule.strategy, moves).into();
        tracing::info!(
            target: "megaflux::plan",
            phase = "planned", strategy = %schedule, target = %target, steps = steps.len(), bins = bins_planned
        );
        self.active = Some(ActivePlan {
            record: MigrationRecord {
                strategy: schedule.to_string(),
                target: target.to_string(),
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
        });
        Ok(())
    }

    /// Called by worker 0 while its control input is open at `time`; returns the
    /// instructions to send at `time`. `completed(t)` says whether the output frontier has
    /// passed `t`. Issues at most one step per time.
    pub fn poll(&mut self, time: Time, completed: impl Fn(Time) -> bool, now_s: f64) -> Vec<ControlInst> {
        let mut out = Vec::new();
        if let Some(active) = self.active.as_mut() {
            let ready = match active.record.step_times.last() {
                None => true,
                Some(&t) if t >= time => false,
                Some(&t) => active.pipelined || completed(t),
            };
            if ready && let Some(step) = active.remaining.pop_front() {
                let index = active.record.step_times.len();
                for m in &step {
                    tracing::info!(
                        target: "megaflux::migration",
                        phase = "issued", bin = m.bin, from = m.from, to = m.to, time, step = index
                    );
                    self.map[m.bin as usize] = m.to;
                    out.push(ControlInst::Move {
                        bin: m.bin,
                        worker: m.to,
                    });
                }
                active.record.step_times.push(time);
                active.record.bins_moved += step.len();
                active.in_flight.push_back((time, step));
            }
        }
        self.retire(completed, now_s);
        out
    }

    /// Notes the steps whose time the output frontier has passed, and finishes the plan
    /// once every step was issued and has completed. Issues nothing: a job whose control
    /// input is closed calls only this.
    pub fn retire(&mut self, completed: impl Fn(Time) -> bool, now_s: f64) {
        let Some(active) = self.active.as_mut() else {
            return;
        };
        while let Some((t, step)) = active.in_flight.front()
            && completed(*t)
        {
            for m in step {
                tracing::info!(
                    target: "megaflux::migration",
                    phase = "completed", bin = m.bin, from = m.from, to = m.to, time = *t
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
            self.finished.push(finished.record);
        }
    }

    /// Finished migrations, and the running one (not completed) if any.
    pub fn records(&self) -> Vec<MigrationRecord> {
        let mut all = self.finished.clone();
        all.extend(self.active.as_ref().map(|a| a.record.clone()));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::uniform;
    use crate::plan::Strategy;

    fn schedule(strategy: Strategy, pipelined: bool) -> Schedule {
        Schedule { strategy, pipelined }
    }

    #[test]
    fn waits_for_completion_unless_pipelined() {
        let mut d = PlanDriver::new(uniform(16, 2), 2);
        d.start(schedule(Strategy::Fluid, false), &Target::Pack(1), 0.0)
            .unwrap();
        assert_eq!(d.poll(5, |_| false, 0.1).len(), 1);
        assert!(d.poll(6, |_| false, 0.1).is_empty());
        assert_eq!(d.poll(7, |t| t <= 5, 0.2).len(), 1);
        let mut p = PlanDriver::new(uniform(16, 2), 2);
        p.start(schedule(Strategy::Fluid, true), &Target::Pack(1), 0.0)
            .unwrap();
        let issued: usize = (1..=8).map(|t| p.poll(t, |_| false, 0.0).len()).sum();
        assert_eq!(issued, 8);
        assert!(p.busy());
        assert!(p.poll(9, |_| false, 0.0).is_empty());
        assert!(p.poll(10, |t| t <= 8, 0.5).is_empty());
        assert!(!p.busy());
        let r = &p.records()[0];
        assert_eq!((r.steps, r.bins_moved, r.completed_s), (8, 8, Some(0.5)));
        assert_eq!(p.map(), &vec![0; 16]);
    }

    #[test]
    fn an_unfinished_plan_reports_only_what_was_issued() {
        let mut d = PlanDriver::new(uniform(16, 2), 2);
        d.start(schedule(Strategy::Fluid, false), &Target::Pack(1), 0.0)
            .unwrap();
        assert_eq!(d.poll(1, |_| false, 0.0).len(), 1);
        assert_eq!(d.poll(2, |t| t < 2, 0.0).len(), 1);
        // The run ends: the issued steps complete, nothing new is issued.
        d.retire(|_| true, 1.0);
        let r = &d.records()[0];
        assert_eq!((r.step_times.len(), r.bins_moved, r.bins_planned), (2, 2, 8));
        assert_eq!(r.completed_s, None);
        assert_eq!(d.map().iter().filter(|w| **w == 0).count(), 10);
    }

    #[test]
    fn rejects_bad_commands_and_keeps_map() {
        let mut d = PlanDriver::new(uniform(16, 2), 2);
        let before = d.map().clone();
        assert_eq!(
            d.command(
                Command::MoveBins {
                    bins: vec![16],
                    worker: 0
                },
                0.0
            ),
            Err(CommandError::UnknownBin { bin: 16, bins: 16 })
        );
        assert_eq!(
            d.command(
                Command::MoveBins {
                    bins: vec![0],
                    worker: 2
                },
                0.0
            ),
            Err(CommandError::UnknownWorker {
                worker: 2,
                workers: 2
            })
        );
        assert!(
            d.command(
                Command::StartPlan {
                    schedule: schedule(Strategy::Fluid, false),
                    target: Target::Drain(5)
                },
                0.0
            )
            .is_err()
        );
        assert_eq!(d.command(Command::CancelPlan, 0.0), Err(CommandError::NoPlan));
        assert_eq!(d.map(), &before);
        d.command(
            Command::MoveBins {
                bins: vec![1],
                worker: 0,
            },
            0.0,
        )
        .unwrap();
        assert_eq!(
            d.command(
                Command::MoveBins {
                    bins: vec![3],
                    worker: 0
                },
                0.0
            ),
            Err(CommandError::PlanRunning)
        );
        assert_eq!(
            d.poll(3, |_| false, 0.0),
            vec![ControlInst::Move { bin: 1, worker: 0 }]
        );
    }

    #[test]
    fn handle_is_shared() {
        let h = ControlHandle::new();
        let h2 = h.clone();
        let id = h2.send(Command::CancelPlan);
        assert_eq!(h.drain(), vec![(id, Command::CancelPlan)]);
        assert!(h.drain().is_empty());
    }
}
