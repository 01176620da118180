//! Command-line parsing, and `megaflux run` with or without its dashboard, for the jobs a
//! binary offers.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use megaflux::epoch::{ADAPTIVE_EPOCH_US, EpochLen};
use megaflux::harness::{self, EpochMode, Idle, Pacing, RunConfig, RunError, WorkerAt};
use megaflux::job::{AnyJob, Jobs, registry::Takes};
use megaflux::membership::Secret;
use megaflux::membership::secret::TOKEN_ENV as CLUSTER_TOKEN_ENV;
use megaflux::plan::{MigrationSpec, Schedule};
use megaflux::source::{Input, Location};
use megaflux::{Bins, ConfigError, control::ControlHandle};
use megaflux_probe::ProbeError;
use megaflux_probe::wire::TOKEN_ENV;

use crate::dash::{self, model::Connection, model::Dash};
use crate::flags;
use crate::memory;
use crate::observe::{self, ProbeArgs};
use crate::outcome::print_summary;
use crate::session::{self, LOOPBACK_ANY, Shown};

/// A headless run's length when `--duration` is not given.
const HEADLESS_SECS: f64 = 10.0;
/// A run's length with the dashboard when `--duration` is not given: until q, in practice.
const DASHBOARD_SECS: f64 = 3600.0;

/// Live state migration for timely dataflow: run a job, migrate its bins, measure, watch.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a job (timely's -n/-p/-h go after `--`).
    Run(Box<RunArgs>),
    /// Run a matrix of workloads x variants, print a table and write JSON.
    Bench(crate::bench::BenchArgs),
    /// Draw bench results, run summaries or traces as an SVG (latency over time, CCDF), or a
    /// trace for Perfetto.
    Report(crate::report::ReportArgs),
    /// Open the dashboard on a running job's collector (`run --serve ADDR`).
    Attach(AttachArgs),
    /// Watch a recorded trace again (a time machine), or re-run its job with --rerun.
    Replay(crate::replay::ReplayArgs),
}

/// Why a command line was not taken.
#[derive(Debug)]
pub enum Usage {
    /// Clap's word on it (a bad flag or value, or `--help` and `--version`, which it prints).
    Clap(clap::Error),
    /// The binary's jobs declare a flag `run` has already.
    Jobs(String),
}

/// Checks the command line `args` (the program's name first) of a binary offering `jobs`
/// without running it: its subcommand and flags, and for `run`, that the job is one of
/// `jobs` and takes the job flags given. (`run` checks the rest of its settings as it
/// starts, against the files and cluster they name.)
pub fn check_command_line<I, T>(args: I, jobs: &Jobs) -> Result<(), Usage>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = parse_cli(args, jobs)?;
    if let Command::Run(args) = cli.command {
        let job = job_of(&args, jobs).map_err(|e| Usage::Jobs(e.to_string()))?;
        job.params()
            .resolve(job.name(), &args.params)
            .map_err(|e| Usage::Jobs(e.to_string()))?;
    }
    Ok(())
}

fn parse_cli<I, T>(args: I, jobs: &Jobs) -> Result<Cli, Usage>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{CommandFactory, FromArgMatches};
    let command = crate::job_flags::add(Cli::command(), jobs).map_err(Usage::Jobs)?;
    let matches = command.try_get_matches_from(args).map_err(Usage::Clap)?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(Usage::Clap)?;
    if let (Command::Run(args), Some(("run", run))) = (&mut cli.command, matches.subcommand()) {
        args.params = crate::job_flags::given(run, jobs);
    }
    Ok(cli)
}

