//! Runs a built-in workload open-loop on a timely cluster, with scheduled migrations,
//! failures and rejoins, and measures it: output digest, latency, migrations, failures,
//! memory.

mod collect;
mod config;
mod end;
mod epochs;
mod measure;
mod plane;
mod preload;
mod worker;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use config::{
    Cluster, DEFAULT_RECOVERY, Idle, MAX_PACE_AHEAD, MAX_REPLICAS, Pace, RunConfig, Scripted, WorkerAt,
    cluster_position, validate,
};

use crate::Time;
use crate::abort::{Abort, park_forever};
use crate::bins::list;
use crate::control::ControlHandle;
use crate::error::ConfigError;
use crate::failure::Failures;
use crate::nexmark::NexmarkJob;
use crate::summary::Summary;
use crate::workload::{CountJob, Counting, Workload};
use worker::{Shared, Stopped, run_worker};

/// How long a cluster process that found lost bins waits before it exits.
const LOST_GRACE: Duration = Duration::from_millis(500);

/// Errors that stop a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("timely: {0}")]
    Timely(String),
    #[error("{0}")]
    Worker(String),
    #[error(
        "process {process} ({address}) went away ({cause}); a timely cluster cannot go on without one of its processes"
    )]
    PeerLost {
        process: usize,
        address: String,
        cause: String,
    },
    #[error(
        "bins {} lost their last replica at time {time}: the job cannot produce their outputs, so it stopped",
        list(bins)
    )]
    BinsLost { bins: Vec<u32>, time: Time },
}

impl RunError {
    /// The exit status a command-line run reports it with: 3 for lost bins, 2 for bad
    /// settings, 1 otherwise.
    pub fn exit_status(&self) -> u8 {
        match self {
            RunError::BinsLost { .. } => 3,
            RunError::Config(_) => 2,
            _ => 1,
        }
    }
}

/// Runs the job. Returns the summary in the process that hosts worker 0, `None` elsewhere.
///
/// A worker that panics, a peer process that goes away, or bins that lose their last
/// replica stop the run with that error within a loop turn. In a cluster the stopped
/// process's workers never return (so that its peers see the process go away instead of
/// a clean shutdown): the caller is expected to exit.
pub fn run(config: RunConfig, control: ControlHandle) -> Result<Option<Summary>, RunError> {
    validate(&config)?;
    let (timely, addresses) = config::cluster(&config)?;
    let cluster = !addresses.is_empty();
    let peers = config.workers * addresses.len().max(1);
    let failures = Arc::new(Failures::new(peers));
    let abort = Abort::new(config.workers, addresses);
    let config = Arc::new(config);
    let result: Arc<Mutex<Option<Summary>>> = Arc::default();
    let slot = Arc::clone(&result);
    let start: Arc<OnceLock<Instant>> = Arc::default();
    let run_abort = Arc::clone(&abort);
    let guards = timely::execute(timely, move |worker| {
        run_abort.enter(worker.index());
        let shared = Shared {
            config: &config,
            control: &control,
            start: &start,
            failures: &failures,
            abort: &run_abort,
        };
        let summary = match config.workload {
            Workload::KeyCount => {
                let job = CountJob::new(Counting::Dense, config.keys, config.seed);
                run_worker(worker, &shared, &job)
            }
            Workload::HashCount => {
                let job = CountJob::new(Counting::Hashed, config.keys, config.seed);
                run_worker(worker, &shared, &job)
            }
            Workload::Nexmark(query) => {
                let job = NexmarkJob::new(query, config.rate, config.nexmark, config.epoch);
                run_worker(worker, &shared, &job)
            }
        };
        match summary {
            Ok(summary) => {
                if let Some(s) = summary
                    && let Ok(mut slot) = slot.lock()
                {
                    *slot = Some(s);
                }
                run_abort.finished();
            }
            Err(Stopped) if cluster => park_forever(),
            // Timely steps a worker until its dataflows complete, which they never will.
            Err(Stopped) => {
                for dataflow in worker.installed_dataflows() {
                    worker.drop_dataflow(dataflow);
                }
            }
        }
    })
    .map_err(RunError::Timely)?;
    if let Err(e) = abort.wait() {
        if cluster {
            // Every process finds lost bins at about the same time: give the others a moment
            // to stop for that reason rather than for this process going away.
            if matches!(e, RunError::BinsLost { .. }) {
                std::thread::sleep(LOST_GRACE);
            }
            // Joining would wait for parked workers; the process exits instead.
            std::mem::forget(guards);
        } else {
            drop(guards.join());
        }
        return Err(e);
    }
    for r in guards.join() {
        r.map_err(RunError::Worker)?;
    }
    let summary = result.lock().map(|mut s| s.take()).unwrap_or(None);
    Ok(summary)
}
