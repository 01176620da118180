//! A recorded job, ready to run again: the job from the trace's header, and every command
//! it took (`--migrate` plans, failures, rejoins, a person's moves) at the logical time it
//! took it. Migrations never change a job's outputs, so a re-run, with the recorded
//! strategies or with others, must give the recorded output digest;
//! [`crate::compare`] sets the two runs side by side.
//!
//! A trace is untrusted input: its header does not choose how many threads a re-run starts
//! or how long it runs beyond [`Limits`] (which flags lift), and its numbers are combined
//! with checked arithmetic. Lines that cannot be read are skipped and named
//! ([`Recording::unreadable`]).

use std::path::Path;
use std::time::Duration;

use megaflux::harness::balancer::BalanceMode;
use megaflux::harness::{Pace, RunConfig, Scripted};
use megaflux::plan::Schedule;
use megaflux::summary::Summary;
use megaflux::{Time, control::Command};
use megaflux_probe::event::{Event, Outcome};
use megaflux_probe::record::{BadLines, TraceReader, Unreadable};
use megaflux_probe::wire::CommandRequest;

use crate::error::{ReplayError, RerunLimit};

/// The most workers a re-run starts, over all its processes, unless its [`Limits`] say more.
pub const MAX_WORKERS: usize = 256;
/// The most bins a trace's commands may name in all (each a word of memory while the
/// re-run holds them): millions of moves, far more than a real run's.
pub const MAX_LISTED_BINS: usize = 1 << 22;
/// The longest a re-run's measured run lasts, unless its [`Limits`] say more: an hour.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);

/// How far a re-run follows its trace: no more workers and no longer than these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Worker threads over all the re-run's processes.
    pub max_workers: usize,
    /// The length of the measured run; commands recorded at epochs past it are refused too.
    pub max_duration: Duration,
}

