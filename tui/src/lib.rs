//! The `megaflux` command: runs with a live dashboard or headless, benchmarks and reports.
//! A library as well as a binary so that tests and benchmarks reach the dashboard's model
//! and views.

pub mod bench;
pub mod cli;
pub mod dash;
pub mod observe;
pub mod replay;
pub mod report;
