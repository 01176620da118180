//! Command-line parsing, and `megaflux run` with or without its dashboard.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use megaflux::epoch::EpochLen;
use megaflux::harness::{self, Idle, RunConfig, RunError, WorkerAt};
use megaflux::nexmark::NexmarkParams;
use megaflux::plan::{MigrationSpec, Schedule};
use megaflux::summary::Summary;
use megaflux::workload::Workload;
use megaflux::{Bins, ConfigError, control::ControlHandle};
use megaflux_probe::ProbeError;
use megaflux_probe::wire::TOKEN_ENV;

use crate::dash::{self, model::Connection, model::Dash};
use crate::observe::{self, ProbeArgs};

/// A headless run's length when `--duration` is not given.
const HEADLESS_SECS: f64 = 10.0;
/// A run's length with the dashboard when `--duration` is not given: until q, in practice.
const DASHBOARD_SECS: f64 = 3600.0;

/// Live state migration for timely dataflow: run a workload, migrate its bins, measure.
#[derive(Debug, Parser)]
#[command(name = "megaflux", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a built-in workload (timely's -n/-p/-h go after `--`).
    Run(Box<RunArgs>),
    /// Run a matrix of workloads x variants, print a table and write JSON.
    Bench(crate::bench::BenchArgs),
    /// Draw bench results or run summaries as an SVG (latency over time, CCDF).
    Report(crate::report::ReportArgs),
    /// Open the dashboard on a running job's collector (`run --serve ADDR`).
    Attach(AttachArgs),
    /// Watch a recorded trace again (a time machine), or re-run its job with --rerun.
    Replay(crate::replay::ReplayArgs),
}