#[derive(Debug, Args)]
struct AttachArgs {
    /// The collector's address, HOST:PORT, e.g. localhost:6650 or 127.0.0.1:6650.
    #[arg(value_parser = flags::address)]
    addr: SocketAddr,
    /// The token for commands (default: $MEGAFLUX_TOKEN).
    #[arg(long)]
    token: Option<String>,
    /// Also serve the job's metrics for Prometheus at http://ADDR/metrics, from the events
    /// this dashboard follows.
    #[arg(long, value_name = "ADDR", value_parser = flags::address)]
    metrics: Option<SocketAddr>,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The job's own flags given (read apart: each binary's jobs have their own).
    #[arg(skip)]
    params: megaflux::job::ParamValues,
    /// No dashboard: print the final JSON summary as the last line of stdout.
    #[arg(long)]
    headless: bool,
    /// The job to run, by name: one of this binary's [default: its first].
    #[arg(long, value_name = "JOB")]
    workload: Option<String>,
    /// Where a job that reads its records reads them: a file, - for standard input,
    /// tcp:HOST:PORT (a server that sends one record per line), or a Kafka topic,
    /// kafka://HOST:PORT/TOPIC (each message one record; ?end=now reads each partition up to
    /// its end as of the start, replayable like a file; &from=earliest|latest|O1,O2,...).
    #[arg(long, value_name = "FILE|-|tcp:HOST:PORT|kafka://HOST:PORT/TOPIC", value_parser = flags::input)]
    input: Option<Input>,
    /// How records read from a file are due: `rate` (record i at i / --rate) or
    /// `event-time` (at the record's event time, from the first record's, divided by --speed).
    #[arg(long, value_name = "rate|event-time", default_value = "rate", value_parser = flags::pacing)]
    pace: Pacing,
    /// With --pace event-time: how many times faster than their event times records are due.
    #[arg(long, default_value_t = 1.0, value_parser = flags::speed)]
    speed: f64,
    /// Write every output exactly once, whatever the migrations and failures: to a file, one
    /// JSON line each (the record as serde serializes it), or to a PostgreSQL table
    /// (postgresql://USER@HOST:PORT/DB?table=NAME: rows of time BIGINT and output JSONB,
    /// committed with the run's progress; a run that crashed resumes where it committed).
    #[arg(long, value_name = "FILE|URL")]
    output: Option<megaflux::sink::Output>,
    /// Worker threads per process.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=1024))]
    workers: u64,
    /// Number of bins: a power of two from 16 to 65536.
    #[arg(long, default_value_t = megaflux::bins::DEFAULT_BINS, value_parser = flags::bins)]
    bins: usize,
    /// Offered load in records per second, over all workers (generated records, and a file
    /// read by rate).
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..))]
    rate: u64,
    /// Length of the measured run in seconds [default: 10, or until the input ends for a
    /// job that reads one; an hour with the dashboard on one process, where q ends it].
    #[arg(long, value_parser = flags::duration, value_name = "SECS")]
    duration: Option<f64>,
    /// Seed of the record generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Run the plain-timely twin of the job (no migration machinery).
    #[arg(long)]
    native: bool,
    /// Start the measured run with empty state: no preload of what a generated job makes
    /// first (every key of a key count, the events that open a query's auctions).
    #[arg(long)]
    no_preload: bool,
    /// A migration: STRATEGY[+pipelined]@SECS:TARGET, e.g. fluid@10:pack:1 or matched@20:uniform.
    /// Strategies: all-at-once, fluid, batched:K, matched. Targets: uniform, pack:N, drain:W, map:W,W,...
    #[arg(long = "migrate", value_name = "SPEC", value_parser = flags::migration)]
    migrations: Vec<MigrationSpec>,
    /// Replicas per bin: 1, or 2 for a primary and a standby on another worker (on another
    /// process when the job has several).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=2))]
    replicas: u64,
    /// A worker failure: WORKER@SECS, e.g. 1@7. The worker's partitions fail-stop wherever
    /// it is; with --replicas 2 their standbys take over. Repeatable.
    #[arg(long = "fail", value_name = "W@SECS", value_parser = flags::worker_at)]
    failures: Vec<WorkerAt>,
    /// A failed worker serves again, empty: WORKER@SECS. Bins then rebalance onto it.
    /// Repeatable.
    #[arg(long = "rejoin", value_name = "W@SECS", value_parser = flags::worker_at)]
    rejoins: Vec<WorkerAt>,
    /// How a recovery copies bins to their new standbys (and a rejoin rebalances):
    /// all-at-once, fluid, batched:K or matched, optionally +pipelined.
    #[arg(long, default_value = "matched", value_parser = flags::schedule)]
    recovery: Schedule,
    /// Fault injection: worker WORKER panics at SECS, to see how a job stops (every process
    /// exits non-zero with the panic's message). Repeatable.
    #[arg(long = "inject-panic", value_name = "W@SECS", value_parser = flags::worker_at)]
    panics: Vec<WorkerAt>,
    /// What a worker with nothing to do does: spin (lowest latency, a busy core per worker)
    /// or park (waits for news until its next epoch: little CPU at low rates, but on a
    /// shared machine a parked core can wake late).
    #[arg(long, default_value = "spin", value_parser = flags::idle)]
    idle: Idle,
    /// Length of an epoch (the unit of logical time) in microseconds: a divisor of 1000.
    /// With fixed epochs every record waits for its epoch to close, so finer epochs mean
    /// lower latency, at a cost per epoch in every operator [default: 100, in every build;
    /// 10 with adaptive epochs].
    #[arg(long, value_name = "US", value_parser = flags::epoch)]
    epoch_us: Option<u64>,
    /// How records become logical times: fixed (every epoch is a time of its own, closed
    /// once its interval has passed: every run has the same times), adaptive (each worker
    /// sends what came due since its last batch once that batch is out: a record waits for
    /// a turn of the loop rather than half an epoch, and a loaded job makes fewer, larger
    /// batches, of up to 1 ms; only for jobs whose outputs do not read times, and the digest leaves times
    /// out), or auto: adaptive where allowed (jobs that say so, `Job::allows_adaptive_epochs`,
    /// except in a cluster that restarts after a crash and in a run writing a table, which a
    /// later run resumes), fixed for the rest.
    #[arg(long, default_value = "auto", value_parser = flags::epochs)]
    epochs: flags::Epochs,
    /// How far the work a job scheduled past its input's end (sessions that close,
    /// timeouts) runs once the input ended: `all` (until none is left), `off`, or seconds of
    /// logical time [default: as the job says; `all` for a job of your own]. --duration caps
    /// the run, the drain included.
    #[arg(long, value_name = "all|off|SECS", value_parser = flags::drain)]
    drain: Option<megaflux::job::Drain>,
    /// The longest line an input may have, in bytes: a longer one stops the job with an
    /// error naming the input and the line [default: 1048576, 1 MiB].
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..=1 << 32))]
    max_line_bytes: Option<u64>,
    /// Check that the first record, output and bin state of every operator survive the
    /// encoding they cross processes in, and stop naming the operator and the type if one
    /// does not (debug builds always check).
    #[arg(long)]
    check_serde: bool,
    /// Where the bins start: uniform, pack:N, drain:W or map:W,W,... [default: uniform].
    #[arg(long, value_name = "TARGET", value_parser = flags::target)]
    placement: Option<megaflux::plan::Target>,
    /// What worker 0 does when the busiest worker stays above --balance-threshold times the
    /// mean load for --balance-every: `suggest` a plan (logged; the plan dialog's and
    /// --migrate's `balance` target makes it), issue it (`auto`), or nothing (`off`: the load
    /// is still measured). The dashboard's `B` key changes it while the job runs.
    #[arg(long, default_value = "suggest", value_name = "off|suggest|auto", value_parser = flags::balance)]
    balance: megaflux::harness::balancer::BalanceMode,
    /// The busiest worker's load over the mean above which the load is uneven.
    #[arg(long, default_value_t = megaflux::harness::balancer::DEFAULT_THRESHOLD, value_name = "X")]
    balance_threshold: f64,
    /// How long the load must stay uneven before the balancer acts, in seconds.
    #[arg(long, default_value_t = megaflux::harness::balancer::DEFAULT_EVERY.as_secs_f64(), value_name = "SECS")]
    balance_every: f64,
    /// How the balancer's plans move bins.
    #[arg(long, default_value = "fluid", value_parser = flags::schedule, value_name = "STRATEGY")]
    balance_strategy: Schedule,
    /// The most state one placement by load moves (a balancer's decision, a `balance` plan,
    /// a rebalance after a rejoin): bytes, or with a unit (`64MiB`, `1GB`) [default: no cap].
    #[arg(long, value_name = "BYTES", value_parser = megaflux::size::parse)]
    balance_max_bytes: Option<u64>,
    /// Largest state message in bytes.
    #[arg(long, default_value_t = megaflux::operator::DEFAULT_CHUNK_BYTES, value_parser = flags::chunk)]
    chunk_bytes: usize,
    /// Also write the summary (pretty JSON) to this file.
    #[arg(long, value_name = "FILE")]
    summary: Option<PathBuf>,
    /// Record every event of the job to this trace file (JSON Lines, traces/FORMAT.md).
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Let --record and --output replace existing files.
    #[arg(long)]
    force: bool,
    /// Take a lost process's place in a running cluster job: start this process again with
    /// its -n, -p and -h and the job's other flags, and the job restarts to take it in and
    /// rebalances bins onto it.
    #[arg(long)]
    join: bool,
    /// Serve the job's events and take commands on this address (loopback unless --token).
    #[arg(long, value_name = "ADDR")]
    serve: Option<SocketAddr>,
    /// Send this process's events to the collector at this address (the other processes of
    /// a cluster, with process 0 serving).
    #[arg(long, value_name = "ADDR")]
    export: Option<SocketAddr>,
    /// Serve the job's metrics for Prometheus at http://ADDR/metrics (the text format, or
    /// OpenMetrics when asked): each process serves what its collector gathers, its own
    /// workers' numbers and those of the processes that --export to it.
    #[arg(long, value_name = "ADDR", value_parser = flags::address)]
    metrics: Option<SocketAddr>,
    /// Once the run ended, keep serving its last numbers until a scrape reads them, for at
    /// most this many seconds (so that a short run's end is scraped) [default: 0].
    #[arg(long, value_name = "SECS", value_parser = flags::linger, requires = "metrics")]
    metrics_linger: Option<f64>,
    /// The token subscribers need to send commands (default: $MEGAFLUX_TOKEN); required to
    /// serve on a non-loopback address.
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// In a cluster, the secret every process proves to the others (default:
    /// $MEGAFLUX_CLUSTER_TOKEN, at least 16 bytes); needed when a host is not loopback. A
    /// flag's value is visible to other users of the machine: prefer the file or variable.
    #[arg(long, value_name = "TOKEN", conflicts_with = "cluster_token_file")]
    cluster_token: Option<String>,
    /// In a cluster, read the secret from this file (its first line; keep it readable by
    /// you alone).
    #[arg(long, value_name = "FILE")]
    cluster_token_file: Option<PathBuf>,
    /// In a cluster, how long to wait for the other processes to connect before giving up.
    #[arg(long, value_name = "SECS", default_value_t = megaflux::harness::CLUSTER_WAIT.as_secs_f64(), value_parser = flags::duration)]
    cluster_wait: f64,
    /// In a cluster, how long a process may stay silent (hung, stopped, cut off) before the
    /// others count it as lost and go on without it; a crashed process is seen at once.
    #[arg(long, value_name = "SECS", default_value_t = megaflux::membership::SILENCE_LIMIT.as_secs_f64(), value_parser = flags::peer_timeout)]
    peer_timeout: f64,
    /// In a cluster, the port process 0 watches the others' liveness on (default: its
    /// timely port + 1000).
    #[arg(long, value_name = "PORT")]
    coordinator_port: Option<u16>,
    /// Let the allocator use transparent huge pages (off by default: a move's first touch of
    /// fresh 2 MiB pages stalls the worker that installs the bins).
    #[arg(long)]
    huge_pages: bool,
    /// Arguments for timely: -n PROCESSES -p INDEX -h HOSTFILE.
    #[arg(last = true, value_name = "TIMELY_ARGS")]
    timely: Vec<String>,
}

