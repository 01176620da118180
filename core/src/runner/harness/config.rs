//! What defines a run ([`RunConfig`]), how it reads and writes itself for trace headers, and
//! the checks it must pass before anything starts.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::balancer::BalanceConfig;
use super::drain::Drain;
use crate::Time;
use crate::bins::Bins;
use crate::config::uniform;
use crate::control::Command;
use crate::epoch::EpochLen;
use crate::error::ConfigError;
use crate::job::params::{Flag, ParamValues};
use crate::operator::DEFAULT_CHUNK_BYTES;
use crate::plan::{MigrationSpec, Schedule, Strategy, Target};
use crate::source::{Input, Location};

/// The most replicas a bin can have.
pub const MAX_REPLICAS: usize = 2;

/// The recovery strategy when none is given.
pub const DEFAULT_RECOVERY: Schedule = Schedule {
    strategy: Strategy::Matched,
    pipelined: false,
};

/// Everything that defines a run. It serializes to the readable form trace headers carry
/// (the workload, migrations and bins as `megaflux run` spells them, the duration in seconds)
/// and reads back from it; fields added since the first traces have defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// The job's name (a built-in workload's, or a user's job's).
    pub workload: String,
    /// Worker threads per process.
    pub workers: usize,
    /// Bins per operator (`--bins`, a power of two from 16 to 65536).
    #[serde(with = "bin_count")]
    pub bins: Bins,
    /// Records per second, over all workers.
    pub rate: u64,
    /// The measured run's length (after the preload); its last epoch is the last one in it.
    #[serde(rename = "duration_s", with = "seconds")]
    pub duration: Duration,
    /// Seeds a generated job's draws (`--seed`; the key counts' keys, not NEXMark's stream,
    /// which is fixed).
    pub seed: u64,
    /// Run the plain-timely twin instead (no migration).
    pub native: bool,
    /// Run the source's preload before the measured run (what a generated job makes first:
    /// every key once, for a key count).
    pub preload: bool,
    /// Migrations the run starts on its own (`--migrate`), in the order given.
    #[serde(with = "texts")]
    pub migrations: Vec<MigrationSpec>,
    /// The most bytes in one chunk of a shipped bin's encoding (`--chunk-bytes`).
    pub chunk_bytes: usize,
    /// The values of the job's own flags ([`crate::job::Job::params`]), as given: those not
    /// here take their defaults. Read them with [`RunConfig::get`].
    #[serde(default, skip_serializing_if = "ParamValues::is_empty")]
    pub params: ParamValues,
    /// Timely's own arguments (`-n`, `-p`, `-h`).
    pub timely_args: Vec<String>,
    /// Replicas per bin: 1, or 2 (a primary and a standby on another worker).
    #[serde(default = "one")]
    pub replicas: usize,
    /// Workers that fail (fail-stop of their partitions) during the run.
    #[serde(default, with = "texts")]
    pub failures: Vec<WorkerAt>,
    /// Failed workers that serve again during the run.
    #[serde(default, with = "texts")]
    pub rejoins: Vec<WorkerAt>,
    /// How recoveries and rebalances after a rejoin copy bins.
    #[serde(default = "recovery", with = "text")]
    pub recovery: Schedule,
    /// Workers that panic on purpose, to see how a job stops (fault injection).
    #[serde(default, with = "texts")]
    pub panics: Vec<WorkerAt>,
    /// How the input is paced: open loop at `rate` (the default), or as fast as the job goes.
    #[serde(default, skip_serializing_if = "Pace::is_open_loop")]
    pub pace: Pace,
    /// What a worker with nothing to do does: spin (the default) or wait for news.
    #[serde(default, skip_serializing_if = "Idle::is_spin")]
    pub idle: Idle,
    /// The length of an epoch, the unit of logical time (1 ms in traces without it).
    #[serde(rename = "epoch_us", default = "one_ms")]
    pub epoch: EpochLen,
    /// Whether every epoch is a logical time of its own (the library's default) or each
    /// worker sends what came due since its last batch once that batch is done (the CLI's
    /// `auto` where allowed). Adaptive epochs want a fine `epoch`
    /// ([`crate::epoch::ADAPTIVE_EPOCH_US`], which the CLI takes unless told).
    #[serde(rename = "epochs", default, skip_serializing_if = "EpochMode::is_fixed")]
    pub epoch_mode: EpochMode,
    /// Commands taken at given measured epochs, in order (a re-run's recorded commands). Not
    /// in trace headers: the re-run's trace logs them as commands, like any other.
    #[serde(skip)]
    pub script: Vec<Scripted>,
    /// Where a job that reads its records reads them (`--input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Input>,
    /// How records read from a file are due: by `rate` (the default) or by their event time.
    #[serde(default, skip_serializing_if = "Pacing::is_rate")]
    pub pacing: Pacing,
    /// How much faster than their event times records are due (`--speed`).
    #[serde(default = "one_f64", skip_serializing_if = "is_one")]
    pub speed: f64,
    /// Where every output goes (`--output`): a file, one JSON line each, or a PostgreSQL
    /// table. Not in trace headers: a re-run writes none unless told.
    #[serde(skip)]
    pub output: Option<crate::sink::Output>,
    /// Whether `output` may replace an existing file.
    #[serde(skip)]
    pub replace_output: bool,
    /// How long a process of a cluster waits for the others to connect before it gives up
    /// ([`CLUSTER_WAIT`] unless set).
    #[serde(skip, default = "cluster_wait")]
    pub cluster_wait: Duration,
    /// How long a process of a cluster may stay silent before the others count it as lost
    /// (`--peer-timeout`; [`crate::membership::SILENCE_LIMIT`] unless set).
    #[serde(skip, default = "peer_timeout")]
    pub peer_timeout: Duration,
    /// The port of process 0's membership coordinator (`--coordinator-port`; process 0's
    /// timely port plus [`crate::membership::COORDINATOR_PORT_OFFSET`] unless set).
    #[serde(skip)]
    pub coordinator_port: Option<u16>,
    /// Whether this process takes a lost process's place in a running job (`--join`)
    /// rather than start the job with the others.
    #[serde(skip)]
    pub join: bool,
    /// The secret every connection between the cluster's processes proves
    /// (`--cluster-token`); none: only a cluster whose hosts are all loopback may run.
    #[serde(skip)]
    pub cluster_secret: crate::membership::Secret,
    /// How far the work scheduled past the last epoch runs (`--drain`); `None`: as far as
    /// the job says ([`crate::job::Job::drain`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<Drain>,
    /// Where a re-run's drain ends: at this many logical ticks past the measured run's base
    /// (the time before its first epoch), where its recorded run's ended (the recorded
    /// summary's `drain.ended_at` less the recorded `base`), whatever the clock says:
    /// `--duration` does not cut it, a stop still does. Its outputs are then the recorded
    /// run's, whether that drain completed, was cut or reached its horizon. `None`: as
    /// `drain` says. Set by `replay --rerun`.
    #[serde(skip)]
    pub drain_ends: Option<Time>,
    /// Rebalances after a rejoin spread the bins evenly whatever the balancer's mode, as
    /// before placements by load: a re-run of a run whose rebalances did so repeats them.
    /// Set by `replay --rerun`.
    #[serde(skip)]
    pub even_rebalances: bool,
    /// The longest line an input may have, in bytes (`--max-line-bytes`): a longer one
    /// stops the job naming the input and the line, rather than fill the memory.
    #[serde(default = "max_line_bytes", skip_serializing_if = "is_max_line_bytes")]
    pub max_line_bytes: usize,
    /// Check that the first record, output and bin state of every operator survive the
    /// encoding they cross processes in (`--check-serde`; debug builds always do).
    #[serde(skip)]
    pub check_serde: bool,
    /// How the run balances its bins by measured load (`--balance*`).
    #[serde(default)]
    pub balance: BalanceConfig,
    /// Where the bins start (`--placement`; every bin on worker `b mod workers` unless set).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "optional_text")]
    pub placement: Option<Target>,
}

