//! Reading recorded megaflux traces back (`traces/FORMAT.md`).
//!
//! * [`perfetto`]: a trace as Chrome trace-event JSON, which the Perfetto UI opens: a
//!   process per timely process, a thread per worker, an async slice per bin move and per
//!   plan, counters for state and latency, instants for commands and failures.
//! * [`seek`]: the job model at any point of a trace, from the keyframe before it.
//! * [`player`]: the time machine's source: plays, seeks and steps through a trace.
//! * [`rerun`]: a recorded job, rebuilt to run again with the commands it took at the
//!   logical times it took them; [`compare`]: the recorded run and the re-run side by side.

#![warn(missing_docs)]

pub mod compare;
pub mod error;
pub mod perfetto;
pub mod player;
pub mod rerun;
pub mod seek;

pub use error::{ReplayError, RerunLimit};
