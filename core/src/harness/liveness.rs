//! This process's part in its cluster's membership, wired to the run: a lost process stops
//! the run (a hung one too, which timely alone would wait for for ever), and failures other
//! processes detect reach the driver on process 0.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, Weak};

use crate::abort::Abort;
use crate::failure::Failures;
use crate::membership::{Coordinator, Event, Hello, Member, OnEvent, coordinator_address};

use super::{Cluster, RunConfig, RunError};

/// The computation membership's news goes to: the run's current generation's.
pub(super) type Current = Arc<Mutex<Weak<Abort>>>;

/// A cluster process's membership, until the run ends.
pub(super) enum Liveness {
    Coordinator(Coordinator),
    Member(Member),
}

impl Liveness {
    /// Starts this process's end of membership (none for one process).
    /// With `keep` (a job that restarts after a crash), process 0 tells the others of its
    /// committed frontier, and they keep it there.
    pub(super) fn start(
        config: &RunConfig,
        cluster: &Cluster,
        current: &Current,
        failures: &Arc<Failures>,
        keep: Option<Arc<AtomicU64>>,
    ) -> Result<Option<Self>, RunError> {
        if cluster.addresses.len() < 2 {
            return Ok(None);
        }
        let address = coordinator_address(&cluster.addresses, config.coordinator_port)?;
        let on_event = on_event(
            Arc::clone(current),
            Arc::clone(failures),
            cluster.addresses.clone(),
        );
        let job = fingerprint(config);
        let started = if cluster.process == 0 {
            Coordinator::start(
                &address,
                job,
                (cluster.processes, config.workers),
                config.cluster_wait,
                keep,
                on_event,
            )
            .map(Liveness::Coordinator)
        } else {
            let hello = Hello {
                job,
                process: cluster.process,
                processes: cluster.processes,
                join: config.join,
            };
            Member::start(
                address,
                hello,
                config.cluster_wait,
                Arc::clone(failures),
                keep.unwrap_or_default(),
                on_event,
            )
            .map(Liveness::Member)
        };
        Ok(Some(started?))
    }

    /// Process 0's coordinator.
    pub(super) fn coordinator(&self) -> Option<&Coordinator> {
        match self {
            Liveness::Coordinator(c) => Some(c),
            Liveness::Member(_) => None,
        }
    }

    /// The run ended normally here: the others are told, so that this process exiting is
    /// not taken for a loss.
    pub(super) fn finish(&self) {
        match self {
            Liveness::Coordinator(c) => c.finish(),
            Liveness::Member(m) => m.finish(),
        }
    }
}

fn on_event(current: Current, failures: Arc<Failures>, addresses: Vec<String>) -> OnEvent {
    Arc::new(move |event| {
        let Some(abort) = current.lock().ok().and_then(|c| c.upgrade()) else {
            return;
        };
        match event {
            Event::Lost { process, cause } => abort.lose(
                process,
                RunError::PeerLost {
                    process,
                    address: addresses.get(process).cloned().unwrap_or_default(),
                    cause,
                },
            ),
            Event::Failed { worker } => failures.report(worker),
            Event::Refused { reason } => abort.stop(RunError::Refused(reason)),
            Event::Restart(order) => abort.ordered(order),
            Event::Join { process } => abort.join(process),
        }
    })
}

/// What every process of one job agrees on: a process started with another command is
/// refused rather than let in to compute something else.
fn fingerprint(config: &RunConfig) -> u64 {
    // What shapes the dataflow or its records: processes that differ in one of these build
    // different dataflows (which timely would wait on for ever) or compute something else.
    // Not the duration: a cluster drains, so processes may be given different lengths.
    let what = format!(
        "{}|{}|{}|{}|{}|{}|{}|{:?}|{:?}|{}|{}|{}",
        config.workload,
        config.workers,
        config.bins.count(),
        config.replicas,
        config.seed,
        config.keys,
        config.rate,
        config.epoch,
        config.epoch_mode,
        config.native,
        config.input.is_some(),
        config.output.is_some(),
    );
    xxhash_rust::xxh3::xxh3_64(what.as_bytes())
}
