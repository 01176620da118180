//! `megaflux bench`: a matrix of fresh runs on the standard timeline (migrate away at 1/3 of
//! the duration, back to `uniform` at 2/3; or, for failure variants, fail worker 1 at 1/3 and
//! rejoin it at 2/3), compared side by side.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use megaflux::harness::{DEFAULT_RECOVERY, Pacing, RunConfig, WorkerAt};
use megaflux::job::{Jobs, ParamValues, registry::Takes};
use megaflux::plan::{MigrationSpec, Schedule};
use megaflux::source::Input;
use megaflux::summary::Summary;
use megaflux::{Bins, ConfigError};
use serde::Serialize;

/// The variants every benchmark knows.
const VARIANTS: &[&str] = &["native", "none", "all-at-once", "fluid", "batched:8", "matched"];

/// `megaflux bench`'s arguments: the matrix (workloads × variants × bins × rates), each
/// run's shape, and where the results go.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Workloads, comma separated: jobs of this binary (`megaflux`: keycount, hashcount,
    /// q1..q8).
    #[arg(long, value_delimiter = ',', default_value = "hashcount")]
    workloads: Vec<String>,
    /// The input of jobs that read one (as `run --input`).
    #[arg(long, value_name = "FILE|-|tcp:HOST:PORT", value_parser = crate::flags::input)]
    input: Option<Input>,
    /// How their records are due (as `run --pace`).
    #[arg(long, value_name = "rate|event-time", default_value = "rate", value_parser = crate::flags::pacing)]
    pace: Pacing,
    /// As `run --speed`.
    #[arg(long, default_value_t = 1.0, value_parser = crate::flags::speed)]
    speed: f64,
    /// Start every run with empty state (as `run --no-preload`).
    #[arg(long)]
    no_preload: bool,
    /// Variants, comma separated: native, none, or a strategy (all-at-once, fluid, batched:K,
    /// matched, each optionally +pipelined); fail:STRATEGY (two replicas, worker 1 fails at
    /// 1/3 and rejoins at 2/3, recovery by STRATEGY); any of them with +replicas runs with two
    /// replicas per bin (`replicas` alone is none+replicas), and with +probe with the probe
    /// on, recording a trace (`probe` alone is none+probe).
    #[arg(long, value_delimiter = ',', default_values_t = VARIANTS.iter().map(|v| v.to_string()))]
    variants: Vec<String>,
    /// Bin counts to try, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "256")]
    bins: Vec<usize>,
    /// Offered rates to try (records/s), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "400000")]
    rates: Vec<u64>,
    /// Keys of the counting workloads (their `--keys`).
    #[arg(long, default_value_t = 4_000_000)]
    keys: u64,
    /// Seconds per run.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// NEXMark: auctions open at any time (state of Q3, Q4, Q6; the queries'
    /// `--in-flight-auctions`).
    #[arg(long, default_value_t = megaflux::nexmark::NexmarkParams::default().in_flight_auctions)]
    in_flight_auctions: usize,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// As `run --epochs`: auto (adaptive where allowed), fixed or adaptive.
    #[arg(long, default_value = "auto", value_parser = crate::flags::epochs)]
    epochs: crate::flags::Epochs,
    /// Where the migration goes at 1/3 of the run: pack:N, drain:W or another target.
    #[arg(long, default_value = "pack:1")]
    away: String,
    /// A preset that finishes in under three minutes on 2 cores.
    #[arg(long)]
    quick: bool,
    /// Where to write the results as JSON.
    #[arg(long, default_value = "bench.json")]
    out: PathBuf,
}

/// One run of the matrix and what it measured.
#[derive(Debug, Serialize)]
struct Row {
    workload: String,
    variant: String,
    bins: usize,
    rate: u64,
    steady_p50_ns: u64,
    steady_p99_ns: u64,
    steady_max_ns: u64,
    during_p99_ns: Option<u64>,
    during_max_ns: Option<u64>,
    migration_s: Option<f64>,
    bytes_moved: u64,
    /// The largest RSS sampled during the measured run.
    rss_peak_bytes: Option<u64>,
    achieved_rate: f64,
    /// During-migration max latency over all-at-once's, and steady p99 over native's (same
    /// workload, bins and rate), where both were run.
    max_vs_all_at_once: Option<f64>,
    p99_vs_native: Option<f64>,
    /// For a `+probe` variant: steady p99 over the same variant's without the probe.
    p99_vs_probe_off: Option<f64>,
    /// For a `+replicas` variant: steady p99 over the same variant's with one replica.
    p99_vs_one_replica: Option<f64>,
    /// For a failure variant: from the failure to the last promoted replica's first work,
    /// and the largest latency in that time.
    takeover_ms: Option<f64>,
    takeover_max_ns: Option<u64>,
    /// Size of the trace a `+probe` variant recorded.
    trace_bytes: Option<u64>,
    summary: Summary,
}

