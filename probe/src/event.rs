//! The typed events of a megaflux job: what the probe makes of core's `tracing` events, what
//! travels on the wire and what a trace file holds, one per line (`traces/FORMAT.md`).
//!
//! Adding an event kind or an optional field keeps [`FORMAT_VERSION`]; renaming or removing
//! anything bumps it. Readers skip kinds they do not know.

use serde::{Deserialize, Serialize};

/// Version of the event schema and of the trace format.
pub const FORMAT_VERSION: u32 = 3;

/// An event with where and when it happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stamped {
    /// Wall-clock seconds since the probe of the emitting process started.
    pub at_s: f64,
    /// The timely process the event comes from.
    pub process: u32,
    /// What happened; its `kind` and fields sit beside `at_s` and `process` on the line.
    #[serde(flatten)]
    pub event: Event,
}

/// Phases a bin goes through when it moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Worker 0 sent the move on the control input, effective at `time`.
    Issued,
    /// The old owner serialized the bin and sent it.
    Extracted,
    /// The new owner has every chunk of the bin.
    Received,
    /// The new owner installed the bin before applying `time`.
    Installed,
    /// The output frontier passed `time`: the move is complete everywhere.
    Completed,
}

impl Phase {
    /// The phase as traces spell it.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Issued => "issued",
            Phase::Extracted => "extracted",
            Phase::Received => "received",
            Phase::Installed => "installed",
            Phase::Completed => "completed",
        }
    }
}

/// What became of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The collector passed it on to the job (which answers `applied` or `rejected`).
    Received,
    /// Carried out: by worker 0, at the logical `time` its control input stood at (or, for
    /// a recording command, by the collector).
    Applied,
    /// Refused, with a `reason`: by the collector (a `command` event without `id`) or by the
    /// job.
    Rejected,
}

impl Outcome {
    /// The outcome as traces spell it.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Received => "received",
            Outcome::Applied => "applied",
            Outcome::Rejected => "rejected",
        }
    }
}

/// What the balancer did (a [`Event::Balance`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BalancePhase {
    /// It measured a whole window with no plan running.
    Measured,
    /// It proposes a `balance` plan (`--balance suggest`): a person may start it.
    Suggested,
    /// It made its standing proposal afresh from the last window's loads (each
    /// `--balance-every` the proposal stands).
    Refreshed,
    /// It started a `balance` plan (`--balance auto`).
    Issued,
    /// It dropped its proposal: the load evened out, or a plan runs.
    Withdrawn,
    /// The job refused the plan it issued.
    Refused,
    /// It measured what its last plan achieved: `imbalance` over the first whole window
    /// after the plan ended, beside the `predicted` one.
    Achieved,
}

impl BalancePhase {
    /// The phase as traces spell it.
    pub fn name(self) -> &'static str {
        match self {
            BalancePhase::Measured => "measured",
            BalancePhase::Suggested => "suggested",
            BalancePhase::Refreshed => "refreshed",
            BalancePhase::Issued => "issued",
            BalancePhase::Withdrawn => "withdrawn",
            BalancePhase::Refused => "refused",
            BalancePhase::Achieved => "achieved",
        }
    }
}

