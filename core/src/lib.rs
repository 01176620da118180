//! megaflux: stateful timely dataflow operators whose state migrates between workers while
//! they run (Megaphone) and survives a worker's failure (Flux), the runner that runs a job
//! on them, and the built-in workloads.
//!
//! Three layers, each using only those below it:
//!
//! * The engine: [`bins`] (keys hash to a power-of-two number of bins, the unit of
//!   placement), [`config`] (bin→worker maps and their history by logical time), [`plan`]
//!   (migration strategies turning a current and a target map into steps), [`driver`] (the
//!   plan driver), [`operator`] (`stateful_unary` / `stateful_binary`, the F/S operator
//!   pair, and replicas), [`control`] (the handle through which commands reach the
//!   dataflow), [`failure`], [`failover`], [`balance`], [`scale`], [`size`], [`epoch`],
//!   [`error`].
//! * The runner: [`job`] (what a job is, its own flags, the registry), [`source`],
//!   [`harness`] (`run_job`: the run from start to summary), [`membership`] (the cluster's
//!   processes), [`summary`], [`latency`], [`sampler`], [`rate`], [`rss`], [`files`].
//! * The built-in workloads, jobs like a user's: [`workload`] (key count, and
//!   [`workload::builtin`]), [`nexmark`], [`skew`].

#![warn(missing_docs)]

mod engine;
mod runner;

pub(crate) use engine::failpoint;
pub use engine::{
    balance, bins, config, control, driver, epoch, error, failover, failure, operator, plan, scale, size,
};
pub use runner::{files, harness, job, latency, membership, rate, rss, sampler, sink, source, summary};

pub mod nexmark;
pub mod skew;
pub mod workload;

/// Logical time: epochs of scheduled input time, [`epoch::DEFAULT_EPOCH_US`] (100 µs) each
/// in every build unless the run's [`epoch::EpochLen`] (`--epoch-us`) says otherwise. Say
/// durations as durations ([`Bin::schedule_after`], [`Bin::ticks`], [`Bin::since`]) rather
/// than as numbers of epochs: they then mean the same whatever the epoch.
pub type Time = u64;

pub use bins::Bins;
pub use config::ControlInst;
pub use error::{CommandError, ConfigError};
pub use harness::{RunConfig, RunError, run_job};
pub use job::{Job, Jobs, Operators};
pub use operator::{Bin, Side, StatefulConfig, stateful_binary, stateful_unary};
pub use size::{BinState, StateSize};
pub use source::Source;
/// The timely dataflow this crate builds on, so that jobs name its types at the same version.
pub use timely;
