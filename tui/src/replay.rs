//! `megaflux replay FILE`: the dashboard over a recorded trace, with a timeline to play,
//! pause, seek and step; or, with `--rerun`, the recorded job run again and compared.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use megaflux::control::ControlHandle;
use megaflux::harness::{Pace, RunError};
use megaflux::job::Jobs;
use megaflux::plan::Schedule;
use megaflux_probe::wire::TOKEN_ENV;
use megaflux_replay::ReplayError;
use megaflux_replay::compare::Comparison;
use megaflux_replay::rerun::{Limits, MAX_DURATION, MAX_WORKERS, Options, Recording};

use crate::flags;
use crate::observe::{self, ProbeArgs};
use crate::session::{self, LOOPBACK_ANY, Shown};

/// `megaflux replay`'s arguments: the trace, and what a `--rerun` changes and writes.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The trace (`megaflux run --record FILE`).
    file: PathBuf,
    /// Run the recorded job again, taking its commands at their logical times, and compare
    /// the two runs (exit 0: same outputs, 1: they differ, 2: bad input).
    #[arg(long)]
    rerun: bool,
    /// Re-plan every recorded migration with this schedule (same target, same start).
    #[arg(long, requires = "rerun", value_parser = flags::schedule)]
    strategy: Option<Schedule>,
    /// Recoveries and rebalances with this schedule.
    #[arg(long, requires = "rerun", value_parser = flags::schedule)]
    recovery: Option<Schedule>,
    /// `recorded`: the recorded input rate, so that latencies compare; `max`: as fast as the
    /// job goes.
    #[arg(long, requires = "rerun", value_enum, default_value_t = Speed::Recorded)]
    speed: Speed,
    /// Record the re-run to this trace file.
    #[arg(long, requires = "rerun", value_name = "FILE")]
    record: Option<PathBuf>,
    /// Write the re-run's outputs to this file, one JSON line each, or to a PostgreSQL
    /// table (as `run --output`).
    #[arg(long, requires = "rerun", value_name = "FILE|URL")]
    output: Option<megaflux::sink::Output>,
    /// Let --record and --output replace existing files.
    #[arg(long)]
    force: bool,
    /// Watch the re-run on the live dashboard.
    #[arg(long, requires = "rerun")]
    watch: bool,
    /// The most worker threads the re-run starts over all its processes: a trace whose header
    /// asks for more is refused [default: 256].
    #[arg(long, requires = "rerun", value_name = "N")]
    max_workers: Option<usize>,
    /// The longest the re-run's measured run may last, in seconds: a trace whose run (or a
    /// command in it) lasts longer is refused [default: 3600].
    #[arg(long, requires = "rerun", value_name = "SECS")]
    max_duration: Option<u64>,
    /// Arguments for timely, to re-run on a cluster: -n PROCESSES -p INDEX -h HOSTFILE.
    #[arg(last = true, value_name = "TIMELY_ARGS")]
    timely: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Speed {
    Recorded,
    Max,
}

/// Runs `megaflux replay` (a re-run with one of `jobs`).
pub fn replay(args: ReplayArgs, jobs: &Jobs) -> ExitCode {
    if !args.rerun {
        observe::install_tracing(None, false);
        return report(watch(&args.file), "watching the trace");
    }
    match rerun(&args, jobs) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(status(&e))
        }
    }
}

fn report(result: anyhow::Result<()>, what: &str) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {what}: {e:#}");
            ExitCode::from(status(&e))
        }
    }
}

/// 2 for bad input (the trace, the settings), the run's own status otherwise.
fn status(e: &anyhow::Error) -> u8 {
    if let Some(r) = e.downcast_ref::<ReplayError>() {
        return if r.is_bad_input() { 2 } else { 1 };
    }
    e.downcast_ref::<RunError>().map_or(1, RunError::exit_status)
}

/// The time machine: the dashboard over the trace.
fn watch(path: &Path) -> anyhow::Result<()> {
    crate::dash::replay::run(path)
}

