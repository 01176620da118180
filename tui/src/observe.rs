//! The probe side of `megaflux run`: the tracing setup, and the collector (with recording
//! and serving) or the exporter that this process runs next to its job.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use megaflux::control::ControlHandle;
use megaflux::harness::{RunConfig, cluster_position};
use megaflux_probe::collector::{Collector, CollectorConfig, CollectorReport};
use megaflux_probe::export::Exporter;
use megaflux_probe::layer::EVENT_QUEUE;
use megaflux_probe::record::{Build, Host, TraceHeader};
use megaflux_probe::{Event, ProbeError, ProbeLayer};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;

/// How long process 0's collector waits for the other processes' last events.
const EXPORTER_LINGER: Duration = Duration::from_secs(10);

/// What to do with this process's events.
#[derive(Debug, Default)]
pub struct ProbeArgs {
    /// Record every event to this trace file (`--record`).
    pub record: Option<PathBuf>,
    /// Serve events to subscribers and take their commands on this address (`--serve`, or
    /// a loopback port for this process's own dashboard).
    pub serve: Option<SocketAddr>,
    /// Send this process's events to the collector at this address instead of running one
    /// (`--export`; not with `record`, `serve` or `metrics`).
    pub export: Option<SocketAddr>,
    /// Serve the job's metrics on this address (`--metrics`).
    pub metrics: Option<SocketAddr>,
    /// How long the run's last numbers stay served until a scrape reads them.
    pub metrics_linger: Duration,
    /// The token clients need (`--token` or `$MEGAFLUX_TOKEN`): for commands, exporters,
    /// and any client of a non-loopback address.
    pub token: Option<String>,
    /// Whether `record` may replace an existing file.
    pub force: bool,
    /// Whether the cluster's life is said on stderr (not under a dashboard, which owns the
    /// terminal).
    pub lifecycle: bool,
}

impl ProbeArgs {
    fn wanted(&self) -> bool {
        self.record.is_some() || self.serve.is_some() || self.export.is_some() || self.metrics.is_some()
    }
}

/// The observer running next to the job.
pub enum Observer {
    /// Nothing: no recording, serving or exporting was asked for (tracing only).
    None,
    /// This process's collector: it records, serves, or both; with the token made for it
    /// when it serves and none was given.
    Collector(Collector, Option<Made>),
    /// This process's events going to another process's collector.
    Exporter(Exporter),
}

/// A token made for this run's collector, and its file (removed with it).
pub struct Made {
    token: String,
    _file: Option<crate::token::TokenFile>,
}

