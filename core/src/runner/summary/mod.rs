//! The report of a finished run: what the JSON summary holds, and how worker 0 builds it
//! from every worker's report and its own latency measurements.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

mod placement;
mod spans;

pub use placement::WorkerPlacement;
pub(crate) use placement::per_worker;

pub(crate) use spans::SpanSums;
pub use spans::{MAX_SPANS, OutputSpans, Parting};

use crate::Time;
use crate::driver::{FailureHistory, MigrationRecord, PlanHistory};
use crate::epoch::EpochLen;
use crate::harness::RunConfig;
use crate::job::ParamValues;
use crate::latency::{LatencyRecorder, Percentiles, WindowStats};
use crate::operator::TransferTotals;

/// Latency percentiles during one migration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DuringLatency {
    /// The median per-record latency, in nanoseconds.
    pub p50: u64,
    /// The 99th percentile, in nanoseconds.
    pub p99: u64,
    /// The largest, in nanoseconds.
    pub max: u64,
}

impl DuringLatency {
    /// The percentiles of every record of the epochs due from `from_s` to one epoch after
    /// `to_s` (seconds of the run): what a migration issued and completed then cost. The
    /// summary and the live `plan` `latency` events both say this.
    pub fn between(latency: &LatencyRecorder, epoch: EpochLen, from_s: f64, to_s: f64) -> DuringLatency {
        let p = latency.between(epoch.in_secs(from_s), epoch.in_secs(to_s) + 1);
        DuringLatency {
            p50: p.p50,
            p99: p.p99,
            max: p.max,
        }
    }

    /// The last epoch whose records [`DuringLatency::between`] takes for a span ending at
    /// `to_s`.
    pub fn last_epoch(epoch: EpochLen, to_s: f64) -> Time {
        epoch.in_secs(to_s) + 1
    }
}

/// One migration in the summary.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MigrationSummary {
    /// The schedule as `--migrate` spells it (`fluid`, `batched:8`, `matched+pipelined`, ...).
    pub strategy: String,
    /// Where it left the bins (`pack:1`, `uniform`, or a hand-made move's description).
    pub target: String,
    /// When the plan was made, in seconds since the measured run began.
    pub issued_s: f64,
    /// When its last step completed (the output frontier passed its time), in seconds since
    /// the measured run began; `None` if the run ended first.
    pub completed_s: Option<f64>,
    /// `completed_s - issued_s`; `None` if it did not complete.
    pub duration_s: Option<f64>,
    /// Steps issued.
    pub steps: usize,
    /// Bin changes issued (fewer than planned if cancelled or cut short by the run's end).
    pub bins_moved: usize,
    /// State its steps shipped, in bytes, over every worker (a bin sent to two new holders
    /// counts twice): serialized for bins that travelled encoded, in memory for bins handed
    /// to another worker of the same process as they are.
    pub bytes_moved: u64,
    /// The state messages (chunks) the encoded bins travelled in.
    pub chunks: u64,
    /// Bin changes handed to a worker of the same process as they are, neither encoded nor
    /// cut into chunks.
    #[serde(default)]
    pub bins_handed: u64,
    /// Per-record latency of the epochs due from `issued_s` to one epoch after
    /// `completed_s` (or to the run's end).
    pub latency_ns_during: DuringLatency,
    /// Job RSS sampled last before the migration was issued, in bytes.
    pub rss_before_bytes: Option<u64>,
    /// The largest job RSS sampled from its issue to its completion (or the run's end), in
    /// bytes; `None` without samples (no `/proc`).
    pub rss_peak_bytes: Option<u64>,
    /// Whether a command dropped its steps not yet issued.
    pub cancelled: bool,
    /// Who made it, if not a command or the run's flags: `balancer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// The recovery of one failure: new standbys for the bins it left with one replica.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecoverySummary {
    /// The `--recovery` schedule it ran with (`matched`, `fluid+pipelined`, ...).
    pub strategy: String,
    /// Bins that got a copy.
    pub bins_copied: usize,
    /// Serialized state copied, in bytes, over every worker.
    pub bytes: u64,
    /// When the recovery was planned, in seconds since the measured run began.
    pub issued_s: f64,
    /// `None` if it had not finished when the run ended (or was cut short).
    pub duration_s: Option<f64>,
    /// Per-record latency of the epochs due from its issue to one epoch after its
    /// completion (or to the run's end).
    pub latency_ns_during: DuringLatency,
    /// Whether it was cut short (a later failure cancelled it).
    pub cancelled: bool,
}

