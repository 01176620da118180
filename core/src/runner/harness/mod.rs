//! The runner: runs any [`Job`] open-loop on a timely cluster, with its control plane
//! (scheduled and commanded migrations, failures and rejoins), and measures it: output
//! digest, latency, migrations, failures, memory. `--output` writes its outputs.

pub mod abort;
pub mod balancer;
mod collect;
mod config;
pub mod drain;
mod end;
mod epochs;
mod identity;
mod join;
mod liveness;
mod loads;
mod measure;
mod mesh;
mod plane;
mod preload;
mod restart;
pub use restart::crash_stops;
pub use restart::{REBALANCED_ONTO_JOINED, RESTORED_STANDBYS};
mod worker;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use config::{
    CLUSTER_WAIT, Cluster, DEFAULT_RECOVERY, EpochMode, Idle, MAX_PACE_AHEAD, MAX_REPLICAS, Pace, Pacing,
    RunConfig, Scripted, WorkerAt, cluster_position, initial_placement, validate,
};

use crate::Time;
use crate::bins::list;
use crate::control::ControlHandle;
use crate::error::ConfigError;
use crate::failure::Failures;
use crate::harness::abort::{Abort, Outcome, park_forever};
use crate::job::Job;
use crate::operator::Handoffs;
use crate::sink::Writer;
use crate::source::{InputError, Source};
use crate::summary::Summary;
use collect::Committed;
use mesh::MeshError;
use restart::Generation;
use worker::{Shared, Stopped, run_worker};

/// How much longer than `--cluster-wait` the first computation's connections are waited
/// for, so that what membership saw meanwhile (a process refused, or never come) is known
/// when they are given up.
const FORM_GRACE: Duration = Duration::from_secs(1);

/// How long a cluster process that found lost bins waits before it exits.
const LOST_GRACE: Duration = Duration::from_millis(500);

/// Errors that stop a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The run's settings cannot work; found before the job starts.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Timely could not start the job (bad timely arguments, a cluster that cannot connect).
    #[error("timely: {0}")]
    Timely(String),
    /// A worker panicked (user logic, an injected panic, a bin that fails to decode) or the
    /// run's shared state was poisoned; the message says which worker and why.
    #[error("{0}")]
    Worker(String),
    /// Another process of the cluster went away (its connection failed).
    #[error(
        "process {process} ({address}) went away ({cause}); a timely cluster cannot go on without one of its processes"
    )]
    PeerLost {
        /// The lost process's index (`-p`).
        process: usize,
        /// Its `host:port` from the host file.
        address: String,
        /// The communication error timely reported.
        cause: String,
    },
    /// Process 0's coordinator refused this process (it runs another job, or its index is
    /// taken).
    #[error("process 0 refused this process: {0}")]
    Refused(String),
    /// The cluster's membership could not start (its coordinator cannot listen, say).
    #[error(transparent)]
    Membership(#[from] crate::membership::MembershipError),
    /// A failure left bins with no replica: the job stops rather than produce wrong output.
    #[error(
        "bins {} lost their last replica at time {time}: the job cannot produce their outputs, so it stopped",
        list(bins)
    )]
    BinsLost {
        /// The bins left with no replica.
        bins: Vec<u32>,
        /// The logical time from which they have none.
        time: Time,
    },
    /// The other processes of the cluster did not all connect in time.
    #[error(
        "process {process}: the cluster did not form within {} s: waiting for {waiting} to connect (check that each runs with the same -n, -p and -h, and that nothing blocks its port)",
        waited.as_secs()
    )]
    ClusterNotFormed {
        /// This process's index.
        process: usize,
        /// The processes it waited for, with their addresses.
        waiting: String,
        /// How long it waited.
        waited: Duration,
    },
    /// The input cannot be read, or a record in it cannot be parsed.
    #[error("reading the input: {0}")]
    Input(InputError),
    /// `--output` cannot be written: the job stopped rather than lose outputs.
    #[error("{0}")]
    Output(String),
}

impl RunError {
    /// The exit status a command-line run reports it with: 3 for lost bins, 2 for bad
    /// settings, 1 otherwise.
    pub fn exit_status(&self) -> u8 {
        match self {
            RunError::BinsLost { .. } => 3,
            RunError::Config(_) | RunError::Input(_) => 2,
            _ => 1,
        }
    }
}

