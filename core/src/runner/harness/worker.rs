//! One worker's run: its dataflow, the preload, the measured epochs, the end of the run,
//! and its report to worker 0.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use timely::dataflow::{InputHandleVec, ProbeHandle};
use timely::worker::Worker;

use super::collect::{Digest, Reports};
use super::drain::{self, Drain};
use super::end::RunEnd;
use super::epochs::Epochs;
use super::loads::{LoadReports, Meter, window_at};
use super::measure::{Latencies, RssSamples};
use super::plane::ControlPlane;
use super::preload::preload;
use super::restart::{Disagreed, Generation, agree, hand_out};
use super::{EpochMode, Pacing};
use super::{RunConfig, RunError};
use crate::Time;
use crate::config::ControlInst;
use crate::control::ControlHandle;
use crate::driver::PlanDriver;
use crate::failure::Failures;
use crate::harness::abort::Abort;
use crate::job::{Job, Operators};
use crate::latency::{Dues, LatencyRecorder, ListedDues};
use crate::operator::{Handoffs, StatefulConfig, TransferLog};
use crate::rss;
use crate::sampler::{self, Sampler};
use crate::sink::Writer;
use crate::source::{Feed, Input, ReadSource, Source, Timing};
use crate::summary::{DrainSummary, Summary, WorkerReport, summarize};

/// The run stopped early (its error is with the run's [`Abort`]).
pub(super) struct Stopped;

/// What every worker of a process shares.
pub(super) struct Shared<'a> {
    pub(super) config: &'a Arc<RunConfig>,
    pub(super) control: &'a ControlHandle,
    /// One clock for all workers of this process: a worker that gets past the start a few
    /// milliseconds late then catches up on its overdue epochs instead of lagging for good.
    pub(super) start: &'a OnceLock<Instant>,
    pub(super) failures: &'a Arc<Failures>,
    /// How far this process's inputs have reached, in any computation of the run (a
    /// member believes no committed frontier past it).
    pub(super) reached: &'a AtomicU64,
    /// Where this process's workers hand each other moving bins as they are.
    pub(super) handoffs: &'a Arc<Handoffs>,
    pub(super) abort: &'a Abort,
    /// The `--output` file, which worker 0 of the first process takes.
    pub(super) sink: &'a Mutex<Option<Writer>>,
    /// The computation this is, and what it starts with.
    pub(super) generation: &'a Generation,
}

impl Shared<'_> {
    /// Steps the worker once, unless the run must stop (it stopped elsewhere, or bins lost
    /// their last replica here).
    pub(super) fn step(&self, worker: &mut Worker) -> Result<(), Stopped> {
        if let Some((bins, time)) = self.failures.lost() {
            self.abort.stop(RunError::BinsLost { bins, time });
        }
        if self.abort.is_stopped() {
            return Err(Stopped);
        }
        // A computation that lost a process panics on its poisoned channels; caught, the
        // worker can still leave it with its bins for a restart (the panic hook told the run).
        catch_unwind(AssertUnwindSafe(|| worker.step()))
            .map(drop)
            .map_err(|_| Stopped)
    }

    /// Stops the run with `error`.
    fn fail(&self, error: RunError) -> Stopped {
        self.abort.stop(error);
        Stopped
    }

    /// As [`Shared::step`], but a worker with nothing to do waits up to `park` for news
    /// instead of spinning: workers that share cores leave them to those that have work.
    fn step_or_park(&self, worker: &mut Worker, park: Duration) -> Result<(), Stopped> {
        if let Some((bins, time)) = self.failures.lost() {
            self.abort.stop(RunError::BinsLost { bins, time });
        }
        if self.abort.is_stopped() {
            return Err(Stopped);
        }
        catch_unwind(AssertUnwindSafe(|| worker.step_or_park(Some(park))))
            .map(drop)
            .map_err(|_| Stopped)
    }
}