/// One failure in the summary.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FailureSummary {
    /// The failed worker's index in the whole job.
    pub worker: u32,
    /// When it failed, on the run's clock.
    pub at_s: f64,
    /// The logical time of its instructions.
    pub time: Time,
    /// From the failure until every promoted standby could serve its bins: it holds them up
    /// to date from the start, so until the output passed the failure's logical time `time`
    /// (from which the standbys are the primaries); `None` if it did not before the run
    /// ended. However long a promoted bin then waits for its next record does not count.
    pub takeover_ms: Option<f64>,
    /// Bins whose standby took over as primary.
    pub bins_promoted: usize,
    /// Bins left with one replica.
    pub bins_degraded: usize,
    /// Bins left with none (the run stopped).
    pub bins_lost: Vec<u32>,
    /// The latency of the records due from the failure to the end of its takeover.
    pub latency_ns_during_takeover: DuringLatency,
    /// The recovery that gave its degraded bins new standbys (after the rejoin when no live
    /// worker could take them); `None` if none ran.
    pub recovery: Option<RecoverySummary>,
    /// When the worker was brought back, in seconds since the measured run began; `None` if
    /// it never rejoined.
    pub rejoined_s: Option<f64>,
}

/// The plans a summary does not list one by one, added up: with `migrations` and the
/// failures' `recovery`, every plan of the run counts exactly once.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UnlistedPlans {
    /// How many: migrations past the first [`crate::driver::KEPT_PLANS`], recoveries of
    /// failures not listed, recovery attempts a later one for the same failure replaced, and
    /// a rebalance still running at the end.
    pub plans: u64,
    /// Of them, recoveries (and rebalances that served as one).
    pub recoveries: u64,
    /// Of them, those cancelled.
    pub cancelled: u64,
    /// Of them, those whose every issued step completed before the run ended.
    pub completed: u64,
    /// Steps they issued.
    pub steps: u64,
    /// Bin changes they issued.
    pub bins_moved: u64,
    /// State their steps shipped, in bytes, over every worker (as `bytes_moved` of a listed
    /// plan): whatever was shipped at a time no listed plan issued a step at (only plan steps
    /// ship state).
    pub bytes_moved: u64,
    /// The state messages (chunks) the encoded bins travelled in.
    pub chunks: u64,
    /// Bin changes handed to a worker of the same process as they are.
    #[serde(default)]
    pub bins_handed: u64,
}

/// The failures a summary does not list one by one (those past the first
/// [`crate::driver::KEPT_FAILURES`]), added up.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UnlistedFailures {
    /// How many.
    pub failures: u64,
    /// Bins whose standby took over as primary, over all of them.
    pub bins_promoted: u64,
    /// Bins left with one replica, over all of them.
    pub bins_degraded: u64,
    /// Bins left with none, over all of them.
    pub bins_lost: u64,
    /// Of them, those whose worker was brought back.
    pub rejoined: u64,
}