#[derive(Debug, Args)]
struct AttachArgs {
    /// The collector's address, e.g. 127.0.0.1:6650.
    addr: SocketAddr,
    /// The token for commands (default: $MEGAFLUX_TOKEN).
    #[arg(long)]
    token: Option<String>,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// No dashboard: print the final JSON summary as the last line of stdout.
    #[arg(long)]
    headless: bool,
    /// keycount, hashcount, or a NEXMark query q1 to q8.
    #[arg(long, default_value = "keycount", value_parser = parse_workload)]
    workload: Workload,
    /// Worker threads per process.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=1024))]
    workers: u64,
    /// Number of bins: a power of two from 16 to 65536.
    #[arg(long, default_value_t = megaflux::bins::DEFAULT_BINS, value_parser = parse_bins)]
    bins: usize,
    /// Number of distinct keys.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    keys: u64,
    /// Offered load in records per second, over all workers.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..))]
    rate: u64,
    /// Length of the measured run in seconds [default: 10; an hour with the dashboard on
    /// one process, where q ends it].
    #[arg(long, value_parser = parse_duration, value_name = "SECS")]
    duration: Option<f64>,
    /// Seed of the record generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Run the plain-timely twin of the workload (no migration machinery).
    #[arg(long)]
    native: bool,
    /// Start the measured run with empty state: no preload of every key (count workloads)
    /// or of the events that open `--in-flight-auctions` auctions (NEXMark).
    #[arg(long)]
    no_preload: bool,
    /// A migration: STRATEGY[+pipelined]@SECS:TARGET, e.g. fluid@10:pack:1 or matched@20:uniform.
    /// Strategies: all-at-once, fluid, batched:K, matched. Targets: uniform, pack:N, drain:W, map:W,W,...
    #[arg(long = "migrate", value_name = "SPEC", value_parser = parse_migration)]
    migrations: Vec<MigrationSpec>,
    /// Replicas per bin: 1, or 2 for a primary and a standby on another worker (on another
    /// process when the job has several).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=2))]
    replicas: u64,
    /// A worker failure: WORKER@SECS, e.g. 1@7. The worker's partitions fail-stop wherever
    /// it is; with --replicas 2 their standbys take over. Repeatable.
    #[arg(long = "fail", value_name = "W@SECS", value_parser = parse_worker_at)]
    failures: Vec<WorkerAt>,
    /// A failed worker serves again, empty: WORKER@SECS. Bins then rebalance onto it.
    /// Repeatable.
    #[arg(long = "rejoin", value_name = "W@SECS", value_parser = parse_worker_at)]
    rejoins: Vec<WorkerAt>,
    /// How a recovery copies bins to their new standbys (and a rejoin rebalances):
    /// all-at-once, fluid, batched:K or matched, optionally +pipelined.
    #[arg(long, default_value = "matched", value_parser = parse_schedule)]
    recovery: Schedule,
    /// Fault injection: worker WORKER panics at SECS, to see how a job stops (every process
    /// exits non-zero with the panic's message). Repeatable.
    #[arg(long = "inject-panic", value_name = "W@SECS", value_parser = parse_worker_at)]
    panics: Vec<WorkerAt>,
    /// NEXMark: window length of Q5 (sliding), Q7 and Q8 (tumbling), in ms.
    #[arg(long, default_value_t = NexmarkParams::default().window_ms, value_parser = clap::value_parser!(u64).range(1..))]
    window_ms: u64,
    /// NEXMark: slide of Q5's window in ms (must divide --window-ms).
    #[arg(long, default_value_t = NexmarkParams::default().slide_ms, value_parser = clap::value_parser!(u64).range(1..))]
    slide_ms: u64,
    /// NEXMark: auctions open at any time (state of Q3, Q4, Q6).
    #[arg(long, default_value_t = NexmarkParams::default().in_flight_auctions, value_parser = parse_auctions)]
    in_flight_auctions: usize,
    /// What a worker with nothing to do does: spin (lowest latency, a busy core per worker)
    /// or park (waits for news until its next epoch: little CPU at low rates, but on a
    /// shared machine a parked core can wake late).
    #[arg(long, default_value = "spin", value_parser = parse_idle)]
    idle: Idle,
    /// Length of an epoch (the unit of logical time) in microseconds: a divisor of 1000.
    /// Every record waits for its epoch to close, so finer epochs mean lower latency, at a
    /// cost per epoch in every operator.
    #[arg(long, value_name = "US", default_value_t = EpochLen::default().us(), value_parser = parse_epoch)]
    epoch_us: u64,
    /// Largest state message in bytes.
    #[arg(long, default_value_t = megaflux::operator::DEFAULT_CHUNK_BYTES, value_parser = parse_chunk)]
    chunk_bytes: usize,
    /// Also write the summary (pretty JSON) to this file.
    #[arg(long, value_name = "FILE")]
    summary: Option<PathBuf>,
    /// Record every event of the job to this trace file (JSON Lines, traces/FORMAT.md).
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Let --record replace an existing file.
    #[arg(long, requires = "record")]
    force: bool,
    /// Serve the job's events and take commands on this address (loopback unless --token).
    #[arg(long, value_name = "ADDR")]
    serve: Option<SocketAddr>,
    /// Send this process's events to the collector at this address (the other processes of
    /// a cluster, with process 0 serving).
    #[arg(long, value_name = "ADDR")]
    export: Option<SocketAddr>,
    /// The token subscribers need to send commands (default: $MEGAFLUX_TOKEN); required to
    /// serve on a non-loopback address.
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// Arguments for timely: -n PROCESSES -p INDEX -h HOSTFILE.
    #[arg(last = true, value_name = "TIMELY_ARGS")]
    timely: Vec<String>,
}

fn parse_workload(s: &str) -> Result<Workload, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

fn parse_auctions(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("`{s}` is not a number of auctions (at least 1)")),
    }
}

fn parse_bins(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    Bins::new(n).map(Bins::count).map_err(|e| e.to_string())
}

fn parse_duration(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 86_400.0 => Ok(x),
        _ => Err(format!("`{s}` is not a duration in seconds (0 < SECS <= 86400)")),
    }
}

fn parse_migration(s: &str) -> Result<MigrationSpec, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

fn parse_worker_at(s: &str) -> Result<WorkerAt, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

pub(crate) fn parse_schedule(s: &str) -> Result<Schedule, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

fn parse_idle(s: &str) -> Result<Idle, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

fn parse_epoch(s: &str) -> Result<u64, String> {
    let us = s
        .parse::<u64>()
        .map_err(|_| format!("`{s}` is not a number of microseconds"))?;
    EpochLen::from_us(us).map(EpochLen::us).map_err(|e| e.to_string())
}

