//! What a job did since it started, added up from its events: records read, outputs made,
//! records each operator applied, plans, failures, restarts, the balancer's decisions, and
//! histograms of latency, plan and takeover durations. The rest of the model says how the
//! job stands now; this is what a metrics endpoint serves as counters.
//!
//! Invariant: every total only grows (a counter a scraper reads never goes back), and every
//! map stays within its bound whatever the events say.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::bounds::{MAX_OPERATORS, MAX_PEERS, text};
use crate::event::{BalancePhase, Event, Phase};

/// Upper bounds of the per-record latency histogram's buckets, in seconds.
pub const LATENCY_BUCKETS_S: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Upper bounds of the plan duration histogram's buckets, in seconds.
pub const PLAN_BUCKETS_S: &[f64] = &[0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];
/// Upper bounds of the takeover histogram's buckets, in seconds.
pub const TAKEOVER_BUCKETS_S: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The most (strategy, by) pairs counted: strategies past the first `PLAN_KINDS - MAKERS`
/// pairs count as `other`, one pair per maker.
pub const PLAN_KINDS: usize = 32;

/// What makes plans.
const MAKERS: [&str; 4] = ["command", "balancer", "recovery", "rebalance"];

/// A histogram of fixed buckets: per bucket (one per bound, then one above them all), the
/// observations in it, with their sum and count.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Buckets {
    /// Observations per bucket: `counts[i]` those above bound `i - 1` and at most bound
    /// `i`; the last, those above every bound.
    pub counts: Vec<u64>,
    /// The observations' sum.
    pub sum: f64,
    /// How many there were.
    pub count: u64,
}

impl Buckets {
    /// Counts `value` into the bucket of `bounds` it falls in (a value that is not a
    /// number is not counted).
    pub fn observe(&mut self, bounds: &[f64], value: f64) {
        if !value.is_finite() {
            return;
        }
        let bucket = bounds.partition_point(|&b| b < value);
        self.add(bounds, bucket, 1, value);
    }

    /// Adds `n` observations summing to `sum` to bucket `bucket` of `bounds`. The sum stays
    /// a number (a snapshot in JSON has no infinity): at most `f64::MAX`.
    fn add(&mut self, bounds: &[f64], bucket: usize, n: u64, sum: f64) {
        self.counts.resize(bounds.len() + 1, 0);
        if let Some(c) = self.counts.get_mut(bucket) {
            *c = c.saturating_add(n);
            self.count = self.count.saturating_add(n);
            self.add_sum(sum);
        }
    }

    fn add_sum(&mut self, sum: f64) {
        if sum.is_finite() {
            self.sum = (self.sum + sum).clamp(-f64::MAX, f64::MAX);
        }
    }

    /// Each bucket's upper bound (`+Inf` last) with its own count, not the buckets' below
    /// (the exposition's encoder adds them up): together never more than `count`, so that
    /// the running sum cannot overflow whatever the counts (from a file) say.
    pub fn per_bucket(&self, bounds: &[f64]) -> Vec<(f64, u64)> {
        let mut left = self.count;
        bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .enumerate()
            .map(|(i, bound)| {
                let n = self.counts.get(i).copied().unwrap_or(0).min(left);
                left -= n;
                (bound, n)
            })
            .collect()
    }
}

/// One worker's totals.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerTotals {
    /// Records its source sent before the measured run (the latest start's).
    pub records_at_start: u64,
    /// Records its source sent since that start, as its samples added up.
    pub records_since_start: u64,
    /// The most records it was known to have sent: what it counts as.
    pub records_in: u64,
    /// Outputs it counted so far.
    pub outputs: u64,
    /// Records each of its operators applied, by operator (at most [`MAX_OPERATORS`]).
    pub applied: BTreeMap<String, u64>,
}

impl WorkerTotals {
    /// The worker is known to have sent `records` and counted `outputs` (its totals only grow).
    fn known(&mut self, records: u64, outputs: u64) {
        self.records_in = self.records_in.max(records);
        self.outputs = self.outputs.max(outputs);
    }
}