impl Limits {
    /// [`MAX_WORKERS`] and [`MAX_DURATION`].
    pub const DEFAULT: Limits = Limits {
        max_workers: MAX_WORKERS,
        max_duration: MAX_DURATION,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// What to change in a re-run.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Every recorded plan re-planned with this schedule (same target, same start).
    pub strategy: Option<Schedule>,
    /// Recoveries and rebalances with this schedule.
    pub recovery: Option<Schedule>,
    /// How the re-run paces its input: [`Pace::OpenLoop`] at the recorded rate, or
    /// [`Pace::Max`] as fast as it goes (whose latencies measure nothing).
    pub pace: Pace,
    /// Timely's arguments for the re-run; without them every worker of the recorded job runs
    /// in this process.
    pub timely_args: Vec<String>,
    /// How many workers and how long the trace may make the re-run run.
    pub limits: Limits,
}

/// A recorded job and what became of it.
#[derive(Clone, Debug)]
pub struct Recording {
    /// The job as recorded, its own timed migrations, failures and rejoins left out: the
    /// recorded commands replace them.
    pub config: RunConfig,
    /// The commands the job took, at their measured epochs.
    pub script: Vec<Scripted>,
    /// The recorded job's processes.
    pub processes: usize,
    /// The summary the trace ends with: what a re-run is compared with (its `duration_s`
    /// also sets the re-run's duration).
    pub summary: Summary,
    /// Commands the job rejected (not taken again).
    pub rejected: usize,
    /// The recording was paused or lost events: commands may be missing from the script.
    pub gaps: bool,
    /// Lines of the trace that could not be read, skipped: commands on them are missing
    /// from the script.
    pub unreadable: Unreadable,
    /// The recorded run's first restart after a crash (processes lost, the committed time it
    /// restarted from), and the commands taken after it, which are left out: they name the
    /// workers of the restarted computation, numbered afresh. A re-run does not crash a
    /// process; a restart changes no output, so the outputs still compare.
    pub restarted: Option<(String, Time, usize)>,
    /// The trace is from before jobs had flags of their own: `config.params` holds every
    /// setting that became a flag ([`megaflux::workload::upgrade_header`]), of which the
    /// job keeps those it declares.
    pub older: bool,
    /// The file the job read is no longer where it was recorded: the re-run reads the file
    /// of the same name beside the trace (this path), once its size and hash match.
    pub input_beside: Option<String>,
}

impl Recording {
    /// Reads the job and its commands from the trace at `path`.
    pub fn read(path: &Path) -> Result<Recording, ReplayError> {
        let mut reader = TraceReader::open(path)?;
        reader.set_bad_lines(BadLines::Skip);
        let name = path.display().to_string();
        let bad = |why: String| ReplayError::Rerun(format!("{name}: {why}"));
        let header = reader.header().clone();
        let mut job = header.config.clone();
        // Traces from before jobs had flags of their own: their settings become flags.
        let older = megaflux::workload::upgrade_header(&mut job);
        let mut config: RunConfig =
            serde_json::from_value(job).map_err(|e| bad(format!("the header's job cannot be read: {e}")))?;
        if config.native {
            return Err(bad("a --native run has no migrations to re-run".into()));
        }
        let mut base: Option<Time> = None;
        let mut taken: Vec<(Time, Command, usize)> = Vec::new();
        let mut rejected = 0;
        let mut listed = 0usize;
        let mut gaps = false;
        let mut summary = None;
        let mut restarted: Option<(String, Time, usize)> = None;
        while let Some(stamped) = reader.next_event()? {
            let line = reader.line();
            match stamped.event {
                Event::Restart { lost, from, .. } => {
                    restarted.get_or_insert((lost, from, 0));
                }
                Event::Command {
                    outcome: Outcome::Applied,
                    ..
                } if restarted.is_some() => {
                    if let Some((_, _, after)) = restarted.as_mut() {
                        *after += 1;
                    }
                }
                Event::JobStarted { base: b, .. } => {
                    base.get_or_insert(b);
                }
                Event::Command {
                    outcome: Outcome::Applied,
                    time: Some(time),
                    request,
                    ..
                } => {
                    let request = request.ok_or_else(|| {
                        bad(format!(
                            "line {line}: the command has no `request` (traces of format version 1 cannot be re-run)"
                        ))
                    })?;
                    let command = serde_json::from_value::<CommandRequest>(request)
                        .map_err(|e| e.to_string())
                        .and_then(|r| r.to_command())
                        .map_err(|e| {
                            bad(format!("line {line}: a command that cannot be taken again: {e}"))
                        })?;
                    // A few bytes can name thousands of bins (`0-65535`): the commands kept
                    // are budgeted by the bins they name, not by their lines.
                    listed = listed.saturating_add(command_bins(&command));
                    if listed > MAX_LISTED_BINS {
                        return Err(bad(format!(
                            "line {line}: the trace's commands name more than {MAX_LISTED_BINS} bins in all"
                        )));
                    }
                    // The recorded balancer's plans are among the commands: the re-run's own
                    // would add others (as for `--balance auto`, below).
                    let command = match command {
                        Command::Balance {
                            mode: BalanceMode::Auto,
                        } => Command::Balance {
                            mode: BalanceMode::Suggest,
                        },
                        other => other,
                    };
                    taken.push((time, command, line));
                }
                Event::Command {
                    outcome: Outcome::Rejected,
                    time: Some(_),
                    ..
                } => rejected += 1,
                Event::Recording { on: false, .. } | Event::Dropped { .. } => gaps = true,
                Event::Summary { summary: s } => {
                    summary = Some(
                        serde_json::from_value::<Summary>(s)
                            .map_err(|e| bad(format!("line {line}: the summary cannot be read: {e}")))?,
                    );
                }
                _ => {}
            }
        }
        let summary = summary.ok_or_else(|| {
            bad("no summary at its end: the run was cut short or failed, so a re-run has nothing to compare with".into())
        })?;
        let recorded_base = base;
        let base = match (base, taken.first()) {
            (Some(b), _) => b,
            (None, None) => 0,
            (None, Some(_)) => {
                return Err(bad(
                    "commands but no `job_started` event: their epochs are unknown".into(),
                ));
            }
        };
        let peers = header.peers as usize;
        let mut script = Vec::with_capacity(taken.len());
        for (time, command, line) in taken {
            check_workers(&command, peers).map_err(|e| bad(format!("line {line}: {e}")))?;
            script.push(Scripted {
                epoch: measured_epoch(time, base).map_err(|e| bad(format!("line {line}: {e}")))?,
                command,
            });
        }
        config.migrations.clear();
        // The recorded balancer's plans are among the commands; the re-run's own would
        // add others (its loads differ).
        if config.balance.mode == BalanceMode::Auto {
            config.balance.mode = BalanceMode::Suggest;
        }
        // A run whose rebalances after a rejoin spread evenly (one from before they were
        // placed by load, or one whose balancer was off) is re-run so, moving the same bins;
        // one placed by load is placed by the re-run's own loads (the outputs are the same).
        config.even_rebalances = !summary
            .migrations
            .iter()
            .any(|m| m.target == megaflux::driver::REBALANCED_BY_LOAD);
        config.failures.clear();
        config.rejoins.clear();
        config.panics.clear();
        // A run stopped early covers fewer epochs than it was given.
        config.duration = std::time::Duration::try_from_secs_f64(summary.duration_s)
            .map_err(|e| bad(format!("the summary's duration: {e}")))?;
        // And it drains as far as the recorded run did: to the gate it ended at (counted from
        // the measured run's base, where its epochs start), whether its drain completed, was
        // cut by the clock or a stop, or reached its horizon.
        config.drain_ends = summary
            .drain
            .as_ref()
            .zip(recorded_base)
            .map(|(d, base)| d.ended_at.saturating_sub(base));
        let input_beside = match (&mut config.input, path.parent()) {
            (Some(input), Some(dir)) => {
                let dir = if dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    dir
                };
                input.look_beside(dir).then(|| input.name())
            }
            _ => None,
        };
        Ok(Recording {
            input_beside,
            config,
            script,
            processes: (header.processes as usize).max(1),
            summary,
            rejected,
            gaps,
            unreadable: reader.unreadable().clone(),
            restarted,
            older,
        })
    }