fn parse_chunk(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 64 => Ok(n),
        _ => Err(format!("`{s}` is not a chunk size of at least 64 bytes")),
    }
}

/// Parses the command line and runs it; usage errors exit with status 2.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // What is wrong (a line, and the arguments it names), without clap's usage block.
            let text = e.render().to_string();
            let what: Vec<&str> = text.lines().take_while(|l| !l.trim().is_empty()).collect();
            if what.is_empty() {
                eprintln!("error: bad arguments");
            } else {
                eprintln!("{}", what.join("\n"));
            }
            return ExitCode::from(2);
        }
    };
    if !matches!(cli.command, Command::Run(_) | Command::Replay(_)) {
        // `run` and `replay` set up tracing themselves, with the probe when asked for.
        observe::install_tracing(None);
    }
    match cli.command {
        Command::Run(args) => run(*args),
        Command::Replay(args) => crate::replay::replay(args),
        Command::Attach(args) => {
            let token = args.token.or_else(|| std::env::var(TOKEN_ENV).ok());
            let (tx, rx) = dash::queue();
            let commands = dash::source::live(args.addr, token, tx.clone());
            let view = Dash::new(Connection::Connecting(args.addr.to_string()), None);
            match dash::run(
                view,
                rx,
                tx,
                dash::Sinks {
                    commands: Some(commands),
                    player: None,
                },
            ) {
                // A dashboard that never reached its collector says why, and fails.
                Ok(dash) if !dash.connected => {
                    let why = match dash.connection {
                        Connection::Closed(why) => why,
                        _ => format!("the collector at {} was not reached", args.addr),
                    };
                    eprintln!("error: {why}");
                    ExitCode::FAILURE
                }
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Report(args) => match crate::report::report(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                if e.downcast_ref::<crate::report::BadInput>().is_some() {
                    ExitCode::from(2)
                } else {
                    ExitCode::FAILURE
                }
            }
        },
        Command::Bench(args) => match crate::bench::bench(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                // Bad settings are usage errors; a failed run is not.
                if e.downcast_ref::<ConfigError>().is_some() {
                    ExitCode::from(2)
                } else {
                    ExitCode::FAILURE
                }
            }
        },
    }
}

fn run(args: RunArgs) -> ExitCode {
    let dashboard = !args.headless && std::io::stdout().is_terminal();
    let config = match run_config(&args, dashboard) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if !args.headless && !dashboard {
        eprintln!("megaflux: stdout is not a terminal, so no dashboard: running headless");
    }
    if dashboard && args.export.is_some() {
        eprintln!(
            "error: the dashboard runs with the process that serves; processes that --export run --headless"
        );
        return ExitCode::from(2);
    }
    let probe = ProbeArgs {
        record: args.record.clone(),
        // The dashboard is a subscriber of this process's collector.
        serve: args.serve.or(dashboard.then_some(LOOPBACK_ANY)),
        export: args.export,
        token: args.token.clone().or_else(|| std::env::var(TOKEN_ENV).ok()),
        force: args.force,
    };
    let control = ControlHandle::new();
    let observer = match observe::start(&config, &probe, &control) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e:#}");
            let usage = e
                .downcast_ref::<ProbeError>()
                .is_some_and(|p| matches!(p, ProbeError::Config(_)));
            return ExitCode::from(if usage { 2 } else { 1 });
        }
    };
    let state = match config.workload {
        Workload::Nexmark(_) => format!("{} in-flight auctions", config.nexmark.in_flight_auctions),
        _ => format!("{} keys", config.keys),
    };
    eprintln!(
        "megaflux: {}{} at {} records/s for {} s, {state}, {} bins, {} worker(s) per process{}",
        config.workload,
        if config.native { " (native)" } else { "" },
        config.rate,
        config.duration.as_secs_f64(),
        config.bins.count(),
        config.workers,
        match (config.preload, config.workload) {
            (false, _) => "",
            (true, Workload::Nexmark(_)) => "; preloading the events that open the in-flight auctions",
            (true, _) => "; preloading every key first",
        }
    );
    let (ran, finished) = run_observed(config, observer, dashboard, &probe, control, run_headless);
    // After a dashboard, a person reads the summary: the JSON goes to --summary's file only.
    let ran = ran.and_then(|summary| print_summary(summary, args.summary.as_deref(), !dashboard));
    match (ran, finished) {
        (Ok(()), Ok(report)) => {
            match (report, &args.record) {
                (Some(report), Some(path)) if report.recording_failed.is_some() => {
                    eprintln!(
                        "error: recording to {} failed: {}; the trace ends after {} lines, the job ran to its end",
                        path.display(),
                        report.recording_failed.unwrap_or_default(),
                        report.recorded_lines
                    );
                    return ExitCode::FAILURE;
                }
                (Some(report), Some(path)) => eprintln!(
                    "megaflux: recorded {} lines to {} ({} events dropped)",
                    report.recorded_lines,
                    path.display(),
                    report.model.dropped_total()
                ),
                _ => {}
            }
            ExitCode::SUCCESS
        }
        (Err(e), _) | (Ok(()), Err(e)) => {
            eprintln!("error: {e:#}");
            let status = e.downcast_ref::<RunError>().map_or(1, RunError::exit_status);
            ExitCode::from(status)
        }
    }
}

