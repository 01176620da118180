//! One worker's run: its dataflows, the preload, the open-loop measured epochs, the end of
//! the run, and its report to worker 0.

use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use timely::dataflow::{InputHandleVec, ProbeHandle};
use timely::worker::Worker;

use super::collect::{Digest, Reports};
use super::end::RunEnd;
use super::plane::ControlPlane;
use super::{Idle, MAX_PACE_AHEAD, Pace, RunConfig, RunError};
use crate::Time;
use crate::abort::Abort;
use crate::config::ControlInst;
use crate::control::ControlHandle;
use crate::failure::Failures;
use crate::latency::{LatencyRecorder, first_record};
use crate::operator::StatefulConfig;
use crate::rss;
use crate::sampler::{self, Sampler};
use crate::summary::{Summary, WorkerReport, summarize};
use crate::workload::Job;

/// Keys preloaded per logical time.
const PRELOAD_PER_TIME: u64 = 1 << 18;
/// Preload times that may be unfinished at once.
const PRELOAD_IN_FLIGHT: u64 = 4;
/// How far ahead of a stop request the run ends.
const STOP_AHEAD: Duration = Duration::from_millis(50);
/// How long before its next epoch is due an idle open-loop worker stops waiting and spins,
/// so that waking late does not delay the epoch.
const PARK_MARGIN: Duration = Duration::from_micros(100);
/// The longest a worker of a [`Pace::Max`] run waits for news with nothing to do.
const MAX_PACE_PARK: Duration = Duration::from_millis(1);
/// How often worker 0 samples resident memory.
const RSS_SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// The run stopped early (its error is with the run's [`Abort`]).
pub(super) struct Stopped;

/// What every worker of a process shares.
pub(super) struct Shared<'a> {
    pub(super) config: &'a RunConfig,
    pub(super) control: &'a ControlHandle,
    /// One clock for all workers of this process: a worker that gets past the start a few
    /// milliseconds late then catches up on its overdue epochs instead of lagging for good.
    pub(super) start: &'a OnceLock<Instant>,
    pub(super) failures: &'a Arc<Failures>,
    pub(super) abort: &'a Abort,
}

impl Shared<'_> {
    /// Steps the worker once, unless the run must stop (it stopped elsewhere, or bins lost
    /// their last replica here).
    fn step(&self, worker: &mut Worker) -> Result<(), Stopped> {
        if let Some((bins, time)) = self.failures.lost() {
            self.abort.stop(RunError::BinsLost { bins, time });
        }
        if self.abort.is_stopped() {
            return Err(Stopped);
        }
        worker.step();
        Ok(())
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
        worker.step_or_park(Some(park));
        Ok(())
    }
}

/// The first index at or after `lo` that worker `index` of `peers` generates.
#[inline]
fn first_index(lo: u64, index: usize, peers: usize) -> u64 {
    let peers = peers as u64;
    lo + (index as u64 + peers - lo % peers) % peers
}

/// Preloads (every key once, or the events that open the NEXMark auctions):
/// `PRELOAD_PER_TIME` keys per logical time, with at most `PRELOAD_IN_FLIGHT` times
/// unfinished, so that the preload never piles up in memory. A stop during the preload ends it
/// early (the measured loop then ends the run). Returns the logical times it took and the
/// records this worker sent.
fn preload<J: Job>(
    worker: &mut Worker,
    shared: &Shared,
    job: &J,
    data: &mut InputHandleVec<Time, J::Rec>,
    mut plane: Option<&mut ControlPlane>,
    probe: &ProbeHandle<Time>,
) -> Result<(Time, u64), Stopped> {
    let (index, peers) = (worker.index(), worker.peers());
    let len = if shared.config.preload {
        job.preload_len()
    } else {
        0
    };
    let times = len.div_ceil(PRELOAD_PER_TIME);
    let mut source = job.preload_source(index, peers);
    let mut sent = 0;
    for t in 0..times {
        if shared.control.stop_requested() {
            break;
        }
        while probe.less_than(&t.saturating_sub(PRELOAD_IN_FLIGHT)) {
            shared.step(worker)?;
        }
        data.advance_to(t);
        if let Some(plane) = plane.as_deref_mut() {
            plane.advance(t);
        }
        let (lo, hi) = (t * PRELOAD_PER_TIME, ((t + 1) * PRELOAD_PER_TIME).min(len));
        let mut i = first_index(lo, index, peers);
        while i < hi {
            data.send(source(i, t));
            sent += 1;
            i += peers as u64;
        }
        shared.step(worker)?;
    }
    Ok((times, sent))
}

