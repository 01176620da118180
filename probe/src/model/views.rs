//! What the model holds of each part of a job: bins, holders, workers, frontiers, latency
//! windows, moves, failures and commands.

use std::collections::BTreeMap;

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
    pub keys: u64,
    pub bytes: u64,
}

/// Where a bin's replicas are, as the control plane placed them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holders {
    pub primary: Option<u32>,
    pub standby: Option<u32>,
}

impl Holders {
    /// One replica left (the job had two).
    pub fn degraded(&self) -> bool {
        self.primary.is_some() && self.standby.is_none()
    }
}

/// A worker's failure and what followed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailureView {
    pub worker: u32,
    pub at_s: f64,
    pub time: Option<u64>,
    pub promoted: u64,
    pub degraded: u64,
    /// Replicas that did their first work in place of the failed worker.
    pub takeovers: u64,
    pub rejoined_s: Option<f64>,
    /// Bins given two replicas again, once the recovery finished.
    pub recovered: Option<u64>,
    pub lost: Option<String>,
}

/// A worker's latest load.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerView {
    pub process: u32,
    /// Records its source sent per second, over the last interval.
    pub records_per_s: f64,
    /// Records its stateful operators applied per second, over the last interval (a
    /// replica's included; `None` from jobs that did not say).
    #[serde(default)]
    pub applied_per_s: Option<f64>,
    /// Fraction of the last interval spent running operators.
    pub busy: f64,
    pub finished: bool,
    /// What it holds of each operator, exactly, as of its last sample (standbys included).
    #[serde(default)]
    pub held: BTreeMap<String, Held>,
}

/// What a worker holds of one operator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub bins: u64,
    pub keys: u64,
    pub bytes: u64,
}

/// An operator's frontiers on a worker.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FrontierView {
    pub applied: Option<u64>,
    pub control: Option<u64>,
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
    pub count: u64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl LatencyWindow {
    /// The window a `latency` event reports (`None` for other events).
    pub fn of(stamped: &Stamped) -> Option<LatencyWindow> {
        match &stamped.event {
            Event::Latency {
                t_s,
                count,
                p50,
                p99,
                max,
                ..
            } => Some(LatencyWindow {
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
    pub bin: u32,
    pub time: u64,
    pub from: Option<u32>,
    pub to: Option<u32>,
    pub phase: Phase,
    pub bytes: u64,
}

/// A command and what became of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandView {
    pub at_s: f64,
    pub outcome: Outcome,
    pub command: String,
    pub reason: Option<String>,
}
