//! The merged view of a job, built from its events alone: where every bin lives and how big
//! it is, each worker's load, each operator's frontiers, the latency timeline, migrations in
//! flight and finished, and the command log. The collector keeps one and sends it whole to
//! each new subscriber, which then applies the events that follow.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use megaflux::epoch::EpochLen;
use serde::{Deserialize, Serialize};

use crate::event::{BalancePhase, Event, Phase, Stamped};

mod bounds;
mod plans;
mod totals;
mod views;

pub use bounds::{
    COMMAND_LOG, DROP_PLACES, HISTORY, LATENCY_WINDOWS, MAX_AT_S, MAX_OPERATORS, MAX_PEERS, TEXT_CHARS,
};
use bounds::{bounded_push, is_queue_place, text};
pub use plans::{BalanceView, During, PlanView, Suggestion};
pub use totals::{
    Buckets, LATENCY_BUCKETS_S, PLAN_BUCKETS_S, PLAN_KINDS, PlanCount, TAKEOVER_BUCKETS_S, Totals,
    WorkerTotals, saturating_sum,
};
pub use views::{
    BinLoadView, BinView, CommandView, DrainView, FailureView, FrontierView, Held, Holders, LatencyWindow,
    Move, PartitionView, RestartView, StandbyIndex, WorkerView,
};

/// Finished plans a latency window is merged into besides the running one, the latest
/// first: a window arrives a little after its epochs, so only the plans that finished just
/// before it can be waiting for it (and a window costs the same however many plans the
/// history holds).
const MERGED_PLANS: usize = 8;

/// The most partitions of a Kafka input the model keeps (ids from the network).
pub const MAX_PARTITIONS: u32 = 4096;

/// The most bins a job can have.
pub const MAX_BINS: u32 = megaflux::bins::MAX_BINS as u32;

/// Everything known about a job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobModel {
    /// The hello of each process.
    pub processes: BTreeMap<u32, Stamped>,
    /// Workers in the whole job, as its first hello (or, without one, its `job_started`
    /// events) said; 0 until then, at most [`MAX_PEERS`].
    pub peers: u32,
    /// Per operator, per bin.
    pub operators: BTreeMap<String, Vec<BinView>>,
    /// Each worker's latest load, by its index in the whole job.
    pub workers: BTreeMap<u32, WorkerView>,
    /// Per worker, per operator (`output` is the job's output frontier).
    pub frontiers: BTreeMap<u32, BTreeMap<String, FrontierView>>,
    /// Latency windows in arrival order (at most [`LATENCY_WINDOWS`], oldest dropped
    /// first); keyframes leave them out.
    pub latency: Vec<LatencyWindow>,
    /// Bins whose latest move has not completed, by bin.
    pub moving: BTreeMap<u32, Move>,
    /// The running plan, if any.
    pub plan: Option<PlanView>,
    /// Completed plans, oldest first (at most [`HISTORY`]).
    pub finished_plans: Vec<PlanView>,
    /// The job's `command` events (received, applied, rejected), oldest first (at most
    /// [`COMMAND_LOG`]).
    pub commands: VecDeque<CommandView>,
    /// Events dropped, per place.
    pub dropped: BTreeMap<String, u64>,
    /// Whether the collector writes a trace (`None`: it records nothing).
    pub recording: Option<bool>,
    /// Why the recording stopped, if a write to the trace failed.
    #[serde(default)]
    pub recording_failed: Option<String>,
    /// Every bin's replicas, once the control plane said (jobs with replicas).
    #[serde(default)]
    pub placement: Vec<Holders>,
    /// Workers that failed and have not rejoined.
    #[serde(default)]
    pub failed: BTreeSet<u32>,
    /// Worker failures and what followed, oldest first (at most [`HISTORY`]).
    #[serde(default)]
    pub failures: Vec<FailureView>,
    /// Bins that lost their last replica (the job stopped), and when.
    #[serde(default)]
    pub lost: Option<(u64, String)>,
    /// Restarts after processes went away, oldest first (at most [`HISTORY`]).
    #[serde(default)]
    pub restarts: Vec<RestartView>,
    /// Whether the job keeps two replicas per bin (its placement named a standby).
    #[serde(default)]
    pub replicated: bool,
    /// The drain, once the input ended and the run drains (the latest word of it).
    #[serde(default)]
    pub draining: Option<DrainView>,
    /// How far each partition of a Kafka input is read, by partition (at most
    /// [`MAX_PARTITIONS`]).
    #[serde(default)]
    pub partitions: BTreeMap<u32, PartitionView>,
    /// What the balancer last said.
    #[serde(default)]
    pub balance: BalanceView,
    /// What the job did since it started, added up.
    #[serde(default)]
    pub totals: Totals,
    /// Events applied.
    pub events: u64,
    /// The latest event's time.
    pub now_s: f64,
    /// The logical time of the measured run's first epoch, once worker 0 said.
    #[serde(default)]
    pub base: Option<u64>,
    /// Which bins each worker is the standby of in some operator's views: what a failure
    /// clears, found without reading every bin. Not part of the model (never serialized,
    /// equal whatever it holds); rebuilt from the views when missing.
    #[serde(skip)]
    #[doc(hidden)]
    pub standbys: StandbyIndex,
}