/// Plans started of one strategy, for one reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanCount {
    /// The plan's strategy, as `--migrate` spells a schedule.
    pub strategy: String,
    /// Who or what made it: `command` (a person: the dashboard, `attach`, `--migrate`),
    /// `balancer`, `recovery` (after a failure) or `rebalance` (onto a worker that rejoined).
    pub by: String,
    /// How many.
    pub count: u64,
}

/// Everything a job's events added up to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Per worker, by its index in the whole job (at most [`MAX_PEERS`]).
    pub workers: BTreeMap<u32, WorkerTotals>,
    /// Plans started, by strategy and maker (at most [`PLAN_KINDS`] pairs, then `other`).
    pub plans: Vec<PlanCount>,
    /// How long finished plans ran, in seconds.
    pub plan_seconds: Buckets,
    /// State the moves shipped, in bytes (as their senders serialized it).
    pub moved_bytes: u64,
    /// Worker failures.
    pub failures: u64,
    /// Restarts among the survivors after processes crashed.
    pub crash_restarts: u64,
    /// From a failure to each replica's first work for a bin it took over, in seconds.
    pub takeover_seconds: Buckets,
    /// The balancer's decisions, by the mode that made them (`suggest`, `auto`).
    pub balance_decisions: BTreeMap<String, u64>,
    /// Per-record latency, in seconds, from the job's latency windows.
    pub latency_seconds: Buckets,
    /// Every output before this logical time is committed to the sink, once it said.
    pub sink_committed: Option<u64>,
    /// Outputs handed to the sink so far.
    pub sink_rows: u64,
    /// When (on the shared wall clock) the latest failure happened.
    pub last_failure_s: Option<f64>,
    /// The balancer issued a plan that has not started yet: the next plan is its.
    pub balancer_issued: bool,
    /// Records in and outputs counted before the latest restart: the workers are numbered
    /// afresh, and the totals never go back below these.
    #[serde(default)]
    pub before_restart: (u64, u64),
}

