//! The engine: bins, configurations and their plans, the F/S operator pair with its
//! replicas, and the control stream that drives them. It knows nothing of how a run is
//! driven (the runner) or what runs (the workloads): nothing here names a module of
//! either, which `core/tests/layers.rs` checks.

pub mod balance;
pub mod bins;
pub mod config;
pub mod control;
pub mod driver;
pub mod epoch;
pub mod error;
pub mod failover;
pub(crate) mod failpoint;
pub mod failure;
pub mod operator;
pub mod plan;
pub mod scale;
pub mod size;
