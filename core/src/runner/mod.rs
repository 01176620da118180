//! The runner: jobs and their sources, the harness that runs one from its start to its
//! summary (control plane, cluster membership, crash restarts, measurement), and the sink.
//! It builds on the engine and knows no built-in workload: they use it as a user's job
//! does, which `core/tests/layers.rs` checks.

pub mod files;
pub mod harness;
pub mod job;
pub mod latency;
pub mod membership;
pub mod rate;
pub mod rss;
pub mod sampler;
pub mod sink;
pub mod source;
pub mod summary;