/// One thing that happened in a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// A process joined: its share of the job and the job's configuration.
    Hello {
        /// Timely processes in the job (`-n`).
        processes: u32,
        /// Workers in this process.
        workers: u32,
        /// Workers in the whole job.
        peers: u32,
        /// Bins per operator (a power of two).
        bins: u32,
        /// The job's complete configuration, as `megaflux run` took it.
        config: serde_json::Value,
        /// The wall clock (seconds since the Unix epoch) when this process's probe started:
        /// `anchor_unix_s + at_s` puts its events on one axis with every other process's
        /// (version 2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        anchor_unix_s: Option<f64>,
    },
    /// A worker finished its preload: the measured run starts at logical time `base`.
    JobStarted {
        /// The worker's index in the whole job.
        worker: u32,
        /// Workers in the whole job.
        peers: u32,
        /// The logical time the preload ended at: the measured run's first epoch is `base + 1`.
        base: u64,
        /// Records the worker's source sent before the measured run (its preload) (version 3).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        records: Option<u64>,
    },
    /// A worker finished its last epoch.
    JobFinished {
        /// The worker's index in the whole job.
        worker: u32,
        /// Records the worker's source sent in the whole run.
        records: u64,
        /// Outputs the worker counted in the whole run (worker 0 counts every output of a
        /// run that restarts after a crash) (version 3).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outputs: Option<u64>,
    },
    /// The size of one bin of one operator, reported by a worker holding it (its primary,
    /// or its standby when `standby`).
    BinSize {
        /// The worker holding the bin, in the whole job.
        worker: u32,
        /// The stateful operator's name.
        operator: String,
        /// The bin's index, below the job's `bins`.
        bin: u32,
        /// Keys the bin holds.
        keys: u64,
        /// Shallow in-memory estimate of the bin's state (entries × entry size), in bytes.
        bytes: u64,
        /// The worker holds the bin as its standby (`false`: its primary).
        #[serde(default, skip_serializing_if = "is_false")]
        standby: bool,
    },
    /// A worker finished sampling an operator. When `full`, every bin it holds was reported
    /// just before this event.
    Sampled {
        /// The sampling worker, in the whole job.
        worker: u32,
        /// The stateful operator's name.
        operator: String,
        /// Every bin the worker holds was just reported (its first sample), not only the
        /// changed ones.
        full: bool,
        /// Bins of the operator the worker holds.
        bins: u64,
        /// Keys in those bins, in total.
        keys: u64,
        /// Shallow in-memory estimate of those bins' state, in bytes.
        bytes: u64,
    },
    /// An operator's frontiers on a worker: everything before `applied` is applied (`None`:
    /// finished); `control` is the control frontier it has seen; `input` the time the
    /// worker's input is open at, so `input - applied` is its lag in epochs (ms).
    Frontier {
        /// The worker, in the whole job.
        worker: u32,
        /// The operator's name; `output` is the job's output frontier.
        operator: String,
        /// Every update before this logical time is applied; `None`: the operator is done.
        applied: Option<u64>,
        /// The control frontier the operator has seen (absent for native operators).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        control: Option<u64>,
        /// The logical time the worker's input is open at.
        input: u64,
    },
    /// A worker's load over the last sampling interval.
    WorkerStats {
        /// The worker, in the whole job.
        worker: u32,
        /// Records the worker's source sent in the interval.
        records: u64,
        /// Records the worker's stateful operators applied in the interval (a replica's
        /// included) (version 2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        applied: Option<u64>,
        /// Outputs the worker counted since the run started: a running total, not the
        /// interval's (version 3).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outputs_total: Option<u64>,
        /// Time the worker's stateful operators spent in their activations in the interval,
        /// in nanoseconds.
        busy_ns: u64,
        /// Length of the interval, in nanoseconds.
        interval_ns: u64,
    },
    /// What each bin of an operator cost a worker in the last interval: `loads` are
    /// `bin:records:busy_ns` triples separated by spaces (`:s` appended where the worker holds
    /// the bin's standby), for the bins that had work, at most the busiest 512 (version 3).
    BinLoads {
        /// The worker, in the whole job.
        worker: u32,
        /// The stateful operator's name.
        operator: String,
        /// Length of the interval, in nanoseconds.
        interval_ns: u64,
        /// Records the operator applied on the worker in the interval, over all its bins (not
        /// only those `loads` names) (version 3).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        applied: Option<u64>,
        /// The bins' costs.
        loads: String,
    },
    /// The balancer on worker 0 measured, proposed, issued, withdrew or was refused a plan
    /// that moves bins by their measured load (version 3).
    Balance {
        /// What it did.
        phase: BalancePhase,
        /// When, in seconds of the measured run.
        run_s: f64,
        /// Max / mean worker load it measured (`measured`, `suggested`, `issued`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        imbalance: Option<f64>,
        /// The imbalance predicted once its plan is done.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        predicted: Option<f64>,
        /// Bins the plan moves (`suggested`, `issued`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bins: Option<u64>,
        /// Their bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bytes: Option<u64>,
        /// A sizing (the run started packed): the workers serving now, and those the plan
        /// leaves serving.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        serving: Option<u64>,
        /// As `serving`, once the plan is done.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        needed: Option<u64>,
        /// How the plan moves them, as `--migrate` spells a schedule.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strategy: Option<String>,
        /// Why, for people.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Latency of one 250 ms window of epochs; `histogram` is HdrHistogram V2, base64.
    Latency {
        /// The window's number: window `w` holds epochs `250w+1 … 250w+250` (ms).
        window: u64,
        /// When the window starts, in seconds of the measured run (`window × 0.25`).
        t_s: f64,
        /// Records measured in the window.
        count: u64,
        /// Median latency of the window's records, in nanoseconds.
        p50: u64,
        /// 99th-percentile latency, in nanoseconds.
        p99: u64,
        /// Largest latency, in nanoseconds.
        max: u64,
        /// The window's HdrHistogram of latencies in ns, V2-serialized and base64-encoded
        /// (empty if it could not be serialized).
        histogram: String,
    },
    /// A bin's move went through a phase. `worker` is where it happened.
    Migration {
        /// The phase the move went through.
        phase: Phase,
        /// The bin that moves.
        bin: u32,
        /// The logical time the bin's new holders take effect at.
        time: u64,
        /// The operator whose bin it is (`extracted`, `received`, `installed`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        operator: Option<String>,
        /// The worker the phase happened on: the sender for `extracted`, the new holder for
        /// `received` and `installed`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<u32>,
        /// The worker the bin leaves: `issued` and `completed`, the old primary when the
        /// primary changes, else the old standby; `extracted`, the sending holder.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<u32>,
        /// The worker the bin goes to: the new primary when the primary changes, else the
        /// new standby; `extracted`, the receiving holder.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<u32>,
        /// Size of the serialized bin, in bytes (`extracted`, `received`, `installed`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bytes: Option<u64>,
        /// Chunks the bin was sent in (`extracted`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        chunks: Option<u64>,
        /// The plan step that issued the move, from 0 (`issued`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<u64>,
        /// Issued: the bin's holders from `time` on (`standby` -1: none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        primary: Option<u32>,
        /// Issued: the bin's standby from `time` on, `-1` for none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        standby: Option<i64>,
        /// The source keeps its replica (a recovery copy), rather than moving it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        copy: Option<bool>,
    },
    /// A plan was made from a command or a `--migrate` (`purpose` migration), to restore
    /// replicas after a failure (`recovery`) or to spread bins onto a worker that rejoined
    /// (`rebalance`).
    PlanStarted {
        /// How the plan splits its moves into steps, as its schedule spells it
        /// (`fluid`, `all-at-once`, ..., with `+pipelined` when steps do not wait).
        strategy: String,
        /// The placement the plan moves to, as a description (`uniform`, ...).
        target: String,
        /// Steps the plan was split into.
        steps: u64,
        /// Bins the plan changes the holders of.
        bins: u64,
        /// Why it was made: `migration` (also when absent), `recovery` or `rebalance`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        purpose: Option<String>,
        /// The plan's number in the run, and the logical time the control input stood at
        /// when it was made (version 2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
        /// The logical time the control input stood at when the plan was made (version 2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        time: Option<u64>,
        /// When it was made, in seconds of the measured run (the clock the summary and
        /// the latency windows' `t_s` use) (version 2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_s: Option<f64>,
    },
    /// A plan finished: every step issued and complete (or cancelled and drained).
    PlanCompleted {
        /// The plan's strategy, as in its [`Event::PlanStarted`].
        strategy: String,
        /// Steps the plan issued.
        steps: u64,
        /// Seconds the plan ran, from its making to its completion.
        seconds: f64,
        /// The plan's number in the run, as in its [`Event::PlanStarted`] (version 2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
        /// The plan was cancelled before all its steps were issued (version 2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cancelled: Option<bool>,
        /// When it completed, in seconds of the measured run (version 2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_s: Option<f64>,
    },
    /// The latency of every record of the epochs due while plan `id` ran (from its
    /// `run_s` to one epoch after its completion's, or the run's end): exactly what the
    /// summary says of it, once worker 0 has measured them all (version 2).
    PlanLatency {
        /// The plan's number in the run, as in its [`Event::PlanStarted`].
        id: u64,
        /// Median latency of those records, in nanoseconds.
        p50: u64,
        /// 99th-percentile latency, in nanoseconds.
        p99: u64,
        /// Largest latency, in nanoseconds.
        max: u64,
    },
    /// A command was received from a subscriber and passed on to the job, or applied or
    /// rejected (with the reason). `id` is the control handle's: the job's answer carries
    /// the id the collector's `received` gave out.
    Command {
        /// What became of the command.
        outcome: Outcome,
        /// The control handle's id for the command; absent when the collector refused it, or
        /// the job a `--migrate` spec.
        id: Option<u64>,
        /// The logical time worker 0's control input stood at when it took the command.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        time: Option<u64>,
        /// The command described for people, not to be parsed (`request` is the command).
        command: String,
        /// The command as a subscriber sends it (`{"command": "move_bins", ...}`), to run
        /// it again (version 2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<serde_json::Value>,
        /// Who gave it: `handle` (a subscriber or the dashboard) or `run` (the run's own
        /// `--migrate`, `--fail`, `--rejoin`, or a failure it noticed) (version 2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
        /// Why it was rejected (`rejected` only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Where every bin's replicas are from logical time `time` on: one entry per bin,
    /// space separated, `P/S` (primary and standby), `P` (no standby) or `-` (lost).
    Placement {
        /// The logical time the placement holds from.
        time: u64,
        /// One entry per bin, in bin order, space separated: `P/S`, `P` or `-`.
        holders: String,
    },
    /// A worker failed (fail-stop of its partitions): from `time` on it holds nothing.
    /// `promoted` bins' standbys became primaries; `degraded` bins have one replica left;
    /// `suspects` holders were dropped because their copy may never have left the worker;
    /// `lost` lists bins left with none (`0-3,7`).
    Failure {
        /// The failed worker, in the whole job.
        worker: u32,
        /// Why it is taken as failed (`fail-stop` when core gives no reason).
        reason: String,
        /// The logical time the failure is in force from.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        time: Option<u64>,
        /// Bins whose standby became their primary.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        promoted: Option<u64>,
        /// Bins left with one replica.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        degraded: Option<u64>,
        /// Holders dropped because the state they were sent may never have left the worker.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suspects: Option<u64>,
        /// The bins left with no replica, as a compact list (`0-3,7`); absent if none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lost: Option<String>,
    },
    /// A replica did its first work for a bin whose primary failed: `worker` took over `bin`
    /// of `operator` at `time`.
    Takeover {
        /// The operator whose bin was taken over.
        operator: String,
        /// The worker that took over, in the whole job.
        worker: u32,
        /// The bin taken over.
        bin: u32,
        /// The logical time of the worker's first work for the bin.
        time: u64,
    },
    /// A failed worker serves again, empty, from `time` on.
    Rejoin {
        /// The worker that serves again, in the whole job.
        worker: u32,
        /// The logical time it serves from.
        time: u64,
    },
    /// The bins that `worker`'s failure left with one replica have two again.
    Recovery {
        /// The worker whose failure the recovery repaired.
        worker: u32,
        /// The bins that got a new copy.
        bins: Vec<u32>,
    },
    /// Processes went away (a crash) and the survivors restarted the job among themselves,
    /// or processes started again for lost places joined it (`--join`), from the committed
    /// logical time `from`, with the bins they held (restart number `generation`): the job
    /// goes on.
    Restart {
        /// How many restarts the job has had, this one included.
        generation: u32,
        /// The committed frontier the new computation starts from.
        from: u64,
        /// The processes lost, as a compact list (`2`, `1-2`).
        lost: String,
        /// The processes that go on, as a compact list (`0-1`).
        survivors: String,
        /// The processes taken in, started again for lost places (empty for a crash).
        #[serde(default)]
        joined: String,
    },
    /// The input ended at logical time `input_end` and the run drains: every output before
    /// `gate` is out, and `bins` bins had work scheduled at or after it, the earliest at
    /// `next`, when last looked at (worker 0, every second of the drain, `for_ms` into it).
    Draining {
        /// The logical time of the run's last epoch.
        input_end: u64,
        /// Every output before it is out.
        gate: u64,
        /// Bins with work scheduled at or after the gate.
        bins: u64,
        /// The earliest time of that work.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next: Option<u64>,
        /// Milliseconds since the drain began.
        for_ms: u64,
    },
    /// How far the job has read a partition of its Kafka topic (at most every 250 ms, and at
    /// the read's end): every message before `offset` is read, and the partition held
    /// messages up to `end` (its high watermark, or the read's end) when last fetched.
    InputPartition {
        /// The partition's id.
        partition: u32,
        /// The next offset the job reads.
        offset: u64,
        /// The partition's end as last seen: `end − offset` messages are still to read.
        end: u64,
    },
    /// A fetch from a partition of the job's Kafka topic failed (its broker went away, say):
    /// the read asks again every second and says so each time, until the broker answers.
    InputRetry {
        /// The partition's id.
        partition: u32,
        /// The offset the read asked for.
        offset: u64,
        /// Why the fetch failed (at most [`crate::model::TEXT_CHARS`] characters).
        reason: String,
    },
    /// The job's output sink committed every output before logical time `upto` (at most
    /// every 200 ms, as its writer commits), having been handed `rows` outputs so far
    /// (version 3).
    OutputCommitted {
        /// Every output at a time before it is committed.
        upto: u64,
        /// Outputs handed to the sink so far in this run.
        rows: u64,
    },
    /// Bins lost their last replica at `time` (`0-3,7`): the job stops.
    Lost {
        /// The logical time from which the bins have no replica.
        time: u64,
        /// The lost bins, as a compact list (`0-3,7`; [`parse_bins`] reads it).
        bins: String,
    },
    /// Recording to the trace was paused (`on: false`, the last event before the gap) or
    /// resumed (`on: true`, the first event after it; also the first event of a trace).
    /// `failed` says why it stopped when a write to the trace failed: the job and the views
    /// go on, the trace ends there (never in a trace, whose writes failed).
    Recording {
        /// `true`: recording started or resumed; `false`: it paused or stopped.
        on: bool,
        /// The error of the failed write that stopped the recording for good.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failed: Option<String>,
    },
    /// The job as the collector's model saw it at this point, without its latency history
    /// (the `latency` events and the summary's timeline hold it): a reader seeking into a
    /// trace starts from the last keyframe before the place it seeks to (version 2; written
    /// to traces only). `model` is a [`crate::model::JobModel`]; it travels as plain JSON
    /// because its maps have integer keys, which this internally tagged enum cannot read
    /// back typed.
    Keyframe {
        /// The [`crate::model::JobModel`] as JSON, without its latency history.
        model: serde_json::Value,
    },
    /// The run's summary (as `megaflux run` prints it): the last line of a trace that ended
    /// cleanly (version 2).
    Summary {
        /// The summary's JSON, as `megaflux run` prints it.
        summary: serde_json::Value,
    },
    /// Events lost on the way, counted where they were lost (`queue`: the layer's queue of
    /// that process; `subscriber N`: a slow viewer). The count is the total so far there.
    Dropped {
        /// Where the events were lost: `queue` or `subscriber N`.
        place: String,
        /// Events lost there since the start (a running total, not a delta).
        count: u64,
    },
    /// A sample of one operator's bins as core sends it, `bin:keys:bytes` triples separated
    /// by spaces: one event leaves the worker thread instead of one per bin. The collector
    /// and the exporter turn it into [`Event::BinSize`]s ([`expand`]) before anything else
    /// sees it, so it never travels or reaches a trace.
    BinSizes {
        /// The sampling worker, in the whole job.
        worker: u32,
        /// The stateful operator's name.
        operator: String,
        /// `bin:keys:bytes` triples, space separated; `:s` after one marks a bin held as
        /// standby.
        sizes: String,
    },
}

/// Replaces every [`Event::BinSizes`] by one [`Event::BinSize`] per bin (malformed triples
/// are skipped); other events pass unchanged.
pub fn expand(events: Vec<Stamped>) -> Vec<Stamped> {
    if !events.iter().any(|e| matches!(e.event, Event::BinSizes { .. })) {
        return events;
    }
    let mut out = Vec::with_capacity(events.len());
    for e in events {
        let Event::BinSizes {
            worker,
            operator,
            sizes,
        } = e.event
        else {
            out.push(e);
            continue;
        };
        for triple in sizes.split_whitespace() {
            // `bin:keys:bytes`, then `:s` for a standby.
            let (triple, standby) = match triple.strip_suffix(":s") {
                Some(t) => (t, true),
                None => (triple, false),
            };
            let mut parts = triple.split(':').map(str::parse::<u64>);
            if let (Some(Ok(bin)), Some(Ok(keys)), Some(Ok(bytes)), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
                && let Ok(bin) = u32::try_from(bin)
            {
                out.push(Stamped {
                    at_s: e.at_s,
                    process: e.process,
                    event: Event::BinSize {
                        worker,
                        operator: operator.clone(),
                        bin,
                        keys,
                        bytes,
                        standby,
                    },
                });
            }
        }
    }
    out
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Bins from a compact list (`0-3,7,9-10`); malformed parts and bins past `limit` are
/// skipped, and a range never expands past `limit` entries.
pub fn parse_bins(list: &str, limit: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>(), b.parse::<u32>()),
            None => (part.parse::<u32>(), part.parse::<u32>()),
        };
        if let (Ok(lo), Ok(hi)) = (lo, hi) {
            out.extend((lo..=hi.min(limit.saturating_sub(1))).take(limit as usize));
        }
    }
    out
}