impl Totals {
    /// Adds what `event` says; `wall_s` is when it happened on a clock shared by every
    /// process (for durations between events of two processes); `peers` bounds the workers
    /// it keeps totals of.
    pub fn apply(&mut self, event: &Event, wall_s: f64, peers: u32) {
        if event.worker().is_some_and(|w| w >= peers.clamp(1, MAX_PEERS)) {
            return;
        }
        match event {
            Event::JobStarted { worker, records, .. } => {
                if let Some(w) = self.worker(*worker) {
                    w.records_at_start = records.unwrap_or(0);
                    w.records_since_start = 0;
                    w.records_in = w.records_in.max(w.records_at_start);
                }
            }
            Event::WorkerStats {
                worker,
                records,
                outputs_total,
                ..
            } => {
                if let Some(w) = self.worker(*worker) {
                    w.records_since_start = w.records_since_start.saturating_add(*records);
                    let records = w.records_at_start.saturating_add(w.records_since_start);
                    w.known(records, outputs_total.unwrap_or(0));
                }
            }
            Event::JobFinished {
                worker,
                records,
                outputs,
            } => {
                if let Some(w) = self.worker(*worker) {
                    w.known(*records, outputs.unwrap_or(0));
                }
            }
            Event::BinLoads {
                worker,
                operator,
                applied: Some(applied),
                ..
            } => {
                if let Some(w) = self.worker(*worker)
                    && (w.applied.contains_key(operator) || w.applied.len() < MAX_OPERATORS)
                {
                    let n = w.applied.entry(text(operator)).or_default();
                    *n = n.saturating_add(*applied);
                }
            }
            Event::PlanStarted {
                strategy,
                purpose,
                target,
                ..
            } => {
                // The plans a restart makes are migrations that say why in their target.
                use megaflux::harness::{REBALANCED_ONTO_JOINED, RESTORED_STANDBYS};
                let by = match purpose.as_deref() {
                    Some("recovery") => "recovery",
                    Some("rebalance") => "rebalance",
                    _ if target.starts_with(RESTORED_STANDBYS) => "recovery",
                    _ if target.starts_with(REBALANCED_ONTO_JOINED) => "rebalance",
                    _ if self.balancer_issued => "balancer",
                    _ => "command",
                };
                self.balancer_issued = false;
                self.count_plan(strategy, by);
            }
            Event::PlanCompleted { seconds, .. } if *seconds >= 0.0 => {
                self.plan_seconds.observe(PLAN_BUCKETS_S, *seconds)
            }
            Event::Migration {
                phase: Phase::Extracted,
                bytes: Some(bytes),
                ..
            } => self.moved_bytes = self.moved_bytes.saturating_add(*bytes),
            Event::Failure { .. } => {
                self.failures = self.failures.saturating_add(1);
                self.last_failure_s = Some(wall_s);
            }
            Event::Takeover { .. } => {
                if let Some(failed) = self.last_failure_s {
                    self.takeover_seconds
                        .observe(TAKEOVER_BUCKETS_S, (wall_s - failed).max(0.0));
                }
            }
            Event::Restart { joined, .. } => {
                if joined.is_empty() {
                    self.crash_restarts = self.crash_restarts.saturating_add(1);
                }
                self.before_restart = (self.records_in(), self.outputs());
                self.workers.clear();
            }
            Event::Balance { phase, .. } => {
                let mode = match phase {
                    BalancePhase::Suggested => "suggest",
                    BalancePhase::Issued => {
                        self.balancer_issued = true;
                        "auto"
                    }
                    BalancePhase::Refused => {
                        self.balancer_issued = false;
                        return;
                    }
                    _ => return,
                };
                let n = self.balance_decisions.entry(mode.to_string()).or_default();
                *n = n.saturating_add(1);
            }
            Event::Latency { histogram, .. } => self.latency(histogram),
            Event::OutputCommitted { upto, rows } => {
                // The end of time (a finished sink) is no time a gauge can show.
                if *upto != u64::MAX {
                    self.sink_committed = Some(self.sink_committed.unwrap_or(0).max(*upto));
                }
                self.sink_rows = self.sink_rows.max(*rows);
            }
            _ => {}
        }
    }

    /// The totals of `worker`, unless its index is past any job's.
    fn worker(&mut self, worker: u32) -> Option<&mut WorkerTotals> {
        (worker < MAX_PEERS).then(|| self.workers.entry(worker).or_default())
    }

    fn count_plan(&mut self, strategy: &str, by: &str) {
        let named = self.plans.iter().filter(|p| p.strategy != "other").count();
        // A strategy past the named pairs' room counts as `other` (a pair never renamed).
        let strategy = match self.plans.iter().any(|p| p.strategy == strategy && p.by == by) {
            false if named >= PLAN_KINDS - MAKERS.len() => "other",
            _ => strategy,
        };
        match self
            .plans
            .iter_mut()
            .find(|p| p.strategy == strategy && p.by == by)
        {
            Some(p) => p.count = p.count.saturating_add(1),
            None => self.plans.push(PlanCount {
                strategy: text(strategy),
                by: by.to_string(),
                count: 1,
            }),
        }
    }

    /// Counts a latency window's records into the latency buckets (a window whose histogram
    /// does not decode adds nothing).
    fn latency(&mut self, histogram: &str) {
        let bounds_ns: Vec<u64> = LATENCY_BUCKETS_S.iter().map(|s| (s * 1e9) as u64).collect();
        if let Some((counts, sum_ns, _)) = megaflux::latency::bucket_counts(histogram, &bounds_ns) {
            for (bucket, n) in counts.into_iter().enumerate().filter(|(_, n)| *n > 0) {
                self.latency_seconds.add(LATENCY_BUCKETS_S, bucket, n, 0.0);
            }
            self.latency_seconds.add_sum(sum_ns / 1e9);
        }
    }