/// The dataflow of one worker: the job (migrateable or native), its inputs and probe, and
/// what its operators log.
struct Dataflow<R: Clone + 'static> {
    index: usize,
    data: InputHandleVec<Time, R>,
    /// Taken by worker 0's control plane; the other workers drop theirs, so that the control
    /// frontier follows worker 0 alone.
    control: Option<InputHandleVec<Time, ControlInst>>,
    probe: ProbeHandle<Time>,
    digest: Digest,
    end: RunEnd,
    stateful: StatefulConfig,
    transfers: TransferLog,
    sampler: Option<Sampler>,
    /// The load reports to worker 0 (built in every dataflow: a cluster's processes must
    /// build the same one).
    loads: LoadReports,
    /// Reads this worker's load while the balancer watches, and when it last did.
    meter: Option<(Meter, Duration)>,
    /// The `--output` file, on the worker that writes it.
    sink: Option<Rc<RefCell<Writer>>>,
}

impl<R: timely::ExchangeData + Clone> Dataflow<R> {
    fn build<J: Job<In = R> + ?Sized>(
        worker: &mut Worker,
        shared: &Shared,
        job: &J,
        seeded: Option<(crate::config::Placement, crate::operator::Seed)>,
    ) -> Self {
        let config = shared.config;
        let peers = worker.peers();
        let mut stateful = if config.replicas > 1 {
            StatefulConfig::replicated(config.bins, peers, config.workers)
        } else {
            StatefulConfig::uniform(config.bins, peers)
        };
        // `validate` checked it: a placement it refused never gets here.
        if let Ok(placement) = super::config::initial_placement(config, peers) {
            stateful.initial = placement;
        }
        if let Some((placement, seed)) = seeded {
            stateful.initial = placement;
            stateful.seed = Some(Arc::new(seed));
        }
        stateful.committed = shared.generation.keep.clone();
        stateful.chunk_bytes = config.chunk_bytes;
        stateful.epoch = config.epoch;
        stateful.check_serde |= config.check_serde;
        stateful.failures = Arc::clone(shared.failures);
        stateful.handoffs = Some(Arc::clone(shared.handoffs));
        // Built before the dataflow: the operators learn from it whether to time themselves.
        let sampler = sampler::wanted().then(|| Sampler::new(worker, stateful.observers.clone()));
        let mut data = InputHandleVec::new();
        let mut control = InputHandleVec::new();
        let probe = ProbeHandle::new();
        let digest = Digest::new(config.epoch_mode == EpochMode::Fixed);
        let mut end = RunEnd::new();
        let mut loads = LoadReports::new();
        let sink = (worker.index() == 0)
            .then(|| shared.sink.lock().ok().and_then(|mut s| s.take()))
            .flatten()
            .map(|s| Rc::new(RefCell::new(s)));
        {
            let (digest, probe, native) = (digest.clone(), probe.clone(), config.native);
            let sinking = config.output.is_some().then(|| sink.clone());
            let committed = shared.generation.keep.as_ref().map(|_| {
                (worker.index() == 0)
                    .then(|| shared.generation.committed.clone())
                    .flatten()
            });
            let (data, control, end, loads) = (&mut data, &mut control, &mut end, &mut loads);
            let (stateful, run) = (stateful.clone(), Arc::clone(config));
            worker.dataflow::<Time, _, _>(move |scope| {
                end.build(scope);
                loads.build(scope);
                let input = data.to_stream(scope);
                let ops = if native {
                    Operators::native(stateful, run)
                } else {
                    Operators::migrating(control.to_stream(scope), stateful, run)
                };
                let output = job.dataflow(input, &ops);
                digest.count(output, &probe, sinking, committed);
            });
        }
        Dataflow {
            index: worker.index(),
            data,
            control: Some(control),
            probe,
            digest,
            end,
            transfers: Rc::clone(&stateful.transfers),
            stateful,
            sampler,
            loads,
            meter: None,
            sink,
        }
    }

    /// The output's frontier: the earliest time not yet complete.
    fn output(&self) -> Time {
        self.probe
            .with_frontier(|f| f.first().copied().unwrap_or(Time::MAX))
    }
}