impl RunConfig {
    /// Whether the balancer sizes the set of workers serving by their true rates: the run
    /// starts packed (`--placement pack:N`), its other workers idle until needed.
    pub fn elastic(&self) -> bool {
        matches!(self.placement, Some(Target::Pack(_)))
    }

    /// The value of the job's own flag `flag` in this run (its default if not given).
    pub fn get<T>(&self, flag: &Flag<T>) -> T {
        flag.of(&self.params)
    }
}

fn max_line_bytes() -> usize {
    crate::source::DEFAULT_MAX_LINE_BYTES
}

fn is_max_line_bytes(n: &usize) -> bool {
    *n == crate::source::DEFAULT_MAX_LINE_BYTES
}

/// How long a process of a cluster waits for the others to connect: processes started by
/// hand, one after another, are all up well within it.
pub const CLUSTER_WAIT: Duration = Duration::from_secs(60);

fn cluster_wait() -> Duration {
    CLUSTER_WAIT
}

fn peer_timeout() -> Duration {
    crate::membership::SILENCE_LIMIT
}

fn one_f64() -> f64 {
    1.0
}

fn is_one(x: &f64) -> bool {
    *x == 1.0
}

/// How records read from a file are due (`--pace`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pacing {
    /// Record `i` at `i / rate` seconds.
    #[default]
    Rate,
    /// At its event time less the first record's, divided by `speed`.
    EventTime,
}