/// The job `args` describe; without `--duration` it runs [`HEADLESS_SECS`], or
/// [`DASHBOARD_SECS`] when a dashboard shows it.
fn run_config(args: &RunArgs, dashboard: bool) -> Result<RunConfig, ConfigError> {
    let config = RunConfig {
        workload: args.workload,
        workers: args.workers as usize,
        bins: Bins::new(args.bins)?,
        keys: args.keys,
        rate: args.rate,
        // A cluster's processes must agree on the length, and only process 0 has a dashboard.
        duration: Duration::from_secs_f64(args.duration.unwrap_or(
            if dashboard && harness::cluster_position(&args.timely)?.processes == 1 {
                DASHBOARD_SECS
            } else {
                HEADLESS_SECS
            },
        )),
        seed: args.seed,
        native: args.native,
        preload: !args.no_preload,
        migrations: args.migrations.clone(),
        chunk_bytes: args.chunk_bytes,
        nexmark: NexmarkParams {
            window_ms: args.window_ms,
            slide_ms: args.slide_ms,
            in_flight_auctions: args.in_flight_auctions,
        },
        timely_args: args.timely.clone(),
        replicas: args.replicas as usize,
        failures: args.failures.clone(),
        rejoins: args.rejoins.clone(),
        recovery: args.recovery,
        panics: args.panics.clone(),
        idle: args.idle,
        epoch: EpochLen::from_us(args.epoch_us)?,
        ..RunConfig::default()
    };
    harness::validate(&config)?;
    Ok(config)
}

/// What [`run_observed`] returns: the run's summary, and the observer's report.
pub(crate) type Observed = (
    anyhow::Result<Option<Summary>>,
    anyhow::Result<Option<megaflux_probe::collector::CollectorReport>>,
);

/// Runs the job with the dashboard (when `dashboard` and the observer serves) or with
/// `headless`, then lets the observer finish: the trace keeps what the job emitted even if
/// the run failed, and ends with the summary if it did not.
pub(crate) fn run_observed(
    config: RunConfig,
    observer: observe::Observer,
    dashboard: bool,
    probe: &ProbeArgs,
    control: ControlHandle,
    headless: impl FnOnce(RunConfig, ControlHandle) -> anyhow::Result<Option<Summary>>,
) -> Observed {
    let ran = match observer.local_addr() {
        Some(addr) if dashboard => {
            let recording = probe.record.as_ref().map(|p| p.display().to_string());
            run_with_dashboard(config, recording, probe.token.clone(), addr, control)
        }
        _ => headless(config, control),
    };
    let summary = ran.as_ref().ok().and_then(Option::as_ref);
    let finished = observer.finish(summary.and_then(|s| serde_json::to_value(s).ok()));
    (ran, finished)
}

/// Where the dashboard's collector listens: loopback, a port the system picks.
pub(crate) const LOOPBACK_ANY: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

fn run_headless(config: RunConfig, control: ControlHandle) -> anyhow::Result<Option<Summary>> {
    harness::run(config, control).context("the run failed")
}

