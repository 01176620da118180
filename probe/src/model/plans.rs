//! Plans as the model knows them, and the latency during each: merged from the windows'
//! histograms while the plan runs (an estimate: whole windows, so a little before and after
//! it), then the exact figure worker 0 measured (`plan_latency`), which is the summary's.

use megaflux::epoch::EpochLen;
use megaflux::latency::merge_encoded;
use serde::{Deserialize, Serialize};

/// A plan, running or finished.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanView {
    /// How it splits its moves into steps, as its `plan_started` spells it (`fluid`, ...).
    pub strategy: String,
    /// The placement it moves to, as its `plan_started` describes it.
    pub target: String,
    /// Steps it was split into.
    pub steps: u64,
    /// Bins it changes the holders of.
    pub bins: u64,
    /// Steps issued so far: one past the highest `step` of its `issued` moves.
    pub steps_issued: u64,
    /// Moves that completed while it ran (`completed` migration events).
    pub bins_completed: u64,
    /// Bytes extracted while it ran, summed over operators and receiving holders.
    pub bytes_moved: u64,
    /// When it started, on the probe's clock.
    pub started_s: f64,
    /// How long it ran, in seconds; `None` while it runs.
    pub seconds: Option<f64>,
    /// The plan's number in the run.
    #[serde(default)]
    pub id: Option<u64>,
    /// When it was made and when it completed, in seconds of the measured run (the
    /// latency windows' clock).
    #[serde(default)]
    pub issued_run_s: Option<f64>,
    /// When it completed, in seconds of the measured run; `None` while it runs.
    #[serde(default)]
    pub completed_run_s: Option<f64>,
    /// Latency during it, once any is known.
    #[serde(default)]
    pub during: Option<During>,
    /// The histograms of the windows during it, merged (HdrHistogram V2, base64), until the
    /// exact figure arrives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged: Option<String>,
}

/// Latency percentiles during a plan (ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct During {
    /// Median latency, in nanoseconds.
    pub p50: u64,
    /// 99th-percentile latency, in nanoseconds.
    pub p99: u64,
    /// Largest latency, in nanoseconds.
    pub max: u64,
    /// Worker 0's exact figure (the summary's); otherwise merged from whole windows.
    pub exact: bool,
}

impl PlanView {
    /// The epochs whose records count as during the plan, as the summary counts them: from
    /// the one due when it was made to one past the one due when it completed (open while
    /// it runs). `None` before its run time is known.
    fn epochs(&self, epoch: EpochLen) -> Option<(u64, u64)> {
        let from = epoch.in_secs(self.issued_run_s?);
        let to = self
            .completed_run_s
            .map_or(u64::MAX, |c| epoch.in_secs(c).saturating_add(1));
        Some((from, to))
    }

    /// Merges window `window` (its histogram encoded) if it holds epochs during the plan
    /// and the exact figure has not arrived.
    pub(super) fn merge_window(&mut self, window: u64, histogram: &str, epoch: EpochLen) {
        if self.during.is_some_and(|d| d.exact) {
            return;
        }
        let Some((from, to)) = self.epochs(epoch) else {
            return;
        };
        // Window `w` holds epochs w * per + 1 ..= (w + 1) * per.
        let per = epoch.per_window().max(1);
        let lo = window.saturating_mul(per).saturating_add(1);
        let hi = window.saturating_add(1).saturating_mul(per);
        if hi < from || lo > to {
            return;
        }
        if let Some((merged, p)) = merge_encoded(self.merged.as_deref(), histogram) {
            self.merged = Some(merged);
            self.during = Some(During {
                p50: p.p50,
                p99: p.p99,
                max: p.max,
                exact: false,
            });
        }
    }

    /// Takes worker 0's exact figure.
    pub(super) fn exact(&mut self, p50: u64, p99: u64, max: u64) {
        self.during = Some(During {
            p50,
            p99,
            max,
            exact: true,
        });
        self.merged = None;
    }
}

/// What the balancer last said: its latest measure, and the plan it proposes, if any.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BalanceView {
    /// Max / mean worker load in the last window it measured.
    pub measured: Option<f64>,
    /// The `balance` plan it proposes (`--balance suggest`) and nobody started yet.
    pub suggestion: Option<Suggestion>,
}

/// A `balance` plan the balancer proposes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Suggestion {
    /// When it proposed it, in seconds of the measured run.
    pub run_s: f64,
    /// Max / mean worker load it measured.
    pub imbalance: f64,
    /// As predicted once the plan is done.
    pub predicted: f64,
    /// Bins the plan moves.
    pub bins: u64,
    /// Their bytes.
    pub bytes: u64,
    /// How the plan would move them (`--balance-strategy`), as `--migrate` spells it.
    pub strategy: String,
    /// A sizing: the workers serving now and after the plan.
    #[serde(default)]
    pub workers: Option<[u64; 2]>,
}
