//! The collector's state: the model every event is applied to, the trace they are written
//! to, and the fan-out to subscribers.
//!
//! Frames are encoded once and shared by every subscriber. A subscriber's queue is bounded
//! in bytes ([`SUBSCRIBER_BYTES`]): a viewer that does not keep up loses events (counted,
//! and reported as `dropped` events of its own place) and never holds up the collector. A trace write that fails stops the recording, says so
//! to every viewer, and nothing else.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use megaflux::control::ControlHandle;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::limits::{FAIR_BYTES, FRAME_BYTES, FRAME_EVENTS, SUBSCRIBER_BYTES, SUBSCRIBERS_BYTES, short};
use super::{CollectorReport, KEYFRAME_EVERY, Limits};
use crate::error::ProbeError;
use crate::event::{Event, Outcome, Stamped};
use crate::model::JobModel;
use crate::record::Recorder;
use crate::wire::{EventFrame, ServerFrame};

/// Operator names of this process remembered (a job has a handful).
const OPERATORS_KNOWN: usize = 64;

/// A keyframe is written once the trace has grown by this many times the last one's size.
const KEYFRAME_SHARE: u64 = 4;

/// One subscriber's end of the fan-out.
pub(super) struct Subscriber {
    pub(super) frames: mpsc::UnboundedSender<EventFrame>,
    /// Bytes queued and not yet written to its connection.
    pub(super) queued: Arc<AtomicUsize>,
    pub(super) dropped: u64,
    pub(super) reported: u64,
}

impl Subscriber {
    /// Queues `frame` unless the subscriber's queue would go over its bytes, or it is past
    /// its fair share and all subscribers' queues over theirs (`total`); `false` when the
    /// subscriber is gone.
    fn offer(&mut self, frame: &EventFrame, total: &AtomicUsize) -> bool {
        let size = frame.bytes.len();
        let mine = self.queued.load(Ordering::Relaxed);
        if mine + size > SUBSCRIBER_BYTES
            || (mine + size > FAIR_BYTES && total.load(Ordering::Relaxed) + size > SUBSCRIBERS_BYTES)
        {
            self.dropped = self.dropped.saturating_add(frame.events as u64);
            return true;
        }
        self.queued.fetch_add(size, Ordering::Relaxed);
        total.fetch_add(size, Ordering::Relaxed);
        self.frames.send(frame.clone()).is_ok()
    }

    /// Its queue no longer counts in `total` (it is gone, and its frames with it).
    pub(super) fn release(&self, total: &AtomicUsize) {
        let _ = total.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
            Some(t.saturating_sub(self.queued.swap(0, Ordering::Relaxed)))
        });
    }
}

pub(super) struct State {
    /// The process this collector runs in: only its events answer commands.
    pub(super) local_process: u32,
    pub(super) limits: Limits,
    pub(super) model: JobModel,
    pub(super) recorder: Option<Recorder>,
    pub(super) subscribers: HashMap<u64, Subscriber>,
    /// Bytes queued for all subscribers (each subscriber's frames counted).
    pub(super) queued_total: Arc<AtomicUsize>,
    pub(super) next_subscriber: u64,
    pub(super) control: Option<ControlHandle>,
    /// Commands sent to the job and not answered yet: control id → (subscriber, request).
    pub(super) pending: HashMap<u64, (u64, u64)>,
    /// Processes whose exporter is connected: its connection, and how to close it when a
    /// newer one of the same process arrives.
    pub(super) exporters: BTreeMap<u32, (u64, tokio::sync::oneshot::Sender<String>)>,
    pub(super) report: CollectorReport,
    pub(super) queue_dropped: Arc<AtomicU64>,
    pub(super) queue_reported: u64,
    /// Connections turned away before their hello (counted by the listener).
    pub(super) turned_away: Arc<AtomicU64>,
    /// When the last keyframe was written, and where the trace then ended and how big the
    /// keyframe was.
    pub(super) keyframe: Option<(Instant, u64, u64)>,
    /// Operators this process's own events named (at most [`OPERATORS_KNOWN`]): every
    /// process runs the same dataflow, so an exporter naming another is held back until this
    /// process names it, and cannot take the model's operator places first.
    pub(super) operators: std::collections::HashSet<String>,
    /// When a command last resumed the recording.
    pub(super) resumed: Option<Instant>,
    /// This process's probe clock, on which the collector stamps its own events (keyframes,
    /// commands it received, recording, drops, the summary), so that they share the axis of
    /// the process they happen in rather than the latest clock of any process.
    pub(super) clock: std::time::Instant,
}

impl State {
    /// Now on this process's probe clock.
    pub(super) fn now_s(&self) -> f64 {
        self.clock.elapsed().as_secs_f64()
    }

    /// An event of the collector's own, stamped now.
    pub(super) fn own(&self, event: Event) -> Stamped {
        Stamped {
            at_s: self.now_s(),
            process: self.local_process,
            event,
        }
    }

    /// Notes a connection closed or refused for `reason`: counted, and kept (cut short)
    /// while fewer than [`Limits::reasons_kept`] are.
    pub(super) fn closed(&mut self, reason: &str) {
        tracing::warn!(target: "megaflux_probe::collector", reason = %short(reason), "connection closed");
        self.report.closed_total += 1;
        if self.report.closed.len() < self.limits.reasons_kept {
            self.report.closed.push(short(reason));
        }
    }