#[derive(Serialize)]
struct Results<'a> {
    format: u32,
    workers: usize,
    duration_s: f64,
    away: &'a str,
    rows: &'a [Row],
}

/// One cell of the matrix.
struct Cell {
    workload: String,
    /// Whether the job reads `--input`.
    reads: bool,
    /// The job's own flags the bench sets (`--keys`, `--in-flight-auctions`), where it has
    /// them.
    params: ParamValues,
    variant: String,
    bins: usize,
    rate: u64,
}

/// Runs the matrix `args` describe with the jobs of `jobs`.
pub fn bench(mut args: BenchArgs, jobs: &Jobs) -> anyhow::Result<()> {
    if args.quick {
        args.duration = 9.0;
        args.keys = 1_000_000;
        args.rates = vec![200_000];
        args.variants = ["native", "none", "all-at-once", "fluid", "matched"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    }
    if let Some(input) = args.input.as_mut() {
        input.resolve()?;
    }
    let cells = cells(&args, jobs)?;
    for cell in &cells {
        check(&args, cell, jobs)?;
    }
    let bar = ProgressBar::new(cells.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {elapsed} spent, about {eta} left  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut rows = Vec::new();
    for cell in &cells {
        bar.set_message(format!(
            "{} {} bins={} rate={}",
            cell.workload, cell.variant, cell.bins, cell.rate
        ));
        let (summary, trace_bytes) =
            run_child(&args, cell).with_context(|| format!("run {} {}", cell.workload, cell.variant))?;
        rows.push(row(cell, summary, trace_bytes));
        bar.inc(1);
    }
    bar.finish_and_clear();
    add_ratios(&mut rows);
    print_table(&rows);
    write(&args.out, &args, &rows)?;
    eprintln!("results written to {}", args.out.display());
    Ok(())
}

fn cells(args: &BenchArgs, jobs: &Jobs) -> Result<Vec<Cell>, ConfigError> {
    let mut cells = Vec::new();
    for w in &args.workloads {
        let job = jobs.find(w)?;
        let workload = job.name().to_string();
        let reads = matches!(job.input(&RunConfig::default()), Takes::Input { .. });
        let declared = job.params();
        let params = [
            ("keys", args.keys.to_string()),
            ("in-flight-auctions", args.in_flight_auctions.max(1).to_string()),
        ]
        .into_iter()
        .filter(|(name, _)| declared.declares(name))
        .fold(ParamValues::new(), |p, (name, value)| p.with(name, value));
        for &bins in &args.bins {
            Bins::new(bins)?;
            for &rate in &args.rates {
                for variant in &args.variants {
                    let v = Variant::parse(variant);
                    let bad = |e: ConfigError| ConfigError::Invalid(format!("variant `{variant}`: {e}"));
                    match (v.base, v.recovery()) {
                        ("native" | "none", _) => {}
                        (_, Some(recovery)) => {
                            recovery.parse::<Schedule>().map_err(bad)?;
                        }
                        (base, None) => {
                            format!("{base}@1:uniform")
                                .parse::<MigrationSpec>()
                                .map_err(bad)?;
                        }
                    }
                    cells.push(Cell {
                        workload: workload.clone(),
                        reads,
                        params: params.clone(),
                        variant: variant.clone(),
                        bins,
                        rate,
                    });
                }
            }
        }
    }
    Ok(cells)
}

/// A variant: its base (`native`, `none`, a strategy, or `fail:STRATEGY`), and whether it
/// runs with two replicas (`+replicas`) and with the probe recording (`+probe`).
struct Variant<'a> {
    base: &'a str,
    replicas: bool,
    probe: bool,
}

impl<'a> Variant<'a> {
    fn parse(variant: &'a str) -> Self {
        let (rest, probe) = match variant {
            "probe" => ("none", true),
            v => v.strip_suffix("+probe").map_or((v, false), |b| (b, true)),
        };
        let (base, replicas) = match rest {
            "replicas" => ("none", true),
            v => v.strip_suffix("+replicas").map_or((v, false), |b| (b, true)),
        };
        Variant {
            base,
            replicas,
            probe,
        }
    }

    /// The recovery strategy of a failure variant.
    fn recovery(&self) -> Option<&'a str> {
        self.base.strip_prefix("fail:")
    }

    /// The variant without `suffix` (`+probe` or `+replicas`), if it has it.
    fn without(variant: &str, suffix: &str) -> Option<String> {
        let v = Variant::parse(variant);
        let has = match suffix {
            "+probe" => v.probe,
            _ => v.replicas,
        };
        has.then(|| {
            let mut out = v.base.to_string();
            if v.replicas && suffix != "+replicas" {
                out.push_str("+replicas");
            }
            if v.probe && suffix != "+probe" {
                out.push_str("+probe");
            }
            out
        })
    }
}