/// Runs the job on its own threads and the dashboard on this one, subscribed to this
/// process's collector at `addr` (`recording` names the trace it writes). Quitting the
/// dashboard on process 0 stops the job (a few epochs later) in every process, at the same
/// epoch; another process's runs on to the job's end.
fn run_with_dashboard(
    config: RunConfig,
    recording: Option<String>,
    token: Option<String>,
    addr: SocketAddr,
    control: ControlHandle,
) -> anyhow::Result<Option<Summary>> {
    let first = harness::cluster_position(&config.timely_args)?.process == 0;
    let (tx, rx) = dash::queue();
    let commands = dash::source::live(addr, token, tx.clone());
    let job_control = control.clone();
    let job = std::thread::Builder::new()
        .name("megaflux-job".into())
        .spawn(move || harness::run(config, job_control))
        .context("starting the job")?;
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
    let summary = match job.join() {
        Ok(result) => result.context("the run failed")?,
        Err(_) => anyhow::bail!("the job's thread panicked"),
    };
    shown.context("the dashboard failed")?;
    Ok(summary)
}

/// Prints the job's summary for a person (and, with `json`, as JSON on stdout) and writes
/// it to `summary_file`; only the process that hosts worker 0 has one.
fn print_summary(
    summary: Option<Summary>,
    summary_file: Option<&std::path::Path>,
    json: bool,
) -> anyhow::Result<()> {
    let Some(summary) = summary else { return Ok(()) };
    if let Some(path) = summary_file {
        let pretty = serde_json::to_string_pretty(&summary)?;
        std::fs::write(path, pretty + "\n")
            .with_context(|| format!("writing the summary to {}", path.display()))?;
    }
    eprintln!("{}", describe(&summary));
    if json {
        println!("{}", serde_json::to_string(&summary)?);
    }
    Ok(())
}

/// A few human-readable lines about a finished run.
fn describe(s: &Summary) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut text = format!(
        "{}{} on {} workers, {} bins: {} records in, {} outputs, latency p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
        s.workload,
        if s.native { " (native)" } else { "" },
        s.workers,
        s.bins,
        s.records_in,
        s.outputs,
        ms(s.latency_ns.p50),
        ms(s.latency_ns.p99),
        ms(s.latency_ns.max)
    );
    for m in &s.migrations {
        text.push_str(&format!(
            "\n  {} to {} at {:.1}s: {} steps, {} bins, {} bytes in {}; during it p99 {:.2} ms max {:.2} ms",
            m.strategy,
            m.target,
            m.issued_s,
            m.steps,
            m.bins_moved,
            m.bytes_moved,
            m.duration_s
                .map_or("(unfinished)".to_string(), |d| format!("{d:.3}s")),
            ms(m.latency_ns_during.p99),
            ms(m.latency_ns_during.max)
        ));
    }
    for f in &s.failures {
        text.push_str(&format!(
            "\n  worker {} failed at {:.1}s (time {}): {} bins promoted, takeover {}",
            f.worker,
            f.at_s,
            f.time,
            f.bins_promoted,
            f.takeover_ms
                .map_or("not seen".to_string(), |t| format!("{t:.1} ms")),
        ));
        if !f.bins_lost.is_empty() {
            text.push_str(&format!("; {} bins lost their last replica", f.bins_lost.len()));
        }
        match &f.recovery {
            Some(r) => text.push_str(&format!(
                "; recovery {}: {} bins, {} bytes in {}{}, during it p99 {:.2} ms max {:.2} ms",
                r.strategy,
                r.bins_copied,
                r.bytes,
                r.duration_s
                    .map_or("(unfinished)".to_string(), |d| format!("{d:.3}s")),
                match f.rejoined_s {
                    Some(at) if r.issued_s >= at => format!(" after its rejoin at {at:.1}s"),
                    _ => String::new(),
                },
                ms(r.latency_ns_during.p99),
                ms(r.latency_ns_during.max)
            )),
            None if f.bins_degraded > 0 && f.bins_lost.is_empty() => text.push_str(&format!(
                "; no live worker could hold the standbys of its {} degraded bins: they stay degraded until it rejoins (--rejoin {}@SECS)",
                f.bins_degraded, f.worker
            )),
            None => {}
        }
        if let (Some(at), Some(r)) = (f.rejoined_s, &f.recovery)
            && r.issued_s < at
        {
            text.push_str(&format!("; it rejoined at {at:.1}s"));
        }
    }
    text
}
