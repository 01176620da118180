//! Reading recorded megaflux traces back (`traces/FORMAT.md`).
//!
//! * [`perfetto`]: a trace as Chrome trace-event JSON, which the Perfetto UI opens: a
//!   process per timely process, a thread per worker, an async slice per bin move and per
//!   plan, counters for state and latency, instants for commands and failures.
//! * [`seek`]: the job model at any point of a trace, from the keyframe before it.

pub mod error;
pub mod perfetto;
pub mod seek;

pub use error::ReplayError;
