//! What the model holds of each part of a job: bins, holders, workers, frontiers, latency
//! windows, moves, failures and commands.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::event::{Event, Outcome, Phase, Stamped};

/// One bin of one operator, as the workers holding it report it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BinView {
    /// The worker that reported it as its primary.
    pub owner: Option<u32>,
    /// The worker that reported it as its standby.
    #[serde(default)]
    pub standby: Option<u32>,
    /// Keys in the bin, as its primary last reported.
    pub keys: u64,
    /// Shallow estimate of the bin's state in bytes, as its primary last reported.
    pub bytes: u64,
    /// What the bin cost its primary in the last interval it had work in. Not part of a
    /// model's snapshot (a welcome, a keyframe): it is stale within `LOAD_FRESH_S`, the
    /// next sample brings it, and 2^16 bins' loads would triple every snapshot's size.
    #[serde(skip)]
    pub load: Option<BinLoadView>,
}

/// What one bin cost its primary's worker over an interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BinLoadView {
    /// Records applied per second.
    pub records_per_s: f64,
    /// Fraction of the interval the worker spent applying them (its share of the
    /// activations that applied it).
    pub busy: f64,
    /// When the interval ended, on the probe's clock: a bin with no work since reports
    /// nothing, so a load older than `LOAD_FRESH_S` is none.
    pub at_s: f64,
}

/// How long a bin's last reported load stands: two sampling intervals and a little.
pub const LOAD_FRESH_S: f64 = 0.6;

impl BinView {
    /// The bin's load at `now_s`, if it reported one recently (else it had no work).
    pub fn load_at(&self, now_s: f64) -> Option<BinLoadView> {
        self.load.filter(|l| now_s - l.at_s <= LOAD_FRESH_S)
    }
}

/// Where a bin's replicas are, as the control plane placed them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holders {
    /// The primary worker; `None` when the bin has no replica left.
    pub primary: Option<u32>,
    /// The standby worker; `None` when the bin has none.
    pub standby: Option<u32>,
}

impl Holders {
    /// One replica left (the job had two).
    pub fn degraded(&self) -> bool {
        self.primary.is_some() && self.standby.is_none()
    }
}

/// Which bins each worker is the standby of, in some operator's views: an index of
/// [`BinView::standby`] kept by the model, so that a worker's failure clears its standbys
/// without reading every bin of every operator. `None` until built (a model read back from
/// JSON has none: the model builds it from the views when it first needs it). Not part of
/// what a model says: any two are equal.
#[derive(Clone, Debug, Default)]
pub struct StandbyIndex(pub(super) Option<BTreeMap<u32, BTreeSet<u32>>>);

impl PartialEq for StandbyIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A restart after processes went away (a real crash).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RestartView {
    /// When process 0 ordered it, on the probe's clock.
    pub at_s: f64,
    /// Restarts so far, this one included.
    pub generation: u32,
    /// The committed logical time the new computation started from.
    pub from: u64,
    /// The processes lost (`2`, `1-2`).
    pub lost: String,
    /// The processes that went on (`0-1`).
    pub survivors: String,
    /// The processes that joined (empty for a crash).
    #[serde(default)]
    pub joined: String,
}

/// The drain of a run whose input ended (see [`crate::event::Event::Draining`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainView {
    /// The logical time of the run's last epoch.
    pub input_end: u64,
    /// Every output before it is out.
    pub gate: u64,
    /// Bins with work scheduled at or after the gate.
    pub bins: u64,
    /// The earliest time of that work.
    pub next: Option<u64>,
    /// Milliseconds since the drain began.
    pub for_ms: u64,
}

/// How far the job has read a partition of its Kafka topic (see
/// [`crate::event::Event::InputPartition`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionView {
    /// The next offset the job reads.
    pub offset: u64,
    /// The partition's end as last seen.
    pub end: u64,
}

impl PartitionView {
    /// Messages still to read.
    pub fn lag(&self) -> u64 {
        self.end.saturating_sub(self.offset)
    }
}

/// A worker's failure and what followed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailureView {
    /// The failed worker, in the whole job.
    pub worker: u32,
    /// When the failure was reported, on the probe's clock.
    pub at_s: f64,
    /// The logical time the failure is in force from, if the job said.
    pub time: Option<u64>,
    /// Bins whose standby became their primary.
    pub promoted: u64,
    /// Bins left with one replica.
    pub degraded: u64,
    /// Replicas that did their first work in place of the failed worker.
    pub takeovers: u64,
    /// When the worker rejoined, on the probe's clock; `None` while it is out.
    pub rejoined_s: Option<f64>,
    /// Bins given two replicas again, once the recovery finished.
    pub recovered: Option<u64>,
    /// The bins it left with no replica, as a compact list (`0-3,7`), if any.
    pub lost: Option<String>,
}

