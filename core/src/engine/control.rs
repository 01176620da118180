//! Commands from outside the dataflow, and the thread-safe handle through which they reach
//! worker 0 (whose [`crate::driver::PlanDriver`] turns them into configuration changes).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::balance::BalanceMode;
use crate::plan::{Schedule, Target};

/// A request to change where bins live.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Move these bins' primaries (or, with `standby`, their standbys) to this worker, in
    /// one step, now.
    MoveBins {
        /// The bins to move, by index (each below the job's bin count).
        bins: Vec<usize>,
        /// The destination: a worker's index in the whole job.
        worker: usize,
        /// Move the bins' standbys instead of their primaries.
        standby: bool,
    },
    /// Plan a migration to `target` and run it step by step.
    StartPlan {
        /// The strategy that splits the moves into steps, and whether steps are pipelined.
        schedule: Schedule,
        /// Where the plan leaves the primaries.
        target: Target,
    },
    /// Drop the steps of the running plan that were not issued yet.
    CancelPlan,
    /// Fail-stop this worker's partitions now (it keeps stepping the dataflow).
    Fail {
        /// The worker to fail: its index in the whole job.
        worker: usize,
    },
    /// A failed worker serves again, empty; bins then rebalance onto it.
    Rejoin {
        /// The failed worker to bring back: its index in the whole job.
        worker: usize,
    },
    /// What the balancer does from now on.
    Balance {
        /// Measure only, propose, or issue.
        mode: BalanceMode,
    },
    /// Pin these bins where they are (or, `pinned: false`, free them): no placement by load
    /// (the balancer's, a rebalance's) moves them; the user's own plans still do.
    Pin {
        /// The bins, by index (each below the job's bin count).
        bins: Vec<usize>,
        /// Pin, or free.
        pinned: bool,
    },
    /// Exclude this worker from placements by load (or, `excluded: false`, include it
    /// again): they neither count it nor put bins on it. Its bins stay until a plan moves
    /// them (`drain:W` does both).
    Exclude {
        /// The worker: its index in the whole job.
        worker: usize,
        /// Exclude, or include.
        excluded: bool,
    },
}

/// A command in the form the wire and traces carry it (`{"command": "move_bins", ...}`).
#[derive(Serialize)]
#[serde(tag = "command", rename_all = "snake_case")]
enum Request<'a> {
    MoveBins {
        #[serde(serialize_with = "crate::bins::compact::serialize")]
        bins: &'a [usize],
        worker: usize,
        standby: bool,
    },
    StartPlan {
        schedule: String,
        target: String,
    },
    CancelPlan,
    Fail {
        worker: usize,
    },
    Rejoin {
        worker: usize,
    },
    Balance {
        mode: String,
    },
    Pin {
        #[serde(serialize_with = "crate::bins::compact::serialize")]
        bins: &'a [usize],
        pinned: bool,
    },
    Exclude {
        worker: usize,
        excluded: bool,
    },
}

/// Longest target a command's description quotes, in characters.
pub const DESCRIBED_TARGET: usize = 120;

impl Command {
    /// The command said for people, in bounded length whatever its size (`move bins 0-6999
    /// to worker 1`, `fluid plan to pack:1`): logs carry this, not the command's Rust form.
    pub fn describe(&self) -> String {
        match self {
            Command::MoveBins {
                bins,
                worker,
                standby,
            } => format!(
                "move {}{} to worker {worker}",
                if *standby { "the standbys of " } else { "" },
                crate::bins::describe(bins)
            ),
            Command::StartPlan { schedule, target } => {
                format!(
                    "{schedule} plan to {}",
                    crate::bins::cut(&target.to_string(), DESCRIBED_TARGET)
                )
            }
            Command::CancelPlan => "cancel the running plan".into(),
            Command::Fail { worker } => format!("fail worker {worker}"),
            Command::Rejoin { worker } => format!("rejoin worker {worker}"),
            Command::Balance { mode } => format!("balance {mode}"),
            Command::Pin { bins, pinned } => format!(
                "{} {}",
                if *pinned { "pin" } else { "unpin" },
                crate::bins::describe(bins)
            ),
            Command::Exclude { worker, excluded } => format!(
                "{} worker {worker}",
                if *excluded { "exclude" } else { "include" }
            ),
        }
    }