/// Runs one worker; returns the summary on worker 0. A worker that stops because its
/// computation is left for a restart hands out its bins first.
pub(super) fn run_worker<J: Job + ?Sized>(
    worker: &mut Worker,
    shared: &Shared,
    job: &J,
) -> Result<Option<Summary>, Stopped> {
    let local = worker.index() % shared.config.workers;
    let seeded = match shared.generation.handout(local) {
        Some(handout) => {
            let from = shared.generation.from;
            let c = &shared.config;
            let copies = (c.bins.count(), c.replicas, c.workers);
            let stateful = !handout.bins.is_empty();
            match agree(worker, copies, &handout.roles(from), stateful, shared.abort) {
                Ok(Some((placement, survived))) => {
                    if worker.index() == 0 {
                        shared.generation.formed(survived);
                    }
                    let me = worker.index() as u32;
                    let seed = handout.seed(from, |bin| placement[bin as usize].holds(me));
                    Some((placement, seed))
                }
                // A job without stateful operators: nothing to place, it starts afresh.
                Ok(None) => {
                    if worker.index() == 0 {
                        shared.generation.formed(Default::default());
                    }
                    None
                }
                Err(Disagreed::Lost(bins)) => {
                    return Err(shared.fail(RunError::BinsLost { bins, time: from }));
                }
                Err(Disagreed::Left) => {
                    // Left before it began: the next computation starts from the same bins.
                    shared.generation.hand_out(local, handout);
                    drop_dataflows(worker);
                    return Err(Stopped);
                }
            }
        }
        None => None,
    };
    let main_dataflow = worker.next_dataflow_index();
    let flow = Dataflow::build(worker, shared, job, seeded);
    let observers = flow.stateful.observers.clone();
    let sink = flow.sink.clone();
    let result = run_flow(worker, shared, job, flow, main_dataflow);
    if result.is_err() && shared.abort.restarting() {
        shared.generation.hand_out(local, hand_out(&observers));
        drop(observers);
        drop_dataflows(worker);
        // The `--output` file goes on with the next computation: what it holds is committed.
        if let Some(sink) = sink.and_then(|s| Rc::try_unwrap(s).ok())
            && let Ok(mut slot) = shared.sink.lock()
        {
            *slot = Some(sink.into_inner());
        }
    }
    result
}

/// Drops every dataflow of a computation being left. Its channels to a lost process are
/// poisoned: dropping may panic, which is fine.
fn drop_dataflows(worker: &mut Worker) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        for dataflow in worker.installed_dataflows() {
            worker.drop_dataflow(dataflow);
        }
    }));
}

