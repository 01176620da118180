//! What became of migrations, recoveries and failures: the driver's records, from which the
//! run's summary is made.

use serde::Serialize;

use crate::Time;

/// What became of a migration or a recovery (a plan or a hand-made move).
#[derive(Clone, Debug, Serialize)]
pub struct MigrationRecord {
    /// The plan's number in the run (its events' `id`).
    pub id: u64,
    /// The schedule as `--migrate` spells it (`fluid`, `batched:8`, `matched+pipelined`, ...).
    pub strategy: String,
    /// Where the plan leaves the bins, as spelled for reports (`pack:1`, `uniform`, or a
    /// description of a hand-made move, recovery or rebalance).
    pub target: String,
    /// Wall-clock seconds since the start of the measured run.
    pub issued_s: f64,
    /// When every issued step had completed (the output frontier passed its time), in
    /// seconds since the start of the measured run; `None` while it runs or if the run
    /// ended first.
    pub completed_s: Option<f64>,
    /// Steps the plan was made of.
    pub steps: usize,
    /// Bin changes the plan was made of.
    pub bins_planned: usize,
    /// Bin changes issued (fewer than planned if the plan was cancelled or the run ended).
    pub bins_moved: usize,
    /// The logical time of every issued step.
    pub step_times: Vec<Time>,
    /// Whether a command dropped the steps not yet issued.
    pub cancelled: bool,
}

/// What became of a failure.
#[derive(Clone, Debug, Serialize)]
pub struct FailureRecord {
    /// The failed worker's index in the whole job.
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
    /// When the worker was brought back, in seconds since the start of the measured run;
    /// `None` if it never rejoined.
    pub rejoined_s: Option<f64>,
}

impl FailureRecord {
    /// Whether its degraded bins still wait for a recovery: none finished (none ran, or a
    /// later failure cut it short), none is needed when it degraded nothing, and none can
    /// help when it lost bins.
    pub(super) fn needs_recovery(&self) -> bool {
        self.recovery.as_ref().is_none_or(|r| r.cancelled)
            && self.lost.is_empty()
            && !self.degraded.is_empty()
    }
}