/// Checks `config` for `job` without starting anything: the settings ([`validate`]), the
/// job's own flags ([`Job::params`], [`Job::validate`]), memory for its state, and that the
/// job gets the input it needs, and only then.
pub fn check_job<J: Job + ?Sized>(job: &J, config: &RunConfig) -> Result<(), ConfigError> {
    validate(config)?;
    job.params().resolve(job.name(), &config.params)?;
    job.validate(config).map_err(ConfigError::Invalid)?;
    let state = job.state_bytes(config).map(|bytes| {
        let what = job.describe(config);
        (bytes, what.unwrap_or_else(|| "as the job foresees it".into()))
    });
    config::check_memory(config, state, crate::rss::total_memory())?;
    if config.join {
        join::check(job, config, &cluster_position(&config.timely_args)?)?;
    }
    let invalid = |m: String| Err(ConfigError::Invalid(m));
    if config.epoch_mode == EpochMode::Adaptive
        && let Some(why) = why_not_adaptive(job, config)
    {
        return invalid(format!("--epochs adaptive: {why}; run it with --epochs fixed"));
    }
    match (job.source(config), &config.input) {
        (Source::Generated(_), Some(input)) => invalid(format!(
            "--input {}: {} makes its own records; --input is for jobs that read theirs",
            input.from,
            job.name()
        )),
        (Source::Read(_), None) => invalid(format!(
            "{} reads its records: give --input FILE (or - for standard input, or tcp:HOST:PORT)",
            job.name()
        )),
        (Source::Read(r), Some(_)) if config.pacing == Pacing::EventTime && !r.has_event_time() => {
            invalid(format!(
                "--pace event-time: the records of {} have no event time (its source names none)",
                job.name()
            ))
        }
        _ => Ok(()),
    }
}

/// Why `job` may not run with adaptive epochs in the run `config` describes; `None` if it
/// may. Adaptive epochs send records at their batch's time, up to a batch before their
/// own: wrong for a job whose outputs read times ([`Job::allows_adaptive_epochs`]), and for
/// a cluster that restarts after a crash, which sends the records again from the last
/// committed time, which a batch may straddle.
pub fn why_not_adaptive<J: Job + ?Sized>(job: &J, config: &RunConfig) -> Option<String> {
    if !job.allows_adaptive_epochs() {
        return Some(format!(
            "{} does not allow adaptive epochs (Job::allows_adaptive_epochs): they send \
             records at their batch's time, up to a batch before their own, which changes \
             the outputs of a job that reads times (windows, timeouts, or the order of \
             records of different keys)",
            job.name()
        ));
    }
    if let Some(crate::sink::Output::Postgres(t)) = &config.output {
        return Some(format!(
            "it writes to table {}, which a run after a crash resumes from the last committed \
             time: its outputs must come at the same times again",
            t.table
        ));
    }
    let processes = cluster_position(&config.timely_args).map_or(1, |c| c.processes);
    restart::possible(job, config, processes).then(|| {
        "this cluster restarts after a crash (--replicas 2 in several processes), sending \
         records again from the last committed time, and adaptive batches may straddle it"
            .to_string()
    })
}

/// Starts timely's workers: at once in one process; in a cluster over connections that
/// proved the cluster's secret ([`mesh`]), made within `wait` (timely itself waits for
/// ever, and trusts whatever connects), naming the processes still missing when it gives
/// up, and at once if a process of a job that restarts is known gone meanwhile (a restart
/// needs a computation to leave).
fn form<F>(
    (addresses, rank, workers): (&[String], usize, usize),
    (wait, abort, secret): (Duration, &Abort, &crate::membership::Secret),
    timely: timely::Config,
    work: F,
) -> Result<timely::communication::WorkerGuards<()>, RunError>
where
    F: Fn(&mut timely::worker::Worker) + Send + Sync + 'static,
{
    if addresses.is_empty() {
        return timely::execute(timely, work).map_err(RunError::Timely);
    }
    crate::failpoint::hit(crate::failpoint::Point::Form);
    // A job that cannot restart stops anyway when a process is lost: it waits out the wait,
    // to name every process still missing.
    let gone = || abort.can_restart() && abort.is_stopped();
    // Membership's verdicts (a process refused, one never come) are in before it gives up.
    let formed = mesh::execute(
        (addresses, 0),
        (rank, workers),
        timely.worker.clone(),
        (wait + FORM_GRACE, &gone, secret),
        work,
    );
    formed.map_err(|e| match e {
        MeshError::Late { missing, last } => {
            let mut waiting = missing
                .iter()
                .map(|p| format!("process {p} ({})", addresses.get(*p).map_or("", String::as_str)))
                .collect::<Vec<_>>()
                .join(", ");
            if let Some(last) = last {
                waiting.push_str(&format!("; last seen: {last}"));
            }
            // What membership saw meanwhile (a process refused, one that never came).
            if abort.is_stopped()
                && let Err(seen) = abort.wait_order(Duration::ZERO)
            {
                waiting.push_str(&format!("; {seen}"));
            }
            RunError::ClusterNotFormed {
                process: rank,
                waiting,
                waited: wait,
            }
        }
        MeshError::Gone => match abort.lost().first() {
            Some(lost) => RunError::Worker(format!(
                "process {lost} went away before the cluster formed: the job cannot start without it"
            )),
            None => abort
                .wait_order(Duration::ZERO)
                .err()
                .unwrap_or_else(|| RunError::Worker("the cluster stopped while it formed".into())),
        },
        other => RunError::Timely(format!("process {rank}: the cluster could not form: {other}")),
    })
}

