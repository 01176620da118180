//! The collector: merges this process's events and those of exporters (the other processes
//! of a cluster) into one [`JobModel`], records them, serves subscribers, and forwards
//! subscribers' commands to the job's control handle.
//!
//! It runs on its own thread with a single-threaded tokio runtime, so that it takes no
//! worker thread's time. Nothing it does can stall the job: the job's events reach it
//! through the layer's never-blocking queue, and a slow subscriber loses events (counted)
//! instead of holding up the collector or the other subscribers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use megaflux::control::{Command, ControlHandle};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, MissedTickBehavior};

use crate::error::ProbeError;
use crate::event::{Event, Outcome, Stamped};
use crate::layer::EventQueue;
use crate::model::JobModel;
use crate::record::{Recorder, TraceHeader};
use crate::wire::{ClientFrame, CommandRequest, Connection, PROTOCOL_VERSION, Role, ServerFrame};

/// Frames queued for one subscriber before it starts losing events.
pub const SUBSCRIBER_QUEUE: usize = 1024;
/// How long a new connection may take to say hello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How often dropped-event counts are reported and the trace flushed.
const TICK: Duration = Duration::from_millis(500);
/// How often a trace gets a keyframe of the job at the most.
pub const KEYFRAME_EVERY: Duration = Duration::from_secs(5);
/// A keyframe is written once the trace has grown by this many times the last one's size.
const KEYFRAME_SHARE: u64 = 4;
/// Most events handled per turn of the collector loop.
const BATCH: usize = 4096;
/// Most events in one frame to a subscriber or from an exporter (a few hundred kB).
pub const FRAME_EVENTS: usize = 2048;

/// How to run a collector.
#[derive(Default)]
pub struct CollectorConfig {
    /// Where to serve exporters and subscribers.
    pub serve: Option<SocketAddr>,
    /// The token subscribers need for commands. Without one, only a loopback address may be
    /// served.
    pub token: Option<String>,
    /// Where to record, and the trace's header.
    pub record: Option<(PathBuf, TraceHeader)>,
    /// The job's control, for subscribers' commands.
    pub control: Option<ControlHandle>,
    /// This process's hello, the first event of the job.
    pub hello: Option<Stamped>,
}

/// What a collector did, once finished.
#[derive(Clone, Debug, Default)]
pub struct CollectorReport {
    pub events: u64,
    pub recorded_lines: u64,
    /// Connections closed for a protocol error, with the reason.
    pub closed: Vec<String>,
    /// The model at the end.
    pub model: JobModel,
}

/// A running collector.
pub struct Collector {
    local_addr: Option<SocketAddr>,
    stop: Option<oneshot::Sender<Finish>>,
    thread: Option<std::thread::JoinHandle<Result<CollectorReport, ProbeError>>>,
}

enum Inbox {
    Events(Vec<Stamped>),
    ExporterJoined,
    ExporterLeft,
    Subscribe {
        frames: mpsc::Sender<ServerFrame>,
        snapshot: oneshot::Sender<(u64, Box<JobModel>)>,
    },
    Unsubscribe(u64),
    Command {
        subscriber: u64,
        request: u64,
        command: CommandRequest,
        allowed: bool,
    },
    Closed(String),
}

struct Subscriber {
    frames: mpsc::Sender<ServerFrame>,
    dropped: u64,
    reported: u64,
}

