//! `megaflux replay FILE`: the dashboard over a recorded trace, with a timeline to play,
//! pause, seek and step; or, with `--rerun`, the recorded job run again and compared.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use megaflux::control::ControlHandle;
use megaflux::harness::{self, Pace, RunConfig, RunError};
use megaflux::plan::Schedule;
use megaflux::summary::Summary;
use megaflux_probe::wire::TOKEN_ENV;
use megaflux_replay::ReplayError;
use megaflux_replay::compare::Comparison;
use megaflux_replay::rerun::{Options, Recording};

use crate::cli::{LOOPBACK_ANY, parse_schedule, run_observed};
use crate::observe::{self, ProbeArgs};

/// How often the progress line of a re-run is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The trace (`megaflux run --record FILE`).
    file: PathBuf,
    /// Run the recorded job again, taking its commands at their logical times, and compare
    /// the two runs (exit 0: same outputs, 1: they differ, 2: bad input).
    #[arg(long)]
    rerun: bool,
    /// Re-plan every recorded migration with this schedule (same target, same start).
    #[arg(long, requires = "rerun", value_parser = parse_schedule)]
    strategy: Option<Schedule>,
    /// Recoveries and rebalances with this schedule.
    #[arg(long, requires = "rerun", value_parser = parse_schedule)]
    recovery: Option<Schedule>,
    /// `recorded`: the recorded input rate, so that latencies compare; `max`: as fast as the
    /// job goes.
    #[arg(long, requires = "rerun", value_enum, default_value_t = Speed::Recorded)]
    speed: Speed,
    /// Record the re-run to this trace file.
    #[arg(long, requires = "rerun", value_name = "FILE")]
    record: Option<PathBuf>,
    /// Let --record replace an existing file.
    #[arg(long, requires = "record")]
    force: bool,
    /// Watch the re-run on the live dashboard.
    #[arg(long, requires = "rerun")]
    watch: bool,
    /// Arguments for timely, to re-run on a cluster: -n PROCESSES -p INDEX -h HOSTFILE.
    #[arg(last = true, value_name = "TIMELY_ARGS")]
    timely: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Speed {
    Recorded,
    Max,
}

/// Runs `megaflux replay`.
pub fn replay(args: ReplayArgs) -> ExitCode {
    if !args.rerun {
        observe::install_tracing(None);
        return report(watch(&args.file), "watching the trace");
    }
    match rerun(&args) {
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

/// Re-runs the recorded job; returns whether the outputs matched.
fn rerun(args: &ReplayArgs) -> anyhow::Result<bool> {
    let recording = Recording::read(&args.file)?;
    let options = Options {
        strategy: args.strategy,
        recovery: args.recovery,
        pace: match args.speed {
            Speed::Recorded => Pace::OpenLoop,
            Speed::Max => Pace::Max,
        },
        timely_args: args.timely.clone(),
    };
    let config = recording.rerun(&options)?;
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
    if recording.gaps {
        eprintln!(
            "megaflux: warning: the recording was paused or lost events, so commands the job took then may be missing from the re-run"
        );
    }
    let probe = ProbeArgs {
        record: args.record.clone(),
        serve: dashboard.then_some(LOOPBACK_ANY),
        export: None,
        token: std::env::var(TOKEN_ENV).ok(),
        force: args.force,
    };
    let control = ControlHandle::new();
    let observer = observe::start(&config, &probe, &control)?;
    let (ran, finished) = run_observed(config, observer, dashboard, &probe, control, run_with_progress);
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
    if summary.duration_s < recording.summary.duration_s {
        eprintln!(
            "megaflux: the re-run stopped after {:.1} of {:.1} s (the dashboard quit): its outputs cannot match",
            summary.duration_s, recording.summary.duration_s
        );
    } else if !comparison.digests_match() {
        eprintln!("megaflux: the re-run's outputs differ from the recorded run's");
    }
    Ok(comparison.digests_match())
}

/// Runs the job on its own threads, drawing its progress on stderr (when that is a terminal).
fn run_with_progress(config: RunConfig, control: ControlHandle) -> anyhow::Result<Option<Summary>> {
    let total_ms = config.duration.as_millis() as u64;
    let job_control = control.clone();
    let job = std::thread::Builder::new()
        .name("megaflux-job".into())
        .spawn(move || harness::run(config, job_control))
        .context("starting the job")?;
    let draw = std::io::stderr().is_terminal();
    let started = std::time::Instant::now();
    while !job.is_finished() {
        std::thread::sleep(PROGRESS_EVERY);
        if draw {
            eprint!(
                "\r{}",
                progress_line(control.progress().as_millis() as u64, total_ms, started.elapsed())
            );
        }
    }
    if draw {
        eprintln!();
    }
    match job.join() {
        Ok(result) => Ok(result.context("the re-run failed")?),
        Err(_) => anyhow::bail!("the job's thread panicked"),
    }
}

/// `[#####.....] 1.2 / 4.0 s of the run in 0.8 s`.
fn progress_line(done_ms: u64, total_ms: u64, elapsed: Duration) -> String {
    const WIDTH: u64 = 30;
    let done_ms = done_ms.min(total_ms);
    let filled = (done_ms * WIDTH).checked_div(total_ms).unwrap_or(WIDTH) as usize;
    format!(
        "[{}{}] {:.1} / {:.1} s of the run in {:.1} s",
        "#".repeat(filled),
        ".".repeat(WIDTH as usize - filled),
        done_ms as f64 / 1e3,
        total_ms as f64 / 1e3,
        elapsed.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_fills_with_the_run() {
        let line = progress_line(2000, 4000, Duration::from_millis(500));
        assert!(
            line.starts_with(&format!("[{}{}]", "#".repeat(15), ".".repeat(15))),
            "{line}"
        );
        assert!(line.ends_with("2.0 / 4.0 s of the run in 0.5 s"), "{line}");
        assert!(progress_line(9000, 4000, Duration::ZERO).starts_with(&format!("[{}]", "#".repeat(30))));
        assert!(progress_line(0, 0, Duration::ZERO).starts_with(&format!("[{}]", "#".repeat(30))));
    }
}
