//! Typed errors of the library.

use thiserror::Error;

/// A job or migration setting that cannot work.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("bin count {0} is not a power of two between 16 and 65536")]
    BinCount(usize),
    #[error("malformed migration `{spec}`: {reason}")]
    Migration { spec: String, reason: String },
    #[error(
        "unknown strategy `{0}` (expected all-at-once, fluid, batched:K or matched, optionally with +pipelined)"
    )]
    Strategy(String),
    #[error("malformed target `{spec}`: {reason}")]
    Target { spec: String, reason: String },
    #[error("{0}")]
    Invalid(String),
}

/// Why a command sent through the control handle was not applied.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum CommandError {
    #[error("unknown bin {bin} (the job has {bins} bins)")]
    UnknownBin { bin: usize, bins: usize },
    #[error("unknown worker {worker} (the job has {workers} workers)")]
    UnknownWorker { worker: usize, workers: usize },
    #[error("a migration plan is already running")]
    PlanRunning,
    #[error("no migration plan is running")]
    NoPlan,
    #[error("a recovery or rebalance is running: it cannot be cancelled")]
    Restoring,
    #[error("{0}")]
    BadTarget(String),
    #[error("worker {0} has failed (rejoin it first)")]
    WorkerFailed(usize),
    #[error("worker {0} has not failed")]
    NotFailed(usize),
    #[error("worker {worker} cannot hold the standby of bin {bin}: {reason}")]
    BadStandby {
        bin: usize,
        worker: usize,
        reason: String,
    },
}