    /// Whether totals (a keyframe's, from a file) keep the bounds events are held to.
    pub(super) fn within_bounds(&self) -> bool {
        let buckets = |b: &Buckets, bounds: &[f64]| b.counts.len() <= bounds.len() + 1;
        self.workers.len() <= MAX_PEERS as usize
            && self.workers.keys().all(|w| *w < MAX_PEERS)
            && self.workers.values().all(|w| w.applied.len() <= MAX_OPERATORS)
            && self.plans.len() <= PLAN_KINDS
            && self.balance_decisions.len() <= 2
            && buckets(&self.plan_seconds, PLAN_BUCKETS_S)
            && buckets(&self.takeover_seconds, TAKEOVER_BUCKETS_S)
            && buckets(&self.latency_seconds, LATENCY_BUCKETS_S)
    }

    /// Records in, over every worker (and never below what was counted before a restart).
    pub fn records_in(&self) -> u64 {
        saturating_sum(self.workers.values().map(|w| w.records_in)).max(self.before_restart.0)
    }

    /// Outputs, over every worker (and never below what was counted before a restart).
    pub fn outputs(&self) -> u64 {
        saturating_sum(self.workers.values().map(|w| w.outputs)).max(self.before_restart.1)
    }

    /// Plans started, whatever made them.
    pub fn plans_started(&self) -> u64 {
        saturating_sum(self.plans.iter().map(|p| p.count))
    }
}