/// Runs one worker's built dataflow to the end of the run.
fn run_flow<R: timely::ExchangeData + Clone, J: Job<In = R> + ?Sized>(
    worker: &mut Worker,
    shared: &Shared,
    job: &J,
    mut flow: Dataflow<R>,
    main_dataflow: usize,
) -> Result<Option<Summary>, Stopped> {
    let config = shared.config;
    let (index, peers) = (worker.index(), worker.peers());
    let source = job.source(config);
    let reports = Reports::new(worker);
    let control = flow.control.take();
    let mut plane = control.filter(|_| index == 0).map(|control| {
        ControlPlane::new(
            config,
            flow.stateful.initial.clone(),
            peers,
            control,
            Arc::clone(shared.failures),
        )
    });

    let generator = match &source {
        Source::Generated(g) => Some(g.as_ref()),
        Source::Read(_) => None,
    };
    let (base, preloaded) = preload(
        worker,
        shared,
        generator,
        &mut flow.data,
        plane.as_mut(),
        &flow.probe,
    )?;
    let from = shared.generation.from;
    if !config.native {
        // Every run measures its load, whatever the balancer's mode (the timeline's
        // imbalance; `balance` may turn the balancer on while the job runs), as busy time:
        // the activations are timed (two clock reads each).
        flow.stateful.observers.time_operators();
        let meter = Meter::new(index as u32, flow.stateful.observers.clone(), config.bins.count());
        flow.meter = Some((meter, Duration::ZERO));
    }
    let (feed, dues) = feed(config, &source, index, peers).map_err(|e| shared.fail(e))?;
    let mut epochs = Epochs::new(config, base, preloaded, feed);
    epochs.resume_from(from);
    // After the resume: the records a crashed computation sent before it are this one's
    // start, not its first interval's.
    if let Some(sampler) = flow.sampler.as_mut() {
        sampler.begin(epochs.records_in());
    }
    flow.data.advance_to(epochs.next_time());
    shared.reached.fetch_max(epochs.next_time(), Ordering::AcqRel);
    if let Some(plane) = plane.as_mut() {
        plane.begin(base);
        plane.advance(epochs.next_time());
    }
    while flow.probe.less_than(&epochs.next_time()) {
        shared.step(worker)?;
    }

    let start = *shared.start.get_or_init(Instant::now);
    epochs.begin(start);
    if let Some(plane) = plane.as_mut()
        && shared.generation.index > 0
    {
        let generation = shared.generation;
        let purpose = |joined| super::restart::recovery_purpose(generation.index, joined);
        // Bins left with one copy get their standbys at once.
        plane.restore_standbys(&purpose(&[]), start.elapsed().as_secs_f64());
        if !generation.joined.is_empty() {
            // Bins move onto a process that joined once the new computation has caught up
            // (and the standbys are restored): a move at its first time would hold every
            // output back until that process, still starting, took the bin.
            let caught_up = epochs.time_of(epochs.reached(start.elapsed()));
            plane.rebalance_from(&purpose(&generation.joined), caught_up);
        }
    }
    let records = epochs.records_in();
    tracing::info!(target: "megaflux::job", phase = "started", worker = index, peers, base, records);
    let mut latencies = Latencies::new(
        LatencyRecorder::with_dues(dues, config.epoch),
        config.epoch.per_window(),
        flow.sampler.is_some(),
    );
    let mut rss = index.is_multiple_of(config.workers).then(RssSamples::new);
    if index == 0 {
        latencies.resume(shared.generation.measured());
    }
    let measured = measured_loop(
        worker,
        shared,
        &mut flow,
        &mut epochs,
        &mut plane,
        &mut latencies,
        &mut rss,
        start,
    );
    if let Some(plane) = plane.as_ref() {
        if !plane.rebalance_waits() {
            shared.generation.rebalanced();
        }
        if measured.is_err() {
            shared.generation.keep_plans(plane.driver().records().listed);
        }
    }
    let policy = match config.drain_ends {
        // It drains, to a gate set once the last epoch is known (below).
        Some(_) => Drain::All,
        None => config.drain.unwrap_or_else(|| job.drain(config)),
    };
    let driver = measured.and_then(|()| {
        finish(
            worker,
            shared,
            &mut flow,
            &epochs,
            plane,
            &mut latencies,
            start,
            policy == Drain::Off,
        )
    });
    let local = index % config.workers;
    let driver = driver
        .inspect_err(|_| keep_for_restart(shared, (index, local), &latencies, &flow.transfers, None))?;
    // A computation restarted at the run's end sends no epoch: the records before it still
    // count as the run's.
    while shared.generation.index > 0 && !epochs.count_before_resume() {
        shared.step(worker)?;
    }
    let last_time = epochs.time_of(epochs.last());
    let policy = match config.drain_ends {
        // A re-run's drain ends at the gate its recorded run's did, in ticks past the base:
        // work at earlier times runs, as it did there. (Not counted from the last epoch:
        // the input's end of a run that reads a file is where it saw the end, a little
        // later on a busy machine.) `Drain::For` counts from the time after the last epoch.
        Some(gate) => {
            let gate = epochs.time_of(0).saturating_add(gate);
            let past = gate.saturating_sub(last_time).saturating_sub(1);
            Drain::For(config.epoch.closes_at(past))
        }
        None => policy,
    };
    let transfers = Rc::clone(&flow.transfers);
    let keep =
        |_: &Stopped| keep_for_restart(shared, (index, local), &latencies, &transfers, driver.as_ref());
    let (ended_at, drain_took) =
        drain(worker, shared, &mut flow, last_time, policy, start).inspect_err(keep)?;
    // The input closes next: every output of the run may be committed.
    shared.reached.store(Time::MAX, Ordering::Release);
    let scheduled = flow.stateful.observers.scheduled();
    worker.drop_dataflow(main_dataflow);
    let written = match &flow.sink {
        Some(sink) => Some(
            sink.borrow_mut()
                .finish()
                .map_err(|e| shared.fail(RunError::Output(e)))?,
        ),
        None => None,
    };
    let records_in = epochs.records_in();
    let sums = match (&shared.generation.committed, index) {
        (Some(committed), 0) => committed.get(),
        _ => flow.digest.get(),
    };
    let outputs = sums.count;
    tracing::info!(target: "megaflux::job", phase = "finished", worker = index, records = records_in, outputs);
    let end_s = start.elapsed().as_secs_f64();

    let report = WorkerReport {
        digest: sums.hash,
        outputs: sums.count,
        spans: sums.spans,
        records_in,
        preloaded,
        transfers: shipped_in_the_run(shared.generation, index % config.workers, &flow.transfers),
        rss_peak: rss.as_ref().and_then(|_| rss::peak()),
        rss_samples: rss.map(RssSamples::into_samples).unwrap_or_default(),
        scheduled,
    };
    crate::failpoint::hit(crate::failpoint::Point::Report);
    let reports = reports
        .exchange(report, || shared.step(worker))
        .inspect_err(keep)?;
    // An input that failed ended the run as its end would have: every output of the records
    // before it is written; the run then stops with the error.
    if let Some(failed) = epochs.take_failure() {
        return Err(shared.fail(RunError::Input(failed)));
    }

    let Some(driver) = driver else {
        return Ok(None);
    };
    let (mut records, failures) = (driver.records(), driver.failures());
    let mut plans = shared.generation.earlier().plans;
    plans.append(&mut records.listed);
    for past in plans.drain(crate::driver::KEPT_PLANS.min(plans.len())..) {
        records.unlisted.add(&past, false);
    }
    records.listed = plans;
    let recoveries = failures.iter().filter_map(|f| f.recovery.as_ref());
    latencies.report_plans(records.iter().chain(recoveries), config.epoch, Some(end_s));
    // A stopped run covers fewer epochs than it was configured for.
    let ran = RunConfig {
        duration: config.epoch.closes_at(epochs.last()),
        ..(**config).clone()
    };
    let mut summary = summarize(
        &ran,
        peers,
        &reports,
        &latencies.recorder,
        records,
        failures,
        end_s,
    );
    summary.outputs_written = written.as_ref().map(|w| w.rows);
    summary.output = written;
    summary.input = config.input.as_ref().map(crate::source::Input::summary);
    summary.placement = crate::summary::per_worker(driver.placement(), peers, config.workers);
    if !config.native {
        summary.balance = Some(driver.balance().summary(config.balance.mode.to_string()));
        for (w, window) in summary.timeline.iter_mut().enumerate() {
            window.imbalance = driver.balance().of_window(w);
        }
    }
    if policy != Drain::Off {
        let pending = reports
            .iter()
            .fold(crate::operator::Scheduled::default(), |all, r| {
                all.and(r.scheduled)
            });
        let horizon = policy.horizon(last_time, config.epoch);
        summary.drain = Some(DrainSummary {
            input_end: last_time,
            ended_at,
            cut: pending.next.is_some_and(|next| next < horizon),
            bins_pending: pending.bins,
            next_time: pending.next,
            took_s: drain_took.as_secs_f64(),
        });
    }
    let done = latencies.recorder.epochs();
    let done_at = |from| {
        let first = done.partition_point(|d| epochs.time_of(d.last) < from);
        done.get(first).map(|d| d.at_ns)
    };
    crate::summary::time_takeovers(&mut summary.failures, &latencies.recorder, config.epoch, done_at);
    summary.crashes = shared.generation.crash_summaries(start, done_at);
    summary.joins = shared.generation.join_summaries(start, done_at);
    super::restart::attach_recoveries(&mut summary.crashes, &mut summary.joins, &summary.migrations);
    Ok(Some(summary))
}