/// Runs `job`. Returns the summary in the process that hosts worker 0, `None` elsewhere.
///
/// A worker that panics, a peer process that goes away, bins that lose their last replica,
/// an input that cannot be read or an output that cannot be written stop the run with that
/// error within a loop turn. In a cluster the stopped process's workers never return (so
/// that its peers see the process go away instead of a clean shutdown): the caller is
/// expected to exit. A job that can restart (see `restart.rs`) instead goes on without a
/// lost process other than process 0, in a new computation among the survivors.
pub fn run_job<J: Job + ?Sized>(
    job: Arc<J>,
    mut config: RunConfig,
    control: ControlHandle,
) -> Result<Option<Summary>, RunError> {
    check_job(&*job, &config)?;
    // Every flag of the job's own at its value, given or default: the header, the
    // cluster's settings check and the summary say them all.
    config.params = job.params().resolve(job.name(), &config.params)?;
    let (timely, addresses) = config::cluster(&config)?;
    let position = cluster_position(&config.timely_args)?;
    let first_process = position.process == 0;
    let restartable = restart::possible(&*job, &config, addresses.len());
    // The first process writes every output: it opens the sink before anything runs.
    let sink = match (&config.output, first_process) {
        (Some(output), true) => {
            // Only a sink that can resume looks at the run (hashing its input file).
            let identity = match output {
                crate::sink::Output::File(_) => crate::sink::RunIdentity::default(),
                crate::sink::Output::Postgres(_) => identity::identity(&config),
            };
            let writer = Writer::open(output, config.replace_output, &identity);
            Some(writer.map_err(|e| RunError::Output(e.to_string()))?)
        }
        _ => None,
    };
    let sink = Arc::new(Mutex::new(sink));
    let committed = (restartable && first_process).then(Committed::default);
    let keep = restartable.then(|| match &committed {
        Some(c) => Arc::clone(&c.frontier),
        None => Arc::new(AtomicU64::new(0)),
    });
    config
        .cluster_secret
        .check_hosts(&addresses)
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let current: liveness::Current = Arc::default();
    // How far this process's inputs have reached, in any computation of the run.
    let reached = Arc::new(AtomicU64::new(0));
    // A process that joins hears of its order (or its refusal) from its first frame on.
    let mut joining = config.join.then(|| join::waiting(&current, &config, &addresses));
    // The first computation's abort hears membership's news from its first frame on: a
    // refusal, or process 0 not reached, comes before the computation forms.
    let mut first_abort = (!config.join).then(|| {
        let abort = Abort::of_generation(config.workers, addresses.clone(), (0..addresses.len()).collect());
        if restartable {
            abort.restartable();
        }
        if let Ok(mut c) = current.lock() {
            c.abort = Arc::downgrade(&abort);
        }
        abort
    });
    let liveness = liveness::Liveness::start(&config, &position, &current, (keep.clone(), &reached))?;
    // A process that process 0 refuses, or that never reached it, forms no computation:
    // it says why at once.
    if let Some(liveness) = liveness.as_ref().filter(|_| !config.join) {
        liveness.wait_welcomed(config.cluster_wait + FORM_GRACE);
        if let Some(abort) = first_abort.as_ref().filter(|a| a.is_stopped()) {
            return Err(abort
                .wait_order(Duration::ZERO)
                .err()
                .unwrap_or_else(|| RunError::Worker("the cluster stopped while it formed".into())));
        }
    }
    if restartable {
        tracing::info!(target: "megaflux::job", phase = "restartable", processes = addresses.len());
    }
    let start: Arc<OnceLock<Instant>> = Arc::default();
    let mut generation = Generation::first(config.workers, keep.clone(), committed);
    let mut survivors: Vec<usize> = (0..addresses.len()).collect();
    let mut config = Arc::new(config);
    if let Some(waiting) = &joining {
        let order = join::taken_in(waiting, &config, position.process)?;
        // The job's clock: records are due as on the processes already running.
        let clock = Duration::from_nanos(order.clock_ns);
        let _ = start.set(Instant::now().checked_sub(clock).unwrap_or_else(Instant::now));
        if let Some(keep) = &keep {
            keep.fetch_max(order.committed, std::sync::atomic::Ordering::AcqRel);
        }
        if let Some(end) = order.end {
            control.set_end(end);
        }
        generation = Generation::joining(config.workers, keep, order.generation, order.committed);
        survivors = order.survivors;
        config = Arc::new(restart::later_config(&config));
    }
    loop {
        let here: Vec<String> = survivors.iter().map(|p| addresses[*p].clone()).collect();
        let abort = first_abort
            .take()
            .unwrap_or_else(|| Abort::of_generation(config.workers, here.clone(), survivors.clone()));
        if restartable {
            abort.restartable();
        }
        // Numbered as this computation numbers its workers, as the failures others report.
        let failures = Arc::new(Failures::new(config.workers * here.len().max(1)));
        if let Ok(mut c) = current.lock() {
            c.abort = Arc::downgrade(&abort);
            c.failures = Arc::downgrade(&failures);
        }
        // News that came while this process waited to be taken in, after its order.
        if let Some(waiting) = joining.take() {
            match waiting.wait_order(Duration::ZERO)? {
                Some(order) if order.generation > generation.index => abort.ordered(order),
                _ => {}
            }
        }
        // A process that joined after the last order was given is taken in by the next; one
        // lost since is left out of it.
        if let Some(coordinator) = liveness.as_ref().and_then(|l| l.coordinator()) {
            for process in coordinator.lost_among(&survivors) {
                abort.lose(
                    process,
                    RunError::PeerLost {
                        process,
                        address: addresses[process].clone(),
                        cause: "it went away while the job restarted".into(),
                    },
                );
            }
            for process in coordinator.joined() {
                abort.join(process);
            }
        }
        let rank = survivors.iter().position(|p| *p == position.process).unwrap_or(0);
        let generation_now = Arc::new(generation);
        let ran = run_generation(
            &job,
            &config,
            &control,
            (&start, &sink, &abort, &generation_now),
            (&failures, &reached),
            (timely.clone(), rank, &here),
        )?;
        if let Ran::Finished(summary) = ran {
            crate::failpoint::hit(crate::failpoint::Point::Finished);
            if let Some(liveness) = &liveness {
                liveness.finish();
            }
            return Ok(summary.map(|s| *s));
        }
        let seen = abort.restarting_since().unwrap_or_else(Instant::now);
        let clock = start.get().copied();
        let order = restart::order(
            liveness.as_ref(),
            &generation_now,
            (&abort, clock, control.end()),
            position.process,
        )?;
        // Every process of the next computation ends where process 0 fixed the end: a
        // process restarted past it would otherwise send epochs the run never had.
        if let Some(end) = order.end {
            control.set_end(end);
        }
        let lost = abort.lost();
        // Taken in: new to the computation, or back in the place of a process lost from it.
        let joined: Vec<usize> = order
            .survivors
            .iter()
            .copied()
            .filter(|p| !survivors.contains(p) || lost.contains(p))
            .collect();
        // Process 0 orders the restart: its event is the job's.
        if position.process == 0 {
            let as_u32 = |ps: &[usize]| ps.iter().map(|p| *p as u32).collect::<Vec<_>>();
            tracing::warn!(
                target: "megaflux::job",
                phase = "restart",
                generation = order.generation,
                from = order.committed,
                survivors = %list(&as_u32(&order.survivors)),
                lost = %list(&as_u32(&lost)),
                joined = %list(&as_u32(&joined))
            );
        }
        let times = (order.generation, order.committed);
        generation = generation_now.next(times, seen, (lost, joined));
        survivors = order.survivors;
        // Plans, failures and panics name the first computation's workers.
        config = Arc::new(restart::later_config(&config));
    }
}