/// Every event kind of this format version, as the `kind` field spells it.
pub const KINDS: &[&str] = &[
    "hello",
    "job_started",
    "job_finished",
    "bin_size",
    "sampled",
    "frontier",
    "worker_stats",
    "bin_loads",
    "balance",
    "latency",
    "migration",
    "plan_started",
    "plan_completed",
    "plan_latency",
    "command",
    "placement",
    "failure",
    "takeover",
    "rejoin",
    "recovery",
    "restart",
    "lost",
    "draining",
    "input_partition",
    "input_retry",
    "output_committed",
    "recording",
    "dropped",
    "keyframe",
    "summary",
];

impl Event {
    /// The operator the event is about, if it names one.
    pub fn operator(&self) -> Option<&str> {
        match self {
            Event::BinSize { operator, .. }
            | Event::Takeover { operator, .. }
            | Event::Sampled { operator, .. }
            | Event::Frontier { operator, .. }
            | Event::BinSizes { operator, .. }
            | Event::BinLoads { operator, .. } => Some(operator),
            Event::Migration { operator, .. } => operator.as_deref(),
            _ => None,
        }
    }

    /// The event's `kind`, as a trace line names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Hello { .. } => "hello",
            Event::JobStarted { .. } => "job_started",
            Event::JobFinished { .. } => "job_finished",
            Event::BinSize { .. } => "bin_size",
            Event::Sampled { .. } => "sampled",
            Event::Frontier { .. } => "frontier",
            Event::WorkerStats { .. } => "worker_stats",
            Event::BinLoads { .. } => "bin_loads",
            Event::Balance { .. } => "balance",
            Event::Latency { .. } => "latency",
            Event::Migration { .. } => "migration",
            Event::PlanStarted { .. } => "plan_started",
            Event::PlanCompleted { .. } => "plan_completed",
            Event::PlanLatency { .. } => "plan_latency",
            Event::Command { .. } => "command",
            Event::Placement { .. } => "placement",
            Event::Failure { .. } => "failure",
            Event::Takeover { .. } => "takeover",
            Event::Rejoin { .. } => "rejoin",
            Event::Recovery { .. } => "recovery",
            Event::Restart { .. } => "restart",
            Event::Lost { .. } => "lost",
            Event::Draining { .. } => "draining",
            Event::InputPartition { .. } => "input_partition",
            Event::InputRetry { .. } => "input_retry",
            Event::OutputCommitted { .. } => "output_committed",
            Event::Recording { .. } => "recording",
            Event::Dropped { .. } => "dropped",
            Event::Keyframe { .. } => "keyframe",
            Event::Summary { .. } => "summary",
            Event::BinSizes { .. } => "bin_sizes",
        }
    }

    /// The worker an event is about, if it is about one.
    pub fn worker(&self) -> Option<u32> {
        match self {
            Event::JobStarted { worker, .. }
            | Event::JobFinished { worker, .. }
            | Event::BinSize { worker, .. }
            | Event::BinSizes { worker, .. }
            | Event::Sampled { worker, .. }
            | Event::Frontier { worker, .. }
            | Event::WorkerStats { worker, .. }
            | Event::BinLoads { worker, .. }
            | Event::Failure { worker, .. }
            | Event::Takeover { worker, .. }
            | Event::Rejoin { worker, .. }
            | Event::Recovery { worker, .. } => Some(*worker),
            Event::Migration { worker, .. } => *worker,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let e = Stamped {
            at_s: 1.5,
            process: 1,
            event: Event::Migration {
                phase: Phase::Extracted,
                bin: 7,
                time: 1200,
                operator: Some("count".into()),
                worker: None,
                from: Some(0),
                to: Some(1),
                bytes: Some(4096),
                chunks: Some(1),
                step: None,
                primary: None,
                standby: None,
                copy: None,
            },
        };
        let line = serde_json::to_string(&e).unwrap();
        assert!(
            line.contains(&format!(r#""kind":"{}""#, e.event.kind())),
            "{line}"
        );
        assert!(KINDS.contains(&e.event.kind()));
        assert!(line.contains(r#""phase":"extracted""#), "{line}");
        assert!(!line.contains("step"), "{line}");
        let back: Stamped = serde_json::from_str(&line).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn a_sample_of_bins_becomes_one_event_per_bin() {
        let raw = Stamped {
            at_s: 2.0,
            process: 1,
            event: Event::BinSizes {
                worker: 1,
                operator: "count".into(),
                sizes: "3:10:80 7:0:0 bad 9:x:1 11:5:40 12:1:8:s 13:1:1:1".into(),
            },
        };
        let other = Stamped {
            at_s: 2.0,
            process: 1,
            event: Event::Dropped {
                place: "queue".into(),
                count: 1,
            },
        };
        let out = expand(vec![raw, other.clone()]);
        let bins: Vec<(u32, u64)> = out
            .iter()
            .filter_map(|e| match &e.event {
                Event::BinSize {
                    bin, keys, worker: 1, ..
                } => Some((*bin, *keys)),
                _ => None,
            })
            .collect();
        assert_eq!(bins, vec![(3, 10), (7, 0), (11, 5), (12, 1)]);
        assert!(out.iter().any(|e| matches!(
            e.event,
            Event::BinSize {
                bin: 12,
                standby: true,
                ..
            }
        )));
        assert_eq!(out.last(), Some(&other));
        assert!(out.iter().all(|e| e.process == 1 && e.at_s == 2.0));
    }

    #[test]
    fn bin_lists_parse_within_bounds() {
        assert_eq!(parse_bins("0-3,7, 9-10,x,5-2", 16), vec![0, 1, 2, 3, 7, 9, 10]);
        assert_eq!(parse_bins("14-4000000000", 16), vec![14, 15]);
        assert!(parse_bins("", 16).is_empty());
    }
}
