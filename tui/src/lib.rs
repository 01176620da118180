//! The `megaflux` command line: runs with a live dashboard or headless, benchmarks, reports
//! and replays, for the built-in workloads or for a user's own jobs ([`main`]). A library as
//! well as a binary so that a user's binary gets the whole command line with one call, and
//! tests and benchmarks reach the dashboard's model and views.

#![warn(missing_docs)]

pub mod bench;
pub mod cli;
pub mod dash;
mod drain;
mod flags;
mod job_flags;
mod lifecycle;
mod memory;
pub mod observe;
mod outcome;
pub mod replay;
pub mod report;
pub mod session;
mod signals;
mod token;

pub use cli::main;

// Memory a worker frees after shipping bins away goes back to the system promptly, so
// migrations do not ratchet up the job's resident memory (glibc keeps it per thread arena).
// A binary built on this crate gets it unless it turns the default feature `mimalloc` off
// (to keep an allocator of its own).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
