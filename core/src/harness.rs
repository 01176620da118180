//! Runs a built-in workload open-loop on a timely cluster, with scheduled migrations, and
//! measures it: output digest, latency, migrations, memory.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use timely::dataflow::operators::{Exchange, Inspect, Probe};
use timely::dataflow::{InputHandleVec, ProbeHandle};

use crate::Time;
use crate::bins::{Bins, hash_key};
use crate::config::{ControlInst, uniform};
use crate::control::{Command, ControlHandle, PlanDriver};
use crate::error::ConfigError;
use crate::latency::{LatencyRecorder, WINDOW_MS};
use crate::nexmark::{NexmarkJob, NexmarkParams};
use crate::operator::{DEFAULT_CHUNK_BYTES, StatefulConfig};
use crate::plan::MigrationSpec;
use crate::rss;
use crate::sampler::{self, Sampler};
use crate::summary::{Summary, WorkerReport, summarize};
use crate::workload::{CountJob, Counting, Job, Workload};

/// Keys preloaded per logical time.
const PRELOAD_PER_TIME: u64 = 1 << 18;
/// Preload times that may be unfinished at once.
const PRELOAD_IN_FLIGHT: u64 = 4;
/// How far ahead of a stop request the run ends, in epochs (ms).
const STOP_AHEAD_MS: u64 = 50;
/// How often worker 0 samples resident memory.
const RSS_SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// Everything that defines a run. It serializes to the readable form trace headers carry
/// (the workload, migrations and bins as `megaflux run` spells them, the duration in seconds)
/// and reads back from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    #[serde(with = "text")]
    pub workload: Workload,
    /// Worker threads per process.
    pub workers: usize,
    #[serde(with = "bin_count")]
    pub bins: Bins,
    pub keys: u64,
    /// Records per second, over all workers.
    pub rate: u64,
    #[serde(rename = "duration_s", with = "seconds")]
    pub duration: Duration,
    pub seed: u64,
    /// Run the plain-timely twin instead (no migration).
    pub native: bool,
    /// Insert every key once before the measured run.
    pub preload: bool,
    #[serde(with = "texts")]
    pub migrations: Vec<MigrationSpec>,
    pub chunk_bytes: usize,
    /// Window sizes and auction counts of the NEXMark queries.
    pub nexmark: NexmarkParams,
    /// Timely's own arguments (`-n`, `-p`, `-h`).
    pub timely_args: Vec<String>,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            workload: Workload::KeyCount,
            workers: 2,
            bins: Bins::new(crate::bins::DEFAULT_BINS).unwrap_or_else(|_| unreachable!()),
            keys: 1_000_000,
            rate: 200_000,
            duration: Duration::from_secs(10),
            seed: 42,
            native: false,
            preload: true,
            migrations: Vec::new(),
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            nexmark: NexmarkParams::default(),
            timely_args: Vec::new(),
        }
    }
}

/// Serde forms of [`RunConfig`]'s fields that have a textual form of their own.
mod text {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<T: Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr<Err: Display>,
        D: Deserializer<'de>,
    {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}

mod texts {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<T: Display, S: Serializer>(values: &[T], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(values.iter().map(ToString::to_string))
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<Vec<T>, D::Error>
    where
        T: FromStr<Err: Display>,
        D: Deserializer<'de>,
    {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|v| v.parse().map_err(D::Error::custom))
            .collect()
    }
}

mod bin_count {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    use crate::Bins;