/// The drain of the run whose last epoch has time `last_time` (see `harness/drain.rs`): the
/// work scheduled past it runs as far as `policy` says, under a gate every worker holds.
/// Returns the gate it ended at (every output before it is out) and how long it took.
fn drain<R: timely::ExchangeData + Clone>(
    worker: &mut Worker,
    shared: &Shared,
    flow: &mut Dataflow<R>,
    last_time: Time,
    policy: Drain,
    start: Instant,
) -> Result<(Time, Duration), Stopped> {
    crate::failpoint::hit(crate::failpoint::Point::Drain);
    let began = Instant::now();
    let plan = drain::Plan {
        index: flow.index,
        peers: worker.peers(),
        last_time,
        drain: policy,
        len: shared.config.epoch,
        // A re-run ends its drain where its recorded run did, however long that takes here.
        deadline: match shared.config.drain_ends {
            Some(_) => Instant::now() + Duration::from_secs_f64(drain::MAX_DRAIN_SECS),
            None => start + shared.config.duration,
        },
        control: shared.control,
    };
    let gated = drain::Gated {
        reached: shared.reached,
        data: &mut flow.data,
        probe: &flow.probe,
        end: &mut flow.end,
        observers: &flow.stateful.observers,
    };
    let sink = flow.sink.clone();
    let ended_at = drain::run(gated, plan, |park| {
        shared.step_or_park(worker, park)?;
        match sink_failed(&sink) {
            Some(why) => Err(shared.fail(RunError::Output(why))),
            None => Ok(()),
        }
    })?;
    Ok((ended_at, began.elapsed()))
}

