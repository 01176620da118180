//! This process's part in its cluster's membership, wired to the run: a lost process stops
//! the run (a hung one too, which timely alone would wait for for ever), and failures other
//! processes detect reach the driver on process 0.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, Weak};

use crate::failure::Failures;
use crate::harness::abort::Abort;
use crate::membership::{
    Coordinator, Event, Hello, Links, Member, NewlyFailed, OnEvent, Settings, coordinator_address,
};

use super::{Cluster, Pacing, RunConfig, RunError};

/// The computation membership's news goes to: the run's current generation's.
pub(super) type Current = Arc<Mutex<Computation>>;

/// What membership reaches of the current computation.
#[derive(Default)]
pub(super) struct Computation {
    /// Where losses, refusals and orders go.
    pub(super) abort: Weak<Abort>,
    /// Where failures other processes report go (process 0), and the failures this
    /// process forwards come from (the others): numbered as this computation numbers its
    /// workers.
    pub(super) failures: Weak<Failures>,
}

/// A cluster process's membership, until the run ends.
pub(super) enum Liveness {
    Coordinator(Coordinator),
    Member(Member),
}

impl Liveness {
    /// Starts this process's end of membership (none for one process).
    /// With `keep` (a job that restarts after a crash), process 0 tells the others of its
    /// committed frontier, and they keep it there, but never past what their inputs have
    /// `reached`.
    pub(super) fn start(
        config: &RunConfig,
        cluster: &Cluster,
        current: &Current,
        (keep, reached): (Option<Arc<AtomicU64>>, &Arc<AtomicU64>),
    ) -> Result<Option<Self>, RunError> {
        if cluster.addresses.len() < 2 {
            return Ok(None);
        }
        let address = coordinator_address(&cluster.addresses, config.coordinator_port)?;
        let on_event = on_event(Arc::clone(current), cluster.addresses.clone());
        let job = settings(config);
        let secret = config.cluster_secret.clone();
        let started = if cluster.process == 0 {
            Coordinator::start(
                &address,
                (job, secret),
                (cluster.processes, config.workers),
                (config.cluster_wait, config.peer_timeout),
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
                secret,
            };
            let of_now = Arc::clone(current);
            let newly_failed: NewlyFailed = Arc::new(move || {
                of_now
                    .lock()
                    .ok()
                    .and_then(|c| c.failures.upgrade())
                    .map_or_else(Vec::new, |f| f.newly_failed())
            });
            let links = Links {
                newly_failed,
                committed: keep.unwrap_or_default(),
                reached: Arc::clone(reached),
                silence: config.peer_timeout,
            };
            Member::start(address, hello, config.cluster_wait, links, on_event).map(Liveness::Member)
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

    /// Waits up to `wait` for process 0's verdict on this process (see
    /// [`Member::wait_welcomed`]); process 0 has none to wait for.
    pub(super) fn wait_welcomed(&self, wait: std::time::Duration) {
        if let Liveness::Member(m) = self {
            m.wait_welcomed(wait);
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

fn on_event(current: Current, addresses: Vec<String>) -> OnEvent {
    Arc::new(move |event| {
        let Some((abort, failures)) = current
            .lock()
            .ok()
            .and_then(|c| Some((c.abort.upgrade()?, c.failures.upgrade())))
        else {
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
            Event::Failed { worker } => {
                if let Some(failures) = failures {
                    failures.report(worker);
                }
            }
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
    let settings = Settings::new()
        .with("--workload", &config.workload)
        .with("--workers", config.workers)
        .with("--bins", config.bins.count())
        .with("--replicas", config.replicas)
        .with("--seed", config.seed)
        .with("--rate", config.rate)
        .with("--duration", config.duration.as_secs_f64())
        .with("--epoch-us", config.epoch.us())
        .with("--epochs", config.epoch_mode)
        .with("--native", config.native)
        .with("--no-preload", !config.preload)
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
        );
    // The job's own flags, each by name while they are few; past that, all as one value
    // (a hello carries a bounded number of settings).
    let text: usize = config.params.iter().map(|(n, v)| n.len() + v.len()).sum();
    if config.params.iter().count() <= JOB_FLAGS_APART && text <= JOB_FLAGS_TEXT {
        config
            .params
            .iter()
            .fold(settings, |s, (name, value)| s.with(&format!("--{name}"), value))
    } else {
        let all: Vec<String> = config.params.iter().map(|(n, v)| format!("--{n} {v}")).collect();
        settings.with("the job's own flags", all.join(" "))
    }
}

/// The most flags of a job's own that the settings check names one by one, and the most
/// text they may take so: a hello is at most [`crate::membership::wire::MAX_FRAME`] bytes
/// (past that, every flag travels in one value, hashed, and a difference is named as one).
const JOB_FLAGS_APART: usize = 32;
const JOB_FLAGS_TEXT: usize = 1024;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::harness::EpochMode;
    use crate::job::{Drain, ParamValues};

    /// Reports of other processes' failures reach the driver of the computation running now
    /// (once however often repeated), not one a restart left behind, and none when no
    /// computation runs.
    #[test]
    fn failure_reports_reach_the_current_computation_once() {
        let current = Current::default();
        let on = on_event(Arc::clone(&current), vec!["a:1".into(), "b:1".into()]);
        on(Event::Failed { worker: 1 });
        let computation = |workers| {
            let abort = Abort::of_generation(1, vec!["a:1".into(), "b:1".into()], vec![0, 1]);
            let failures = Arc::new(Failures::new(workers));
            if let Ok(mut c) = current.lock() {
                c.abort = Arc::downgrade(&abort);
                c.failures = Arc::downgrade(&failures);
            }
            (abort, failures)
        };
        let (_abort, first) = computation(2);
        assert_eq!(
            first.newly_failed(),
            Vec::<u32>::new(),
            "a report before it began"
        );
        for _ in 0..1000 {
            on(Event::Failed { worker: 1 });
        }
        assert_eq!(first.newly_failed(), vec![1]);
        assert_eq!(first.newly_failed(), Vec::<u32>::new());
        let (_abort, second) = computation(2);
        on(Event::Failed { worker: 0 });
        assert_eq!(second.newly_failed(), vec![0]);
        assert_eq!(
            first.newly_failed(),
            Vec::<u32>::new(),
            "the restarted one hears nothing"
        );
    }

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
                    output: Some(std::path::PathBuf::from("out.jsonl").into()),
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
        let base = RunConfig {
            params: ParamValues::new().with("keys", 5).with("gap-ms", 200),
            ..base
        };
        let flag = |name: &str, value: u64| {
            let mut c = base.clone();
            c.params.set(name, value);
            c
        };
        let changed = changed.into_iter().map(|(f, c)| {
            (
                f,
                RunConfig {
                    params: base.params.clone(),
                    ..c
                },
            )
        });
        let changed = changed.chain([("--keys", flag("keys", 7)), ("--gap-ms", flag("gap-ms", 7))]);
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
