//! The collector: merges this process's events and those of exporters (the other processes
//! of a cluster) into one [`JobModel`], records them, serves subscribers, and forwards
//! subscribers' commands to the job's control handle.
//!
//! It runs on its own thread with a single-threaded tokio runtime, so that it takes no
//! worker thread's time. Nothing it does can stall the job: the job's events reach it
//! through the layer's never-blocking queue, and a slow subscriber loses events (counted)
//! instead of holding up the collector or the other subscribers.
//!
//! Nothing a client sends is trusted before its hello is accepted, and little after: see
//! [`Limits`] for what a connection may cost, [`gate`] for who may connect, and
//! [`speaker`] for what an exporter may say.
//!
//! * `lifecycle`: the collector's loop, from the first event to the trace's last line.
//! * `state`: the model, the trace and the fan-out to subscribers.
//! * `commands`: subscribers' commands, checked and passed to the job.
//! * `network`: the listener and one task per connection.
//! * [`addresses`]: what each client address may spend, across its connections.

pub mod addresses;
mod commands;
pub mod gate;
mod lifecycle;
pub mod limits;
mod network;
pub mod speaker;
mod state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use megaflux::control::ControlHandle;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::error::ProbeError;
use crate::event::Stamped;
use crate::layer::EventQueue;
use crate::model::JobModel;
use crate::record::{Recorder, TraceHeader};

pub use limits::{FAIR_BYTES, FRAME_BYTES, FRAME_EVENTS, Limits, SUBSCRIBER_BYTES, SUBSCRIBERS_BYTES};

/// How often a trace gets a keyframe of the job at the most.
pub const KEYFRAME_EVERY: Duration = Duration::from_secs(5);

/// How to run a collector.
#[derive(Default)]
pub struct CollectorConfig {
    /// Where to serve exporters and subscribers.
    pub serve: Option<SocketAddr>,
    /// The token clients need: every client on an address other than loopback, exporters
    /// and commands on loopback. Without one, only a loopback address may be served; an
    /// empty one is refused.
    pub token: Option<String>,
    /// Where to record, and the trace's header.
    pub record: Option<(PathBuf, TraceHeader)>,
    /// Whether the trace may replace an existing file.
    pub replace: bool,
    /// The job's control, for subscribers' commands.
    pub control: Option<ControlHandle>,
    /// This process's hello, the first event of the job. Exporters must agree with it.
    pub hello: Option<Stamped>,
    /// What a connection may cost.
    pub limits: Limits,
    /// Where to serve the job's metrics (`GET /metrics`), if anywhere.
    pub metrics: Option<SocketAddr>,
    /// How long the run's last numbers stay served once it ended, until a scrape reads them.
    pub metrics_linger: Duration,
}

/// What a collector did, once finished.
#[derive(Clone, Debug, Default)]
pub struct CollectorReport {
    /// Events the collector took in (after [`crate::event::expand`]), its own included,
    /// whether recorded or not.
    pub events: u64,
    /// Lines written to the trace, header included (0 without one).
    pub recorded_lines: u64,
    /// Connections closed for a protocol error or refused, with the reason (the first
    /// [`Limits::reasons_kept`] of them, each cut short).
    pub closed: Vec<String>,
    /// Every connection closed for a protocol error or refused.
    pub closed_total: u64,
    /// Connections turned away without a hello because too many were waiting for theirs.
    pub turned_away: u64,
    /// Why the trace stopped being written, if a write failed.
    pub recording_failed: Option<String>,
    /// The model at the end.
    pub model: JobModel,
}

/// A running collector.
pub struct Collector {
    local_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    stop: Option<oneshot::Sender<Finish>>,
    thread: Option<std::thread::JoinHandle<Result<CollectorReport, ProbeError>>>,
}

/// How the collector ends.
struct Finish {
    linger: Duration,
    summary: Option<serde_json::Value>,
}

impl Finish {
    /// Ending at once, without a summary.
    const NOW: Finish = Finish {
        linger: Duration::ZERO,
        summary: None,
    };
}

impl Collector {
    /// Starts a collector fed by `queue` (this process's layer).
    pub fn start(config: CollectorConfig, queue: EventQueue) -> Result<Self, ProbeError> {
        let gate = gate::Gate::new(config.serve, config.token.as_deref())?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ProbeError::io("starting the collector's runtime", e))?;
        let bind = |addr: Option<SocketAddr>, what: &str| {
            addr.map(|addr| {
                runtime
                    .block_on(TcpListener::bind(addr))
                    .map_err(|e| ProbeError::io(format!("listening on {addr}{what}"), e))
            })
            .transpose()
        };
        let listener = bind(config.serve, "")?;
        let local_addr = listener.as_ref().and_then(|l| l.local_addr().ok());
        let metrics = bind(config.metrics, " for metrics")?;
        let metrics_addr = metrics.as_ref().and_then(|l| l.local_addr().ok());
        let recorder = match &config.record {
            Some((path, header)) => Some(Recorder::create(path, header, config.replace)?),
            None => None,
        };
        let (stop_tx, stop_rx) = oneshot::channel();
        let network = listener.map(|l| (l, gate));
        let thread = std::thread::Builder::new()
            .name("megaflux-collector".into())
            .spawn(move || {
                runtime.block_on(lifecycle::run(
                    config,
                    queue,
                    (network, metrics),
                    recorder,
                    stop_rx,
                ))
            })
            .map_err(|e| ProbeError::io("starting the collector's thread", e))?;
        Ok(Collector {
            local_addr,
            metrics_addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The address it serves on (with the port the system chose for port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// The address it serves metrics on (with the port the system chose for port 0).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Takes every event still queued, waits up to `linger` for exporters to finish sending,
    /// ends the trace with the run's `summary` (when the run gave one: a trace without it is
    /// known to be cut short), flushes it and stops.
    pub fn finish(
        mut self,
        linger: Duration,
        summary: Option<serde_json::Value>,
    ) -> Result<CollectorReport, ProbeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(Finish { linger, summary });
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(ProbeError::Protocol("the collector's thread panicked".into())),
            None => Ok(CollectorReport::default()),
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(Finish::NOW);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