impl Collector {
    /// Starts a collector fed by `queue` (this process's layer).
    pub fn start(config: CollectorConfig, queue: EventQueue) -> Result<Self, ProbeError> {
        if let Some(addr) = config.serve
            && !addr.ip().is_loopback()
            && config.token.is_none()
        {
            return Err(ProbeError::Config(format!(
                "serving on {addr}, which is not a loopback address, needs a token (--token or {})",
                crate::wire::TOKEN_ENV
            )));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ProbeError::io("starting the collector's runtime", e))?;
        let listener = match config.serve {
            Some(addr) => Some(
                runtime
                    .block_on(TcpListener::bind(addr))
                    .map_err(|e| ProbeError::io(format!("listening on {addr}"), e))?,
            ),
            None => None,
        };
        let local_addr = listener.as_ref().and_then(|l| l.local_addr().ok());
        let recorder = match &config.record {
            Some((path, header)) => Some(Recorder::create(path, header)?),
            None => None,
        };
        let (stop_tx, stop_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("megaflux-collector".into())
            .spawn(move || runtime.block_on(run(config, queue, listener, recorder, stop_rx)))
            .map_err(|e| ProbeError::io("starting the collector's thread", e))?;
        Ok(Collector {
            local_addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The address it serves on (with the port the system chose for port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
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

/// How the collector ends.
struct Finish {
    linger: Duration,
    summary: Option<serde_json::Value>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(Finish {
                linger: Duration::ZERO,
                summary: None,
            });
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct State {
    /// The process this collector runs in: only its events answer commands.
    local_process: u32,
    model: JobModel,
    recorder: Option<Recorder>,
    subscribers: HashMap<u64, Subscriber>,
    next_subscriber: u64,
    control: Option<ControlHandle>,
    /// Commands sent to the job and not answered yet: control id → (subscriber, request).
    pending: HashMap<u64, (u64, u64)>,
    exporters: usize,
    report: CollectorReport,
    queue_dropped: Arc<std::sync::atomic::AtomicU64>,
    queue_reported: u64,
    /// When the last keyframe was written, and where the trace then ended and how big the
    /// keyframe was.
    keyframe: Option<(Instant, u64, u64)>,
    /// This process's probe clock, on which the collector stamps its own events (keyframes,
    /// commands it received, recording, drops, the summary), so that they share the axis of
    /// the process they happen in rather than the latest clock of any process.
    clock: std::time::Instant,
}

impl State {
    /// Now on this process's probe clock.
    fn now_s(&self) -> f64 {
        self.clock.elapsed().as_secs_f64()
    }

    /// Writes a keyframe of the model to the trace if one is due: every
    /// [`KEYFRAME_EVERY`], but not before the trace has grown by [`KEYFRAME_SHARE`] times
    /// the last keyframe's size (a job of many bins has big keyframes); and right after the
    /// recording resumed (`now`).
    fn keyframe(&mut self, now: bool) -> Result<(), ProbeError> {
        let at_s = self.now_s();
        let Some(r) = self.recorder.as_mut() else {
            return Ok(());
        };
        if self.model.recording != Some(true) {
            return Ok(());
        }
        let due = match self.keyframe {
            None => true,
            Some((at, end, size)) => {
                now || (at.elapsed() >= KEYFRAME_EVERY && r.bytes() - end >= KEYFRAME_SHARE * size)
            }
        };
        if due {
            let before = r.bytes();
            r.write(&Stamped {
                at_s,
                process: self.local_process,
                event: Event::Keyframe {
                    model: serde_json::to_value(self.model.keyframe())
                        .map_err(|e| ProbeError::Protocol(format!("a keyframe of the model: {e}")))?,
                },
            })?;
            self.keyframe = Some((Instant::now(), r.bytes(), r.bytes() - before));
        }
        Ok(())
    }

    fn handle(&mut self, events: Vec<Stamped>) -> Result<(), ProbeError> {
        if events.is_empty() {
            return Ok(());
        }
        let events = crate::event::expand(events);
        for event in &events {
            self.model.apply(event);
            // A pause is written before the gap (the model already says off), a resumption
            // after it.
            if let Some(r) = self.recorder.as_mut()
                && (self.model.recording == Some(true)
                    || matches!(event.event, Event::Recording { on: false }))
            {
                r.write(event)?;
            }
            // The job's answer (not the collector's own `received`) goes to whoever asked.
            if let Event::Command {
                id: Some(id),
                outcome: outcome @ (Outcome::Applied | Outcome::Rejected),
                reason,
                ..
            } = &event.event
                && event.process == self.local_process
                && let Some((subscriber, request)) = self.pending.remove(id)
            {
                self.answer(subscriber, request, *outcome, reason.clone());
            }
        }
        self.report.events += events.len() as u64;
        // Frames of a bounded number of events: one sample of 2^16 bins must not make a frame
        // over the limit.
        for chunk in events.chunks(FRAME_EVENTS) {
            self.subscribers.retain(|_, s| {
                match s.frames.try_send(ServerFrame::Events {
                    events: chunk.to_vec(),
                }) {
                    Ok(()) => true,
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        s.dropped += chunk.len() as u64;
                        true
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => false,
                }
            });
        }
        // Commands the job will never answer now.
        if events.iter().any(|e| {
            e.process == self.local_process && matches!(e.event, Event::JobFinished { worker: 0, .. })
        }) {
            for (_, (subscriber, request)) in std::mem::take(&mut self.pending) {
                let reason = "the job finished before taking the command".to_string();
                self.answer(subscriber, request, Outcome::Rejected, Some(reason));
            }
        }
        Ok(())
    }

    fn answer(&mut self, subscriber: u64, request: u64, outcome: Outcome, reason: Option<String>) {
        if let Some(s) = self.subscribers.get_mut(&subscriber) {
            let frame = ServerFrame::Answer {
                request,
                outcome,
                reason,
            };
            if s.frames.try_send(frame).is_err() {
                s.dropped += 1;
            }
        }
    }

    /// Takes a subscriber's command: rejects what cannot be right, forwards the rest to the
    /// job. Either way the feed (and the trace) gets a `command` event: `rejected` with the
    /// reason, or `received` with the id under which the job will answer.
    fn command(
        &mut self,
        subscriber: u64,
        request: u64,
        command: CommandRequest,
        allowed: bool,
    ) -> Result<(), ProbeError> {
        if let CommandRequest::Record { on } = command {
            return self.record(subscriber, request, on, allowed);
        }
        let describe = format!("{command:?}");
        let checked = if allowed {
            self.check(command)
        } else {
            Err("commands need the collector's token".to_string())
        };
        let finished = self.model.workers.get(&0).is_some_and(|w| w.finished);
        let checked = checked.and_then(|c| match self.control.as_ref() {
            _ if finished => Err("the job has finished".to_string()),
            Some(control) => Ok((c, control)),
            None => Err("this collector has no job to command".to_string()),
        });
        let (outcome, id, reason) = match checked {
            Err(reason) => {
                self.answer(subscriber, request, Outcome::Rejected, Some(reason.clone()));
                (Outcome::Rejected, None, Some(reason))
            }
            Ok((command, control)) => {
                let id = control.send(command);
                self.pending.insert(id, (subscriber, request));
                (Outcome::Received, Some(id), None)
            }
        };
        let event = Stamped {
            at_s: self.now_s(),
            process: self.local_process,
            event: Event::Command {
                outcome,
                id,
                time: None,
                command: describe,
                request: None,
                source: None,
                reason,
            },
        };
        self.handle(vec![event])
    }

    /// Pauses or resumes the trace: the collector's own command.
    fn record(&mut self, subscriber: u64, request: u64, on: bool, allowed: bool) -> Result<(), ProbeError> {
        let refused = if !allowed {
            Some("commands need the collector's token")
        } else if self.recorder.is_none() {
            Some("this job records nothing (start it with --record FILE)")
        } else {
            None
        };
        if let Some(reason) = refused {
            self.answer(subscriber, request, Outcome::Rejected, Some(reason.into()));
            return Ok(());
        }
        if self.model.recording != Some(on) {
            let event = Stamped {
                at_s: self.now_s(),
                process: self.local_process,
                event: Event::Recording { on },
            };
            self.handle(vec![event])?;
            // After a gap the trace's bin sizes and frontiers are stale: start it afresh.
            if on {
                self.keyframe(true)?;
            }
            if let Some(r) = self.recorder.as_mut() {
                r.flush()?;
            }
        }
        self.answer(subscriber, request, Outcome::Applied, None);
        Ok(())
    }

    /// What can be checked before the job sees the command (the job checks again).
    fn check(&self, command: CommandRequest) -> Result<Command, String> {
        let bins = self.model.bins();
        let peers = self.model.peers;
        let known = |worker: usize| {
            if peers > 0 && worker >= peers as usize {
                Err(format!(
                    "unknown worker {worker}: the job has workers 0 to {}",
                    peers - 1
                ))
            } else {
                Ok(())
            }
        };
        match &command {
            CommandRequest::MoveBins {
                bins: moved, worker, ..
            } => {
                if moved.is_empty() {
                    return Err("no bins to move".into());
                }
                known(*worker)?;
                if let (Some(n), Some(bad)) = (bins, moved.iter().find(|b| **b >= bins.unwrap_or(0) as usize))
                {
                    return Err(format!(
                        "unknown bin {bad}: the job has {n} bins, 0 to {}",
                        n.saturating_sub(1)
                    ));
                }
            }
            CommandRequest::Fail { worker } | CommandRequest::Rejoin { worker } => known(*worker)?,
            _ => {}
        }
        command.to_command()
    }

    /// Reports counts of dropped events that changed, as events of their own.
    fn report_drops(&mut self, now: f64) -> Result<(), ProbeError> {
        let mut events = Vec::new();
        let queue = self.queue_dropped.load(Ordering::Relaxed);
        if queue != self.queue_reported {
            self.queue_reported = queue;
            events.push(Stamped {
                at_s: now,
                process: self.local_process,
                event: Event::Dropped {
                    place: "queue".into(),
                    count: queue,
                },
            });
        }
        for (id, s) in self.subscribers.iter_mut() {
            if s.dropped != s.reported {
                s.reported = s.dropped;
                events.push(Stamped {
                    at_s: now,
                    process: self.local_process,
                    event: Event::Dropped {
                        place: format!("subscriber {id}"),
                        count: s.dropped,
                    },
                });
            }
        }
        self.handle(events)
    }
}

async fn run(
    config: CollectorConfig,
    mut queue: EventQueue,
    listener: Option<TcpListener>,
    recorder: Option<Recorder>,
    mut stop: oneshot::Receiver<Finish>,
) -> Result<CollectorReport, ProbeError> {
    let (inbox_tx, mut inbox) = mpsc::channel::<Inbox>(1024);
    let local_process = config.hello.as_ref().map_or(0, |h| h.process);
    if let Some(listener) = listener {
        tokio::spawn(accept(
            listener,
            inbox_tx.clone(),
            config.token.clone(),
            local_process,
        ));
    }
    drop(inbox_tx);
    let mut state = State {
        local_process,
        model: JobModel::new(),
        recorder,
        subscribers: HashMap::new(),
        next_subscriber: 0,
        control: config.control,
        pending: HashMap::new(),
        exporters: 0,
        report: CollectorReport::default(),
        queue_dropped: Arc::clone(&queue.dropped),
        queue_reported: 0,
        keyframe: None,
        clock: queue.started,
    };
    let mut first: Vec<Stamped> = config.hello.into_iter().collect();
    if state.recorder.is_some() {
        state.model.recording = Some(true);
        first.push(Stamped {
            at_s: first.first().map_or(0.0, |h| h.at_s),
            process: local_process,
            event: Event::Recording { on: true },
        });
    }
    state.handle(first)?;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut batch = Vec::with_capacity(BATCH);
    let finish = loop {
        tokio::select! {
            n = queue.events.recv_many(&mut batch, BATCH) => {
                if n == 0 {
                    // The layer is gone: the job ended without finishing the collector.
                    break Finish { linger: Duration::ZERO, summary: None };
                }
                state.handle(std::mem::take(&mut batch))?;
            }
            Some(msg) = inbox.recv() => inbox_message(&mut state, msg)?,
            _ = tick.tick() => {
                state.report_drops(state.now_s())?;
                state.keyframe(false)?;
                if let Some(r) = state.recorder.as_mut() {
                    r.flush()?;
                }
            }
            finish = &mut stop => break finish.unwrap_or(Finish { linger: Duration::ZERO, summary: None }),
        }
    };
    // Everything the job emitted before it asked us to finish.
    while let Ok(event) = queue.events.try_recv() {
        batch.push(event);
    }
    state.handle(std::mem::take(&mut batch))?;
    // Exporters send their last events after their own job ends: give them `linger`.
    let deadline = Instant::now() + finish.linger;
    while state.exporters > 0 {
        tokio::select! {
            Some(msg) = inbox.recv() => inbox_message(&mut state, msg)?,
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    state.report_drops(state.now_s())?;
    if let Some(summary) = finish.summary {
        let at_s = state.now_s();
        state.handle(vec![Stamped {
            at_s,
            process: local_process,
            event: Event::Summary { summary },
        }])?;
    }
    if let Some(r) = state.recorder.as_mut() {
        r.flush()?;
        state.report.recorded_lines = r.lines();
    }
    state.report.model = state.model;
    Ok(state.report)
}

fn inbox_message(state: &mut State, msg: Inbox) -> Result<(), ProbeError> {
    match msg {
        Inbox::Events(events) => state.handle(events)?,
        Inbox::ExporterJoined => state.exporters += 1,
        Inbox::ExporterLeft => state.exporters = state.exporters.saturating_sub(1),
        Inbox::Subscribe { frames, snapshot } => {
            let id = state.next_subscriber;
            state.next_subscriber += 1;
            if snapshot.send((id, Box::new(state.model.clone()))).is_ok() {
                state.subscribers.insert(
                    id,
                    Subscriber {
                        frames,
                        dropped: 0,
                        reported: 0,
                    },
                );
            }
        }
        Inbox::Unsubscribe(id) => {
            state.subscribers.remove(&id);
        }
        Inbox::Command {
            subscriber,
            request,
            command,
            allowed,
        } => state.command(subscriber, request, command, allowed)?,
        Inbox::Closed(reason) => {
            tracing::warn!(target: "megaflux_probe::collector", %reason, "connection closed");
            state.report.closed.push(reason);
        }
    }
    Ok(())
}

async fn accept(
    listener: TcpListener,
    inbox: mpsc::Sender<Inbox>,
    token: Option<String>,
    local_process: u32,
) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let inbox = inbox.clone();
                let token = token.clone();
                tokio::spawn(async move {
                    if let Err(reason) = serve(stream, &inbox, token, local_process).await {
                        let _ = inbox.send(Inbox::Closed(format!("{peer}: {reason}"))).await;
                    }
                });
            }
            Err(e) => {
                tracing::warn!(target: "megaflux_probe::collector", error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One connection, from hello to close. An error is the reason it was closed.
async fn serve(
    stream: TcpStream,
    inbox: &mpsc::Sender<Inbox>,
    token: Option<String>,
    local_process: u32,
) -> Result<(), ProbeError> {
    let mut conn = Connection::new(stream);
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, conn.recv::<ClientFrame>()).await {
        Ok(Ok(hello)) => hello,
        Ok(Err(e)) => {
            let _ = conn
                .send(&ServerFrame::Refused {
                    reason: e.to_string(),
                })
                .await;
            return Err(e);
        }
        Err(_) => return Err(ProbeError::Protocol(format!("no hello within {HELLO_TIMEOUT:?}"))),
    };
    let (role, presented) = match hello {
        Some(ClientFrame::Hello {
            protocol: PROTOCOL_VERSION,
            role,
            token,
        }) => (role, token),
        Some(ClientFrame::Hello { protocol, .. }) => {
            let reason =
                format!("protocol version {protocol}; this collector speaks version {PROTOCOL_VERSION}");
            let _ = conn
                .send(&ServerFrame::Refused {
                    reason: reason.clone(),
                })
                .await;
            return Err(ProbeError::Protocol(reason));
        }
        Some(_) => {
            let reason = "the first frame must be a hello".to_string();
            let _ = conn
                .send(&ServerFrame::Refused {
                    reason: reason.clone(),
                })
                .await;
            return Err(ProbeError::Protocol(reason));
        }
        None => return Ok(()),
    };
    let holds_token = match &token {
        Some(t) => presented.as_deref() == Some(t.as_str()),
        None => true,
    };
    // Exporters feed the job's record: with a token they need it, and none may speak for
    // this collector's own process (whose answers to commands it trusts).
    let refusal = match role {
        Role::Exporter { .. } if !holds_token => Some("exporters need the collector's token".to_string()),
        Role::Exporter { process } if process == local_process => {
            Some(format!("process {process} is this collector's own"))
        }
        _ => None,
    };
    if let Some(reason) = refusal {
        let _ = conn
            .send(&ServerFrame::Refused {
                reason: reason.clone(),
            })
            .await;
        return Err(ProbeError::Protocol(reason));
    }
    conn.send(&ServerFrame::Welcome {
        protocol: PROTOCOL_VERSION,
    })
    .await?;
    match role {
        Role::Exporter { process } => {
            let _ = inbox.send(Inbox::ExporterJoined).await;
            let result = exporter(&mut conn, inbox, process).await;
            let _ = inbox.send(Inbox::ExporterLeft).await;
            result
        }
        Role::Subscriber => subscriber(&mut conn, inbox, holds_token).await,
    }
}

async fn exporter(
    conn: &mut Connection<TcpStream>,
    inbox: &mpsc::Sender<Inbox>,
    process: u32,
) -> Result<(), ProbeError> {
    loop {
        match conn.recv::<ClientFrame>().await? {
            None => return Ok(()),
            Some(ClientFrame::Events { events }) => {
                if let Some(wrong) = events.iter().find(|e| e.process != process) {
                    return Err(ProbeError::Protocol(format!(
                        "exporter of process {process} sent an event of process {}",
                        wrong.process
                    )));
                }
                if inbox.send(Inbox::Events(events)).await.is_err() {
                    return Ok(());
                }
            }
            Some(_) => return Err(ProbeError::Protocol("an exporter may only send events".into())),
        }
    }
}

async fn subscriber(
    conn: &mut Connection<TcpStream>,
    inbox: &mpsc::Sender<Inbox>,
    allowed: bool,
) -> Result<(), ProbeError> {
    let (frames_tx, mut frames) = mpsc::channel(SUBSCRIBER_QUEUE);
    let (snap_tx, snap_rx) = oneshot::channel();
    if inbox
        .send(Inbox::Subscribe {
            frames: frames_tx,
            snapshot: snap_tx,
        })
        .await
        .is_err()
    {
        return Ok(());
    }
    let Ok((id, model)) = snap_rx.await else {
        return Ok(());
    };
    let result = async {
        conn.send(&ServerFrame::Snapshot { model }).await?;
        loop {
            tokio::select! {
                frame = frames.recv() => match frame {
                    Some(frame) => conn.send(&frame).await?,
                    None => return Ok(()),
                },
                incoming = conn.recv::<ClientFrame>() => match incoming? {
                    None => return Ok(()),
                    Some(ClientFrame::Command { request, command }) => {
                        let msg = Inbox::Command { subscriber: id, request, command, allowed };
                        if inbox.send(msg).await.is_err() {
                            return Ok(());
                        }
                    }
                    Some(_) => return Err(ProbeError::Protocol("a subscriber may only send commands".into())),
                },
            }
        }
    }
    .await;
    let _ = inbox.send(Inbox::Unsubscribe(id)).await;
    result
}
