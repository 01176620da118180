//! The collector's loop: this process's events, the connections' messages and a tick, from
//! the job's hello to the trace's last line.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, MissedTickBehavior};

use super::gate::Gate;
use super::speaker::JobShape;
use super::state::{State, Subscriber};
use super::{CollectorConfig, CollectorReport, Finish, network};
use crate::error::ProbeError;
use crate::event::{Event, Stamped};
use crate::layer::EventQueue;
use crate::metrics::Snapshot;
use crate::model::JobModel;
use crate::record::Recorder;
use crate::wire::{CommandRequest, EventFrame};
use tokio_util::bytes::Bytes;

/// How often dropped-event counts are reported and the trace flushed.
const TICK: Duration = Duration::from_millis(500);
/// Most events handled per turn of the collector loop.
const BATCH: usize = 4096;
/// How long the metrics server has to write the last scrape's response before the
/// collector's runtime ends.
const METRICS_WRITTEN: Duration = Duration::from_millis(250);
/// Messages from connections queued for the collector loop.
const INBOX: usize = 1024;

/// What a connection's task tells the collector loop.
pub(super) enum Inbox {
    /// Events of an exporter, already checked, and their frame's share of
    /// [`INBOX_BYTES`](super::limits::INBOX_BYTES) (given back once they are taken in).
    Events(Vec<Stamped>, tokio::sync::OwnedSemaphorePermit),
    /// An exporter of `process` was welcomed on connection `connection`: it replaces any
    /// other of the same process (told why through its `replace`), so that a stale or
    /// impostor connection cannot keep the process's real exporter out.
    ExporterJoined {
        process: u32,
        connection: u64,
        replace: oneshot::Sender<String>,
    },
    /// The exporter of `process` on connection `connection` left.
    ExporterLeft(u32, u64),
    /// A subscriber asks to follow: its id and the snapshot, or why not.
    Subscribe {
        frames: mpsc::UnboundedSender<EventFrame>,
        queued: Arc<AtomicUsize>,
        reply: oneshot::Sender<Result<(u64, Vec<Bytes>), String>>,
    },
    Unsubscribe(u64),
    /// A command that passed the connection's checks (token, size, rate).
    Command {
        subscriber: u64,
        request: u64,
        command: CommandRequest,
    },
    /// A connection closed for a protocol error or refused.
    Closed(String),
}