    /// The job to run again with `options`. A job that read a file reads it again, once
    /// it is checked to be the same file (its size and hash in the header); one that read a
    /// stream cannot be re-run: its records were not recorded. A job of more workers, or
    /// longer, than `options.limits` allow, or with commands past its duration's limit, is
    /// refused ([`RerunLimit`]).
    pub fn rerun(&self, options: &Options) -> Result<RunConfig, ReplayError> {
        let mut config = self.config.clone();
        check_input(&config)?;
        config.pace = options.pace;
        if let Some(recovery) = options.recovery {
            config.recovery = recovery;
        }
        config.timely_args = options.timely_args.clone();
        if options.timely_args.is_empty() && self.processes > 1 {
            // Standbys are placed on the next process: one process would place them elsewhere.
            if config.replicas > 1 {
                return Err(ReplayError::Rerun(format!(
                    "its job ran on {} processes with replicas, whose standbys are placed by process: re-run it on as many (timely's -n/-p/-h after --)",
                    self.processes
                )));
            }
            let workers = config.workers.checked_mul(self.processes);
            config.workers = workers.ok_or(RerunLimit::WorkersOverflow {
                workers: config.workers,
                processes: self.processes,
            })?;
        }
        check_limits(&config, &self.script, options.limits)?;
        config.script = self
            .script
            .iter()
            .map(|s| match (&s.command, options.strategy) {
                (Command::StartPlan { target, .. }, Some(schedule)) => Scripted {
                    epoch: s.epoch,
                    command: Command::StartPlan {
                        schedule,
                        target: target.clone(),
                    },
                },
                _ => s.clone(),
            })
            .collect();
        megaflux::harness::validate(&config).map_err(|e| ReplayError::Rerun(e.to_string()))?;
        Ok(config)
    }
}

/// A job that read its records can be re-run only from the same file.
fn check_input(config: &RunConfig) -> Result<(), ReplayError> {
    let Some(input) = &config.input else {
        return Ok(());
    };
    if !input.rereadable() {
        return Err(ReplayError::Rerun(format!(
            "its job read its records from {}, which a trace does not record: it cannot be re-run",
            input.name()
        )));
    }
    input
        .check_unchanged()
        .map_err(|e| ReplayError::Rerun(format!("{e}: a re-run must read the same records")))
}

/// The measured epoch of a command taken at logical `time` in a run whose preload ended at
/// `base`: taken in a turn of the measured loop, at epoch 1 at the earliest. `base + epoch`
/// (where a re-run holds its control input for it) must be a logical time.
fn measured_epoch(time: Time, base: Time) -> Result<u64, RerunLimit> {
    let epoch = time.saturating_sub(base).max(1);
    base.checked_add(epoch)
        .map(|_| epoch)
        .ok_or(RerunLimit::TimeOverflow { base, epoch })
}

/// The re-run's workers (over all its processes), its duration and its commands' epochs
/// within `limits`.
fn check_limits(config: &RunConfig, script: &[Scripted], limits: Limits) -> Result<(), ReplayError> {
    let processes = if config.timely_args.is_empty() {
        1
    } else {
        megaflux::harness::cluster_position(&config.timely_args)
            .map_err(|e| ReplayError::Rerun(e.to_string()))?
            .processes
    };
    let workers = config
        .workers
        .checked_mul(processes)
        .ok_or(RerunLimit::WorkersOverflow {
            workers: config.workers,
            processes,
        })?;
    if workers > limits.max_workers {
        return Err(RerunLimit::Workers {
            workers,
            max: limits.max_workers,
        }
        .into());
    }
    if config.duration > limits.max_duration {
        return Err(RerunLimit::Duration {
            secs: config.duration.as_secs_f64(),
            max: limits.max_duration.as_secs(),
        }
        .into());
    }
    let last = config.epoch.in_duration(limits.max_duration);
    match script.iter().find(|s| s.epoch > last) {
        Some(s) => Err(RerunLimit::Epoch {
            epoch: s.epoch,
            last,
            max: limits.max_duration.as_secs(),
        }
        .into()),
        None => Ok(()),
    }
}

/// Workers a command names must be in the job.
fn check_workers(command: &Command, peers: usize) -> Result<(), String> {
    let worker = match command {
        Command::MoveBins { worker, .. }
        | Command::Fail { worker }
        | Command::Rejoin { worker }
        | Command::Exclude { worker, .. } => *worker,
        Command::StartPlan { .. } | Command::CancelPlan | Command::Balance { .. } | Command::Pin { .. } => {
            return Ok(());
        }
    };
    if peers > 0 && worker >= peers {
        return Err(format!("the command names worker {worker}, the job has {peers}"));
    }
    Ok(())
}
/// The bins `command` names (what holding it costs).
fn command_bins(command: &Command) -> usize {
    match command {
        Command::MoveBins { bins, .. } | Command::Pin { bins, .. } => bins.len(),
        _ => 1,
    }
}