impl Pacing {
    fn is_rate(&self) -> bool {
        *self == Pacing::Rate
    }
}

impl FromStr for Pacing {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "rate" => Ok(Pacing::Rate),
            "event-time" => Ok(Pacing::EventTime),
            other => Err(ConfigError::Invalid(format!(
                "`{other}` is not rate or event-time"
            ))),
        }
    }
}

fn one_ms() -> EpochLen {
    EpochLen::MS
}

/// How a run paces its input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pace {
    /// Measured epoch `e` goes in `e` epoch lengths after the start, whether or not the job
    /// keeps up:
    /// latencies are what users of the job would feel.
    #[default]
    OpenLoop,
    /// Each epoch goes in as soon as the output is at most [`MAX_PACE_AHEAD`] epochs behind:
    /// as fast as the job can go. Latencies then measure nothing.
    Max,
}

/// What an open-loop worker with nothing to do does until its next epoch is due.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Idle {
    /// Keep stepping: the lowest latency, a core per worker always busy.
    #[default]
    Spin,
    /// Once every epoch sent is out, wait for news (timely wakes a worker when data or
    /// progress arrives) until a little before the next epoch is due: little CPU at low
    /// rates, but a parked core can wake late (README, *Usage*).
    Park,
}

impl Idle {
    fn is_spin(&self) -> bool {
        *self == Idle::Spin
    }
}

impl std::str::FromStr for Idle {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "spin" => Ok(Idle::Spin),
            "park" => Ok(Idle::Park),
            other => Err(ConfigError::Invalid(format!("`{other}` is not spin or park"))),
        }
    }
}

/// How a worker's records become logical times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpochMode {
    /// Every epoch is a logical time of its own and goes in once it closes: a record waits
    /// for its epoch to close (half an epoch on average), and every run has the same times
    /// (and so the same `output_digest`).
    #[default]
    Fixed,
    /// Adaptive epochs: each worker sends, as one logical time, every record that came due
    /// since its last batch, once the output has passed that batch. A batch is as long as
    /// the job took with the last one: short when the job is light (a record waits for one
    /// turn of the loop, not half an epoch), long when it is loaded (fewer times, each
    /// costing its progress round once), up to 1 ms; a worker behind by more has up to 32
    /// such batches in flight. A batch takes the time of its first epoch, so each
    /// record goes in at or before its own epoch, and its latency (measured once the output
    /// passes its epoch) is never taken before it is done. The times depend on how fast
    /// the run went, so only jobs whose outputs do not read them may run so
    /// ([`crate::job::Job::allows_adaptive_epochs`]: counts, maps, symmetric joins; not
    /// windows or auction closings), and `output_digest` hashes the outputs without their
    /// times.
    Adaptive,
}

impl EpochMode {
    fn is_fixed(&self) -> bool {
        *self == EpochMode::Fixed
    }
}

impl std::str::FromStr for EpochMode {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fixed" => Ok(EpochMode::Fixed),
            "adaptive" => Ok(EpochMode::Adaptive),
            other => Err(ConfigError::Invalid(format!(
                "`{other}` is not fixed or adaptive"
            ))),
        }
    }
}