/// The `megaflux run` arguments of one cell, on the standard timeline; `trace` is where the
/// run records if the variant has the probe on.
fn run_args(args: &BenchArgs, cell: &Cell, summary: &Path, trace: &Path) -> Vec<String> {
    let mut argv: Vec<String> = vec!["run".into(), "--headless".into()];
    let mut flag = |name: &str, value: String| {
        argv.push(format!("--{name}"));
        argv.push(value);
    };
    flag("workload", cell.workload.clone());
    if let Some(input) = args.input.as_ref().filter(|_| cell.reads) {
        flag("input", input.from.clone());
        flag(
            "pace",
            if args.pace == Pacing::EventTime {
                "event-time"
            } else {
                "rate"
            }
            .into(),
        );
        flag("speed", args.speed.to_string());
    }
    flag("workers", args.workers.to_string());
    if let crate::flags::Epochs::Given(mode) = args.epochs {
        flag("epochs", mode.to_string());
    }
    flag("bins", cell.bins.to_string());
    flag("rate", cell.rate.to_string());
    flag("duration", args.duration.to_string());
    for (name, value) in cell.params.iter() {
        flag(name, value.to_string());
    }
    flag("summary", summary.display().to_string());
    let variant = Variant::parse(&cell.variant);
    if variant.probe {
        flag("record", trace.display().to_string());
    }
    if variant.replicas {
        flag("replicas", "2".into());
    }
    let third = args.duration / 3.0;
    match (variant.base, variant.recovery()) {
        ("native", _) => argv.push("--native".into()),
        ("none", _) => {}
        (_, Some(recovery)) => {
            if !variant.replicas {
                flag("replicas", "2".into());
            }
            flag("fail", format!("{FAILED}@{third}"));
            flag("rejoin", format!("{FAILED}@{}", 2.0 * third));
            flag("recovery", recovery.to_string());
        }
        (v, None) => {
            argv.push("--migrate".into());
            argv.push(format!("{v}@{third}:{}", args.away));
            argv.push("--migrate".into());
            argv.push(format!("{v}@{}:uniform", 2.0 * third));
        }
    }
    if args.no_preload {
        argv.push("--no-preload".into());
    }
    argv
}

/// The worker failure variants fail.
const FAILED: usize = 1;

/// Runs one cell as a fresh `megaflux run` process: every run starts from an empty heap,
/// and its peak RSS is its own.
fn run_child(args: &BenchArgs, cell: &Cell) -> anyhow::Result<(Summary, Option<u64>)> {
    let exe = std::env::current_exe().context("finding the megaflux executable")?;
    let stem = std::env::temp_dir().join(format!("megaflux-bench-{}", std::process::id()));
    let summary_file = stem.with_extension("json");
    let trace = stem.with_extension("trace.jsonl");
    let output = Command::new(&exe)
        .args(run_args(args, cell, &summary_file, &trace))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("starting {}", exe.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or("no message");
        anyhow::bail!("megaflux run failed ({}): {last}", output.status);
    }
    let text = std::fs::read_to_string(&summary_file)
        .with_context(|| format!("reading the run's summary {}", summary_file.display()))?;
    let _ = std::fs::remove_file(&summary_file);
    let trace_bytes = std::fs::metadata(&trace).ok().map(|m| m.len());
    let _ = std::fs::remove_file(&trace);
    let summary = serde_json::from_str(&text).context("parsing the run's summary")?;
    Ok((summary, trace_bytes))
}