impl JobModel {
    /// A model of nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes what each bin of `operator` cost `worker` over an interval of `interval_ns`
    /// ending at `at_s` (`bin:records:busy_ns` triples, `:s` for a standby's, which is the
    /// primary's work again and is not kept). Malformed triples are skipped.
    fn bin_loads(&mut self, (worker, operator): (u32, &str), interval_ns: u64, loads: &str, at_s: f64) {
        if !self.known_worker(worker) {
            return;
        }
        let secs = (interval_ns as f64 / 1e9).max(1e-9);
        for triple in loads.split_whitespace().filter(|t| !t.ends_with(":s")) {
            let mut parts = triple.split(':').map(str::parse::<u64>);
            if let (Some(Ok(bin)), Some(Ok(records)), Some(Ok(busy_ns)), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
                && let Ok(bin) = u32::try_from(bin)
                && let Some(view) = self.bin_mut(operator, bin)
            {
                view.load = Some(BinLoadView {
                    records_per_s: records as f64 / secs,
                    busy: (busy_ns as f64 / interval_ns.max(1) as f64).min(1.0),
                    at_s,
                });
            }
        }
    }

    /// How far the busiest live worker is above the mean: max / mean of the records their
    /// operators applied per second (a standby's work included: it is the worker's load),
    /// once two or more reported.
    pub fn imbalance(&self) -> Option<f64> {
        let loads: Vec<f64> = self
            .workers
            .iter()
            .filter(|(w, _)| !self.failed.contains(w))
            .filter_map(|(_, v)| v.applied_per_s)
            .collect();
        let mean = loads.iter().sum::<f64>() / loads.len().max(1) as f64;
        let max = loads.iter().copied().fold(0.0, f64::max);
        (loads.len() >= 2 && mean > 0.0).then(|| max / mean)
    }

    /// A model of the job a trace's header describes, before its first event: every bin
    /// where the header's initial placement puts it (so that the views know every bin's
    /// owner from the start, whatever events come).
    pub fn from_header(header: &crate::record::TraceHeader) -> Self {
        let mut model = JobModel::new();
        let limit = header.bins.min(MAX_BINS) as usize;
        model.placement = if header.initial_placement.is_empty() {
            header
                .initial_map
                .iter()
                .take(limit)
                .map(|w| Holders {
                    primary: Some(*w),
                    standby: None,
                })
                .collect()
        } else {
            parse_holders(header.initial_placement.iter().map(String::as_str), limit)
        };
        model.replicated = model.placement.iter().any(|h| h.standby.is_some());
        model
    }

    /// Every bin's holders before any command, as the runner places them for a job of the
    /// shape `hello` describes: primaries uniform over the workers, standbys chained to the
    /// next process (or worker).
    fn initial_placement(peers: u32, workers: u32, bins: u32, replicas: u64) -> Vec<Holders> {
        let peers = peers.clamp(1, MAX_PEERS) as usize;
        let map = megaflux::config::uniform(bins.min(MAX_BINS) as usize, peers);
        let placement = if replicas > 1 && peers > 1 {
            megaflux::config::replicated(&map, peers, (workers as usize).clamp(1, peers))
        } else {
            megaflux::config::single(&map)
        };
        let held = |w: u32| (w != megaflux::config::NONE).then_some(w);
        placement
            .iter()
            .map(|r| Holders {
                primary: held(r.primary),
                standby: held(r.standby),
            })
            .collect()
    }

    /// The job's epoch, the unit of its logical times (as its hello's configuration names
    /// it; 1 ms before any hello).
    pub fn epoch(&self) -> EpochLen {
        self.processes
            .values()
            .find_map(|h| match &h.event {
                Event::Hello { config, .. } => Some(EpochLen::of_config(config)),
                _ => None,
            })
            .unwrap_or(EpochLen::MS)
    }

    /// Where the job reads and writes, as process 0's hello names them: its `--input` and
    /// its `--output` (each `None` when not given, or before that hello).
    pub fn connectors(&self) -> (Option<String>, Option<String>) {
        let Some(Event::Hello { config, .. }) = self.processes.get(&0).map(|h| &h.event) else {
            return (None, None);
        };
        let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
        (text(&config["input"]["from"]), text(&config["output"]))
    }

    /// Processes in the job, as its first hello said (`None` before any hello).
    fn first_hello_processes(&self) -> Option<u32> {
        self.processes.values().find_map(|h| match h.event {
            Event::Hello { processes, .. } => Some(processes),
            _ => None,
        })
    }

    /// Bins per operator, once a process said hello (a hello naming more than a job can
    /// have counts as the most a job can have).
    pub fn bins(&self) -> Option<u32> {
        self.processes.values().find_map(|h| match &h.event {
            Event::Hello { bins, .. } => Some((*bins).min(MAX_BINS)),
            _ => None,
        })
    }

    /// The view of `bin` of `operator`, or `None` for a bin the job cannot have (events come
    /// from the network and from files: a bad one must not make the model allocate or panic).
    fn bin_mut(&mut self, operator: &str, bin: u32) -> Option<&mut BinView> {
        let limit = self.bins().unwrap_or(MAX_BINS);
        if bin >= limit {
            return None;
        }
        if !self.operators.contains_key(operator) && self.operators.len() >= MAX_OPERATORS {
            return None;
        }
        let bins = self.operators.entry(operator.to_string()).or_default();
        let count = (limit as usize).min(bins.len().max(bin as usize + 1));
        if bins.len() < count {
            bins.resize(count, BinView::default());
        }
        bins.get_mut(bin as usize)
    }

    /// The holders of `bin`, or `None` for a bin the job cannot have.
    fn holders_mut(&mut self, bin: u32) -> Option<&mut Holders> {
        let limit = self.bins().unwrap_or(MAX_BINS);
        if bin >= limit {
            return None;
        }
        if self.placement.len() <= bin as usize {
            self.placement.resize(bin as usize + 1, Holders::default());
        }
        self.placement.get_mut(bin as usize)
    }

    /// This model as a keyframe carries it: without the latency history or the bins' loads.
    pub fn keyframe(&self) -> JobModel {
        let mut frame = JobModel {
            latency: Vec::new(),
            ..self.clone()
        };
        // Bins' loads are not part of a snapshot (see `BinView::load`).
        for bins in frame.operators.values_mut() {
            for bin in bins {
                bin.load = None;
            }
        }
        frame
    }

    /// Total dropped events over every place (saturating: the counts come from the network).
    pub fn dropped_total(&self) -> u64 {
        self.dropped.values().fold(0u64, |sum, n| sum.saturating_add(*n))
    }

    /// The index of standbys, built from the bins' views if this model has none yet (one
    /// read back from a keyframe or a snapshot): once per such model, then kept up to date.
    fn standby_index(&mut self) -> &mut BTreeMap<u32, BTreeSet<u32>> {
        let operators = &self.operators;
        self.standbys.0.get_or_insert_with(|| {
            let mut index: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
            for bins in operators.values() {
                for (bin, view) in bins.iter().enumerate() {
                    if let Some(worker) = view.standby {
                        index.entry(worker).or_default().insert(bin as u32);
                    }
                }
            }
            index
        })
    }

    /// Keeps the standby index as one operator's view of `bin` changed its standby from
    /// `old` to `new` (the view already says `new`).
    fn standby_changed(&mut self, bin: u32, old: Option<u32>, new: Option<u32>) {
        if old == new {
            return;
        }
        if self.standbys.0.is_none() {
            // Built from the views, which already say `new`.
            self.standby_index();
            return;
        }
        // `old` may still be the standby of the bin in another operator.
        let still_old = old.is_some_and(|o| {
            self.operators
                .values()
                .any(|bins| bins.get(bin as usize).is_some_and(|v| v.standby == Some(o)))
        });
        let index = self.standby_index();
        if let Some(o) = old
            && !still_old
        {
            let emptied = index.get_mut(&o).is_some_and(|bins| {
                bins.remove(&bin);
                bins.is_empty()
            });
            if emptied {
                index.remove(&o);
            }
        }
        if let Some(n) = new {
            index.entry(n).or_default().insert(bin);
        }
    }

    /// `at_s` on `process`'s probe clock as a time on the wall clock all processes share (its
    /// hello's anchor added), or as it is when the process gave none.
    fn wall_s(&self, process: u32, at_s: f64) -> f64 {
        match self.processes.get(&process).map(|h| &h.event) {
            Some(Event::Hello {
                anchor_unix_s: Some(anchor),
                ..
            }) => anchor + at_s,
            _ => at_s,
        }
    }

    /// Applies one event. Every number in it is untrusted (events come from the network
    /// and from files): no value makes the model panic, overflow, or do more work than the
    /// event's own size or the job's bins.
    pub fn apply(&mut self, stamped: &Stamped) {
        self.events = self.events.saturating_add(1);
        // An event stamped at no sane time happens at the model's clock, which it leaves.
        let at_s = Self::valid_at(stamped.at_s).unwrap_or(self.now_s);
        self.now_s = self.now_s.max(at_s);
        let wall_s = self.wall_s(stamped.process, at_s);
        let peers = if self.peers > 0 { self.peers } else { MAX_PEERS };
        self.totals.apply(&stamped.event, wall_s, peers);
        match &stamped.event {
            Event::Hello {
                peers,
                workers,
                bins,
                config,
                ..
            } => {
                // The first hello says what the job is; later ones are its other processes.
                let processes = self.first_hello_processes();
                // A process says hello once: a second one would change the job's shape.
                if stamped.process >= processes.unwrap_or(MAX_PEERS).min(MAX_PEERS)
                    || self.processes.contains_key(&stamped.process)
                {
                    return;
                }
                let replicas = config["replicas"].as_u64().unwrap_or(1);
                if processes.is_none() {
                    self.peers = (*peers).min(MAX_PEERS);
                    // Until the control plane says where bins are, they are where the runner
                    // starts them.
                    if self.placement.is_empty() {
                        self.placement = Self::initial_placement(*peers, *workers, *bins, replicas);
                    }
                }
                self.replicated |= replicas > 1;
                // At the time the model took, and with an anchor that is a time (a NaN would
                // not read back from a snapshot).
                let mut hello = Stamped {
                    at_s,
                    ..stamped.clone()
                };
                if let Event::Hello { anchor_unix_s, .. } = &mut hello.event {
                    *anchor_unix_s = Self::valid_anchor(*anchor_unix_s);
                }
                self.processes.insert(stamped.process, hello);
            }
            Event::JobStarted {
                worker, peers, base, ..
            } => {
                if *worker == 0 {
                    self.base = Some(*base);
                }
                if self.processes.is_empty() {
                    self.peers = self.peers.max((*peers).min(MAX_PEERS));
                }
                if self.known_worker(*worker) {
                    self.workers.entry(*worker).or_default().process = stamped.process;
                }
            }
            Event::JobFinished { worker, .. } => {
                if self.known_worker(*worker) {
                    self.workers.entry(*worker).or_default().finished = true;
                }
                // Worker 0 finishes once the drain has ended.
                if *worker == 0 {
                    self.draining = None;
                }
            }
            Event::BinSize {
                worker,
                operator,
                bin,
                keys,
                bytes,
                standby,
            } => {
                let Some(view) = self.bin_mut(operator, *bin) else {
                    return;
                };
                if *standby {
                    let old = view.standby.replace(*worker);
                    self.standby_changed(*bin, old, Some(*worker));
                } else {
                    view.owner = Some(*worker);
                    view.keys = *keys;
                    view.bytes = *bytes;
                }
            }
            Event::Sampled {
                worker,
                operator,
                bins,
                keys,
                bytes,
                ..
            } => {
                // A failed worker's samples describe what it no longer serves.
                if !self.known_worker(*worker) || self.failed.contains(worker) {
                    return;
                }
                let w = self.workers.entry(*worker).or_default();
                if w.held.contains_key(operator) || w.held.len() < MAX_OPERATORS {
                    let held = Held {
                        bins: *bins,
                        keys: *keys,
                        bytes: *bytes,
                    };
                    w.held.insert(text(operator), held);
                }
            }
            Event::Frontier {
                worker,
                operator,
                applied,
                control,
                input,
            } => {
                if !self.known_worker(*worker) {
                    return;
                }
                let operators = self.frontiers.entry(*worker).or_default();
                // `output` and the operators.
                if !operators.contains_key(operator) && operators.len() > MAX_OPERATORS {
                    return;
                }
                operators.insert(
                    operator.clone(),
                    FrontierView {
                        applied: *applied,
                        control: *control,
                        input: *input,
                    },
                );
            }
            Event::WorkerStats {
                worker,
                records,
                applied,
                busy_ns,
                interval_ns,
                ..
            } => {
                if !self.known_worker(*worker) {
                    return;
                }
                let w = self.workers.entry(*worker).or_default();
                w.process = stamped.process;
                let secs = (*interval_ns as f64 / 1e9).max(1e-9);
                w.records_per_s = *records as f64 / secs;
                w.applied_per_s = applied
                    .filter(|_| !self.failed.contains(worker))
                    .map(|a| a as f64 / secs);
                w.busy = (*busy_ns as f64 / *interval_ns.max(&1) as f64).min(1.0);
            }
            Event::BinLoads {
                worker,
                operator,
                interval_ns,
                loads,
                ..
            } => self.bin_loads((*worker, operator), *interval_ns, loads, at_s),
            Event::Balance {
                phase,
                run_s,
                imbalance,
                predicted,
                bins,
                bytes,
                serving,
                needed,
                strategy,
                ..
            } => match phase {
                BalancePhase::Measured => self.balance.measured = imbalance.filter(|i| i.is_finite()),
                BalancePhase::Suggested | BalancePhase::Refreshed => {
                    self.balance.suggestion = Some(Suggestion {
                        run_s: Self::valid_at(*run_s).unwrap_or(0.0),
                        imbalance: imbalance.filter(|i| i.is_finite()).unwrap_or(0.0),
                        predicted: predicted.filter(|i| i.is_finite()).unwrap_or(0.0),
                        bins: bins.unwrap_or(0),
                        bytes: bytes.unwrap_or(0),
                        strategy: text(strategy.as_deref().unwrap_or("fluid")),
                        workers: serving.zip(*needed).map(|(a, b)| [a, b]),
                    })
                }
                BalancePhase::Issued | BalancePhase::Withdrawn | BalancePhase::Refused => {
                    self.balance.suggestion = None
                }
                BalancePhase::Achieved => {}
            },
            Event::Latency {
                window, histogram, ..
            } => {
                // A window with no start time has no place on the timeline (`of` leaves it
                // out); its histogram still counts for the plans.
                if let Some(w) = LatencyWindow::of(stamped) {
                    let w = LatencyWindow { at_s, ..w };
                    if self.latency.len() >= LATENCY_WINDOWS {
                        let excess = self.latency.len() - LATENCY_WINDOWS;
                        self.latency.drain(..excess + LATENCY_WINDOWS / 8);
                    }
                    self.latency.push(w);
                }
                let epoch = self.epoch();
                let recent = self.finished_plans.iter_mut().rev().take(MERGED_PLANS);
                for plan in self.plan.iter_mut().chain(recent) {
                    plan.merge_window(*window, histogram, epoch);
                }
            }
            Event::PlanLatency { id, p50, p99, max } => {
                let mut plans = self.plan.iter_mut().chain(self.finished_plans.iter_mut().rev());
                if let Some(plan) = plans.find(|p| p.id == Some(*id)) {
                    plan.exact(*p50, *p99, *max);
                }
            }
            Event::Migration {
                phase,
                bin,
                time,
                from,
                to,
                bytes,
                worker,
                operator,
                step,
                primary,
                standby,
                ..
            } => {
                if let (Phase::Issued, Some(step), Some(plan)) = (phase, step, self.plan.as_mut()) {
                    plan.steps_issued = plan.steps_issued.max(step.saturating_add(1));
                }
                if let (Phase::Issued, Some(primary), Some(standby)) = (phase, primary, standby)
                    && let Some(holders) = self.holders_mut(*bin)
                {
                    *holders = Holders {
                        primary: Some(*primary),
                        standby: u32::try_from(*standby).ok(),
                    };
                    self.replicated |= *standby >= 0;
                }
                self.apply_move(
                    *phase,
                    *bin,
                    *time,
                    *from,
                    *to,
                    *bytes,
                    *worker,
                    operator.as_deref(),
                )
            }
            Event::PlanStarted {
                strategy,
                target,
                steps,
                bins,
                id,
                run_s,
                time,
                ..
            } => {
                // Traces written before plans said their run time: the logical time the
                // control input stood at, on the run's clock.
                let epoch = self.epoch();
                let from_time = time
                    .zip(self.base)
                    .map(|(t, base)| t.saturating_sub(base) as f64 * epoch.us() as f64 / 1e6);
                let run_s = run_s.and_then(Self::valid_at);
                // Whatever the balancer proposed is moot once a plan runs.
                self.balance.suggestion = None;
                self.plan = Some(PlanView {
                    strategy: text(strategy),
                    target: text(target),
                    steps: *steps,
                    bins: *bins,
                    steps_issued: 0,
                    bins_completed: 0,
                    bytes_moved: 0,
                    started_s: at_s,
                    seconds: None,
                    id: *id,
                    issued_run_s: run_s.or(from_time),
                    completed_run_s: None,
                    during: None,
                    merged: None,
                })
            }
            Event::PlanCompleted { seconds, run_s, .. } => {
                if let Some(mut plan) = self.plan.take() {
                    let seconds = Self::valid_at(*seconds);
                    plan.seconds = seconds;
                    // `seconds` is the completion's run time less the issue's.
                    plan.completed_run_s = run_s.and_then(Self::valid_at).or(plan
                        .issued_run_s
                        .zip(seconds)
                        .and_then(|(i, s)| Self::valid_at(i + s)));
                    bounded_push(&mut self.finished_plans, plan);
                }
            }
            Event::Command {
                outcome,
                command,
                reason,
                ..
            } => {
                if self.commands.len() == COMMAND_LOG {
                    self.commands.pop_front();
                }
                self.commands.push_back(CommandView {
                    at_s,
                    outcome: *outcome,
                    command: text(command),
                    reason: reason.as_deref().map(text),
                });
            }
            Event::Placement { holders, .. } => {
                let limit = self.bins().unwrap_or(MAX_BINS) as usize;
                self.placement = parse_holders(holders.split_whitespace(), limit);
                self.replicated |= self.placement.iter().any(|h| h.standby.is_some());
            }
            Event::Failure {
                worker,
                time,
                promoted,
                degraded,
                lost,
                ..
            } => {
                if !self.known_worker(*worker) {
                    return;
                }
                self.failed.insert(*worker);
                // Its replicas are gone; the bin sizes it reported with them. The index says
                // which bins it was the standby of: a failure costs what the worker held
                // (each entry put there by an event of its own), not every bin of every
                // operator.
                let held = self.standby_index().remove(worker).unwrap_or_default();
                for bin in held {
                    for bins in self.operators.values_mut() {
                        if let Some(b) = bins.get_mut(bin as usize)
                            && b.standby == Some(*worker)
                        {
                            b.standby = None;
                        }
                    }
                }
                // It holds nothing from now on, whatever it last sampled.
                if let Some(w) = self.workers.get_mut(worker) {
                    w.held.clear();
                    w.applied_per_s = None;
                }
                bounded_push(
                    &mut self.failures,
                    FailureView {
                        worker: *worker,
                        at_s,
                        time: *time,
                        promoted: promoted.unwrap_or(0),
                        degraded: degraded.unwrap_or(0),
                        takeovers: 0,
                        rejoined_s: None,
                        recovered: None,
                        lost: lost.as_deref().map(text),
                    },
                );
            }
            Event::Takeover { .. } => {
                if let Some(f) = self.failures.last_mut() {
                    f.takeovers = f.takeovers.saturating_add(1);
                }
            }
            Event::Rejoin { worker, .. } => {
                self.failed.remove(worker);
                if let Some(f) = self.failures.iter_mut().rev().find(|f| f.worker == *worker) {
                    f.rejoined_s = Some(at_s);
                }
            }
            Event::Recovery { worker, bins } => {
                if let Some(f) = self
                    .failures
                    .iter_mut()
                    .rev()
                    .find(|f| f.worker == *worker && f.recovered.is_none())
                {
                    f.recovered = Some(bins.len() as u64);
                }
            }
            Event::Restart {
                generation,
                from,
                lost,
                survivors,
                joined,
            } => {
                // The survivors' workers are numbered afresh: the failures simulated before,
                // the loads and the frontiers name workers of the computation that ended.
                // (`peers` stays the job's, as its hello said: the bound of every index.)
                self.failed.clear();
                self.workers.clear();
                self.frontiers.clear();
                let restart = RestartView {
                    at_s,
                    generation: *generation,
                    from: *from,
                    lost: text(lost),
                    survivors: text(survivors),
                    joined: text(joined),
                };
                bounded_push(&mut self.restarts, restart);
            }
            Event::Lost { time, bins } => self.lost = Some((*time, text(bins))),
            // The log says it (the dashboard's); the partition's progress stays where it was.
            Event::InputRetry { .. } | Event::OutputCommitted { .. } => {}
            Event::InputPartition {
                partition,
                offset,
                end,
            } => {
                if *partition < MAX_PARTITIONS || self.partitions.contains_key(partition) {
                    self.partitions.insert(
                        *partition,
                        PartitionView {
                            offset: *offset,
                            end: *end,
                        },
                    );
                }
            }
            Event::Draining {
                input_end,
                gate,
                bins,
                next,
                for_ms,
            } => {
                self.draining = Some(DrainView {
                    input_end: *input_end,
                    gate: *gate,
                    bins: *bins,
                    next: *next,
                    for_ms: *for_ms,
                });
            }
            Event::Recording { on, failed } => {
                self.recording = Some(*on);
                if let Some(failed) = failed {
                    self.recording_failed = Some(text(failed));
                }
            }
            // The run's numbers are the trace's to keep, not the live model's.
            Event::Summary { .. } => {}
            // The whole job at that point; the latency history is the one gathered so far.
            Event::Keyframe { model } => {
                // A keyframe that does not read back as a model, or not as one of this job
                // within its bounds, is ignored: the events around it still tell the story.
                if let Ok(model) = serde_json::from_value::<JobModel>(model.clone())
                    && model.within_bounds()
                    && (self.processes.is_empty()
                        || (model.peers == self.peers && model.bins() == self.bins()))
                {
                    let latency = std::mem::take(&mut self.latency);
                    let events = self.events;
                    *self = model;
                    self.latency = latency;
                    self.events = events;
                }
            }
            Event::BinSizes { .. } => {
                for e in crate::event::expand(vec![stamped.clone()]) {
                    self.apply(&e);
                }
            }
            Event::Dropped { place, count } => {
                // A process's own queue: the job's losses, one place per process of the job,
                // always kept. The others (`subscriber N`: slow viewers) fill at most
                // `DROP_PLACES`, so that viewers never hide the job's losses.
                let queue = place == "queue";
                if queue && stamped.process >= self.queue_places() {
                    return;
                }
                let key = format!("process {} {}", stamped.process, text(place));
                // Only a process's queue may read as one.
                if !queue && is_queue_place(&key) {
                    return;
                }
                if !queue
                    && !self.dropped.contains_key(&key)
                    && self.dropped.len() >= DROP_PLACES
                    && self.dropped.keys().filter(|k| !is_queue_place(k)).count() >= DROP_PLACES
                {
                    return;
                }
                let entry = self.dropped.entry(key).or_default();
                *entry = (*entry).max(*count);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn apply_move(
        &mut self,
        phase: Phase,
        bin: u32,
        time: u64,
        from: Option<u32>,
        to: Option<u32>,
        bytes: Option<u64>,
        worker: Option<u32>,
        operator: Option<&str>,
    ) {
        if bin >= self.bins().unwrap_or(MAX_BINS) {
            return;
        }
        let fresh = Move {
            bin,
            time,
            from,
            to,
            phase,
            bytes: 0,
            issued: false,
            installed: 0,
        };
        let operators = self.operators.len().max(1) as u32;
        let entry = self.moving.entry(bin).or_insert_with(|| fresh.clone());
        // A move at a new time replaces an older one that never completed (the run ended).
        if entry.time != time {
            *entry = fresh;
        }
        entry.phase = entry.phase.max(phase);
        entry.issued |= phase == Phase::Issued;
        if phase == Phase::Installed {
            entry.installed = entry.installed.saturating_add(1);
        }
        // A move nobody issued through the control plane (a raw control instruction) has no
        // one to say it completed: it has once every operator installed the bin.
        let raw_done = phase == Phase::Installed && !entry.issued && entry.installed >= operators;
        entry.from = entry.from.or(from);
        entry.to = entry.to.or(to);
        if phase == Phase::Extracted {
            entry.bytes = entry.bytes.saturating_add(bytes.unwrap_or(0));
        }
        if let Some(plan) = self.plan.as_mut() {
            match phase {
                Phase::Extracted => plan.bytes_moved = plan.bytes_moved.saturating_add(bytes.unwrap_or(0)),
                Phase::Completed => plan.bins_completed = plan.bins_completed.saturating_add(1),
                _ => {}
            }
        }
        if phase == Phase::Installed
            && let (Some(worker), Some(operator)) = (worker, operator)
            && let Some(view) = self.bin_mut(operator, bin)
        {
            view.owner = Some(worker);
        }
        if raw_done {
            if let (Some(to), false) = (to.or(worker), self.replicated)
                && let Some(holders) = self.holders_mut(bin)
            {
                holders.primary = Some(to);
            }
            self.moving.remove(&bin);
        }
        if phase == Phase::Completed {
            self.moving.remove(&bin);
        }
    }
}

/// Holders as `placement` events and trace headers spell them (`P/S`, `P`, `-`), at most
/// `limit` of them.
fn parse_holders<'a>(spelled: impl Iterator<Item = &'a str>, limit: usize) -> Vec<Holders> {
    spelled
        .take(limit)
        .map(|h| {
            let mut parts = h.split('/').map(|w| w.parse::<u32>().ok());
            Holders {
                primary: parts.next().flatten(),
                standby: parts.next().flatten(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(event: Event) -> Stamped {
        Stamped {
            at_s: 0.0,
            process: 0,
            event,
        }
    }

    #[test]
    fn a_restart_forgets_the_workers_of_the_computation_that_ended() {
        let mut m = JobModel::new();
        m.apply(&at(Event::Hello {
            processes: 3,
            workers: 2,
            peers: 6,
            bins: 16,
            config: serde_json::json!({}),
            anchor_unix_s: None,
        }));
        for worker in 0..6 {
            m.apply(&at(Event::WorkerStats {
                outputs_total: None,
                worker,
                records: 10,
                applied: Some(10),
                busy_ns: 1,
                interval_ns: 10,
            }));
        }
        assert_eq!(m.workers.len(), 6);
        m.apply(&at(Event::Restart {
            generation: 1,
            from: 40,
            lost: "2".into(),
            survivors: "0-1".into(),
            joined: String::new(),
        }));
        assert!(m.workers.is_empty());
        assert_eq!(m.peers, 6);
        assert_eq!(m.restarts.len(), 1);
        assert_eq!((m.restarts[0].from, m.restarts[0].lost.as_str()), (40, "2"));
    }

    /// Plans of traces written before `run_s` are placed on the run's clock from their
    /// logical time and the run's base.
    #[test]
    fn old_plans_get_their_run_time_from_logical_time() {
        let mut m = JobModel::new();
        m.apply(&at(Event::Hello {
            processes: 1,
            workers: 1,
            peers: 1,
            bins: 16,
            config: serde_json::json!({}),
            anchor_unix_s: None,
        }));
        m.apply(&at(Event::JobStarted {
            records: None,
            worker: 0,
            peers: 1,
            base: 5,
        }));
        let started = |run_s| Event::PlanStarted {
            strategy: "fluid".into(),
            target: "uniform".into(),
            steps: 1,
            bins: 1,
            purpose: None,
            id: Some(0),
            time: Some(1005),
            run_s,
        };
        let completed = |run_s| Event::PlanCompleted {
            strategy: "fluid".into(),
            steps: 1,
            seconds: 0.5,
            id: Some(0),
            cancelled: None,
            run_s,
        };
        m.apply(&at(started(None)));
        m.apply(&at(completed(None)));
        let plan = &m.finished_plans[0];
        assert_eq!((plan.issued_run_s, plan.completed_run_s), (Some(1.0), Some(1.5)));
        m.apply(&at(started(Some(2.0))));
        m.apply(&at(completed(Some(2.25))));
        let plan = &m.finished_plans[1];
        assert_eq!((plan.issued_run_s, plan.completed_run_s), (Some(2.0), Some(2.25)));
    }

    /// A failure clears the standbys the worker held (and only those), found through the
    /// index: also in a model read back from JSON (a subscriber's snapshot), which has none
    /// until it needs one, and after a standby moved to another worker.
    #[test]
    fn a_failure_clears_the_standbys_it_held() {
        let mut m = JobModel::new();
        m.apply(&at(Event::Hello {
            processes: 1,
            workers: 3,
            peers: 3,
            bins: 16,
            config: serde_json::json!({"replicas": 2}),
            anchor_unix_s: None,
        }));
        let standby = |operator: &str, bin, worker| {
            at(Event::BinSize {
                worker,
                operator: operator.into(),
                bin,
                keys: 1,
                bytes: 1,
                standby: true,
            })
        };
        let failure = |worker| {
            at(Event::Failure {
                worker,
                reason: "fail-stop".into(),
                time: Some(1),
                promoted: None,
                degraded: None,
                suspects: None,
                lost: None,
            })
        };
        for (operator, bin, worker) in [("a", 1, 1), ("b", 2, 1), ("a", 3, 2), ("b", 1, 2)] {
            m.apply(&standby(operator, bin, worker));
        }
        let read_back: JobModel = serde_json::from_value(serde_json::to_value(&m).unwrap()).unwrap();
        assert_eq!(read_back, m);
        let of = |m: &JobModel, operator: &str, bin: usize| m.operators[operator][bin].standby;
        for mut model in [m.clone(), read_back] {
            model.apply(&failure(1));
            assert_eq!(of(&model, "a", 1), None);
            assert_eq!(of(&model, "b", 2), None);
            assert_eq!(of(&model, "a", 3), Some(2));
            assert_eq!(of(&model, "b", 1), Some(2));
            // Bin 3's standby moves to worker 0: worker 2's failure leaves it alone.
            model.apply(&standby("a", 3, 0));
            model.apply(&failure(2));
            assert_eq!(of(&model, "a", 3), Some(0));
            assert_eq!(of(&model, "b", 1), None);
            // Failing again costs nothing and changes nothing.
            model.apply(&failure(2));
            assert_eq!(of(&model, "a", 3), Some(0));
        }
    }

    #[test]
    fn bins_the_job_cannot_have_are_ignored() {
        let mut m = JobModel::new();
        let size = |bin| {
            at(Event::BinSize {
                worker: 0,
                operator: "count".into(),
                bin,
                keys: 1,
                bytes: 1,
                standby: false,
            })
        };
        // Before any hello: at most the most bins a job can have.
        m.apply(&size(u32::MAX));
        m.apply(&size(4_000_000_000));
        assert!(m.operators.get("count").is_none_or(|b| b.is_empty()));
        m.apply(&at(Event::Hello {
            processes: 1,
            workers: 1,
            peers: 1,
            bins: u32::MAX,
            config: serde_json::json!({}),
            anchor_unix_s: None,
        }));
        assert_eq!(m.bins(), Some(MAX_BINS));
        m.apply(&size(3));
        m.apply(&size(MAX_BINS));
        assert_eq!(m.operators["count"].len(), 4);
        assert_eq!(m.operators["count"][3].keys, 1);
    }
}
