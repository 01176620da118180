//! What became of migrations, recoveries and failures: the driver's records, from which the
//! run's summary is made.
//!
//! The records are bounded whatever the clients send: the first [`KEPT_PLANS`] migrations
//! and the first [`KEPT_FAILURES`] failures are kept in detail, every later one only adds to
//! totals ([`PlanTotals`], [`FailureTotals`]), and a record never holds more than a short
//! description of where a plan went.

use std::ops::Deref;

use serde::Serialize;

use crate::Time;

/// Migrations (hand-made moves and rebalances included) kept in detail: the first this many
/// to finish. The summary lists these and adds the rest up.
pub const KEPT_PLANS: usize = 256;

/// Failures kept in detail (each with its recovery): the first this many.
pub const KEPT_FAILURES: usize = 256;

/// Finished plans [`super::PlanDriver::finished`] shows (the last this many): worker 0
/// looks at each on every turn of its loop, so they must be few.
pub const RECENT_PLANS: usize = 64;

/// Longest description of a plan's target a record keeps, in characters: a `map:` target
/// names a worker for every bin.
pub const TARGET_CHARS: usize = 120;

/// What became of a migration or a recovery (a plan or a hand-made move).
#[derive(Clone, Debug, Serialize)]
pub struct MigrationRecord {
    /// The plan's number in the run (its events' `id`).
    pub id: u64,
    /// The schedule as `--migrate` spells it (`fluid`, `batched:8`, `matched+pipelined`, ...).
    pub strategy: String,
    /// Where the plan leaves the bins, as spelled for reports (`pack:1`, `uniform`, or a
    /// description of a hand-made move, recovery or rebalance), cut to [`TARGET_CHARS`].
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
    /// Who made the plan, if not a command or the run's flags (`balancer`).
    pub by: Option<&'static str>,
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
    /// How many bins' standbys became primaries (counts, not lists: a record of a job of 2^16
    /// bins stays small, and the run keeps hundreds).
    pub promoted: usize,
    /// How many bins were left with one replica.
    pub degraded: usize,
    /// Holders dropped because the state they were sent may never have left the worker.
    pub suspects: usize,
    /// Bins left with no replica.
    pub lost: Vec<u32>,
    /// The plan that gave the degraded bins new standbys (after a rejoin, if no live
    /// worker could take them before): the last attempt, an earlier one it replaced counts
    /// in [`PlanTotals`].
    pub recovery: Option<MigrationRecord>,
    /// When the worker was brought back, in seconds since the start of the measured run;
    /// `None` if it never rejoined.
    pub rejoined_s: Option<f64>,
}

impl FailureRecord {
    /// Whether its degraded bins wait for a recovery: none finished (none ran, or a later
    /// failure cut it short), none is needed when it degraded nothing, and none can help
    /// when it lost bins.
    pub(super) fn needs_recovery(&self) -> bool {
        self.recovery.as_ref().is_none_or(|r| r.cancelled) && self.lost.is_empty() && self.degraded > 0
    }
}

/// Plans the records do not hold in detail, added up. With the detailed ones, every plan
/// the run made counts exactly once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PlanTotals {
    /// How many.
    pub plans: u64,
    /// Of them, recoveries (and rebalances that served as one).
    pub recoveries: u64,
    /// Of them, those cancelled.
    pub cancelled: u64,
    /// Of them, those whose every issued step completed before the run ended.
    pub completed: u64,
    /// Steps they issued.
    pub steps: u64,
    /// Bin changes they were made of.
    pub bins_planned: u64,
    /// Bin changes they issued.
    pub bins_moved: u64,
}

impl PlanTotals {
    /// Counts `record` in (a `recovery` or not).
    pub(crate) fn add(&mut self, record: &MigrationRecord, recovery: bool) {
        self.plans += 1;
        self.recoveries += u64::from(recovery);
        self.cancelled += u64::from(record.cancelled);
        self.completed += u64::from(record.completed_s.is_some());
        self.steps += record.step_times.len() as u64;
        self.bins_planned += record.bins_planned as u64;
        self.bins_moved += record.bins_moved as u64;
    }
}

/// Failures the records do not hold in detail, added up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct FailureTotals {
    /// How many.
    pub failures: u64,
    /// Bins whose standby became primary, over all of them.
    pub bins_promoted: u64,
    /// Bins left with one replica, over all of them.
    pub bins_degraded: u64,
    /// Holders dropped as suspect, over all of them.
    pub suspects: u64,
    /// Bins left with no replica, over all of them.
    pub bins_lost: u64,
    /// Of them, those whose worker rejoined.
    pub rejoined: u64,
    /// When the first of them happened, on the run's clock (the last detailed failure's
    /// takeover ends by then).
    pub first_at_s: Option<f64>,
}

impl FailureTotals {
    /// Counts `record` in (its recovery, if any, is not: plans add up in [`PlanTotals`]).
    pub(super) fn add(&mut self, record: &FailureRecord) {
        self.failures += 1;
        self.bins_promoted += record.promoted as u64;
        self.bins_degraded += record.degraded as u64;
        self.suspects += record.suspects as u64;
        self.bins_lost += record.lost.len() as u64;
        self.rejoined += u64::from(record.rejoined_s.is_some());
        self.first_at_s = self.first_at_s.or(Some(record.at_s));
    }
}

/// The migrations of a run as its summary gives them: the first [`KEPT_PLANS`] in detail,
/// the rest added up. Reads as the slice of the detailed ones.
#[derive(Clone, Debug, Default)]
pub struct PlanHistory {
    /// At most [`KEPT_PLANS`] migrations (hand-made moves and rebalances included), in the
    /// order they finished, then the one still running, if any and if there is room.
    pub listed: Vec<MigrationRecord>,
    /// Every plan neither in `listed` nor a listed failure's `recovery`: migrations past
    /// the first [`KEPT_PLANS`], recoveries of failures past the first [`KEPT_FAILURES`],
    /// recovery attempts a later one for the same failure replaced, and a rebalance still
    /// running at the end.
    pub unlisted: PlanTotals,
}

impl Deref for PlanHistory {
    type Target = [MigrationRecord];

    fn deref(&self) -> &[MigrationRecord] {
        &self.listed
    }
}

/// The failures of a run as its summary gives them: the first [`KEPT_FAILURES`] in detail,
/// the rest added up. Reads as the slice of the detailed ones.
#[derive(Clone, Debug, Default)]
pub struct FailureHistory {
    /// At most [`KEPT_FAILURES`] failures, in the order they happened, each with its
    /// recovery (the running one, not completed, if any).
    pub listed: Vec<FailureRecord>,
    /// The failures after them (their recoveries count in [`PlanHistory::unlisted`]).
    pub unlisted: FailureTotals,
}

impl Deref for FailureHistory {
    type Target = [FailureRecord];

    fn deref(&self) -> &[FailureRecord] {
        &self.listed
    }
}