/// Checks a cell's settings the way `megaflux run` will, so that a bad matrix fails before
/// its first run.
fn check(args: &BenchArgs, cell: &Cell, jobs: &Jobs) -> anyhow::Result<()> {
    let third = args.duration / 3.0;
    let variant = Variant::parse(&cell.variant);
    let recovery = variant.recovery();
    let migrations = match variant.base {
        "native" | "none" => Vec::new(),
        _ if recovery.is_some() => Vec::new(),
        v => vec![
            format!("{v}@{third}:{}", args.away).parse()?,
            format!("{v}@{}:uniform", 2.0 * third).parse()?,
        ],
    };
    let at = |secs: f64| WorkerAt {
        worker: FAILED,
        at_secs: secs,
    };
    let config = RunConfig {
        workload: cell.workload.clone(),
        input: args.input.clone().filter(|_| cell.reads),
        preload: !args.no_preload,
        pacing: args.pace,
        speed: args.speed,
        workers: args.workers,
        bins: Bins::new(cell.bins)?,
        params: cell.params.clone(),
        rate: cell.rate,
        duration: Duration::from_secs_f64(args.duration),
        native: variant.base == "native",
        migrations,
        replicas: if variant.replicas || recovery.is_some() {
            2
        } else {
            1
        },
        failures: recovery.map(|_| at(third)).into_iter().collect(),
        rejoins: recovery.map(|_| at(2.0 * third)).into_iter().collect(),
        recovery: match recovery {
            Some(r) => r.parse()?,
            None => DEFAULT_RECOVERY,
        },
        ..RunConfig::default()
    };
    let job = jobs.find(&cell.workload)?;
    let config = RunConfig {
        epoch_mode: args.epochs.resolve(|| job.why_not_adaptive(&config).is_none()),
        ..config
    };
    job.check(&config)?;
    Ok(())
}