/// The `megaflux` command line for the jobs of `jobs`: `run`, `attach`, `replay`, `bench`
/// and `report`, with the same flags and outputs as the `megaflux` binary. Usage errors exit
/// with status 2.
pub fn main(jobs: impl Into<Jobs>) -> ExitCode {
    let jobs: Jobs = jobs.into();
    let cli = match parse_cli(std::env::args_os(), &jobs) {
        Ok(cli) => cli,
        Err(Usage::Clap(e)) if !e.use_stderr() => e.exit(),
        Err(Usage::Clap(e)) => {
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
        Err(Usage::Jobs(why)) => {
            eprintln!("error: {why}");
            return ExitCode::from(2);
        }
    };
    if !matches!(cli.command, Command::Run(_) | Command::Replay(_)) {
        // `run` and `replay` set up tracing themselves, with the probe when asked for.
        observe::install_tracing(None, false);
    }
    // Before the job allocates its state; bench and replay runs take the default.
    memory::apply(matches!(&cli.command, Command::Run(args) if args.huge_pages));
    match cli.command {
        Command::Run(args) => run(*args, &jobs),
        Command::Replay(args) => crate::replay::replay(args, &jobs),
        Command::Attach(args) => attach(args),
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
        Command::Bench(args) => match crate::bench::bench(args, &jobs) {
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

fn attach(args: AttachArgs) -> ExitCode {
    if !std::io::stdout().is_terminal() {
        eprintln!(
            "error: attach shows a dashboard and needs a terminal; its standard output is not one \
             (to follow a job without one, run it with --headless, or --record a trace and read it with `megaflux report`)"
        );
        return ExitCode::from(2);
    }
    let token = args
        .token
        .or_else(|| std::env::var(TOKEN_ENV).ok())
        .or_else(|| crate::token::find(args.addr));
    // Bound before the dashboard takes the terminal, so that a port in use is said plainly.
    let metrics = match args.metrics.map(metrics_listener).transpose() {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    if let Some(addr) = metrics.as_ref().and_then(|l| l.local_addr().ok()) {
        eprintln!("megaflux: metrics on http://{addr}/metrics");
    }
    let (tx, rx) = dash::queue();
    let commands = dash::source::live(args.addr, token, tx.clone(), metrics);
    let view = Dash::new(Connection::Connecting(args.addr.to_string()), None);
    let sinks = dash::Sinks {
        commands: Some(commands),
        player: None,
    };
    match dash::run(view, rx, tx, sinks) {
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

/// A listener for `attach --metrics`, ready for tokio.
fn metrics_listener(addr: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    use anyhow::Context;
    let listener =
        std::net::TcpListener::bind(addr).with_context(|| format!("listening on {addr} for metrics"))?;
    listener
        .set_nonblocking(true)
        .with_context(|| format!("listening on {addr} for metrics"))?;
    Ok(listener)
}

/// The job `run` runs: the one `--workload` names, or the binary's first.
fn job_of(args: &RunArgs, jobs: &Jobs) -> Result<std::sync::Arc<dyn AnyJob>, ConfigError> {
    match args.workload.as_deref() {
        Some(name) => jobs.find(name),
        None => jobs
            .first()
            .ok_or_else(|| ConfigError::Invalid("this binary has no job to run".into())),
    }
}

fn run(args: RunArgs, jobs: &Jobs) -> ExitCode {
    let dashboard = !args.headless && std::io::stdout().is_terminal();
    let (job, mut config) =
        match job_of(&args, jobs).and_then(|job| run_config(&args, dashboard, &*job).map(|c| (job, c))) {
            Ok(found) => found,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
    if let Some(clash) = record_clash(args.record.as_deref(), &config) {
        eprintln!("error: {clash}");
        return ExitCode::from(2);
    }
    if !args.headless && !dashboard {
        eprintln!("megaflux: stdout is not a terminal, so no dashboard: running headless");
    }
    if harness::cluster_position(&config.timely_args).is_ok_and(|c| c.processes > 1)
        && !config.cluster_secret.is_given()
    {
        eprintln!(
            "megaflux: warning: no cluster token (--cluster-token, --cluster-token-file or ${CLUSTER_TOKEN_ENV}): every host is loopback, so the cluster runs, but anyone on this machine can join, stall or stop it"
        );
    }
    if let Some(warning) = args
        .cluster_token_file
        .as_deref()
        .and_then(crate::token::readable_by_others)
    {
        eprintln!("megaflux: warning: {warning}");
    }
    if dashboard && args.export.is_some() {
        eprintln!(
            "error: the dashboard runs with the process that serves; processes that --export run --headless"
        );
        return ExitCode::from(2);
    }
    if args.record.is_some()
        && let Some(input) = config.input.as_mut()
    {
        if input.rereadable() {
            // The trace says which file it read, so that a re-run can check it reads the same.
            if let Err(e) = input.identify() {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        } else {
            eprintln!(
                "megaflux: warning: the job reads {}, which is not recorded: the trace can be watched and reported, but not re-run",
                input.name()
            );
        }
    }
    let probe = ProbeArgs {
        record: args.record.clone(),
        // The dashboard is a subscriber of this process's collector.
        serve: args.serve.or(dashboard.then_some(LOOPBACK_ANY)),
        export: args.export,
        metrics: args.metrics,
        metrics_linger: std::time::Duration::from_secs_f64(args.metrics_linger.unwrap_or(0.0)),
        token: args.token.clone().or_else(|| std::env::var(TOKEN_ENV).ok()),
        force: args.force,
        lifecycle: !dashboard,
    };
    let control = ControlHandle::new();
    if !dashboard {
        let first = harness::cluster_position(&config.timely_args).is_ok_and(|c| c.process == 0);
        if let Err(e) = crate::signals::stop_on_signals(control.clone(), first) {
            eprintln!("megaflux: warning: SIGINT and SIGTERM will kill the run at once ({e})");
        }
    }
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
    eprintln!("megaflux: {}", starting(&*job, &config, args.duration.is_some()));
    let output = config.output.clone();
    let epoch = config.epoch;
    let shown = if dashboard { Shown::Dashboard } else { Shown::Plain };
    let (ran, finished) = session::run(job, config, observer, shown, &probe, control);
    // After a dashboard, a person reads the summary: the JSON goes to --summary's file only.
    let ran = ran.and_then(|summary| {
        if let Some(cut) = summary
            .as_ref()
            .and_then(|s| s.drain.as_ref())
            .and_then(|d| crate::drain::cut(d, epoch))
        {
            eprintln!("megaflux: {cut}");
        }
        if let (Some(s), Some(_)) = (&summary, &output)
            && let Some(out) = &s.output
        {
            eprintln!("megaflux: {}", crate::outcome::output_line(out));
        }
        print_summary(summary, args.summary.as_deref(), !dashboard)
    });
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

/// Why `--record` cannot be `record`: it is the file the run reads or writes its outputs to.
fn record_clash(record: Option<&std::path::Path>, config: &RunConfig) -> Option<String> {
    let record = record?;
    let input = config.input.as_ref().and_then(|i| match i.location() {
        Location::File(p) | Location::Stream(p) => Some(p),
        _ => None,
    });
    let output = config
        .output
        .as_ref()
        .and_then(|o| o.file())
        .map(std::path::Path::to_path_buf);
    let (flag, _) = [("--output", output), ("--input", input)]
        .into_iter()
        .find(|(_, other)| {
            other
                .as_deref()
                .is_some_and(|o| megaflux::files::same_file(record, o))
        })?;
    Some(format!(
        "--record {} is the {flag} file: one file cannot hold both",
        record.display()
    ))
}

/// The line `run` prints as the job starts: what runs, on what, how fast, for how long.
fn starting(job: &dyn AnyJob, config: &RunConfig, timed: bool) -> String {
    let secs = config.duration.as_secs_f64();
    let pace = match config.input.as_ref().map(|i| (i, i.location())) {
        None => format!("at {} records/s for {secs} s", config.rate),
        Some((input, location)) => {
            let how = match (input.rereadable(), config.pacing) {
                (true, Pacing::Rate) => format!("at {} records/s", config.rate),
                (true, Pacing::EventTime) => format!("by event time x{}", config.speed),
                _ => "as records arrive".to_string(),
            };
            let location = match (&location, &input.partitions) {
                (Location::Kafka(_), Some(parts)) => {
                    let each: Vec<String> = parts
                        .iter()
                        .map(|p| {
                            format!(
                                "{}:{}..{}",
                                p.id,
                                p.from,
                                p.to.map_or("".into(), |t| t.to_string())
                            )
                        })
                        .collect();
                    format!(" (partitions {})", each.join(", "))
                }
                _ => String::new(),
            };
            let until = if timed {
                format!("for at most {secs} s")
            } else {
                "until it ends".to_string()
            };
            format!("reading {}{location} {how}, {until}", input.name())
        }
    };
    let state = job.describe(config).map(|d| format!(", {d}")).unwrap_or_default();
    let epochs = match config.epoch_mode {
        EpochMode::Adaptive => "adaptive epochs".to_string(),
        EpochMode::Fixed => format!("fixed {} µs epochs", config.epoch.us()),
    };
    let line = format!(
        "{}{} {pace}{state}, {} bins, {} worker(s) per process, {epochs}",
        config.workload,
        if config.native { " (native)" } else { "" },
        config.bins.count(),
        config.workers,
    );
    let processes = harness::cluster_position(&config.timely_args).map_or(1, |c| c.processes);
    if processes < 2 {
        return line;
    }
    match harness::crash_stops(job.input(config), config) {
        None if config.join => format!("{line}; joining the running job in a lost process's place"),
        None => format!("{line}; a crash of a process other than 0 restarts it among the others"),
        Some(why) => format!("{line}; a crash of any process stops it: {why}"),
    }
}

/// The run `args` describe for `job`; without `--duration` it runs [`HEADLESS_SECS`],
/// [`DASHBOARD_SECS`] when a dashboard shows it, or until its input ends (at most a day).
fn run_config(args: &RunArgs, dashboard: bool, job: &dyn AnyJob) -> Result<RunConfig, ConfigError> {
    let cluster = harness::cluster_position(&args.timely)?;
    let mut input = args.input.clone();
    // Worker 0 reads the input: the first process must find it, the others need not.
    if let Some(input) = input.as_mut().filter(|_| cluster.process == 0) {
        input.resolve()?;
    }
    let mut config = RunConfig {
        workload: job.name().to_string(),
        workers: args.workers as usize,
        bins: Bins::new(args.bins)?,
        rate: args.rate,
        seed: args.seed,
        native: args.native,
        preload: !args.no_preload,
        migrations: args.migrations.clone(),
        chunk_bytes: args.chunk_bytes,
        params: job.params().resolve(job.name(), &args.params)?,
        timely_args: args.timely.clone(),
        replicas: args.replicas as usize,
        failures: args.failures.clone(),
        rejoins: args.rejoins.clone(),
        recovery: args.recovery,
        panics: args.panics.clone(),
        idle: args.idle,
        input,
        pacing: args.pace,
        speed: args.speed,
        output: args.output.clone(),
        replace_output: args.force,
        cluster_wait: Duration::from_secs_f64(args.cluster_wait),
        peer_timeout: Duration::from_secs_f64(args.peer_timeout),
        coordinator_port: args.coordinator_port,
        join: args.join,
        drain: args.drain,
        check_serde: args.check_serde,
        placement: args.placement.clone(),
        balance: megaflux::harness::balancer::BalanceConfig {
            mode: args.balance,
            threshold: args.balance_threshold,
            every_s: args.balance_every,
            strategy: args.balance_strategy,
            max_bytes: args.balance_max_bytes.unwrap_or(u64::MAX),
        },
        max_line_bytes: args
            .max_line_bytes
            .map_or(megaflux::source::DEFAULT_MAX_LINE_BYTES, |n| n as usize),
        ..RunConfig::default()
    };
    let reads = matches!(job.input(&config), Takes::Input { .. }) && config.input.is_some();
    // A cluster's processes must agree on the length, and only process 0 has a dashboard.
    let default_secs = if reads {
        flags::MAX_SECS
    } else if dashboard && cluster.processes == 1 {
        DASHBOARD_SECS
    } else {
        HEADLESS_SECS
    };
    config.duration = Duration::from_secs_f64(args.duration.unwrap_or(default_secs));
    config.epoch_mode = args.epochs.resolve(|| job.why_not_adaptive(&config).is_none());
    config.epoch = match (args.epoch_us, config.epoch_mode) {
        (Some(us), _) => EpochLen::from_us(us)?,
        (None, EpochMode::Adaptive) => EpochLen::from_us(ADAPTIVE_EPOCH_US)?,
        (None, EpochMode::Fixed) => EpochLen::default(),
    };
    config.cluster_secret = cluster_secret(args)?;
    config
        .cluster_secret
        .check_hosts(&cluster.addresses)
        .map_err(invalid)?;
    job.check(&config)?;
    Ok(config)
}

fn invalid(e: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid(e.to_string())
}

/// The cluster's secret as the flags or the environment give it; none if none does.
fn cluster_secret(args: &RunArgs) -> Result<Secret, ConfigError> {
    let token = match (&args.cluster_token, &args.cluster_token_file) {
        (Some(token), _) => Some(token.clone()),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| invalid(format!("--cluster-token-file {}: {e}", path.display())))?;
            Some(text.lines().next().unwrap_or_default().to_string())
        }
        (None, None) => std::env::var(CLUSTER_TOKEN_ENV).ok(),
    };
    match token {
        Some(token) => Secret::new(&token).map_err(invalid),
        None => Ok(Secret::none()),
    }
}