/// Runs one worker; returns the summary on worker 0.
pub(super) fn run_worker<J: Job>(
    worker: &mut Worker,
    shared: &Shared,
    job: &J,
) -> Result<Option<Summary>, Stopped> {
    let config = shared.config;
    let index = worker.index();
    let peers = worker.peers();
    let bins = config.bins;
    let mut source = job.source(index, peers);

    let mut data = InputHandleVec::<Time, J::Rec>::new();
    let mut control = InputHandleVec::<Time, ControlInst>::new();
    let probe = ProbeHandle::new();
    let digest = Digest::new();
    let mut end = RunEnd::new();
    let mut stateful = if config.replicas > 1 {
        StatefulConfig::replicated(bins, peers, config.workers)
    } else {
        StatefulConfig::uniform(bins, peers)
    };
    stateful.chunk_bytes = config.chunk_bytes;
    stateful.failures = Arc::clone(shared.failures);
    let transfers = Rc::clone(&stateful.transfers);
    let takeovers = Rc::clone(&stateful.takeovers);
    // Built before the dataflow: the operators learn from it whether to time themselves.
    let mut sampler = sampler::wanted().then(|| Sampler::new(worker, stateful.observers.clone()));
    let main_dataflow = worker.next_dataflow_index();
    {
        let digest = digest.clone();
        let probe = probe.clone();
        let native = config.native;
        let (data, control, end) = (&mut data, &mut control, &mut end);
        let stateful = stateful.clone();
        worker.dataflow::<Time, _, _>(move |scope| {
            end.build(scope);
            let input = data.to_stream(scope);
            let ctrl = control.to_stream(scope);
            let output = if native {
                job.native(input, &stateful)
            } else {
                job.megaflux(input, ctrl, &stateful)
            };
            digest.count(output, &probe);
        });
    }
    let reports = Reports::new(worker);

    // Only worker 0 issues control: the other workers close their control inputs, so that
    // the control frontier follows worker 0 alone.
    let mut plane = (index == 0).then(|| {
        ControlPlane::new(
            config,
            stateful.initial.clone(),
            peers,
            control,
            Arc::clone(shared.failures),
        )
    });

    let (preload_times, mut records_in) = preload(worker, shared, job, &mut data, plane.as_mut(), &probe)?;
    // Measured epoch `e` (1-based, closing `e` epoch lengths after the start) has logical
    // time `base + e`.
    let preloaded = records_in;
    if let Some(sampler) = sampler.as_mut() {
        sampler.begin(records_in);
    }
    let base = preload_times;
    let time_of = |epoch: u64| base + epoch;
    data.advance_to(time_of(1));
    if let Some(plane) = plane.as_mut() {
        plane.begin(base);
        plane.advance(time_of(1));
    }
    while probe.less_than(&time_of(1)) {
        shared.step(worker)?;
    }

    let start = *shared.start.get_or_init(Instant::now);
    tracing::info!(target: "megaflux::job", phase = "started", worker = index, peers, base);
    let len = config.epoch;
    let mut last_epoch = len.in_duration(config.duration);
    let mut latency = LatencyRecorder::new(config.rate, len);
    // The first epoch whose latency is not yet known, and the first not yet sent.
    let mut next_measured: u64 = 1;
    let mut next_epoch: u64 = 1;
    let rate = config.rate;
    let first_of = |epoch: u64| first_record(epoch, rate, len);
    let samples_rss = index.is_multiple_of(config.workers);
    let mut rss_samples: Vec<(f64, u64)> = Vec::new();
    let mut last_rss = start - RSS_SAMPLE_EVERY;
    let observed = sampler.is_some();
    let per_window = len.per_window();
    let frontier = || probe.with_frontier(|f| f.first().copied().unwrap_or(Time::MAX));
    let measure = |latency: &mut LatencyRecorder, next_measured: &mut u64, until: u64| {
        // One reading for every epoch found done: recording one must not add to the next.
        let now = start.elapsed().as_nanos() as u64;
        while *next_measured < until && !probe.less_equal(&time_of(*next_measured)) {
            latency.record(*next_measured, now, observed);
            if observed && next_measured.is_multiple_of(per_window) {
                latency.report_window(*next_measured / per_window - 1);
            }
            *next_measured += 1;
        }
    };

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let parks = config.pace == Pace::Max && config.workers > cores;
    let mut panic_at = config
        .panics
        .iter()
        .filter(|p| p.worker == index)
        .map(|p| p.at_secs)
        .reduce(f64::min);
    loop {
        let now = start.elapsed();
        let now_s = now.as_secs_f64();
        if let Some(at) = panic_at.take_if(|at| *at <= now_s) {
            panic!("injected panic (--inject-panic {index}@{at})");
        }
        // A stop ends the run `STOP_AHEAD` later, so that every worker (of every process)
        // learns the last epoch before it reaches it.
        if index == 0 && shared.control.stop_requested() {
            let reached = match config.pace {
                Pace::OpenLoop => len.in_duration(now),
                // Other workers may have sent up to `MAX_PACE_AHEAD` epochs past this one's
                // (the output cannot pass its input): the end is past all of them.
                Pace::Max => next_epoch - 1 + MAX_PACE_AHEAD,
            };
            shared.control.set_end(reached + len.in_duration(STOP_AHEAD));
            // Workers of other processes learn it from the dataflow.
            if let Some(epoch) = shared.control.end() {
                end.tell(epoch);
            }
        }
        if let Some(stop) = shared.control.end().into_iter().chain(end.heard()).min() {
            last_epoch = last_epoch.min(stop);
        }
        let due = match config.pace {
            Pace::OpenLoop => len.in_duration(now),
            // The epochs the output has passed, and a few more; while worker 0 runs a plan,
            // one more, so that its steps (each complete once the output passes it) take a
            // few epochs each rather than `MAX_PACE_AHEAD`.
            Pace::Max => {
                let ahead = if plane.as_ref().is_some_and(ControlPlane::busy) {
                    1
                } else {
                    MAX_PACE_AHEAD
                };
                frontier().saturating_sub(base + 1).saturating_add(ahead)
            }
        };
        let due = due.min(last_epoch);

        if samples_rss && last_rss.elapsed() >= RSS_SAMPLE_EVERY {
            last_rss = Instant::now();
            if let Some(r) = rss::current() {
                rss_samples.push((now_s, r));
            }
        }

        if let Some(plane) = plane.as_mut() {
            plane.turn(shared.control, now_s, frontier());
        }

        // Send every epoch whose scheduled interval has passed.
        if next_epoch <= due {
            while next_epoch <= due {
                data.advance_to(time_of(next_epoch));
                let (lo, hi) = (first_of(next_epoch), first_of(next_epoch + 1));
                let mut i = first_index(lo, index, peers);
                while i < hi {
                    data.send(source(i, time_of(next_epoch)));
                    records_in += 1;
                    i += peers as u64;
                }
                next_epoch += 1;
            }
            data.advance_to(time_of(next_epoch));
        }
        // Every turn: a control input held back for a recorded command catches up.
        if let Some(plane) = plane.as_mut() {
            plane.advance(time_of(next_epoch));
        }

        if index == 0 {
            measure(&mut latency, &mut next_measured, next_epoch);
            shared.control.set_progress(len.closes_at(next_measured - 1));
        }
        if let Some(sampler) = sampler.as_mut() {
            let output = || probe.with_frontier(|f| f.first().copied());
            sampler.maybe_sample(now, records_in, time_of(next_epoch), output);
        }
        // A recorded command due by the last epoch holds the control input: the next turn
        // takes it, or the run could never finish.
        if next_epoch > last_epoch && !plane.as_ref().is_some_and(|p| p.holds_for(time_of(last_epoch))) {
            break;
        }
        // A worker with nothing to do spins, or waits for news (timely wakes it when data or
        // progress arrives). Open loop with `--idle park`: once every epoch sent is out (waking up on
        // news costs tens of microseconds that an epoch in flight would pay), until a little
        // before the next epoch is due. As fast as it goes with more workers than cores: a
        // moment (the next epoch is due when the output moves, which is news).
        let idle = match config.pace {
            Pace::OpenLoop if config.idle == Idle::Spin || probe.less_than(&time_of(next_epoch)) => {
                Duration::ZERO
            }
            Pace::OpenLoop => len
                .closes_at(next_epoch)
                .saturating_sub(start.elapsed())
                .saturating_sub(PARK_MARGIN),
            Pace::Max if parks => MAX_PACE_PARK,
            Pace::Max => Duration::ZERO,
        };
        if idle.is_zero() {
            shared.step(worker)?;
        } else {
            shared.step_or_park(worker, idle)?;
        }
    }
    // Failures and rejoins taken in the last turns go out (perhaps past the last epoch): a
    // failed worker waits for its failure to be issued before it lets go of what it held.
    if let Some(plane) = plane.as_mut() {
        while plane.flush(frontier(), start.elapsed().as_secs_f64()) {
            shared.step(worker)?;
        }
    }
    // The run covers the logical times up to its last epoch: wait for those, then (in one
    // process) drop the dataflow rather than close its inputs. Closing them would release
    // all scheduled later work at once (Q4's auction closings, minutes ahead), which belongs
    // to no measured epoch and costs seconds and gigabytes to drain.
    while probe.less_equal(&time_of(last_epoch)) {
        shared.step(worker)?;
        if index == 0 {
            measure(&mut latency, &mut next_measured, last_epoch + 1);
        }
        if let Some(plane) = plane.as_mut() {
            // Steps already issued may still complete while the last epochs finish.
            plane.retire(frontier(), start.elapsed().as_secs_f64());
        }
    }
    digest.end_at(time_of(last_epoch));
    let driver = plane.map(|p| {
        let mut driver = p.close();
        driver.retire(frontier(), start.elapsed().as_secs_f64());
        driver
    });
    drop(data);
    if peers == config.workers {
        worker.drop_dataflow(main_dataflow);
    } else {
        // Across processes, one that drops its dataflow early would stall the others (their
        // data for it is never taken in), and processes may be given different lengths: so
        // a cluster closes its inputs and drains, later scheduled work included.
        while !probe.done() {
            shared.step(worker)?;
        }
    }
    tracing::info!(target: "megaflux::job", phase = "finished", worker = index, records = records_in);
    let end_s = start.elapsed().as_secs_f64();

    let (digest, outputs) = digest.get();
    let report = WorkerReport {
        digest,
        outputs,
        records_in,
        preloaded,
        transfers: transfers.borrow().iter().map(|(t, v)| (*t, *v)).collect(),
        rss_samples,
        rss_peak: if samples_rss { rss::peak() } else { None },
        takeovers: takeovers
            .borrow()
            .iter()
            .map(|(at, bin)| (at.saturating_duration_since(start).as_secs_f64(), *bin))
            .collect(),
    };
    let reports = reports.exchange(report, || shared.step(worker))?;

    let Some(driver) = driver else {
        return Ok(None);
    };
    // A stopped run covers fewer epochs than it was configured for.
    let ran = RunConfig {
        duration: len.closes_at(last_epoch),
        ..config.clone()
    };
    Ok(Some(summarize(
        &ran,
        peers,
        &reports,
        &latency,
        driver.records(),
        driver.failures(),
        end_s,
    )))
}