/// What a worker leaving its computation for a restart keeps for the next one: worker 0's
/// latencies and plans so far (`driver`, once the control plane closed), and what every
/// worker shipped, so that the summary covers the whole run.
fn keep_for_restart(
    shared: &Shared,
    (index, local): (usize, usize),
    latencies: &Latencies,
    transfers: &crate::operator::TransferLog,
    driver: Option<&PlanDriver>,
) {
    if index == 0 {
        shared.generation.keep_measured(latencies.recorder.epochs());
        if let Some(driver) = driver {
            shared.generation.keep_plans(driver.records().listed);
        }
    }
    shared.generation.keep_shipped(local, &transfers.borrow());
}

/// What local worker `local` shipped in the whole run: in the computations before this
/// one, and in `this`.
fn shipped_in_the_run(
    generation: &Generation,
    local: usize,
    this: &crate::operator::TransferLog,
) -> Vec<(Time, crate::operator::TransferTotals)> {
    let mut earlier = generation.earlier().shipped;
    if let Some(log) = earlier.get_mut(local) {
        for (time, t) in this.borrow().iter() {
            *log.entry(*time).or_default() += *t;
        }
        return log.iter().map(|(t, v)| (*t, *v)).collect();
    }
    this.borrow().iter().map(|(t, v)| (*t, *v)).collect()
}

/// Why the `--output` file can no longer be written, if it cannot. Every turn of a loop
/// asks, and so writes what the sink holds once it has held it long enough.
fn sink_failed(sink: &Option<Rc<RefCell<Writer>>>) -> Option<String> {
    let sink = sink.as_ref()?;
    let mut sink = sink.borrow_mut();
    sink.tick();
    sink.failed().map(str::to_string)
}