    pub fn serialize<S: Serializer>(bins: &Bins, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(bins.count() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bins, D::Error> {
        Bins::new(usize::deserialize(d)?).map_err(D::Error::custom)
    }
}

mod seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Duration::try_from_secs_f64(f64::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// Errors that stop a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("timely: {0}")]
    Timely(String),
    #[error("a worker failed: {0}")]
    Worker(String),
}

/// The first index at or after `lo` that worker `index` of `peers` generates.
#[inline]
fn first_index(lo: u64, index: usize, peers: usize) -> u64 {
    let peers = peers as u64;
    lo + (index as u64 + peers - lo % peers) % peers
}

/// Checks the configuration without starting anything.
pub fn validate(config: &RunConfig) -> Result<(), ConfigError> {
    if config.workers == 0 {
        return Err(ConfigError::Invalid("--workers must be at least 1".into()));
    }
    if config.keys == 0 {
        return Err(ConfigError::Invalid("--keys must be at least 1".into()));
    }
    if config.rate == 0 {
        return Err(ConfigError::Invalid("--rate must be at least 1".into()));
    }
    if config.chunk_bytes == 0 {
        return Err(ConfigError::Invalid(
            "the chunk size must be at least 1 byte".into(),
        ));
    }
    let nexmark = config.nexmark;
    if nexmark.window_ms == 0 || nexmark.slide_ms == 0 || !nexmark.window_ms.is_multiple_of(nexmark.slide_ms)
    {
        return Err(ConfigError::Invalid(format!(
            "--slide-ms {} must divide --window-ms {}",
            nexmark.slide_ms, nexmark.window_ms
        )));
    }
    if config.native && !config.migrations.is_empty() {
        return Err(ConfigError::Invalid(
            "--native runs cannot migrate: drop --migrate or --native".into(),
        ));
    }
    // Targets are checked against the whole job's worker count.
    let (_, processes) = timely_config(config)?;
    let peers = config.workers * processes;
    let map = uniform(config.bins.count(), peers);
    for m in &config.migrations {
        m.target
            .resolve(&map, peers)
            .map_err(|e| ConfigError::Migration {
                spec: m.to_string(),
                reason: e.to_string(),
            })?;
    }
    Ok(())
}

fn timely_args(config: &RunConfig) -> Vec<String> {
    let mut args = vec!["-w".to_string(), config.workers.to_string()];
    args.extend(config.timely_args.iter().cloned());
    args
}

/// Timely's configuration for the run, and the number of processes in the job.
fn timely_config(config: &RunConfig) -> Result<(timely::Config, usize), ConfigError> {
    let args = timely_args(config);
    let bad = |e: String| ConfigError::Invalid(format!("bad timely arguments {:?}: {e}", config.timely_args));
    // Only the communication parser reports left-over words; timely's own ignores them.
    let (communication, free) = timely::CommunicationConfig::from_args(args.iter().cloned()).map_err(bad)?;
    if !free.is_empty() {
        return Err(bad(format!("unexpected {free:?}")));
    }
    let processes = match communication {
        timely::CommunicationConfig::Cluster { addresses, .. } => addresses.len(),
        _ => 1,
    };
    Ok((
        timely::Config::from_args(args.into_iter()).map_err(bad)?,
        processes,
    ))
}

/// Runs the job. Returns the summary in the process that hosts worker 0, `None` elsewhere.
pub fn run(config: RunConfig, control: ControlHandle) -> Result<Option<Summary>, RunError> {
    validate(&config)?;
    let (timely, _) = timely_config(&config)?;
    let config = Arc::new(config);
    let result: Arc<Mutex<Option<Summary>>> = Arc::default();
    let slot = Arc::clone(&result);
    // One clock for all workers of this process: a worker that gets past the start a few
    // milliseconds late then catches up on its overdue epochs instead of lagging for good.
    let start: Arc<OnceLock<Instant>> = Arc::default();
    let guards = timely::execute(timely, move |worker| {
        let start = Arc::clone(&start);
        let summary = match config.workload {
            Workload::KeyCount => {
                let job = CountJob::new(Counting::Dense, config.keys, config.seed);
                run_worker(worker, &config, &job, &control, &start)
            }
            Workload::HashCount => {
                let job = CountJob::new(Counting::Hashed, config.keys, config.seed);
                run_worker(worker, &config, &job, &control, &start)
            }
            Workload::Nexmark(query) => {
                let job = NexmarkJob::new(query, config.rate, config.nexmark);
                run_worker(worker, &config, &job, &control, &start)
            }
        };
        if let Some(s) = summary
            && let Ok(mut slot) = slot.lock()
        {
            *slot = Some(s);
        }
    })
    .map_err(RunError::Timely)?;
    for r in guards.join() {
        r.map_err(RunError::Worker)?;
    }
    let summary = result.lock().map(|mut s| s.take()).unwrap_or(None);
    Ok(summary)
}

fn run_worker<J: Job>(
    worker: &mut timely::worker::Worker,
    config: &RunConfig,
    job: &J,
    control_handle: &ControlHandle,
    shared_start: &OnceLock<Instant>,
) -> Option<Summary> {
    let index = worker.index();
    let peers = worker.peers();
    let bins = config.bins;
    let mut source = job.source(index, peers);

    let mut data = InputHandleVec::<Time, J::Rec>::new();
    let mut control = InputHandleVec::<Time, ControlInst>::new();
    let probe = ProbeHandle::new();
    let digest = Rc::new(RefCell::new((0u64, 0u64)));
    let mut stateful = StatefulConfig::uniform(bins, peers);
    stateful.chunk_bytes = config.chunk_bytes;
    let transfers = Rc::clone(&stateful.transfers);
    // Built before the dataflow: the operators learn from it whether to time themselves.
    let mut sampler = sampler::wanted().then(|| Sampler::new(worker, stateful.observers.clone()));
    let main_dataflow = worker.next_dataflow_index();
    {
        let digest = Rc::clone(&digest);
        let probe = probe.clone();
        let native = config.native;
        let (data, control) = (&mut data, &mut control);
        worker.dataflow::<Time, _, _>(move |scope| {
            let input = data.to_stream(scope);
            let ctrl = control.to_stream(scope);
            let output = if native {
                job.native(input, &stateful)
            } else {
                job.megaflux(input, ctrl, &stateful)
            };
            // The digest sits before the probe: once the probe has passed a time, every output at
            // that time was counted.
            output
                .inspect_core(move |event| {
                    if let Ok((stamp, batch)) = event
                        && let Some(&time) = stamp.least()
                    {
                        let mut d = digest.borrow_mut();
                        for out in batch.iter() {
                            d.0 = d.0.wrapping_add(hash_key(&(time, out)));
                        }
                        d.1 += batch.len() as u64;
                    }
                })
                .probe_with(&probe);
        });
    }
    // Every worker's report travels to worker 0 over timely itself, so that it also works
    // across processes.
    let mut reports_in = InputHandleVec::<Time, WorkerReport>::new();
    let reports: Rc<RefCell<Vec<WorkerReport>>> = Rc::default();
    let reports_probe = ProbeHandle::new();
    {
        let reports = Rc::clone(&reports);
        let reports_probe = reports_probe.clone();
        let reports_in = &mut reports_in;
        worker.dataflow::<Time, _, _>(move |scope| {
            reports_in
                .to_stream(scope)
                .exchange(|_| 0)
                .inspect(move |r: &WorkerReport| reports.borrow_mut().push(r.clone()))
                .probe_with(&reports_probe);
        });
    }

    // Only worker 0 issues control: the other workers close their control inputs, so that
    // the control frontier follows worker 0 alone.
    let mut control = (index == 0).then_some(control);

    let mut records_in = 0u64;
    // Preload (every key once, or the first NEXMark events): `PRELOAD_PER_TIME` keys per logical time, with at most
    // `PRELOAD_IN_FLIGHT` times unfinished, so that the preload never piles up in memory.
    let preload_len = if config.preload { job.preload_len() } else { 0 };
    let preload_times = preload_len.div_ceil(PRELOAD_PER_TIME);
    let mut preload = job.preload_source(index, peers);
    for t in 0..preload_times {
        // A stop during the preload ends it early; the measured loop then ends the run.
        if control_handle.stop_requested() {
            break;
        }
        while probe.less_than(&t.saturating_sub(PRELOAD_IN_FLIGHT)) {
            worker.step();
        }
        data.advance_to(t);
        if let Some(control) = control.as_mut() {
            control.advance_to(t);
        }
        let (lo, hi) = (
            t * PRELOAD_PER_TIME,
            ((t + 1) * PRELOAD_PER_TIME).min(preload_len),
        );
        let mut i = first_index(lo, index, peers);
        while i < hi {
            data.send(preload(i, t));
            records_in += 1;
            i += peers as u64;
        }
        worker.step();
    }
    // Measured epoch `e` (1-based, closing `e` ms after the start) has logical time `base + e`.
    let preloaded = records_in;
    if let Some(sampler) = sampler.as_mut() {
        sampler.begin(records_in);
    }
    let base = preload_times;
    let time_of = |epoch: u64| base + epoch;
    data.advance_to(time_of(1));
    if let Some(control) = control.as_mut() {
        control.advance_to(time_of(1));
    }
    while probe.less_than(&time_of(1)) {
        worker.step();
    }

    let start = *shared_start.get_or_init(Instant::now);
    tracing::info!(target: "megaflux::job", phase = "started", worker = index, peers, base);
    let mut duration_ms = config.duration.as_millis() as u64;
    let mut driver = (index == 0).then(|| PlanDriver::new(uniform(bins.count(), peers), peers));
    let mut pending_migrations: Vec<MigrationSpec> = config.migrations.clone();
    pending_migrations.sort_by(|a, b| a.at_secs.total_cmp(&b.at_secs));
    let mut pending_migrations = std::collections::VecDeque::from(pending_migrations);
    let mut latency = LatencyRecorder::new();
    // The first epoch whose latency is not yet known, and the first not yet sent.
    let mut next_measured: u64 = 1;
    let mut next_epoch: u64 = 1;
    let rate = config.rate;
    let first_of = |epoch: u64| -> u64 { ((epoch - 1) as u128 * rate as u128).div_ceil(1000) as u64 };
    let samples_rss = index.is_multiple_of(config.workers);
    let mut rss_samples: Vec<(f64, u64)> = Vec::new();
    let mut last_rss = start - RSS_SAMPLE_EVERY;
    let observed = sampler.is_some();
    let measure = |latency: &mut LatencyRecorder, next_measured: &mut u64, until: u64| {
        while *next_measured < until && !probe.less_equal(&time_of(*next_measured)) {
            let close = Duration::from_millis(*next_measured);
            latency.record(
                *next_measured,
                start.elapsed().saturating_sub(close).as_nanos() as u64,
            );
            if observed && next_measured.is_multiple_of(WINDOW_MS) {
                latency.report_window(*next_measured / WINDOW_MS - 1);
            }
            *next_measured += 1;
        }
    };

    loop {
        let now = start.elapsed();
        let now_s = now.as_secs_f64();
        // A stop ends the run `STOP_AHEAD_MS` later, so that every worker of the process
        // learns the last epoch before it reaches it.
        if index == 0 && control_handle.stop_requested() {
            control_handle.set_end(now.as_millis() as u64 + STOP_AHEAD_MS);
        }
        if let Some(end) = control_handle.end() {
            duration_ms = duration_ms.min(end);
        }
        let now_ms = (now.as_millis() as u64).min(duration_ms);

        if samples_rss && last_rss.elapsed() >= RSS_SAMPLE_EVERY {
            last_rss = Instant::now();
            if let Some(r) = rss::current() {
                rss_samples.push((now_s, r));
            }
        }

        if let (Some(driver), Some(control)) = (driver.as_mut(), control.as_mut()) {
            for (id, command) in control_handle.drain() {
                let describe = format!("{command:?}");
                // The logical time the control input stands at: the command's steps go out
                // at this time or later.
                let time = *control.time();
                match driver.command(command, now_s) {
                    Ok(()) => {
                        tracing::info!(target: "megaflux::command", outcome = "applied", id, time, command = %describe)
                    }
                    Err(e) => {
                        tracing::warn!(target: "megaflux::command", outcome = "rejected", id, time, command = %describe, reason = %e)
                    }
                }
            }
            while !driver.busy() && pending_migrations.front().is_some_and(|m| m.at_secs <= now_s) {
                if let Some(m) = pending_migrations.pop_front()
                    && let Err(e) = driver.command(
                        Command::StartPlan {
                            schedule: m.schedule,
                            target: m.target.clone(),
                        },
                        now_s,
                    )
                {
                    tracing::warn!(target: "megaflux::command", outcome = "rejected", command = %m, reason = %e);
                }
            }
            let time = *control.time();
            let waits = driver.waits_for_steps();
            let insts = driver.poll(time, |t| !probe.less_equal(&t), now_s);
            let issued = !insts.is_empty();
            for inst in insts {
                control.send(inst);
            }
            // Seal a step at once: its old owners learn of it now rather than when the
            // epoch closes, and ship the bins while the epoch's records still arrive.
            // Pipelined plans issue one step per epoch instead.
            if issued && waits {
                control.advance_to(time + 1);
            }
        }

        // Send every epoch whose scheduled interval has passed.
        if next_epoch <= now_ms {
            while next_epoch <= now_ms {
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
            if let Some(control) = control.as_mut() {
                let next = time_of(next_epoch).max(*control.time());
                control.advance_to(next);
            }
        }

        if index == 0 {
            measure(&mut latency, &mut next_measured, next_epoch);
        }
        if let Some(sampler) = sampler.as_mut() {
            let output = || probe.with_frontier(|f| f.first().copied());
            sampler.maybe_sample(now, records_in, time_of(next_epoch), output);
        }
        if next_epoch > duration_ms {
            break;
        }
        worker.step();
    }
    // The run covers the logical times up to its last epoch: wait for those, then (in one
    // process) drop the dataflow rather than close its inputs. Closing them would release all scheduled later
    // work at once (Q4's auction closings, minutes ahead), which belongs to no measured epoch
    // and costs seconds and gigabytes to drain.
    while probe.less_equal(&time_of(duration_ms)) {
        worker.step();
        if index == 0 {
            measure(&mut latency, &mut next_measured, duration_ms + 1);
        }
        if let Some(driver) = driver.as_mut() {
            // Steps already issued may still complete while the last epochs finish.
            driver.retire(|t| !probe.less_equal(&t), start.elapsed().as_secs_f64());
        }
    }
    if let Some(driver) = driver.as_mut() {
        driver.retire(|t| !probe.less_equal(&t), start.elapsed().as_secs_f64());
    }
    drop(data);
    drop(control);
    if peers == config.workers {
        worker.drop_dataflow(main_dataflow);
    } else {
        // Across processes, one that drops its dataflow early would stall the others (their
        // data for it is never taken in), and processes may be given different lengths: so
        // a cluster closes its inputs and drains, later scheduled work included.
        while !probe.done() {
            worker.step();
        }
    }
    tracing::info!(target: "megaflux::job", phase = "finished", worker = index, records = records_in);
    let end_s = start.elapsed().as_secs_f64();
    let records = driver.as_ref().map(PlanDriver::records);

    let (digest, outputs) = *digest.borrow();
    let report = WorkerReport {
        digest,
        outputs,
        records_in,
        preloaded,
        transfers: transfers.borrow().iter().map(|(t, v)| (*t, *v)).collect(),
        rss_samples,
        rss_peak: if samples_rss { rss::peak() } else { None },
    };
    reports_in.send(report);
    drop(reports_in);
    while !reports_probe.done() {
        worker.step();
    }

    let records = records?;
    let reports = reports.borrow();
    // A stopped run covers fewer epochs than it was configured for.
    let ran = RunConfig {
        duration: Duration::from_millis(duration_ms),
        ..config.clone()
    };
    Some(summarize(&ran, peers, &reports, &latency, records, end_s))
}