/// The final report of a run (see DESIGN.md, Contracts).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summary {
    /// The job's name (a built-in workload's, or a user's job's).
    pub workload: String,
    /// Whether the plain-timely twins ran (no control input, no migration).
    pub native: bool,
    /// Workers in the whole job (processes × worker threads per process).
    pub workers: usize,
    /// Timely processes in the job.
    pub processes: usize,
    /// Bins per operator.
    pub bins: usize,
    /// The job's own flags as the run took them (`--keys` of the key-count workloads).
    #[serde(default, skip_serializing_if = "ParamValues::is_empty")]
    pub params: ParamValues,
    /// Offered records per second, over all workers.
    pub rate: u64,
    /// The measured run's configured length, in seconds.
    pub duration_s: f64,
    /// The `--seed` the generated workloads drew their keys with.
    pub seed: u64,
    /// Whether every key was inserted once before the measured run.
    pub preload: bool,
    /// Records the sources sent, over all workers, the preload's included.
    pub records_in: u64,
    /// Outputs at logical times up to the run's last epoch, over all workers.
    pub outputs: u64,
    /// Order-independent hash of the multiset of (time, output) pairs, as hex; with adaptive
    /// epochs, whose times depend on how the batches fell, of the outputs alone.
    pub output_digest: String,
    /// The outputs of `output_digest` per span of logical time, so that two runs whose
    /// digests differ can say where they first part; absent under adaptive epochs (their
    /// times depend on how the batches fell) and in older traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_spans: Option<OutputSpans>,
    /// Per-record latency over the measured run, in nanoseconds (see README, *Usage*).
    pub latency_ns: Percentiles,
    /// Every migration plan and hand-made move, in the order they finished, then the one
    /// still running at the end, up to [`crate::driver::KEPT_PLANS`] (the rest are in
    /// `plans_unlisted`); a failure's recovery (or the rebalance that served as one) is under
    /// `failures` instead.
    pub migrations: Vec<MigrationSummary>,
    /// Replicas per bin.
    #[serde(default = "one")]
    pub replicas: usize,
    /// Every failure, in the order they happened, up to [`crate::driver::KEPT_FAILURES`]
    /// (the rest are in `failures_unlisted`).
    #[serde(default)]
    pub failures: Vec<FailureSummary>,
    /// The plans neither in `migrations` nor a listed failure's `recovery`, added up.
    #[serde(default)]
    pub plans_unlisted: UnlistedPlans,
    /// The failures not in `failures`, added up.
    #[serde(default)]
    pub failures_unlisted: UnlistedFailures,
    /// The sum over processes of each one's peak RSS so far (its high-water mark), in
    /// bytes; `None` without `/proc`.
    pub rss_peak_bytes: Option<u64>,
    /// The largest RSS sampled during the measured run (unlike `rss_peak_bytes`, not
    /// inflated by earlier runs in the same process).
    pub rss_max_bytes: Option<u64>,
    /// The last sampled RSS before the first migration (or at the end, without one).
    pub rss_steady_bytes: Option<u64>,
    /// Records per second actually offered (equal to `rate` unless the generator fell behind at the end).
    pub achieved_rate: f64,
    /// Per-record latency of every 250 ms window of the measured run, in order.
    pub timeline: Vec<WindowStats>,
    /// (latency ns, fraction of records slower) over the whole run.
    pub latency_ccdf: Vec<(u64, f64)>,
    /// Lines written to `--output`, when the run wrote one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs_written: Option<u64>,
    /// What the run read, when it read its records (`--input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<crate::source::InputSummary>,
    /// Where the outputs went and how far they are committed, when the run wrote them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<crate::sink::OutputSummary>,
    /// Processes that went away while the job ran on, each loss with the restart among the
    /// survivors that followed (a job that restarts after a crash: `--replicas 2` across
    /// processes, generated records).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crashes: Vec<CrashSummary>,
    /// Processes started again for a lost place (`--join`) that the job took in, each with
    /// the restart that took it in and the rebalance onto it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joins: Vec<JoinSummary>,
    /// How the work scheduled past the last epoch ran, for a job that drains
    /// ([`crate::job::Job::drain`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainSummary>,
    /// What the balancer saw and did (`--balance`), unless it was off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance: Option<crate::balance::BalanceSummary>,
    /// Each worker's primaries and standbys at the end of the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placement: Vec<WorkerPlacement>,
}

/// The drain of a run: the work its operators scheduled for times after the last epoch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DrainSummary {
    /// The logical time of the last epoch: the input's end.
    pub input_end: Time,
    /// Every output before this logical time is the run's; no work at or after it ran.
    pub ended_at: Time,
    /// Whether work before the drain's horizon was left undone: a stop, or `--duration`
    /// reached, cut the drain.
    pub cut: bool,
    /// Bins (of every operator) that still had work scheduled at or after `ended_at`.
    pub bins_pending: u64,
    /// The earliest time of that work.
    pub next_time: Option<Time>,
    /// Seconds the drain took.
    pub took_s: f64,
}

/// A process that joined the running job in a lost one's place, and the restart that took
/// it in.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JoinSummary {
    /// The place it took, by index at the job's start.
    pub process: usize,
    /// When process 0 began the restart that took it in, on the run's clock (seconds since
    /// the measured run began): at once when it asked, or once a computation forming then
    /// had formed.
    pub asked_s: f64,
    /// From then until the new computation with it had formed and agreed where every bin
    /// is.
    pub restart_ms: Option<f64>,
    /// From then until the new computation's first epoch completed.
    pub takeover_ms: Option<f64>,
    /// The logical time the new computation started from (the committed frontier).
    pub from_time: Time,
    /// The restart (generation) that took it in.
    pub generation: u32,
    /// The rebalance that moved bins onto it (`--recovery`), once the job ran it.
    #[serde(default)]
    pub rebalance: Option<RecoverySummary>,
}