/// What [`EpochMode`]'s `FromStr` reads back.
impl std::fmt::Display for EpochMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EpochMode::Fixed => "fixed",
            EpochMode::Adaptive => "adaptive",
        })
    }
}

/// Epochs a [`Pace::Max`] run keeps unfinished at once: enough that workers which share cores
/// (and so wait for the scheduler to meet) are not held up each epoch.
pub const MAX_PACE_AHEAD: u64 = 100;

impl Pace {
    fn is_open_loop(&self) -> bool {
        *self == Pace::OpenLoop
    }
}

/// A command the run takes when its control input reaches measured epoch `epoch` (logical
/// time `base + epoch`). A plan waits, as `--migrate` plans do, for the running one to end.
#[derive(Clone, Debug, PartialEq)]
pub struct Scripted {
    /// The measured epoch: the logical time less the preload's `base`.
    pub epoch: u64,
    /// The command taken there.
    pub command: Command,
}

fn one() -> usize {
    1
}

fn recovery() -> Schedule {
    DEFAULT_RECOVERY
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            workload: "keycount".to_string(),
            workers: 2,
            bins: Bins::new(crate::bins::DEFAULT_BINS).unwrap_or_else(|_| unreachable!()),
            rate: 200_000,
            duration: Duration::from_secs(10),
            seed: 42,
            native: false,
            preload: true,
            migrations: Vec::new(),
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            params: ParamValues::new(),
            timely_args: Vec::new(),
            replicas: 1,
            failures: Vec::new(),
            rejoins: Vec::new(),
            recovery: DEFAULT_RECOVERY,
            panics: Vec::new(),
            pace: Pace::OpenLoop,
            idle: Idle::Spin,
            epoch: EpochLen::default(),
            epoch_mode: EpochMode::Fixed,
            script: Vec::new(),
            input: None,
            pacing: Pacing::Rate,
            speed: 1.0,
            output: None,
            replace_output: false,
            cluster_wait: CLUSTER_WAIT,
            peer_timeout: crate::membership::SILENCE_LIMIT,
            coordinator_port: None,
            cluster_secret: crate::membership::Secret::none(),
            join: false,
            drain: None,
            drain_ends: None,
            even_rebalances: false,
            max_line_bytes: crate::source::DEFAULT_MAX_LINE_BYTES,
            check_serde: false,
            balance: BalanceConfig::default(),
            placement: None,
        }
    }
}

/// A worker and a point in the run: `W@SECS` (`--fail 1@7`, `--rejoin 1@12`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkerAt {
    /// A worker's index in the whole job.
    pub worker: usize,
    /// Seconds since the measured run began.
    pub at_secs: f64,
}

impl FromStr for WorkerAt {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| ConfigError::Invalid(format!("malformed `{s}`: {reason}"));
        let (worker, secs) = s
            .split_once('@')
            .ok_or_else(|| bad("expected WORKER@SECS, e.g. 1@7"))?;
        let worker = worker
            .parse::<usize>()
            .map_err(|_| bad(&format!("`{worker}` is not a worker index")))?;
        let at_secs = secs
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| bad(&format!("`{secs}` is not a time in seconds")))?;
        Ok(WorkerAt { worker, at_secs })
    }
}

impl fmt::Display for WorkerAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.worker, self.at_secs)
    }
}

