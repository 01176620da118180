//! The merged view of a job, built from its events alone: where every bin lives and how big
//! it is, each worker's load, each operator's frontiers, the latency timeline, migrations in
//! flight and finished, and the command log. The collector keeps one and sends it whole to
//! each new subscriber, which then applies the events that follow.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use megaflux::epoch::EpochLen;
use serde::{Deserialize, Serialize};

use crate::event::{Event, Phase, Stamped};

mod bounds;
mod plans;
mod views;

pub use bounds::{COMMAND_LOG, DROP_PLACES, HISTORY, LATENCY_WINDOWS, MAX_OPERATORS, MAX_PEERS, TEXT_CHARS};
use bounds::{bounded_push, text};
pub use plans::{During, PlanView};
pub use views::{
    BinView, CommandView, FailureView, FrontierView, Held, Holders, LatencyWindow, Move, WorkerView,
};

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
    /// Whether the job keeps two replicas per bin (its placement named a standby).
    #[serde(default)]
    pub replicated: bool,
    /// Events applied.
    pub events: u64,
    /// The latest event's time.
    pub now_s: f64,
    /// The logical time of the measured run's first epoch, once worker 0 said.
    #[serde(default)]
    pub base: Option<u64>,
}

impl JobModel {
    /// A model of nothing yet.
    pub fn new() -> Self {
        Self::default()
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

    /// This model as a keyframe carries it: without the latency history.
    pub fn keyframe(&self) -> JobModel {
        JobModel {
            latency: Vec::new(),
            ..self.clone()
        }
    }

    /// Total dropped events over every place.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.values().sum()
    }

    /// Applies one event.
    pub fn apply(&mut self, stamped: &Stamped) {
        self.events += 1;
        self.now_s = self.now_s.max(stamped.at_s);
        match &stamped.event {
            Event::Hello {
                peers,
                workers,
                bins,
                config,
                ..
            } => {
                // The first hello says what the job is; later ones are its other processes.
                let processes = self.processes.values().find_map(|h| match h.event {
                    Event::Hello { processes, .. } => Some(processes),
                    _ => None,
                });
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
                self.processes.insert(stamped.process, stamped.clone());
            }
            Event::JobStarted { worker, peers, base } => {
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
            }
            Event::BinSize {
                worker,
                operator,
                bin,
                keys,
                bytes,
                standby,
            } => {
                if let Some(view) = self.bin_mut(operator, *bin) {
                    if *standby {
                        view.standby = Some(*worker);
                    } else {
                        view.owner = Some(*worker);
                        view.keys = *keys;
                        view.bytes = *bytes;
                    }
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
            Event::Latency {
                window, histogram, ..
            } => {
                if self.latency.len() >= LATENCY_WINDOWS {
                    self.latency.drain(..LATENCY_WINDOWS / 8);
                }
                self.latency.extend(LatencyWindow::of(stamped));
                let epoch = self.epoch();
                for plan in self.plan.iter_mut().chain(self.finished_plans.iter_mut()) {
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
                self.plan = Some(PlanView {
                    strategy: text(strategy),
                    target: text(target),
                    steps: *steps,
                    bins: *bins,
                    steps_issued: 0,
                    bins_completed: 0,
                    bytes_moved: 0,
                    started_s: stamped.at_s,
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
                    plan.seconds = Some(*seconds);
                    // `seconds` is the completion's run time less the issue's.
                    plan.completed_run_s = run_s.or(plan.issued_run_s.map(|i| i + seconds));
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
                    at_s: stamped.at_s,
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
                // It holds nothing from now on, whatever it last sampled.
                if let Some(w) = self.workers.get_mut(worker) {
                    w.held.clear();
                    w.applied_per_s = None;
                }
                bounded_push(
                    &mut self.failures,
                    FailureView {
                        worker: *worker,
                        at_s: stamped.at_s,
                        time: *time,
                        promoted: promoted.unwrap_or(0),
                        degraded: degraded.unwrap_or(0),
                        takeovers: 0,
                        rejoined_s: None,
                        recovered: None,
                        lost: lost.as_deref().map(text),
                    },
                );
                // Its replicas are gone; the bin sizes it reported with them.
                for bins in self.operators.values_mut() {
                    for b in bins.iter_mut() {
                        if b.standby == Some(*worker) {
                            b.standby = None;
                        }
                    }
                }
            }
            Event::Takeover { .. } => {
                if let Some(f) = self.failures.last_mut() {
                    f.takeovers += 1;
                }
            }
            Event::Rejoin { worker, .. } => {
                self.failed.remove(worker);
                if let Some(f) = self.failures.iter_mut().rev().find(|f| f.worker == *worker) {
                    f.rejoined_s = Some(stamped.at_s);
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
            Event::Lost { time, bins } => self.lost = Some((*time, text(bins))),
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
                let key = format!("process {} {}", stamped.process, text(place));
                if !self.dropped.contains_key(&key) && self.dropped.len() >= DROP_PLACES {
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
            entry.bytes += bytes.unwrap_or(0);
        }
        if let Some(plan) = self.plan.as_mut() {
            match phase {
                Phase::Extracted => plan.bytes_moved += bytes.unwrap_or(0),
                Phase::Completed => plan.bins_completed += 1,
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