pub(super) async fn run(
    config: CollectorConfig,
    mut queue: EventQueue,
    (network, metrics): (Option<(TcpListener, Gate)>, Option<TcpListener>),
    recorder: Option<Recorder>,
    mut stop: oneshot::Receiver<Finish>,
) -> Result<CollectorReport, ProbeError> {
    let mut scrapes = metrics.map(|listener| {
        let (scrapes, requests) = crate::metrics::channel();
        tokio::spawn(crate::metrics::serve(listener, scrapes));
        requests
    });
    let metrics_linger = config.metrics_linger;
    let (inbox_tx, mut inbox) = mpsc::channel::<Inbox>(INBOX);
    let local_process = config.hello.as_ref().map_or(0, |h| h.process);
    let turned_away = Arc::new(AtomicU64::new(0));
    let queued_total = Arc::new(AtomicUsize::new(0));
    if let Some((listener, gate)) = network {
        let shape = config.hello.as_ref().and_then(JobShape::of);
        tokio::spawn(network::accept(network::Listener {
            listener,
            inbox: inbox_tx.clone(),
            gate,
            limits: config.limits.clone(),
            local_process,
            shape,
            turned_away: Arc::clone(&turned_away),
            addresses: super::addresses::Addresses::new(&config.limits),
            clock: queue.started,
            queued_total: Arc::clone(&queued_total),
            inbox_bytes: Arc::new(tokio::sync::Semaphore::new(super::limits::INBOX_BYTES >> 10)),
        }));
    }
    drop(inbox_tx);
    let mut state = State {
        local_process,
        limits: config.limits,
        model: JobModel::new(),
        recorder,
        subscribers: HashMap::new(),
        queued_total: Arc::clone(&queued_total),
        next_subscriber: 0,
        control: config.control,
        pending: HashMap::new(),
        exporters: BTreeMap::new(),
        report: CollectorReport::default(),
        queue_dropped: Arc::clone(&queue.dropped),
        queue_reported: 0,
        turned_away,
        keyframe: None,
        resumed: None,
        operators: std::collections::HashSet::new(),
        clock: queue.started,
    };
    let mut first: Vec<Stamped> = config.hello.into_iter().collect();
    if state.recorder.is_some() {
        state.model.recording = Some(true);
        first.push(Stamped {
            at_s: first.first().map_or(0.0, |h| h.at_s),
            process: local_process,
            event: Event::Recording {
                on: true,
                failed: None,
            },
        });
    }
    state.handle(first);
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut batch = Vec::with_capacity(BATCH);
    let finish = loop {
        tokio::select! {
            n = queue.events.recv_many(&mut batch, BATCH) => {
                if n == 0 {
                    // The layer is gone: the job ended without finishing the collector.
                    break Finish::NOW;
                }
                state.handle(std::mem::take(&mut batch));
            }
            Some(msg) = inbox.recv() => message(&mut state, msg),
            Some(reply) = crate::metrics::next_scrape(&mut scrapes) => {
                let _ = reply.send(Snapshot::of(&state.model, false));
            }
            _ = tick.tick() => {
                state.report_drops();
                state.keyframe(false);
                state.flush();
            }
            finish = &mut stop => break finish.unwrap_or(Finish::NOW),
        }
    };
    // Everything the job emitted before it asked us to finish.
    while let Ok(event) = queue.events.try_recv() {
        batch.push(event);
    }
    state.handle(std::mem::take(&mut batch));
    // Exporters send their last events after their own job ends: give them `linger`.
    let deadline = Instant::now() + finish.linger;
    while !state.exporters.is_empty() {
        tokio::select! {
            Some(msg) = inbox.recv() => message(&mut state, msg),
            Some(reply) = crate::metrics::next_scrape(&mut scrapes) => {
                let _ = reply.send(Snapshot::of(&state.model, false));
            }
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    state.report_drops();
    if let Some(summary) = finish.summary {
        let summary = state.own(Event::Summary { summary });
        state.handle(vec![summary]);
    }
    state.flush();
    // The run's last numbers, until a scraper has read them (or the linger is over): a
    // scrape every few seconds would otherwise never see a short run's end.
    if scrapes.is_some() {
        let mut deadline = Instant::now() + metrics_linger;
        let mut read = false;
        loop {
            tokio::select! {
                Some(reply) = crate::metrics::next_scrape(&mut scrapes) => {
                    // The server writes the response on this runtime, which ends with this
                    // loop: it gets a moment (other scrapes then get the same numbers). A
                    // scraper that left before its answer read nothing.
                    if reply.send(Snapshot::of(&state.model, true)).is_ok() && !read {
                        read = true;
                        deadline = Instant::now() + METRICS_WRITTEN;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
    }
    if let Some(r) = state.recorder.as_ref() {
        state.report.recorded_lines = r.lines();
    }
    state.report.turned_away = state.turned_away.load(Ordering::Relaxed);
    state.report.model = state.model;
    Ok(state.report)
}

fn message(state: &mut State, msg: Inbox) {
    match msg {
        Inbox::Events(events, _budget) => state.exported(events),
        Inbox::ExporterJoined {
            process,
            connection,
            replace,
        } => {
            if let Some((_, older)) = state.exporters.insert(process, (connection, replace)) {
                let _ = older.send(format!("a newer exporter of process {process} connected"));
            }
        }
        Inbox::ExporterLeft(process, connection) => {
            if state
                .exporters
                .get(&process)
                .is_some_and(|(c, _)| *c == connection)
            {
                state.exporters.remove(&process);
            }
        }
        Inbox::Subscribe {
            frames,
            queued,
            reply,
        } => {
            if state.subscribers.len() >= state.limits.subscribers {
                let _ = reply.send(Err(format!(
                    "this collector serves {} subscribers already",
                    state.limits.subscribers
                )));
                return;
            }
            let snapshot = match crate::wire::snapshot_frames(&state.model) {
                Ok(snapshot) => snapshot,
                Err(e) => {
                    let _ = reply.send(Err(e.to_string()));
                    return;
                }
            };
            let id = state.next_subscriber;
            state.next_subscriber += 1;
            if reply.send(Ok((id, snapshot))).is_ok() {
                let subscriber = Subscriber {
                    frames,
                    queued,
                    dropped: 0,
                    reported: 0,
                };
                state.subscribers.insert(id, subscriber);
            }
        }
        Inbox::Unsubscribe(id) => {
            if let Some(s) = state.subscribers.remove(&id) {
                s.release(&state.queued_total);
            }
        }
        Inbox::Command {
            subscriber,
            request,
            command,
        } => state.command(subscriber, request, command),
        Inbox::Closed(reason) => state.closed(&reason),
    }
}