/// A loss of processes and the restart of the job among the survivors.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CrashSummary {
    /// The processes lost, by their index at the job's start.
    pub processes: Vec<usize>,
    /// When process 0 saw the loss, on the run's clock (seconds since the measured run
    /// began).
    pub detected_s: f64,
    /// From then until the survivors' new computation had formed and agreed where every bin
    /// survived.
    pub restart_ms: Option<f64>,
    /// From the loss seen until the restarted computation's first epoch completed (its first
    /// output, the records it was sent again included); `None` if none did.
    pub takeover_ms: Option<f64>,
    /// The logical time the restarted computation started from (the committed frontier).
    pub from_time: Time,
    /// Bins whose surviving copy was a standby, now the primary.
    pub bins_promoted: usize,
    /// Bins left with one copy.
    pub bins_degraded: usize,
    /// The restart (generation) that followed it.
    #[serde(default)]
    pub generation: u32,
    /// The copies that gave those bins standbys again (`--recovery`), once the restarted
    /// computation ran it.
    #[serde(default)]
    pub recovery: Option<RecoverySummary>,
}

fn one() -> usize {
    1
}

/// What each worker reports to worker 0 at the end.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct WorkerReport {
    pub(crate) digest: u64,
    pub(crate) outputs: u64,
    /// `digest` and `outputs` per span of logical time (empty when the digest is untimed).
    pub(crate) spans: SpanSums,
    pub(crate) records_in: u64,
    /// Of `records_in`, those inserted before the measured run.
    pub(crate) preloaded: u64,
    pub(crate) transfers: Vec<(Time, TransferTotals)>,
    /// Samples of this process's RSS (only from its first worker).
    pub(crate) rss_samples: Vec<(f64, u64)>,
    pub(crate) rss_peak: Option<u64>,
    /// The work this worker's bins still had scheduled when the run ended.
    pub(crate) scheduled: crate::operator::Scheduled,
}