/// Re-runs the recorded job with its job from `jobs`; returns whether the outputs matched.
fn rerun(args: &ReplayArgs, jobs: &Jobs) -> anyhow::Result<bool> {
    let recording = Recording::read(&args.file)?;
    let name = &recording.config.workload;
    let Some(job) = jobs.get(name) else {
        return Err(ReplayError::Rerun(format!(
            "{}: the trace is of the job `{name}`, which this binary does not have (it runs {}): re-run it with the binary that ran it (its own `replay --rerun`)",
            args.file.display(),
            jobs.names().join(", ")
        ))
        .into());
    };
    let options = Options {
        strategy: args.strategy,
        recovery: args.recovery,
        pace: match args.speed {
            Speed::Recorded => Pace::OpenLoop,
            Speed::Max => Pace::Max,
        },
        timely_args: args.timely.clone(),
        limits: Limits {
            max_workers: args.max_workers.unwrap_or(MAX_WORKERS),
            max_duration: args
                .max_duration
                .map_or(MAX_DURATION, std::time::Duration::from_secs),
        },
    };
    if !recording.unreadable.is_empty() {
        eprintln!(
            "megaflux: warning: {}: {}; commands on them are not taken again",
            args.file.display(),
            recording.unreadable
        );
    }
    let mut config = recording.rerun(&options)?;
    if recording.older {
        let declared = job.params();
        config.params.retain(|name| declared.declares(name));
    }
    config.output = args.output.clone();
    config.replace_output = args.force;
    job.check(&config)
        .map_err(|e| ReplayError::Rerun(e.to_string()))?;
    let dashboard = args.watch && std::io::stdout().is_terminal();
    if args.watch && !dashboard {
        eprintln!("megaflux: stdout is not a terminal, so no dashboard: re-running headless");
    }
    eprintln!(
        "megaflux: re-running {}: {} for {} s on {} worker(s) per process, {} recorded command(s) at their logical times{}{}",
        args.file.display(),
        config.workload,
        config.duration.as_secs_f64(),
        config.workers,
        config.script.len(),
        match options.pace {
            Pace::Max => ", as fast as it goes",
            Pace::OpenLoop => ", at the recorded rate",
        },
        if recording.rejected > 0 {
            format!(" ({} rejected ones left out)", recording.rejected)
        } else {
            String::new()
        }
    );
    if let Some(beside) = &recording.input_beside {
        eprintln!(
            "megaflux: note: the recorded input file is no longer where it was read; the re-run reads {beside}, beside the trace (checked to be the same size and hash)"
        );
    }
    if let Some((lost, from, after)) = &recording.restarted {
        eprintln!(
            "megaflux: note: the recorded run restarted after process {lost} went away (from logical time {from}); the re-run does not crash a process, and leaves out the {after} command(s) taken after the restart (they name the restarted computation's workers); a restart changes no output, so the outputs still compare"
        );
    }
    if recording.gaps {
        eprintln!(
            "megaflux: warning: the recording was paused or lost events, so commands the job took then may be missing from the re-run"
        );
    }
    let probe = ProbeArgs {
        record: args.record.clone(),
        serve: dashboard.then_some(LOOPBACK_ANY),
        export: None,
        metrics: None,
        metrics_linger: std::time::Duration::ZERO,
        token: std::env::var(TOKEN_ENV).ok(),
        force: args.force,
        lifecycle: !dashboard,
    };
    // The re-run's header says every flag of the job's own, as the run will take them (an
    // older trace's header had only some).
    config.params = job.params().resolve(job.name(), &config.params)?;
    let control = ControlHandle::new();
    let observer = observe::start(&config, &probe, &control)?;
    let shown = if dashboard {
        Shown::Dashboard
    } else {
        Shown::Progress
    };
    let (ran, finished) = session::run(job, config, observer, shown, &probe, control);
    let ran = ran?;
    finished?;
    let Some(summary) = ran else {
        // A cluster's other processes: process 0 compares.
        eprintln!("megaflux: this process's part of the re-run is done; process 0 compares the runs");
        return Ok(true);
    };
    let comparison = Comparison {
        recorded: &recording.summary,
        rerun: &summary,
        recorded_latency: recording.config.pace == Pace::OpenLoop,
        rerun_latency: options.pace == Pace::OpenLoop,
    };
    print!("{}", comparison.table());
    println!("{}", serde_json::to_string(&summary)?);
    // A re-run's measured seconds may fall a little short of the recorded ones (adaptive
    // epochs close where their batches fell) with the same outputs: only a re-run that took
    // in fewer records than its recording was cut short.
    if !comparison.digests_match() {
        if summary.records_in < recording.summary.records_in {
            eprintln!(
                "megaflux: the re-run stopped after {:.1} of {:.1} s and {} of {} records (the dashboard quit): its outputs cannot match",
                summary.duration_s,
                recording.summary.duration_s,
                summary.records_in,
                recording.summary.records_in
            );
        } else {
            let unit = recording.config.epoch.unit();
            eprintln!(
                "megaflux: the re-run's outputs differ from the recorded run's: {}",
                comparison.parting_words(&unit)
            );
        }
    }
    Ok(comparison.digests_match())
}