/// Installs the tracing subscriber: `MEGAFLUX_LOG` to stderr, plus the probe's layer when
/// `probe` is given, plus the cluster's life in a line each (`lifecycle.rs`) with
/// `lifecycle`.
pub fn install_tracing(probe: Option<ProbeLayer>, lifecycle: bool) {
    // Off unless asked for with MEGAFLUX_LOG (e.g. MEGAFLUX_LOG=megaflux=debug).
    let filter = EnvFilter::try_from_env("MEGAFLUX_LOG").unwrap_or_else(|_| EnvFilter::new("off"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(probe.map(ProbeLayer::filtered))
        .with(lifecycle.then(crate::lifecycle::layer))
        .try_init();
}

/// Sets up tracing and, if asked for, the collector or exporter of this process.
pub fn start(config: &RunConfig, probe: &ProbeArgs, control: &ControlHandle) -> anyhow::Result<Observer> {
    if !probe.wanted() {
        install_tracing(None, probe.lifecycle);
        return Ok(Observer::None);
    }
    let cluster = cluster_position(&config.timely_args)?;
    let (processes, process) = (cluster.processes as u32, cluster.process as u32);
    let (layer, queue) = ProbeLayer::new(process, EVENT_QUEUE);
    let mut json = serde_json::to_value(config).context("describing the job")?;
    // The output is not a setting a re-run takes (it writes none unless told), but the
    // dashboard names it.
    if let Some(output) = &config.output {
        json["output"] = output.name().into();
    }
    let workers = config.workers as u32;
    let peers = processes * workers;
    let bins = config.bins.count() as u32;
    let hello = layer.stamp(Event::Hello {
        processes,
        workers,
        peers,
        bins,
        config: json.clone(),
        anchor_unix_s: Some(layer.anchor_unix_s()),
    });
    install_tracing(Some(layer), probe.lifecycle);
    if let Some(addr) = probe.export {
        // The collector refuses an empty token at its start; so does an exporter.
        megaflux_probe::collector::gate::Gate::new(None, probe.token.as_deref())?;
        if probe.record.is_some() || probe.serve.is_some() || probe.metrics.is_some() {
            return Err(ProbeError::Config(
                "--export sends this process's events to another process's collector; --record, --serve and --metrics go with that process"
                    .into(),
            )
            .into());
        }
        // A collector on this machine that made its own token leaves it for its exporters
        // as it starts (perhaps after this process).
        let token = probe
            .token
            .clone()
            .or_else(|| crate::token::wait_for(addr, config.cluster_wait));
        let exporter = Exporter::start(addr, process, token, hello, queue)
            .with_context(|| format!("exporting events to {addr}"))?;
        return Ok(Observer::Exporter(exporter));
    }
    let placement = megaflux::harness::initial_placement(config, peers as usize)?;
    let map: Vec<u32> = placement.iter().map(|r| r.primary).collect();
    let header = TraceHeader {
        build: Some(Build {
            version: env!("CARGO_PKG_VERSION").to_string(),
            git: env!("MEGAFLUX_GIT").to_string(),
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .to_string(),
        }),
        host: Some(Host::this()),
        initial_placement: placement.iter().map(ToString::to_string).collect(),
        // The addresses timely read from `-h` (none for one process).
        hosts: cluster.addresses.clone(),
        ..TraceHeader::new(json, processes, workers, bins, map)
    };
    // Serving without a token given: one is made, so that no other user of the machine
    // can command the job.
    // (A public address needs a token given: its viewers elsewhere cannot read the file.)
    let made = match (&probe.token, probe.serve) {
        (None, Some(serve)) if serve.ip().is_loopback() => Some(crate::token::generate()?),
        _ => None,
    };
    let collector = Collector::start(
        CollectorConfig {
            serve: probe.serve,
            token: probe.token.clone().or_else(|| made.clone()),
            record: probe.record.clone().map(|p| (p, header)),
            replace: probe.force,
            control: (process == 0).then(|| control.clone()),
            hello: Some(hello),
            metrics: probe.metrics,
            metrics_linger: probe.metrics_linger,
            ..CollectorConfig::default()
        },
        queue,
    )
    .context("starting the collector")?;
    let addr = collector.local_addr();
    if let Some(addr) = addr {
        eprintln!("megaflux: collector serving on {addr}");
    }
    if let Some(metrics) = collector.metrics_addr() {
        eprintln!("megaflux: metrics on http://{metrics}/metrics");
    }
    let made = match (made, addr) {
        (Some(token), Some(addr)) => Some(Made {
            _file: keep_token(addr, &token),
            token,
        }),
        _ => None,
    };
    Ok(Observer::Collector(collector, made))
}

/// Writes the token made for the collector on `addr` where `attach` and exporters find it,
/// and says where; if it cannot be written, says the token itself.
fn keep_token(addr: SocketAddr, token: &str) -> Option<crate::token::TokenFile> {
    match crate::token::TokenFile::write(addr, token) {
        Ok(file) => {
            eprintln!(
                "megaflux: commands need this run's token, in {} (yours alone; `megaflux attach {addr}` reads it)",
                file.path().display()
            );
            Some(file)
        }
        Err(e) => {
            eprintln!("megaflux: warning: {e:#}: commands need this run's token {token} (--token)");
            None
        }
    }
}

impl Observer {
    /// Where this process's collector serves, if it does.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Observer::Collector(c, _) => c.local_addr(),
            _ => None,
        }
    }

    /// The token made for this process's collector, if it made one.
    pub fn made_token(&self) -> Option<String> {
        match self {
            Observer::Collector(_, Some(made)) => Some(made.token.clone()),
            _ => None,
        }
    }

    /// Lets the observer take the job's last events (and the run's summary, for the trace's
    /// last line) and stop.
    pub fn finish(self, summary: Option<serde_json::Value>) -> anyhow::Result<Option<CollectorReport>> {
        match self {
            Observer::None => Ok(None),
            Observer::Exporter(e) => {
                e.finish().context("sending the last events to the collector")?;
                Ok(None)
            }
            Observer::Collector(c, _made) => {
                let report = c
                    .finish(EXPORTER_LINGER, summary)
                    .context("finishing the collector")?;
                Ok(Some(report))
            }
        }
    }
}
