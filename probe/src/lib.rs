//! megaflux-probe: what a running megaflux job looks like from outside.
//!
//! * [`event`]: the versioned, typed event schema (also the trace format's lines).
//! * [`layer`]: a `tracing` Layer that turns core's events into typed events and queues them
//!   without ever blocking the workers (a full queue drops and counts).
//! * [`model`]: the merged view of a job (bins, workers, frontiers, latency, migrations).
//! * [`wire`]: the TCP protocol between exporters, the collector and subscribers.
//! * [`collector`]: merges the local queue and remote exporters, records, serves
//!   subscribers and forwards their commands to the job.
//! * [`export`]: sends a process's events to a remote collector.
//! * [`record`]: the JSON Lines trace recorder and reader.
//! * [`metrics`]: the job's numbers in the Prometheus exposition format, served over HTTP.

#![warn(missing_docs)]

pub mod collector;
pub mod error;
pub mod event;
pub mod export;
pub mod layer;
pub mod metrics;
pub mod model;
pub mod record;
pub mod wire;

pub use error::ProbeError;
pub use event::{Event, FORMAT_VERSION, Stamped};
pub use layer::{EventQueue, ProbeLayer};
pub use model::JobModel;