pub(crate) fn summarize(
    config: &RunConfig,
    peers: usize,
    reports: &[WorkerReport],
    latency: &LatencyRecorder,
    records: PlanHistory,
    failures: FailureHistory,
    end_s: f64,
) -> Summary {
    let digest = reports.iter().fold(0u64, |d, r| d.wrapping_add(r.digest));
    let outputs = reports.iter().map(|r| r.outputs).sum();
    let spans = reports.iter().fold(SpanSums::default(), |mut all, r| {
        all.merge(&r.spans);
        all
    });
    let records_in = reports.iter().map(|r| r.records_in).sum::<u64>();
    let preloaded: u64 = reports.iter().map(|r| r.preloaded).sum();
    // Job RSS at each sample: the sum over processes of their sample with that index.
    let job_rss = job_rss(reports);
    let rss_between = |from: f64, to: f64| {
        job_rss
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .map(|(_, r)| *r)
            .max()
    };
    let rss_before = |at: f64| {
        job_rss
            .iter()
            .take_while(|(t, _)| *t < at)
            .last()
            .map(|(_, r)| *r)
    };
    let first_migration = records.first().map(|r| r.issued_s).unwrap_or(f64::INFINITY);
    let during = |from_s: f64, to_s: f64| DuringLatency::between(latency, config.epoch, from_s, to_s);
    let PlanHistory {
        listed: records,
        unlisted: plans_unlisted,
    } = records;
    let FailureHistory {
        listed: failures,
        unlisted: failures_unlisted,
    } = failures;
    // What each listed plan shipped: the migrations', then the recoveries' in failure order.
    let (by_plan, unlisted_shipped) = {
        let listed: Vec<&MigrationRecord> = records
            .iter()
            .chain(failures.iter().filter_map(|f| f.recovery.as_ref()))
            .collect();
        shipped(reports, &listed)
    };
    let mut by_plan = by_plan.into_iter();
    let migrations = records
        .into_iter()
        .map(|r| {
            let totals = by_plan.next().unwrap_or_default();
            let to_s = r.completed_s.unwrap_or(end_s);
            MigrationSummary {
                duration_s: r.completed_s.map(|c| c - r.issued_s),
                latency_ns_during: during(r.issued_s, to_s),
                strategy: r.strategy,
                target: r.target,
                issued_s: r.issued_s,
                completed_s: r.completed_s,
                steps: r.step_times.len(),
                bins_moved: r.bins_moved,
                bytes_moved: totals.bytes,
                chunks: totals.chunks,
                bins_handed: totals.handed,
                rss_before_bytes: rss_before(r.issued_s),
                rss_peak_bytes: rss_between(r.issued_s, to_s),
                cancelled: r.cancelled,
                by: r.by.map(str::to_string),
            }
        })
        .collect();
    let failures = failures
        .into_iter()
        .map(|f| {
            let recovery = f.recovery.map(|r| RecoverySummary {
                bins_copied: r.bins_moved,
                bytes: by_plan.next().unwrap_or_default().bytes,
                duration_s: r.completed_s.filter(|_| !r.cancelled).map(|c| c - r.issued_s),
                latency_ns_during: during(r.issued_s, r.completed_s.unwrap_or(end_s)),
                strategy: r.strategy,
                issued_s: r.issued_s,
                cancelled: r.cancelled,
            });
            FailureSummary {
                worker: f.worker,
                at_s: f.at_s,
                time: f.time,
                // Known once the run's epochs are (see `time_takeovers`).
                takeover_ms: None,
                bins_promoted: f.promoted,
                bins_degraded: f.degraded,
                bins_lost: f.lost,
                latency_ns_during_takeover: DuringLatency::default(),
                recovery,
                rejoined_s: f.rejoined_s,
            }
        })
        .collect();
    let rss_peak = reports.iter().filter_map(|r| r.rss_peak).reduce(|a, b| a + b);
    Summary {
        workload: config.workload.clone(),
        native: config.native,
        workers: peers,
        processes: peers / config.workers.max(1),
        bins: config.bins.count(),
        params: config.params.clone(),
        rate: config.rate,
        duration_s: config.duration.as_secs_f64(),
        seed: config.seed,
        preload: config.preload,
        records_in,
        outputs,
        output_digest: format!("{digest:016x}"),
        output_spans: (config.epoch_mode == crate::harness::EpochMode::Fixed).then(|| spans.spans()),
        latency_ns: latency.overall(),
        migrations,
        replicas: config.replicas,
        failures,
        plans_unlisted: UnlistedPlans {
            plans: plans_unlisted.plans,
            recoveries: plans_unlisted.recoveries,
            cancelled: plans_unlisted.cancelled,
            completed: plans_unlisted.completed,
            steps: plans_unlisted.steps,
            bins_moved: plans_unlisted.bins_moved,
            bytes_moved: unlisted_shipped.bytes,
            chunks: unlisted_shipped.chunks,
            bins_handed: unlisted_shipped.handed,
        },
        failures_unlisted: UnlistedFailures {
            failures: failures_unlisted.failures,
            bins_promoted: failures_unlisted.bins_promoted,
            bins_degraded: failures_unlisted.bins_degraded,
            bins_lost: failures_unlisted.bins_lost,
            rejoined: failures_unlisted.rejoined,
        },
        rss_peak_bytes: rss_peak,
        rss_steady_bytes: rss_before(first_migration.min(end_s)),
        rss_max_bytes: job_rss.iter().map(|(_, r)| *r).max(),
        achieved_rate: records_in.saturating_sub(preloaded) as f64 / config.duration.as_secs_f64().max(1e-9),
        timeline: latency.timeline(),
        latency_ccdf: latency.ccdf(),
        outputs_written: None,
        input: None,
        output: None,
        crashes: Vec::new(),
        joins: Vec::new(),
        drain: None,
        balance: None,
        placement: Vec::new(),
    }
}

/// Times the takeover of each of `failures` (see [`FailureSummary::takeover_ms`]) and the
/// latency records saw during it, from `latency` with epochs of `epoch`; `done_at(t)` is
/// when logical time `t` was complete, in ns after the run's start.
pub(crate) fn time_takeovers(
    failures: &mut [FailureSummary],
    latency: &LatencyRecorder,
    epoch: crate::epoch::EpochLen,
    done_at: impl Fn(Time) -> Option<u64>,
) {
    for f in failures {
        let served_s = done_at(f.time).map(|ns| (ns as f64 / 1e9).max(f.at_s));
        f.takeover_ms = served_s.map(|s| (s - f.at_s) * 1000.0);
        f.latency_ns_during_takeover =
            DuringLatency::between(latency, epoch, f.at_s, served_s.unwrap_or(f.at_s));
    }
}