/// The sum of `values`, at most `u64::MAX` (they come from the network and from files).
pub fn saturating_sum(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0u64, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_count_each_value_once_and_add_up_to_the_top() {
        let mut b = Buckets::default();
        for v in [0.05, 0.1, 0.3, 1.0, 500.0, f64::NAN] {
            b.observe(PLAN_BUCKETS_S, v);
        }
        assert_eq!(b.count, 5);
        let buckets = b.per_bucket(PLAN_BUCKETS_S);
        assert_eq!(buckets.len(), PLAN_BUCKETS_S.len() + 1);
        assert_eq!(buckets.first(), Some(&(0.1, 2)));
        assert_eq!(buckets.last(), Some(&(f64::INFINITY, 1)));
        assert_eq!(buckets.iter().map(|(_, n)| n).sum::<u64>(), b.count);
    }

    #[test]
    fn records_in_take_the_preload_and_the_samples_and_end_at_the_worker_total() {
        let mut t = Totals::default();
        let started = |records| Event::JobStarted {
            worker: 1,
            peers: 2,
            base: 10,
            records: Some(records),
        };
        let stats = |records, outputs| Event::WorkerStats {
            worker: 1,
            records,
            applied: None,
            outputs_total: Some(outputs),
            busy_ns: 0,
            interval_ns: 1,
        };
        t.apply(&started(100), 0.0, 16);
        t.apply(&stats(50, 7), 0.0, 16);
        t.apply(&stats(25, 9), 0.0, 16);
        assert_eq!((t.records_in(), t.outputs()), (175, 9));
        t.apply(
            &Event::JobFinished {
                worker: 1,
                records: 180,
                outputs: Some(10),
            },
            0.0,
            16,
        );
        assert_eq!((t.records_in(), t.outputs()), (180, 10));
        // A worker index past the job's is no one's.
        t.apply(
            &Event::JobFinished {
                worker: 16,
                records: 1,
                outputs: None,
            },
            0.0,
            16,
        );
        assert_eq!(t.workers.len(), 1);
        // A restart numbers the workers afresh: the totals never go back.
        t.apply(
            &Event::Restart {
                generation: 1,
                from: 5,
                lost: "1".into(),
                survivors: "0".into(),
                joined: String::new(),
            },
            0.0,
            16,
        );
        assert_eq!((t.records_in(), t.outputs(), t.crash_restarts), (180, 10, 1));
        t.apply(&started(150), 0.0, 16);
        assert_eq!(t.records_in(), 180);
        t.apply(&stats(100, 12), 0.0, 16);
        assert_eq!((t.records_in(), t.outputs()), (250, 12));
        // Values from a file add up to at most u64::MAX.
        t.apply(&stats(u64::MAX, u64::MAX), 0.0, 16);
        t.workers.entry(0).or_default().records_in = u64::MAX;
        assert_eq!((t.records_in(), t.outputs()), (u64::MAX, u64::MAX));
    }

    #[test]
    fn plans_count_by_maker_and_stay_within_their_bound() {
        let mut t = Totals::default();
        let plan = |strategy: &str, purpose: Option<&str>| Event::PlanStarted {
            strategy: strategy.into(),
            target: "uniform".into(),
            steps: 1,
            bins: 1,
            purpose: purpose.map(Into::into),
            id: None,
            time: None,
            run_s: None,
        };
        t.apply(&plan("fluid", None), 0.0, 16);
        t.apply(
            &Event::Balance {
                phase: BalancePhase::Issued,
                run_s: 1.0,
                imbalance: None,
                predicted: None,
                bins: None,
                bytes: None,
                serving: None,
                needed: None,
                strategy: None,
                reason: None,
            },
            0.0,
            16,
        );
        t.apply(&plan("fluid", Some("migration")), 0.0, 16);
        t.apply(&plan("matched", Some("recovery")), 0.0, 16);
        let by: Vec<(&str, &str, u64)> = t
            .plans
            .iter()
            .map(|p| (p.strategy.as_str(), p.by.as_str(), p.count))
            .collect();
        assert_eq!(
            by,
            vec![
                ("fluid", "command", 1),
                ("fluid", "balancer", 1),
                ("matched", "recovery", 1)
            ]
        );
        assert_eq!(t.balance_decisions.get("auto"), Some(&1));
        for k in 0..100 {
            t.apply(&plan(&format!("batched:{k}"), None), 0.0, 16);
        }
        t.apply(&plan("batched:200", Some("recovery")), 0.0, 16);
        // A restart's plan is a migration that says why in its target.
        let restored = Event::PlanStarted {
            strategy: "matched".into(),
            target: "standbys lost in a crash (restart 1)".into(),
            steps: 1,
            bins: 1,
            purpose: Some("migration".into()),
            id: None,
            time: None,
            run_s: None,
        };
        t.apply(&restored, 0.0, 16);
        t.apply(&plan("fluid", None), 0.0, 16);
        assert!(t.plans.len() <= PLAN_KINDS, "{:?}", t.plans);
        assert_eq!(t.plans_started(), 106);
        let count = |strategy: &str, by: &str| {
            t.plans
                .iter()
                .find(|p| p.strategy == strategy && p.by == by)
                .map(|p| p.count)
        };
        // Pairs keep their names and counts; the strategies past the room count as `other`,
        // by their maker.
        assert_eq!(count("fluid", "command"), Some(2));
        assert_eq!(count("fluid", "balancer"), Some(1));
        assert_eq!(count("other", "command"), Some(75));
        assert_eq!(count("other", "recovery"), Some(1));
        assert_eq!(count("matched", "recovery"), Some(2));
    }

    #[test]
    fn a_takeover_is_timed_from_the_failure_before_it() {
        let mut t = Totals::default();
        t.apply(
            &Event::Takeover {
                operator: "count".into(),
                worker: 1,
                bin: 0,
                time: 5,
            },
            1.0,
            16,
        );
        assert_eq!(t.takeover_seconds.count, 0);
        t.apply(
            &Event::Failure {
                worker: 0,
                reason: "fail-stop".into(),
                time: None,
                promoted: None,
                degraded: None,
                suspects: None,
                lost: None,
            },
            2.0,
            16,
        );
        t.apply(
            &Event::Takeover {
                operator: "count".into(),
                worker: 1,
                bin: 0,
                time: 5,
            },
            2.02,
            16,
        );
        assert_eq!((t.failures, t.takeover_seconds.count), (1, 1));
        assert!((t.takeover_seconds.sum - 0.02).abs() < 1e-9);
    }
}