    /// The command as JSON, in the form a subscriber sends it: traces log it so that a run
    /// can be replayed with the same commands.
    pub fn request(&self) -> String {
        let request = match self {
            Command::MoveBins {
                bins,
                worker,
                standby,
            } => Request::MoveBins {
                bins,
                worker: *worker,
                standby: *standby,
            },
            Command::StartPlan { schedule, target } => Request::StartPlan {
                schedule: schedule.to_string(),
                target: target.to_string(),
            },
            Command::CancelPlan => Request::CancelPlan,
            Command::Fail { worker } => Request::Fail { worker: *worker },
            Command::Rejoin { worker } => Request::Rejoin { worker: *worker },
            Command::Balance { mode } => Request::Balance {
                mode: mode.to_string(),
            },
            Command::Pin { bins, pinned } => Request::Pin {
                bins,
                pinned: *pinned,
            },
            Command::Exclude { worker, excluded } => Request::Exclude {
                worker: *worker,
                excluded: *excluded,
            },
        };
        // Plain data into a string: it cannot fail.
        serde_json::to_string(&request).unwrap_or_default()
    }
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
    /// The measured epoch the run ends at, once worker 0 has chosen it; `u64::MAX` until
    /// then. Every worker of the process reads it, so they all end at the same epoch.
    end: Arc<AtomicU64>,
    /// Commands queued and not yet drained: worker 0 polls this on every loop turn, so the
    /// common empty case must not take the lock.
    pending: Arc<AtomicUsize>,
    /// How far into the run the last measured epoch whose outputs are all out closed, in
    /// microseconds, as worker 0 last saw it.
    progress_us: Arc<AtomicU64>,
    /// Where the drain stands, once the run drains (worker 0 updates it every second).
    draining: Arc<Mutex<Option<DrainProgress>>>,
}

/// Where the drain of a run stands (see [`crate::job::Job::drain`]): the input ended at
/// `input_end` (the last epoch's time), every output before `gate` is out, and the last
/// look found `scheduled` work at or after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DrainProgress {
    /// The logical time of the run's last epoch.
    pub input_end: crate::Time,
    /// The gate: every output before it is out, or on its way.
    pub gate: crate::Time,
    /// Work scheduled at or after the gate, as the last complete look found it.
    pub scheduled: crate::operator::Scheduled,
    /// Milliseconds since the drain began.
    pub for_ms: u64,
}

impl Default for ControlHandle {
    fn default() -> Self {
        ControlHandle {
            queue: Arc::default(),
            next_id: Arc::default(),
            pending: Arc::default(),
            stop: Arc::default(),
            end: Arc::new(AtomicU64::new(u64::MAX)),
            progress_us: Arc::default(),
            draining: Arc::default(),
        }
    }
}

impl ControlHandle {
    /// A handle with an empty queue, no stop requested and no end epoch chosen.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the run to end soon: on process 0, a few epochs ahead, at the same epoch on
    /// every worker of every process of the job (the others hear of it through the
    /// dataflow). On another process of a cluster it does nothing.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Whether [`ControlHandle::stop`] was called.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Worker 0 fixes the epoch the run ends at (once).
    pub(crate) fn set_end(&self, end: u64) {
        let _ = self
            .end
            .compare_exchange(u64::MAX, end, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The epoch the run ends at, if it was cut short.
    pub(crate) fn end(&self) -> Option<u64> {
        Some(self.end.load(Ordering::Acquire)).filter(|e| *e != u64::MAX)
    }

    /// How far the run has got: when the last measured epoch whose outputs are all out
    /// closed, after the run's start.
    pub fn progress(&self) -> Duration {
        Duration::from_micros(self.progress_us.load(Ordering::Relaxed))
    }

    pub(crate) fn set_progress(&self, done: Duration) {
        self.progress_us
            .store(done.as_micros().try_into().unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Where the drain stands, once the run drains (on process 0).
    pub fn draining(&self) -> Option<DrainProgress> {
        self.draining.lock().ok().and_then(|d| *d)
    }

    pub(crate) fn set_draining(&self, progress: DrainProgress) {
        if let Ok(mut d) = self.draining.lock() {
            *d = Some(progress);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_the_wire_json() {
        let c = Command::MoveBins {
            bins: vec![1, 2, 5],
            worker: 3,
            standby: false,
        };
        assert_eq!(
            c.request(),
            r#"{"command":"move_bins","bins":"1-2,5","worker":3,"standby":false}"#
        );
        assert_eq!(c.describe(), "move bins 1-2,5 to worker 3");
        let plan = Command::StartPlan {
            schedule: "fluid+pipelined".parse().unwrap(),
            target: Target::Pack(1),
        };
        assert_eq!(
            plan.request(),
            r#"{"command":"start_plan","schedule":"fluid+pipelined","target":"pack:1"}"#
        );
        assert_eq!(
            Command::Fail { worker: 2 }.request(),
            r#"{"command":"fail","worker":2}"#
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