/// What the steps of each of `plans` shipped over every worker, in their order, and what was
/// shipped at every other time. One pass over the transfers whatever the number of plans;
/// no two plans step at one time (one plan runs at a time, its steps at times of their own).
fn shipped(reports: &[WorkerReport], plans: &[&MigrationRecord]) -> (Vec<TransferTotals>, TransferTotals) {
    let mut owner: FxHashMap<Time, usize> = FxHashMap::default();
    for (i, plan) in plans.iter().enumerate() {
        owner.extend(plan.step_times.iter().map(|t| (*t, i)));
    }
    let mut each = vec![TransferTotals::default(); plans.len()];
    let mut rest = TransferTotals::default();
    for (t, v) in reports.iter().flat_map(|rep| rep.transfers.iter()) {
        let acc = match owner.get(t) {
            Some(&i) => &mut each[i],
            None => &mut rest,
        };
        *acc += *v;
    }
    (each, rest)
}

/// The job's resident memory over time: per `RSS_BUCKET_S` bucket of run time, the sum over
/// processes of each one's latest sample by then (processes sample on their own clocks).
fn job_rss(reports: &[WorkerReport]) -> Vec<(f64, u64)> {
    const RSS_BUCKET_S: f64 = 0.1;
    let series: Vec<&Vec<(f64, u64)>> = reports
        .iter()
        .map(|r| &r.rss_samples)
        .filter(|s| !s.is_empty())
        .collect();
    let bucket = |t: f64| (t / RSS_BUCKET_S).floor() as usize;
    let Some(last) = series
        .iter()
        .filter_map(|s| s.last())
        .map(|(t, _)| bucket(*t))
        .max()
    else {
        return Vec::new();
    };
    let mut cursors = vec![0usize; series.len()];
    let mut latest: Vec<Option<u64>> = vec![None; series.len()];
    (0..=last)
        .filter_map(|b| {
            for (i, s) in series.iter().enumerate() {
                while cursors[i] < s.len() && bucket(s[cursors[i]].0) <= b {
                    latest[i] = Some(s[cursors[i]].1);
                    cursors[i] += 1;
                }
            }
            // Only once every process has reported does the sum mean the whole job.
            let total: Option<u64> = latest.iter().copied().sum();
            total.map(|total| (b as f64 * RSS_BUCKET_S, total))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_rss_aligns_processes_by_time() {
        let report = |samples: Vec<(f64, u64)>| WorkerReport {
            rss_samples: samples,
            ..WorkerReport::default()
        };
        // The second process misses a sample at 0.1 s: its 0.0 s value carries forward.
        let reports = vec![
            report(vec![(0.0, 10), (0.1, 20), (0.2, 30)]),
            report(vec![(0.01, 1), (0.25, 3)]),
            report(Vec::new()),
        ];
        assert_eq!(job_rss(&reports), vec![(0.0, 11), (0.1, 21), (0.2, 33)]);
    }

    /// A failure at 2 s, effective from time 2000 (1 ms epochs): its takeover ends when time
    /// 2000 is complete, however long a promoted bin then waits for its next record, and
    /// its latency is that of the records due meanwhile.
    #[test]
    fn a_takeover_ends_once_the_output_passed_the_failure() {
        let epoch = crate::epoch::EpochLen::MS;
        let mut latency = LatencyRecorder::new(2000, epoch);
        for e in 1..=3000u64 {
            // The epochs due right after the failure wait 30 ms.
            let late = if (2000..2030).contains(&e) { 30_000_000 } else { 0 };
            latency.record(e, e * 1_000_000 + late, true);
        }
        let failure = |time| FailureSummary {
            worker: 1,
            at_s: 2.0,
            time,
            takeover_ms: None,
            bins_promoted: 8,
            bins_degraded: 8,
            bins_lost: Vec::new(),
            latency_ns_during_takeover: DuringLatency::default(),
            recovery: None,
            rejoined_s: None,
        };
        let mut failures = vec![failure(2000), failure(9000)];
        // Time t completes 30 ms after it closes from 2000 to 2029, at once elsewhere.
        let done_at = |t: Time| {
            (t <= 3000).then(|| t * 1_000_000 + if (2000..2030).contains(&t) { 30_000_000 } else { 0 })
        };
        time_takeovers(&mut failures, &latency, epoch, done_at);
        let ms = failures[0].takeover_ms.unwrap();
        assert!((ms - 30.0).abs() < 1e-6, "{ms}");
        assert!(failures[0].latency_ns_during_takeover.max >= 30_000_000);
        // A failure whose time the run never completed has no takeover time.
        assert_eq!(failures[1].takeover_ms, None);
    }
}