/// This worker's feed of records, and how worker 0 learns when they were due: a share of a
/// generator's on every worker; the records read from the input on worker 0, nothing
/// elsewhere.
fn feed<R: timely::ExchangeData + Clone>(
    config: &RunConfig,
    source: &Source<R>,
    index: usize,
    peers: usize,
) -> Result<(Feed<R>, Dues), RunError> {
    let by_rate = Dues::rate(config.rate);
    let (reads, input) = match (source, &config.input) {
        (Source::Generated(g), _) => {
            let feed = Feed::Generated {
                make: g.records(index, peers),
                index,
                peers,
                rate: config.rate,
                len: config.epoch,
            };
            return Ok((feed, by_rate));
        }
        (Source::Read(reads), Some(input)) if index == 0 => (reads, input),
        _ => return Ok((Feed::Nothing, by_rate)),
    };
    let timing = timing(config, reads, input);
    let dues = match timing {
        Timing::Rate(_) => by_rate,
        _ => Dues::Listed(Rc::new(RefCell::new(ListedDues::default()))),
    };
    let feed = Feed::read(input, reads, (timing, config.max_line_bytes), config.epoch, &dues)
        .map_err(RunError::Input)?;
    Ok((feed, dues))
}

/// When records read from `input` are due: by rate or event time if it can be read again
/// (a file, a topic up to an end), as they arrive from a stream.
fn timing<R>(config: &RunConfig, reads: &ReadSource<R>, input: &Input) -> Timing<R> {
    match (input.rereadable(), config.pacing, &reads.event_time) {
        (true, Pacing::EventTime, Some(time_ms)) => Timing::EventTime {
            time_ms: Arc::clone(time_ms),
            speed: config.speed,
            first: None,
            latest: 0,
        },
        (true, _, _) => Timing::Rate(config.rate),
        _ => Timing::Arrival,
    }
}

/// The measured epochs, open loop or as fast as the job goes, until the last one is sent
/// (a stop brings it closer).
#[allow(clippy::too_many_arguments)]
fn measured_loop<R: timely::ExchangeData + Clone>(
    worker: &mut Worker,
    shared: &Shared,
    flow: &mut Dataflow<R>,
    epochs: &mut Epochs<R>,
    plane: &mut Option<ControlPlane>,
    latencies: &mut Latencies,
    rss: &mut Option<RssSamples>,
    start: Instant,
) -> Result<(), Stopped> {
    let (config, index) = (shared.config, flow.index);
    let mut panic_at = config
        .panics
        .iter()
        .filter(|p| p.worker == index)
        .map(|p| p.at_secs)
        .reduce(f64::min);
    // In a cluster, timely's send and receive threads carry data and progress between the
    // processes; a worker spinning with nothing to do kept them off its core, and a 2-process
    // job's p50 was about twice what it is when the worker yields between turns (README,
    // *Moves between processes*). Within one process there is no one to yield to.
    let yields = worker.peers() > config.workers;
    loop {
        let now = start.elapsed();
        let now_s = now.as_secs_f64();
        if let Some(at) = panic_at.take_if(|at| *at <= now_s) {
            panic!("injected panic (--inject-panic {index}@{at})");
        }
        if index == 0 {
            flow.end
                .on_stop(shared.control, config.epoch, || epochs.reached(now));
        }
        if let Some(last) = flow.end.last(shared.control) {
            epochs.end_by(last);
        }
        let plan_running = plane.as_ref().is_some_and(ControlPlane::busy);
        let due = epochs.due(now, flow.output(), plan_running);
        if let Some(rss) = rss.as_mut() {
            rss.maybe_sample(now_s);
        }
        // Reports close the latency windows, so that worker 0 can tell each window's
        // imbalance.
        if let Some((meter, last)) = flow.meter.as_mut()
            && window_at(now) > window_at(*last)
        {
            flow.loads.send(meter.report(
                now.saturating_sub(*last),
                now,
                window_at(now) - 1,
                epochs.records_in(),
            ));
            *last = now;
        }
        if let Some(plane) = plane.as_mut() {
            // The user's commands and timed plans first: a balancer's plan decided in the
            // same turn would hold a user's plan due now behind it.
            plane.turn(shared.control, now_s, flow.output());
            plane.loads(flow.loads.take(), now_s);
        }
        let before = *flow.data.time();
        epochs.send(&mut flow.data, due);
        // Shared by the process's workers: touched only when this input moved, not every turn.
        if *flow.data.time() > before {
            shared.reached.fetch_max(*flow.data.time(), Ordering::AcqRel);
        }
        if index == 0 && epochs.input_ended() {
            flow.end
                .on_input_end(shared.control, config.epoch, || epochs.reached(now));
        }
        if let Some(why) = sink_failed(&flow.sink) {
            return Err(shared.fail(RunError::Output(why)));
        }
        // Every turn: a control input held back for a recorded command catches up.
        if let Some(plane) = plane.as_mut() {
            plane.advance(epochs.next_time());
        }
        if index == 0 {
            let now_ns = start.elapsed().as_nanos() as u64;
            latencies.record_done(&flow.probe, |e| epochs.time_of(e), now_ns, epochs.next());
            if let Some(plane) = plane.as_ref() {
                latencies.report_plans(plane.driver().finished(), config.epoch, None);
            }
            shared
                .control
                .set_progress(config.epoch.closes_at(latencies.measured()));
        }
        if let Some(sampler) = flow.sampler.as_mut() {
            let output = || {
                let outputs = match (&shared.generation.committed, index) {
                    (Some(committed), 0) => committed.outputs(),
                    _ => flow.digest.outputs(),
                };
                (flow.probe.with_frontier(|f| f.first().copied()), outputs)
            };
            sampler.maybe_sample(now, epochs.records_in(), epochs.next_time(), output);
        }
        // A recorded command due by the last epoch holds the control input: the next turn
        // takes it, or the run could never finish.
        let last_time = epochs.time_of(epochs.last());
        if epochs.all_sent() && !plane.as_ref().is_some_and(|p| p.holds_for(last_time)) {
            return Ok(());
        }
        let idle = epochs.idle(start.elapsed(), &flow.probe);
        if idle.is_zero() {
            shared.step(worker)?;
            if yields {
                std::thread::yield_now();
            }
        } else {
            shared.step_or_park(worker, idle)?;
        }
    }
}

