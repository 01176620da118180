//! A process that takes a lost one's place in a running job (`--join`): it does not start
//! the job with the others; it asks process 0's coordinator to be taken in, waits for the
//! restart order that counts it, and starts that computation with no bins (the restart
//! rebalances onto it).

use std::sync::Arc;
use std::time::Instant;

use super::liveness::Current;
use super::{Cluster, RunConfig, RunError, restart};
use crate::error::ConfigError;
use crate::harness::abort::Abort;
use crate::job::Job;
use crate::membership::Restart;

/// Whether this process may join: it is a cluster process other than process 0, in a job
/// that restarts after a crash.
pub(super) fn check<J: Job + ?Sized>(
    job: &J,
    config: &RunConfig,
    position: &Cluster,
) -> Result<(), ConfigError> {
    let invalid = |m: String| Err(ConfigError::Invalid(m));
    if position.addresses.len() < 2 {
        return invalid(
            "--join takes a lost process's place in a cluster: give timely's -n, -p and -h after --".into(),
        );
    }
    if position.process == 0 {
        return invalid(
            "--join: process 0 cannot join: it holds the job's control plane and output, and a job does not survive its loss".into(),
        );
    }
    if !restart::possible(job, config, position.addresses.len()) {
        let why = restart::why_not(job, config).unwrap_or_default();
        return invalid(format!(
            "--join: this job does not restart after a crash, so no process can join it: {why}"
        ));
    }
    Ok(())
}

/// What membership's news goes to while this process waits to be taken in: set as the
/// run's current computation.
pub(super) fn waiting(current: &Current, config: &RunConfig, addresses: &[String]) -> Arc<Abort> {
    let abort = Abort::of_generation(config.workers, addresses.to_vec(), (0..addresses.len()).collect());
    if let Ok(mut c) = current.lock() {
        c.abort = Arc::downgrade(&abort);
    }
    abort
}

/// Waits until process 0 takes this process (`me`) in, and returns the restart order that
/// does; `Err` if it is refused, process 0 is lost, or no order comes within
/// `config.cluster_wait`. `abort` hears membership's news ([`waiting`]).
pub(super) fn taken_in(abort: &Abort, config: &RunConfig, me: usize) -> Result<Restart, RunError> {
    let since = Instant::now();
    loop {
        let left = config.cluster_wait.saturating_sub(since.elapsed());
        match abort.wait_order(left)? {
            Some(order) if order.survivors.contains(&me) => return Ok(order),
            // An order given before this process was taken in: the next one counts it.
            Some(order) => abort.forget_order(&order),
            None => {
                return Err(RunError::Worker(format!(
                    "process {me}: process 0 did not take this process into the job within {} s",
                    config.cluster_wait.as_secs()
                )));
            }
        }
    }
}
