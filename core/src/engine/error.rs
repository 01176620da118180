//! Typed errors of the library.

use thiserror::Error;

/// A job or migration setting that cannot work.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// `--bins` (the count given) is not a power of two from 16 to 65536.
    #[error("bin count {0} is not a power of two between 16 and 65536")]
    BinCount(usize),
    /// A `--migrate` spec does not parse as `STRATEGY@SECS:TARGET`, or its target does not
    /// fit the job.
    #[error("malformed migration `{spec}`: {reason}")]
    Migration {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A schedule (the string given) names no known strategy.
    #[error(
        "unknown strategy `{0}` (expected all-at-once, fluid, batched:K or matched, optionally with +pipelined)"
    )]
    Strategy(String),
    /// A target does not parse as `uniform`, `pack:N`, `drain:W` or `map:W,W,...`.
    #[error("malformed target `{spec}`: {reason}")]
    Target {
        /// The target as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Any other setting that cannot work for this job (out of range, inconsistent with
    /// another, or beyond this machine); the message says which and why.
    #[error("{0}")]
    Invalid(String),
}

/// Why a command sent through the control handle was not applied.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum CommandError {
    /// A move names a bin the job does not have.
    #[error("unknown bin {bin} (the job has {bins} bins)")]
    UnknownBin {
        /// The bin named.
        bin: usize,
        /// The job's bin count.
        bins: usize,
    },
    /// A command names a worker the job does not have.
    #[error("unknown worker {worker} (the job has {workers} workers)")]
    UnknownWorker {
        /// The worker named.
        worker: usize,
        /// The number of workers in the whole job.
        workers: usize,
    },
    /// A move or a plan was asked for while a plan (a migration, recovery or rebalance)
    /// still runs.
    #[error("a migration plan is already running")]
    PlanRunning,
    /// A cancel was asked for with no plan running.
    #[error("no migration plan is running")]
    NoPlan,
    /// A cancel was asked for while the running plan is a recovery or a rebalance.
    #[error("a recovery or rebalance is running: it cannot be cancelled")]
    Restoring,
    /// A plan's target does not fit the job's live workers and bins (the message says why).
    #[error("{0}")]
    BadTarget(String),
    /// Bins were moved to a worker that has failed, or a worker that has failed (or whose
    /// failure is pending) was failed again.
    #[error("worker {0} has failed (rejoin it first)")]
    WorkerFailed(usize),
    /// A rejoin names a worker that has not failed (or whose rejoin is pending).
    #[error("worker {0} has not failed")]
    NotFailed(usize),
    /// The balancer's mode was set where there is no balancer (a job with none: the native
    /// twin, or a driver on its own).
    #[error("this job has no balancer")]
    NoBalancer,
    /// A standby move cannot take place: the job has one replica per bin, or the worker
    /// holds the bin's primary.
    #[error("worker {worker} cannot hold the standby of bin {bin}: {reason}")]
    BadStandby {
        /// The bin whose standby was to move.
        bin: usize,
        /// The worker named as its new standby.
        worker: usize,
        /// Why it cannot hold it.
        reason: String,
    },
}