/// How one computation of a run ended.
enum Ran {
    /// The run finished; the summary on process 0.
    Finished(Option<Box<Summary>>),
    /// It was left for a restart; every local worker handed out its bins.
    Restart,
}

/// Runs one computation of the run (a generation) among the processes at `addresses`, this
/// one at `rank`, with the failures of its workers in `failures`; its inputs raise
/// `reached`.
#[allow(clippy::type_complexity)]
fn run_generation<J: Job + ?Sized>(
    job: &Arc<J>,
    config: &Arc<RunConfig>,
    control: &ControlHandle,
    (start, sink, abort, generation): (
        &Arc<OnceLock<Instant>>,
        &Arc<Mutex<Option<Writer>>>,
        &Arc<Abort>,
        &Arc<Generation>,
    ),
    (failures, reached): (&Arc<Failures>, &Arc<AtomicU64>),
    (timely, rank, addresses): (timely::Config, usize, &[String]),
) -> Result<Ran, RunError> {
    let cluster = !addresses.is_empty();
    let (failures, reached) = (Arc::clone(failures), Arc::clone(reached));
    let handoffs = Arc::new(Handoffs::new(config.workers));
    let result: Arc<Mutex<Option<Summary>>> = Arc::default();
    let slot = Arc::clone(&result);
    let (job, config, control) = (Arc::clone(job), Arc::clone(config), control.clone());
    let (start, sink, run_abort, gen_run) = (
        Arc::clone(start),
        Arc::clone(sink),
        Arc::clone(abort),
        Arc::clone(generation),
    );
    let (wait, workers) = (config.cluster_wait, config.workers);
    let config_secret = config.cluster_secret.clone();
    let restarted = generation.index > 0;
    let work = move |worker: &mut timely::worker::Worker| {
        run_abort.enter(worker.index());
        let shared = Shared {
            config: &config,
            control: &control,
            start: &start,
            failures: &failures,
            reached: &reached,
            handoffs: &handoffs,
            abort: &run_abort,
            sink: &sink,
            generation: &gen_run,
        };
        let summary = run_worker(worker, &shared, &*job);
        match summary {
            Ok(summary) => {
                if let Some(s) = summary
                    && let Ok(mut slot) = slot.lock()
                {
                    *slot = Some(s);
                }
                run_abort.finished();
            }
            // Left for a restart: its bins are handed out, its dataflows dropped.
            Err(Stopped) if run_abort.restarting() => {}
            Err(Stopped) if cluster => park_forever(),
            // Timely steps a worker until its dataflows complete, which they never will.
            Err(Stopped) => {
                for dataflow in worker.installed_dataflows() {
                    worker.drop_dataflow(dataflow);
                }
            }
        }
    };
    let secret = &config_secret;
    let guards = if restarted {
        crate::failpoint::hit(crate::failpoint::Point::Connect);
        match mesh::execute(
            (addresses, generation.index),
            (rank, workers),
            timely.worker.clone(),
            (wait, &|| abort.is_stopped(), secret),
            work,
        ) {
            Ok(guards) => guards,
            // Another process went away while the survivors reconnected: one more restart,
            // from the same bins.
            Err(_) if abort.restarting() => {
                generation.unseed();
                return Ok(Ran::Restart);
            }
            Err(e) => return Err(RunError::Timely(format!("restarting the cluster: {e}"))),
        }
    } else {
        form((addresses, rank, workers), (wait, abort, secret), timely, work)?
    };
    abort.formed();
    if cluster {
        // What an operator (and a test that kills a process) waits for: every process of
        // this computation is connected and its workers run.
        tracing::info!(
            target: "megaflux::job",
            phase = "formed",
            generation = generation.index,
            processes = addresses.len(),
            workers
        );
    }
    match abort.wait() {
        Err(e) => {
            if cluster {
                // Every process finds lost bins at about the same time: give the others a
                // moment to stop for that reason rather than for this process going away.
                if matches!(e, RunError::BinsLost { .. }) {
                    std::thread::sleep(LOST_GRACE);
                }
                // Joining would wait for parked workers; the process exits instead.
                std::mem::forget(guards);
            } else {
                drop(guards.join());
            }
            Err(e)
        }
        Ok(Outcome::Restart) => {
            restart::leave(guards, generation, abort)?;
            Ok(Ran::Restart)
        }
        Ok(Outcome::Finished) => {
            for r in guards.join() {
                r.map_err(RunError::Worker)?;
            }
            let summary = result.lock().map(|mut s| s.take()).unwrap_or(None);
            Ok(Ran::Finished(summary.map(Box::new)))
        }
    }
}
