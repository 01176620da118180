//! A run's lifecycle, the one home that `run` and `replay --rerun` share: the observer next to
//! the job (started by the caller with [`crate::observe::start`]), the job on its own
//! threads — under the dashboard, with a progress line, or plainly — and the observer's end,
//! which writes the summary as the trace's last line.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use megaflux::control::ControlHandle;
use megaflux::harness::{RunConfig, cluster_position};
use megaflux::job::AnyJob;
use megaflux::summary::Summary;
use megaflux_probe::collector::CollectorReport;
use megaflux_probe::model::DrainView;

use crate::dash::{self, model::Connection, model::Dash};
use crate::observe::{Observer, ProbeArgs};

/// Where the dashboard's collector listens: loopback, a port the system picks.
pub const LOOPBACK_ANY: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);
/// How often a progress line is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);
/// How often a line says where the drain stands.
const DRAIN_EVERY_MS: u64 = 1000;

/// How the job is shown while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// On the live dashboard (when the observer serves).
    Dashboard,
    /// With a progress line on stderr, when stderr is a terminal.
    Progress,
    /// Not at all.
    Plain,
}

/// What a session ends with: the run's summary, and the observer's report.
pub type Observed = (
    anyhow::Result<Option<Summary>>,
    anyhow::Result<Option<CollectorReport>>,
);

/// Runs `job` as `config` says, shown as `shown`, next to `observer`, then lets the observer
/// finish: the trace keeps what the job emitted even if the run failed, and ends with the
/// summary if it did not.
pub fn run(
    job: Arc<dyn AnyJob>,
    config: RunConfig,
    observer: Observer,
    shown: Shown,
    probe: &ProbeArgs,
    control: ControlHandle,
) -> Observed {
    let ran = match (observer.local_addr(), shown) {
        (Some(addr), Shown::Dashboard) => {
            let recording = probe.record.as_ref().map(|p| p.display().to_string());
            let token = probe.token.clone().or_else(|| observer.made_token());
            with_dashboard(job, config, recording, token, addr, control)
        }
        (_, Shown::Progress) => with_progress(job, config, control, true),
        _ => with_progress(job, config, control, false),
    };
    let summary = ran.as_ref().ok().and_then(Option::as_ref);
    let finished = observer.finish(summary.and_then(|s| serde_json::to_value(s).ok()));
    (ran, finished)
}

/// Runs the job on its own threads and the dashboard on this one, subscribed to this
/// process's collector at `addr` (`recording` names the trace it writes). Quitting the
/// dashboard on process 0 stops the job (a few epochs later) in every process, at the same
/// epoch; another process's runs on to the job's end.
fn with_dashboard(
    job: Arc<dyn AnyJob>,
    config: RunConfig,
    recording: Option<String>,
    token: Option<String>,
    addr: SocketAddr,
    control: ControlHandle,
) -> anyhow::Result<Option<Summary>> {
    let first = cluster_position(&config.timely_args)?.process == 0;
    let (tx, rx) = dash::queue();
    let commands = dash::source::live(addr, token, tx.clone(), None);
    let job = spawn(job, config, control.clone())?;
    let shown = dash::run(
        Dash::new(Connection::Connecting(addr.to_string()), recording),
        rx,
        tx,
        dash::Sinks {
            commands: Some(commands),
            player: None,
        },
    );
    if first {
        control.stop();
    } else {
        eprintln!("megaflux: the dashboard closed; this process runs on to the job's end");
    }
    let summary = joined(job)?;
    shown.context("the dashboard failed")?;
    Ok(summary)
}

/// Runs the job on its own threads; with `bar`, draws its progress on stderr (when that is a
/// terminal). A draining run says where its drain stands every second.
fn with_progress(
    job: Arc<dyn AnyJob>,
    config: RunConfig,
    control: ControlHandle,
    bar: bool,
) -> anyhow::Result<Option<Summary>> {
    let total_ms = config.duration.as_millis() as u64;
    let epoch = config.epoch;
    let job = spawn(job, config, control.clone())?;
    let draw = bar && std::io::stderr().is_terminal();
    let started = std::time::Instant::now();
    let mut told = None;
    while !job.is_finished() {
        std::thread::sleep(PROGRESS_EVERY);
        let drain = control.draining();
        if let Some(d) = drain.filter(|d| told.is_none_or(|t: u64| d.for_ms >= t + DRAIN_EVERY_MS)) {
            told = Some(d.for_ms);
            let view = DrainView {
                input_end: d.input_end,
                gate: d.gate,
                bins: d.scheduled.bins,
                next: d.scheduled.next,
                for_ms: d.for_ms,
            };
            let restart = if draw { "\r" } else { "" };
            eprintln!("{restart}megaflux: {}", crate::drain::progress(&view, epoch));
        } else if draw && drain.is_none() {
            eprint!(
                "\r{}",
                progress_line(control.progress().as_millis() as u64, total_ms, started.elapsed())
            );
        }
    }
    if draw {
        eprintln!();
    }
    joined(job)
}

type JobThread = std::thread::JoinHandle<Result<Option<Summary>, megaflux::RunError>>;

fn spawn(job: Arc<dyn AnyJob>, config: RunConfig, control: ControlHandle) -> anyhow::Result<JobThread> {
    std::thread::Builder::new()
        .name("megaflux-job".into())
        .spawn(move || job.run(config, control))
        .context("starting the job")
}

fn joined(job: JobThread) -> anyhow::Result<Option<Summary>> {
    match job.join() {
        Ok(result) => Ok(result.context("the run failed")?),
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
