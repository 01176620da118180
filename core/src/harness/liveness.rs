//! This process's part in its cluster's membership, wired to the run: a lost process stops
//! the run (a hung one too, which timely alone would wait for for ever), and failures other
//! processes detect reach the driver on process 0.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, Weak};

use crate::abort::Abort;
use crate::failure::Failures;
use crate::membership::{Coordinator, Event, Hello, Member, OnEvent, Settings, coordinator_address};

use super::{Cluster, Pacing, RunConfig, RunError};

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
        let job = settings(config);
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

/// What every process of one job must agree on, by the flag that sets it: a process
/// started with another value of any of them is refused, named, rather than let in to
/// compute something else. Everything that shapes the dataflow (which timely would wait on
/// for ever if processes differed), the records, their times or the outputs; not what only
/// process 0 acts on (plans, failures, the recovery strategy) or what changes no answer
/// (chunk sizes, idling).
pub(super) fn settings(config: &RunConfig) -> Settings {
    let given = |given: bool| if given { "given" } else { "not given" };
    let n = &config.nexmark;
    Settings::new()
        .with("--workload", &config.workload)
        .with("--workers", config.workers)
        .with("--bins", config.bins.count())
        .with("--replicas", config.replicas)
        .with("--seed", config.seed)
        .with("--keys", config.keys)
        .with("--rate", config.rate)
        .with("--duration", config.duration.as_secs_f64())
        .with("--epoch-us", config.epoch.us())
        .with("--epochs", config.epoch_mode)
        .with("--native", config.native)
        .with("--no-preload", !config.preload)
        .with("--window-ms", n.window_ms)
        .with("--slide-ms", n.slide_ms)
        .with("--in-flight-auctions", n.in_flight_auctions)
        .with("--input", given(config.input.is_some()))
        .with(
            "--pace",
            match config.pacing {
                Pacing::Rate => "rate",
                Pacing::EventTime => "event-time",
            },
        )
        .with("--speed", config.speed)
        .with("--output", given(config.output.is_some()))
        .with(
            "--drain",
            config.drain.map_or("the job's".to_string(), |d| d.to_string()),
        )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::harness::EpochMode;
    use crate::job::Drain;

    /// Every setting that changes records, times or outputs, flipped alone, is named.
    #[test]
    fn a_process_with_any_one_setting_changed_is_told_which() {
        let base = RunConfig::default();
        let changed: Vec<(&str, RunConfig)> = vec![
            (
                "--workload",
                RunConfig {
                    workload: "q4".into(),
                    ..base.clone()
                },
            ),
            (
                "--workers",
                RunConfig {
                    workers: 3,
                    ..base.clone()
                },
            ),
            (
                "--bins",
                RunConfig {
                    bins: crate::Bins::new(64).unwrap(),
                    ..base.clone()
                },
            ),
            (
                "--replicas",
                RunConfig {
                    replicas: 2,
                    ..base.clone()
                },
            ),
            (
                "--seed",
                RunConfig {
                    seed: 7,
                    ..base.clone()
                },
            ),
            (
                "--keys",
                RunConfig {
                    keys: 7,
                    ..base.clone()
                },
            ),
            (
                "--rate",
                RunConfig {
                    rate: 7,
                    ..base.clone()
                },
            ),
            (
                "--duration",
                RunConfig {
                    duration: Duration::from_secs(7),
                    ..base.clone()
                },
            ),
            (
                "--epoch-us",
                RunConfig {
                    epoch: crate::epoch::EpochLen::MS,
                    ..base.clone()
                },
            ),
            (
                "--epochs",
                RunConfig {
                    epoch_mode: EpochMode::Adaptive,
                    ..base.clone()
                },
            ),
            (
                "--native",
                RunConfig {
                    native: true,
                    ..base.clone()
                },
            ),
            (
                "--no-preload",
                RunConfig {
                    preload: false,
                    ..base.clone()
                },
            ),
            (
                "--input",
                RunConfig {
                    input: Some("views.csv".parse().unwrap()),
                    ..base.clone()
                },
            ),
            (
                "--pace",
                RunConfig {
                    pacing: Pacing::EventTime,
                    ..base.clone()
                },
            ),
            (
                "--speed",
                RunConfig {
                    speed: 2.0,
                    ..base.clone()
                },
            ),
            (
                "--output",
                RunConfig {
                    output: Some("out.jsonl".into()),
                    ..base.clone()
                },
            ),
            (
                "--drain",
                RunConfig {
                    drain: Some(Drain::All),
                    ..base.clone()
                },
            ),
        ];
        let nexmark = |f: fn(&mut crate::nexmark::NexmarkParams)| {
            let mut c = base.clone();
            f(&mut c.nexmark);
            c
        };
        let changed = changed.into_iter().chain([
            ("--window-ms", nexmark(|n| n.window_ms += 1)),
            ("--slide-ms", nexmark(|n| n.slide_ms += 1)),
            ("--in-flight-auctions", nexmark(|n| n.in_flight_auctions += 1)),
        ]);
        let ours = settings(&base);
        assert_eq!(ours.differs(&settings(&base.clone()), 1), None);
        for (flag, config) in changed {
            let said = ours.differs(&settings(&config), 1).unwrap_or_default();
            assert!(said.starts_with(&format!("{flag} is ")), "{flag}: {said:?}");
        }
        // What only process 0 acts on, or what changes no answer, is not compared.
        let same = RunConfig {
            chunk_bytes: 1 << 10,
            migrations: vec!["fluid@1:pack:1".parse().unwrap()],
            ..base.clone()
        };
        assert_eq!(ours.differs(&settings(&same), 1), None);
    }
}