fn row(cell: &Cell, summary: Summary, trace_bytes: Option<u64>) -> Row {
    // A failure disturbs the job from the failure to its recovery's end (the rejoin's, on two
    // workers, where no spare takes the standbys before).
    let failure = summary.failures.first();
    let recovery = failure.and_then(|f| f.recovery.as_ref());
    let disturbed = failure.map(|f| {
        let end = recovery
            .and_then(|r| r.duration_s.map(|d| r.issued_s + d))
            .unwrap_or(f64::INFINITY);
        (f.at_s, end)
    });
    let migrating = |t: f64| {
        summary
            .migrations
            .iter()
            .any(|m| t + 0.25 >= m.issued_s && t <= m.completed_s.unwrap_or(f64::INFINITY))
            || disturbed.is_some_and(|(from, to)| t + 0.25 >= from && t <= to)
    };
    // Steady: the timeline windows after the first second and outside every migration.
    let steady: Vec<_> = summary
        .timeline
        .iter()
        .filter(|w| w.t_s >= 1.0 && !migrating(w.t_s))
        .collect();
    let median = |mut v: Vec<u64>| {
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    let ms = &summary.migrations;
    let (during_p99_ns, during_max_ns, migration_s, bytes_moved) = match recovery {
        Some(r) => (
            Some(r.latency_ns_during.p99),
            Some(r.latency_ns_during.max),
            r.duration_s,
            r.bytes,
        ),
        None => (
            ms.iter().map(|m| m.latency_ns_during.p99).max(),
            ms.iter().map(|m| m.latency_ns_during.max).max(),
            ms.iter().filter_map(|m| m.duration_s).reduce(f64::max),
            ms.iter().map(|m| m.bytes_moved).sum(),
        ),
    };
    Row {
        workload: cell.workload.clone(),
        variant: cell.variant.clone(),
        bins: cell.bins,
        rate: cell.rate,
        steady_p50_ns: median(steady.iter().map(|w| w.latency_ns.p50).collect()),
        steady_p99_ns: median(steady.iter().map(|w| w.latency_ns.p99).collect()),
        steady_max_ns: steady.iter().map(|w| w.latency_ns.max).max().unwrap_or(0),
        during_p99_ns,
        during_max_ns,
        migration_s,
        bytes_moved,
        takeover_ms: failure.and_then(|f| f.takeover_ms),
        takeover_max_ns: failure.map(|f| f.latency_ns_during_takeover.max),
        rss_peak_bytes: summary.rss_max_bytes,
        achieved_rate: summary.achieved_rate,
        trace_bytes,
        max_vs_all_at_once: None,
        p99_vs_native: None,
        p99_vs_probe_off: None,
        p99_vs_one_replica: None,
        summary,
    }
}

fn add_ratios(rows: &mut [Row]) {
    let find = |rows: &[Row], r: &Row, variant: &str| {
        rows.iter().position(|o| {
            o.variant == variant && o.workload == r.workload && o.bins == r.bins && o.rate == r.rate
        })
    };
    for i in 0..rows.len() {
        // Recoveries compare with the all-at-once recovery, migrations with all-at-once.
        let baseline = match Variant::parse(&rows[i].variant).recovery() {
            Some(_) => "fail:all-at-once",
            None => "all-at-once",
        };
        let aao = find(rows, &rows[i], baseline).and_then(|j| rows[j].during_max_ns);
        let native = find(rows, &rows[i], "native").map(|j| rows[j].steady_p99_ns);
        let p99_of = |suffix: &str| {
            Variant::without(&rows[i].variant, suffix)
                .and_then(|v| find(rows, &rows[i], &v))
                .map(|j| rows[j].steady_p99_ns)
        };
        let (off, single) = (p99_of("+probe"), p99_of("+replicas"));
        let r = &mut rows[i];
        r.p99_vs_probe_off = off.map(|o| r.steady_p99_ns as f64 / o.max(1) as f64);
        r.p99_vs_one_replica = single.map(|o| r.steady_p99_ns as f64 / o.max(1) as f64);
        r.max_vs_all_at_once = r.during_max_ns.zip(aao).map(|(a, b)| a as f64 / b.max(1) as f64);
        r.p99_vs_native = native.map(|n| r.steady_p99_ns as f64 / n.max(1) as f64);
    }
}

fn print_table(rows: &[Row]) {
    let ms = |ns: u64| format!("{:.2}", ns as f64 / 1e6);
    let opt = |v: Option<u64>| v.map_or("-".to_string(), ms);
    let ratio = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.3}"));
    println!(
        "{:<10} {:<16} {:>6} {:>8} | {:>8} {:>8} {:>8} | {:>9} {:>9} {:>8} {:>10} {:>8} | {:>9} {:>7} | {:>8} {:>8} {:>8} {:>8} | {:>8} {:>8}",
        "workload",
        "variant",
        "bins",
        "rate",
        "p50 ms",
        "p99 ms",
        "max ms",
        "mig p99",
        "mig max",
        "mig s",
        "MB moved",
        "RSS MB",
        "achieved",
        "offered",
        "vs aao",
        "vs nat",
        "vs off",
        "vs 1 rep",
        "takeover",
        "tk max"
    );
    for r in rows {
        println!(
            "{:<10} {:<16} {:>6} {:>8} | {:>8} {:>8} {:>8} | {:>9} {:>9} {:>8} {:>10.1} {:>8} | {:>9.0} {:>7} | {:>8} {:>8} {:>8} {:>8} | {:>8} {:>8}",
            r.workload,
            r.variant,
            r.bins,
            r.rate,
            ms(r.steady_p50_ns),
            ms(r.steady_p99_ns),
            ms(r.steady_max_ns),
            opt(r.during_p99_ns),
            opt(r.during_max_ns),
            r.migration_s.map_or("-".to_string(), |s| format!("{s:.3}")),
            r.bytes_moved as f64 / 1e6,
            r.rss_peak_bytes
                .map_or("-".to_string(), |b| format!("{:.0}", b as f64 / 1e6)),
            r.achieved_rate,
            r.rate,
            ratio(r.max_vs_all_at_once),
            ratio(r.p99_vs_native),
            ratio(r.p99_vs_probe_off),
            ratio(r.p99_vs_one_replica),
            r.takeover_ms.map_or("-".to_string(), |t| format!("{t:.1}")),
            opt(r.takeover_max_ns),
        );
    }
}

fn write(path: &Path, args: &BenchArgs, rows: &[Row]) -> anyhow::Result<()> {
    let results = Results {
        format: 1,
        workers: args.workers,
        duration_s: args.duration,
        away: &args.away,
        rows,
    };
    let json = serde_json::to_string_pretty(&results)?;
    std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))
}