    /// Runs a trace operation; if it fails, the recording stops (visibly) and the
    /// collector goes on.
    pub(super) fn trace<T>(&mut self, op: impl FnOnce(&mut Recorder) -> Result<T, ProbeError>) -> Option<T> {
        let result = op(self.recorder.as_mut()?);
        match result {
            Ok(value) => Some(value),
            Err(e) => {
                let reason = short(&e.to_string());
                if let Some(r) = self.recorder.take() {
                    self.report.recorded_lines = r.lines();
                }
                self.report.recording_failed = Some(reason.clone());
                let failed = self.own(Event::Recording {
                    on: false,
                    failed: Some(reason),
                });
                self.handle(vec![failed]);
                None
            }
        }
    }

    /// Writes a keyframe of the model to the trace if one is due: every
    /// [`KEYFRAME_EVERY`], but not before the trace has grown by [`KEYFRAME_SHARE`] times
    /// the last keyframe's size (a job of many bins has big keyframes); and right after the
    /// recording resumed (`now`).
    pub(super) fn keyframe(&mut self, now: bool) {
        let Some(r) = self.recorder.as_ref() else {
            return;
        };
        if self.model.recording != Some(true) {
            return;
        }
        let due = match self.keyframe {
            None => true,
            Some((at, end, size)) => {
                now || (at.elapsed() >= KEYFRAME_EVERY && r.bytes() - end >= KEYFRAME_SHARE * size)
            }
        };
        if !due {
            return;
        }
        let model = match serde_json::to_value(self.model.keyframe()) {
            Ok(model) => model,
            Err(e) => {
                tracing::warn!(target: "megaflux_probe::collector", error = %e, "no keyframe");
                return;
            }
        };
        let keyframe = self.own(Event::Keyframe { model });
        if let Some((before, after)) = self.trace(|r| {
            let before = r.bytes();
            r.write(&keyframe).map(|()| (before, r.bytes()))
        }) {
            self.keyframe = Some((Instant::now(), after, after - before));
        }
    }

    /// Takes an exporter's (checked) events: those about an operator this process has not
    /// named yet are left out (the exporter's next sample has them again).
    pub(super) fn exported(&mut self, mut events: Vec<Stamped>) {
        events.retain(|e| e.event.operator().is_none_or(|o| self.operators.contains(o)));
        self.handle(events);
    }

    /// Applies `events` to the model, writes them to the trace and sends them to every
    /// subscriber; answers commands the job answered.
    pub(super) fn handle(&mut self, events: Vec<Stamped>) {
        if events.is_empty() {
            return;
        }
        for e in events.iter().filter(|e| e.process == self.local_process) {
            if let Some(o) = e.event.operator()
                && self.operators.len() < OPERATORS_KNOWN
                && !self.operators.contains(o)
            {
                self.operators.insert(o.to_string());
            }
        }
        let events = crate::event::expand(events);
        for event in &events {
            self.model.apply(event);
            // A pause is written before the gap (the model already says off), a resumption
            // after it.
            if self.recorder.is_some()
                && (self.model.recording == Some(true)
                    || matches!(event.event, Event::Recording { on: false, .. }))
            {
                self.trace(|r| r.write(event));
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
        // Frames of bounded events and bytes, encoded once for every subscriber.
        if !self.subscribers.is_empty() {
            let (frames, left_out) = crate::wire::event_frames(&events, FRAME_EVENTS, FRAME_BYTES);
            let total = &self.queued_total;
            for frame in &frames {
                self.subscribers.retain(|_, s| {
                    let kept = s.offer(frame, total);
                    if !kept {
                        s.release(total);
                    }
                    kept
                });
            }
            if left_out > 0 {
                tracing::warn!(target: "megaflux_probe::collector", left_out, "events too big for a frame");
                for s in self.subscribers.values_mut() {
                    s.dropped = s.dropped.saturating_add(left_out);
                }
            }
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
    }

    pub(super) fn answer(&mut self, subscriber: u64, request: u64, outcome: Outcome, reason: Option<String>) {
        if let Some(s) = self.subscribers.get_mut(&subscriber) {
            let frame = ServerFrame::Answer {
                request,
                outcome,
                reason: reason.map(|r| short(&r)),
            };
            match crate::wire::encode(&frame) {
                Ok(bytes) => {
                    s.offer(&EventFrame { bytes, events: 1 }, &self.queued_total);
                }
                Err(e) => tracing::warn!(target: "megaflux_probe::collector", error = %e, "no answer"),
            }
        }
    }

    /// Reports counts of dropped events that changed, as events of their own.
    pub(super) fn report_drops(&mut self) {
        let mut events = Vec::new();
        let queue = self.queue_dropped.load(Ordering::Relaxed);
        if queue != self.queue_reported {
            self.queue_reported = queue;
            events.push(self.own(Event::Dropped {
                place: "queue".into(),
                count: queue,
            }));
        }
        let now = self.now_s();
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
        self.handle(events);
    }

    /// Flushes the trace (a no-op without one).
    pub(super) fn flush(&mut self) {
        self.trace(Recorder::flush);
    }
}
