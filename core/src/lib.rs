//! megaflux: stateful timely dataflow operators whose state migrates between workers while
//! they run (Megaphone), with the workloads, plans and measurements to study it.
//!
//! * [`bins`]: keys hash to a power-of-two number of bins, the unit of placement.
//! * [`config`]: bin→worker maps and their history by logical time.
//! * [`plan`]: migration strategies turning a current and a target map into steps.
//! * [`operator`]: `stateful_unary` / `stateful_binary`, the F/S operator pair.
//! * [`control`]: the thread-safe handle through which commands reach the dataflow.

#![warn(missing_docs)]

pub mod abort;
pub mod balance;
pub mod bins;
pub mod config;
pub mod control;
pub mod driver;
pub mod epoch;
pub mod error;
pub mod failover;
mod failpoint;
pub mod failure;
pub mod files;
pub mod harness;
pub mod job;
pub mod latency;
pub mod membership;
pub mod nexmark;
pub mod operator;
pub mod plan;
pub mod rss;
pub mod sampler;
pub mod scale;
mod sink;
pub mod size;
pub mod skew;
pub mod source;
pub mod summary;
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