/// A worker's latest load.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerView {
    /// The timely process the worker runs in.
    pub process: u32,
    /// Records its source sent per second, over the last interval.
    pub records_per_s: f64,
    /// Records its stateful operators applied per second, over the last interval (a
    /// replica's included; `None` from jobs that did not say).
    #[serde(default)]
    pub applied_per_s: Option<f64>,
    /// Fraction of the last interval spent running operators.
    pub busy: f64,
    /// The worker finished its last epoch.
    pub finished: bool,
    /// What it holds of each operator, exactly, as of its last sample (standbys included).
    #[serde(default)]
    pub held: BTreeMap<String, Held>,
}

impl WorkerView {
    /// Records applied per second spent busy: the rate the worker could sustain (DS2's
    /// true processing rate), when it was busy at all.
    pub fn true_rate(&self) -> Option<f64> {
        self.applied_per_s
            .filter(|_| self.busy > 0.0)
            .map(|a| a / self.busy)
    }
}

/// What a worker holds of one operator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// Bins of the operator it holds, standbys included.
    pub bins: u64,
    /// Keys in those bins.
    pub keys: u64,
    /// Shallow estimate of those bins' state, in bytes.
    pub bytes: u64,
}

/// An operator's frontiers on a worker.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FrontierView {
    /// Every update before this logical time is applied; `None`: the operator is done.
    pub applied: Option<u64>,
    /// The control frontier the operator has seen (`None` for native operators).
    pub control: Option<u64>,
    /// The logical time the worker's input is open at.
    pub input: u64,
}

impl FrontierView {
    /// Epochs the operator lags behind the input.
    pub fn lag(&self) -> Option<u64> {
        self.applied.map(|a| self.input.saturating_sub(a))
    }
}

/// One latency window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyWindow {
    /// When the window's report arrived, on the probe's clock (as plans' times are).
    pub at_s: f64,
    /// Start of the window in the measured run.
    pub t_s: f64,
    /// Records measured in the window.
    pub count: u64,
    /// Median latency of its records, in nanoseconds.
    pub p50: u64,
    /// 99th-percentile latency, in nanoseconds.
    pub p99: u64,
    /// Largest latency, in nanoseconds.
    pub max: u64,
}

impl LatencyWindow {
    /// The window a `latency` event reports (`None` for other events, and for a window
    /// whose start is no time in the run: negative, past [`super::MAX_AT_S`], or not a
    /// number). Its `at_s` is the event's, as it is: the model puts it on its clock.
    pub fn of(stamped: &Stamped) -> Option<LatencyWindow> {
        match &stamped.event {
            Event::Latency {
                t_s,
                count,
                p50,
                p99,
                max,
                ..
            } if super::JobModel::valid_at(*t_s).is_some() => Some(LatencyWindow {
                at_s: stamped.at_s,
                t_s: *t_s,
                count: *count,
                p50: *p50,
                p99: *p99,
                max: *max,
            }),
            _ => None,
        }
    }
}

/// A bin on the move.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Move {
    /// The bin that moves.
    pub bin: u32,
    /// The logical time its new holders take effect at; a move at another time replaces it.
    pub time: u64,
    /// The worker it leaves, as the first of its events that named one said.
    pub from: Option<u32>,
    /// The worker it goes to, as the first of its events that named one said.
    pub to: Option<u32>,
    /// The furthest phase any of its events reached.
    pub phase: Phase,
    /// Bytes extracted for it so far, summed over operators and receiving holders.
    pub bytes: u64,
    /// Whether the control plane issued it (and so will say when it completed).
    #[serde(default)]
    pub issued: bool,
    /// Operators that installed it at its new holder.
    #[serde(default)]
    pub installed: u32,
}

/// A command and what became of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandView {
    /// When the `command` event was stamped, on the probe's clock.
    pub at_s: f64,
    /// What became of it.
    pub outcome: Outcome,
    /// The command described for people.
    pub command: String,
    /// Why it was rejected, if it was.
    pub reason: Option<String>,
}
