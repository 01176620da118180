//! What every megaflux test waits with, so that a test on a loaded machine fails naming
//! what it waited for instead of hanging the suite:
//!
//! - [`Proc`]: a child process in a process group of its own, its stdout and stderr read
//!   on threads as it runs (a child never blocks on a full pipe), killed with its whole
//!   group when the guard drops (a failed test leaves nothing running), and waited for
//!   only with a deadline ([`Proc::wait`], [`wait_all`]).
//! - [`within`] and [`Watch`]: an in-process run (timely workers on threads) with a
//!   deadline, where one worker's panic stops the others and fails the test with that
//!   panic's message rather than leaving them spinning.
//! - [`wait_until`]: a condition polled until a deadline that fails naming the condition.
//! - [`Postgres`] and [`Kafka`]: a throwaway PostgreSQL server and Kafka broker (real, not
//!   mocks) stopped on drop.
//!
//! Deadlines are generous: they bound a hang, they do not judge speed. Every one is
//! multiplied by `MEGAFLUX_TEST_SLACK` (a number, default 1) for machines slower still.

mod child;
mod inprocess;
mod services;

pub use child::{Proc, run, wait_all};
pub use inprocess::{Watch, wait_until, wait_until_every, within};
pub use services::{KAFKA, Kafka, PG_URL, Postgres};

use std::time::Duration;

/// `limit` times `MEGAFLUX_TEST_SLACK` (1 if unset or not a positive number).
pub fn deadline(limit: Duration) -> Duration {
    let slack = std::env::var("MEGAFLUX_TEST_SLACK")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(1.0);
    limit.mul_f64(slack)
}