/// Ends the run at its last epoch: the control plane's last failures and rejoins go out
/// (a failed worker waits for its failure to be issued before it lets go of what it held),
/// then the epochs up to the last complete and are measured. Outputs past the last epoch
/// count only for a job that drains (not `last_only`). Returns the plan driver on worker 0.
#[allow(clippy::too_many_arguments)]
fn finish<R: timely::ExchangeData + Clone>(
    worker: &mut Worker,
    shared: &Shared,
    flow: &mut Dataflow<R>,
    epochs: &Epochs<R>,
    mut plane: Option<ControlPlane>,
    latencies: &mut Latencies,
    start: Instant,
    last_only: bool,
) -> Result<Option<PlanDriver>, Stopped> {
    let now_s = || start.elapsed().as_secs_f64();
    if let Some(plane) = plane.as_mut() {
        while plane.flush(flow.output(), now_s()) {
            shared.step(worker)?;
        }
    }
    let last_time = epochs.time_of(epochs.last());
    while flow.probe.less_equal(&last_time) {
        shared.step(worker)?;
        if flow.index == 0 {
            let now_ns = start.elapsed().as_nanos() as u64;
            latencies.record_done(&flow.probe, |e| epochs.time_of(e), now_ns, epochs.last() + 1);
            if let Some(plane) = plane.as_ref() {
                latencies.report_plans(plane.driver().finished(), shared.config.epoch, None);
            }
        }
        if let Some(plane) = plane.as_mut() {
            // Steps already issued may still complete while the last epochs finish.
            plane.retire(flow.output(), now_s());
        }
    }
    if last_only {
        flow.digest.end_at(last_time);
    }
    Ok(plane.map(|p| {
        let mut driver = p.close();
        driver.retire(flow.output(), now_s());
        driver
    }))
}