/// Serde forms of [`RunConfig`]'s fields that have a textual form of their own.
pub(super) mod text {
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

mod optional_text {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<T: Display, S: Serializer>(value: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => s.collect_str(v),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<Option<T>, D::Error>
    where
        T: FromStr<Err: Display>,
        D: Deserializer<'de>,
    {
        Option::<String>::deserialize(d)?
            .map(|v| v.parse().map_err(D::Error::custom))
            .transpose()
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

/// Checks the configuration without starting anything.
pub fn validate(config: &RunConfig) -> Result<(), ConfigError> {
    let invalid = |m: String| Err(ConfigError::Invalid(m));
    if config.workers == 0 {
        return invalid("--workers must be at least 1".into());
    }
    if config.rate == 0 {
        return invalid("--rate must be at least 1".into());
    }
    if config.chunk_bytes == 0 {
        return invalid("the chunk size must be at least 1 byte".into());
    }
    if config.max_line_bytes == 0 {
        return invalid("--max-line-bytes must be at least 1".into());
    }
    if let (Some(output), Some(Location::File(input) | Location::Stream(input))) = (
        config.output.as_ref().and_then(|o| o.file()),
        config.input.as_ref().map(Input::location),
    ) && crate::files::same_file(output, &input)
    {
        return invalid(format!(
            "--output {} is the --input file: writing it would destroy what the job reads",
            output.display()
        ));
    }
    if config.native && !config.migrations.is_empty() {
        return invalid("--native runs cannot migrate: drop --migrate or --native".into());
    }
    if config.native && (config.replicas > 1 || !config.failures.is_empty() || !config.rejoins.is_empty()) {
        return invalid("--native runs have no replicas and cannot fail workers: drop --native".into());
    }
    if !(1..=MAX_REPLICAS).contains(&config.replicas) {
        return invalid(format!(
            "--replicas {} is not supported (1, or 2 for a primary and a standby per bin)",
            config.replicas
        ));
    }
    // Targets and workers are checked against the whole job's worker count.
    let (_, processes) = timely_config(config)?;
    if !(config.speed.is_finite() && config.speed > 0.0) {
        return invalid(format!("--speed {} is not a positive factor", config.speed));
    }
    if config.pacing == Pacing::EventTime && !config.input.as_ref().is_some_and(Input::rereadable) {
        return invalid(
            "--pace event-time paces records read from a file (--input FILE) or a topic up to an end (?end=now); records from a stream are due when they arrive"
                .into(),
        );
    }
    let peers = config.workers * processes;
    if config.replicas > peers {
        return invalid(format!(
            "--replicas {} needs at least {} workers, the job has {peers}",
            config.replicas, config.replicas
        ));
    }
    for w in config
        .failures
        .iter()
        .chain(&config.rejoins)
        .chain(&config.panics)
    {
        if w.worker >= peers {
            return invalid(format!(
                "`{w}` names worker {} but the job has {peers} workers (0..{})",
                w.worker,
                peers - 1
            ));
        }
    }
    config.balance.validate()?;
    let start = initial_placement(config, peers)?;
    let map: Vec<u32> = start.iter().map(|r| r.primary).collect();
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

/// Where the bins start in a job of `peers` workers: uniform (with standbys chained into
/// other processes under `--replicas 2`), or as `--placement` says.
pub fn initial_placement(config: &RunConfig, peers: usize) -> Result<crate::config::Placement, ConfigError> {
    let map = uniform(config.bins.count(), peers);
    let uniform = if config.replicas > 1 {
        crate::config::replicated(&map, peers, config.workers)
    } else {
        crate::config::single(&map)
    };
    match &config.placement {
        None => Ok(uniform),
        Some(Target::Balance) => Err(ConfigError::Invalid(
            "--placement balance: nothing is measured before the run starts; use uniform, pack:N, drain:W or map:...".to_string(),
        )),
        Some(target) => target
            .goal(&uniform, peers, config.workers, &vec![true; peers])
            .map_err(|e| ConfigError::Invalid(format!("--placement {target}: {e}"))),
    }
}

/// Refuses a run whose state, `state` bytes in all as the job foresees it
/// ([`crate::job::Job::state_bytes`], with what it holds), cannot fit in this machine's
/// `memory` (its share of it, in a cluster), before the preload fills it for minutes and
/// the system kills the job.
pub(crate) fn check_memory(
    config: &RunConfig,
    state: Option<(u64, String)>,
    memory: Option<u64>,
) -> Result<(), ConfigError> {
    let processes = timely_config(config)?.1;
    let (Some((bytes, what)), Some(memory)) = (state, memory) else {
        return Ok(());
    };
    let needed = (bytes / processes.max(1) as u64).saturating_mul(config.replicas as u64);
    if needed > memory {
        return Err(ConfigError::Invalid(format!(
            "{} needs about {} of state in this process ({what}{}), more than this machine's {}",
            config.workload,
            crate::size::human(needed),
            if config.replicas > 1 {
                ", twice with --replicas 2"
            } else {
                ""
            },
            crate::size::human(memory)
        )));
    }
    Ok(())
}

fn timely_args(config: &RunConfig) -> Vec<String> {
    let mut args = vec!["-w".to_string(), config.workers.to_string()];
    args.extend(config.timely_args.iter().cloned());
    args
}

/// Timely's configuration for the run, and the number of processes in the job.
pub(crate) fn timely_config(config: &RunConfig) -> Result<(timely::Config, usize), ConfigError> {
    let (timely, cluster) = parse_cluster(config)?;
    Ok((timely, cluster.processes))
}

/// Timely's configuration for the run, and the address of every process (empty for one).
pub(crate) fn cluster(config: &RunConfig) -> Result<(timely::Config, Vec<String>), ConfigError> {
    let (timely, cluster) = parse_cluster(config)?;
    Ok((timely, cluster.addresses))
}

/// Where a process stands in its job, as timely reads its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// Timely processes in the job (`-n`).
    pub processes: usize,
    /// This process's index.
    pub process: usize,
    /// Every process's address (empty for one process).
    pub addresses: Vec<String>,
}

/// The cluster timely's arguments (`-n`, `-p`, `-h`, in any of the forms timely's own parser
/// takes: `-n 2`, `-n2`, `--processes=2`) describe: the one parser of them in megaflux.
pub fn cluster_position(timely_args: &[String]) -> Result<Cluster, ConfigError> {
    let config = RunConfig {
        timely_args: timely_args.to_vec(),
        ..RunConfig::default()
    };
    Ok(parse_cluster(&config)?.1)
}

fn parse_cluster(config: &RunConfig) -> Result<(timely::Config, Cluster), ConfigError> {
    let args = timely_args(config);
    let bad = |e: String| ConfigError::Invalid(format!("bad timely arguments {:?}: {e}", config.timely_args));
    // Only the communication parser reports left-over words; timely's own ignores them.
    let (communication, free) = timely::CommunicationConfig::from_args(args.iter().cloned()).map_err(bad)?;
    if !free.is_empty() {
        return Err(bad(format!("unexpected {free:?}")));
    }
    // Timely builds a cluster only for more than one process, so `-p` with one process is
    // checked against timely's own option table here.
    let mut options = getopts::Options::new();
    timely::CommunicationConfig::install_options(&mut options);
    if let Ok(matches) = options.parse(&args) {
        let process = matches
            .opt_get_default("p", 0usize)
            .map_err(|e: std::num::ParseIntError| bad(e.to_string()))?;
        let processes = matches
            .opt_get_default("n", 1usize)
            .map_err(|e: std::num::ParseIntError| bad(e.to_string()))?;
        if process >= processes {
            return Err(bad(format!(
                "-p {process} is not a process of -n {processes}: processes are numbered 0 to {}",
                processes.saturating_sub(1)
            )));
        }
    }
    let cluster = match communication {
        timely::CommunicationConfig::Cluster {
            process, addresses, ..
        } => {
            if process >= addresses.len() {
                return Err(bad(format!(
                    "-p {process} is not a process of -n {}: processes are numbered 0 to {}",
                    addresses.len(),
                    addresses.len() - 1
                )));
            }
            Cluster {
                processes: addresses.len(),
                process,
                addresses,
            }
        }
        _ => Cluster {
            processes: 1,
            process: 0,
            addresses: Vec::new(),
        },
    };
    Ok((timely::Config::from_args(args.into_iter()).map_err(bad)?, cluster))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_points_parse() {
        let w: WorkerAt = "1@7.5".parse().unwrap();
        assert_eq!((w.worker, w.at_secs), (1, 7.5));
        assert_eq!(w.to_string(), "1@7.5");
        for bad in ["1", "x@1", "1@-2", "1@x", "@3"] {
            assert!(bad.parse::<WorkerAt>().is_err(), "{bad}");
        }
    }

    #[test]
    fn replicas_and_failures_are_checked() {
        let ok = RunConfig {
            replicas: 2,
            failures: vec!["1@3".parse().unwrap()],
            ..RunConfig::default()
        };
        assert!(validate(&ok).is_ok());
        for bad in [
            RunConfig {
                replicas: 3,
                ..ok.clone()
            },
            RunConfig {
                replicas: 0,
                ..ok.clone()
            },
            RunConfig {
                workers: 1,
                ..ok.clone()
            },
            RunConfig {
                failures: vec!["2@1".parse().unwrap()],
                ..ok.clone()
            },
            RunConfig {
                native: true,
                ..ok.clone()
            },
        ] {
            assert!(validate(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn state_must_fit_in_memory() {
        let config = |processes: usize| RunConfig {
            workload: "hashcount".into(),
            timely_args: if processes > 1 {
                ["-n", &processes.to_string(), "-p", "0"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            } else {
                Vec::new()
            },
            ..RunConfig::default()
        };
        let gib = 1u64 << 30;
        let state = |bytes: u64| Some((bytes, format!("{} keys", bytes / 32)));
        assert!(check_memory(&config(1), state(1 << 25), Some(gib)).is_ok());
        let e = check_memory(&config(1), state(1 << 35), Some(gib))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("hashcount needs about 32.0 GiB of state in this process (1073741824 keys)"),
            "{e}"
        );
        // Spread over 64 processes, each holds 0.5 GiB.
        assert!(check_memory(&config(64), state(1 << 35), Some(gib)).is_ok());
        assert!(check_memory(&config(1), state(u64::MAX), Some(gib)).is_err());
        assert!(check_memory(&config(1), state(u64::MAX), None).is_ok());
        assert!(check_memory(&config(1), None, Some(gib)).is_ok());
    }

    #[test]
    fn the_cluster_is_read_as_timely_reads_it() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for forms in [
            args(&["-n", "2", "-p", "1"]),
            args(&["-n2", "-p1"]),
            args(&["--processes=2", "--process=1"]),
        ] {
            let c = cluster_position(&forms).unwrap();
            assert_eq!(
                (c.processes, c.process, c.addresses.len()),
                (2, 1, 2),
                "{forms:?}"
            );
        }
        assert_eq!(cluster_position(&[]).unwrap().processes, 1);
        for bad in [
            args(&["-n", "2", "-p", "2"]),
            args(&["-n", "x"]),
            args(&["stray"]),
        ] {
            let e = cluster_position(&bad).unwrap_err().to_string();
            assert!(e.contains("bad timely arguments"), "{bad:?}: {e}");
        }
        let e = cluster_position(&args(&["-n", "2", "-p", "2"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("-p 2 is not a process of -n 2"), "{e}");
        // One process: timely ignores -p, megaflux does not.
        for one in [args(&["-p", "3"]), args(&["-n", "1", "-p", "1"])] {
            let e = cluster_position(&one).unwrap_err().to_string();
            assert!(e.contains("is not a process of -n 1"), "{one:?}: {e}");
        }
    }

    #[test]
    fn old_headers_read_with_defaults() {
        let mut json = serde_json::to_value(RunConfig::default()).unwrap();
        for field in ["replicas", "failures", "rejoins", "recovery", "panics", "balance"] {
            json.as_object_mut().unwrap().remove(field);
        }
        let back: RunConfig = serde_json::from_value(json).unwrap();
        assert_eq!(back, RunConfig::default());
    }

    #[test]
    fn balance_placement_and_params_read_back_as_written() {
        let config = RunConfig {
            placement: Some(Target::Pack(1)),
            params: ParamValues::new()
                .with("skew", "zipf:1.5")
                .with("skew-shift", 30.0),
            balance: BalanceConfig {
                mode: super::super::balancer::BalanceMode::Auto,
                threshold: 1.5,
                every_s: 4.0,
                strategy: DEFAULT_RECOVERY,
                max_bytes: 64 << 20,
            },
            ..RunConfig::default()
        };
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(json["params"]["skew"], "zipf:1.5");
        assert_eq!(json["params"]["skew-shift"], "30");
        assert_eq!(json["placement"], "pack:1");
        assert_eq!(json["balance"]["mode"], "auto");
        assert_eq!(json["balance"]["strategy"], "matched");
        let back: RunConfig = serde_json::from_value(json).unwrap();
        assert_eq!(back, config);
        let plain = serde_json::to_value(RunConfig::default()).unwrap();
        for absent in ["params", "placement"] {
            assert!(plain.get(absent).is_none(), "{absent}");
        }
    }
}
