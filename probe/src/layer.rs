//! The `tracing` Layer: core's events (targets `megaflux::*`) become typed [`Event`]s in a
//! bounded queue. The layer never blocks the thread that emits: when the queue is full the
//! event is dropped and counted, and the count is reported as a [`Event::Dropped`].

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tracing::field::{Field, Visit};
use tracing::{Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{FilterFn, Filtered};
use tracing_subscriber::layer::Context;

use crate::event::{BalancePhase, Event, Outcome, Phase, Stamped};

/// Events the queue between the workers and the collector holds.
pub const EVENT_QUEUE: usize = 1 << 16;

/// The receiving end of the layer's queue, and the count of what it dropped.
pub struct EventQueue {
    /// The layer's events, in the order the process emitted them, stamped on its clock.
    pub events: mpsc::Receiver<Stamped>,
    /// Events the layer dropped so far because the queue was full (a running total).
    pub dropped: Arc<AtomicU64>,
    /// When the layer's clock (every `at_s` of this process) was 0: the collector stamps
    /// its own events on it too.
    pub started: Instant,
}

/// Turns core's events into typed events for the collector.
pub struct ProbeLayer {
    process: u32,
    start: Instant,
    /// The wall clock at `start`, in seconds since the Unix epoch.
    anchor_unix_s: f64,
    queue: mpsc::Sender<Stamped>,
    dropped: Arc<AtomicU64>,
}

impl ProbeLayer {
    /// A layer for process `process`, with a queue of `capacity` events.
    pub fn new(process: u32, capacity: usize) -> (Self, EventQueue) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        let anchor_unix_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let started = Instant::now();
        let layer = ProbeLayer {
            process,
            start: started,
            anchor_unix_s,
            queue: tx,
            dropped: Arc::clone(&dropped),
        };
        (
            layer,
            EventQueue {
                events: rx,
                dropped,
                started,
            },
        )
    }

    /// The layer behind a per-layer filter that lets only megaflux's events through, at
    /// every level, whatever other layers of the same subscriber filter.
    pub fn filtered<S: Subscriber>(self) -> Filtered<Self, FilterFn, S> {
        self.with_filter(FilterFn::new(is_megaflux as fn(&Metadata<'_>) -> bool))
    }

    /// The wall clock (seconds since the Unix epoch) when `at_s` was 0: events of every
    /// process go on one axis as `anchor_unix_s + at_s`.
    pub fn anchor_unix_s(&self) -> f64 {
        self.anchor_unix_s
    }

    /// An event stamped now, as this process (for events the probe makes itself).
    pub fn stamp(&self, event: Event) -> Stamped {
        Stamped {
            at_s: self.start.elapsed().as_secs_f64(),
            process: self.process,
            event,
        }
    }
}

fn is_megaflux(metadata: &Metadata<'_>) -> bool {
    metadata.target().starts_with("megaflux::")
}

impl<S: Subscriber> Layer<S> for ProbeLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let Some(typed) = convert(event.metadata().target(), &fields) else {
            return;
        };
        if self.queue.try_send(self.stamp(typed)).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The fields of one tracing event.
#[derive(Default)]
struct Fields(HashMap<&'static str, Value>);

enum Value {
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
    Str(String),
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name(), Value::U64(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name(), Value::I64(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name(), Value::F64(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name(), Value::Bool(value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), Value::Str(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%x` fields arrive here, formatted with their Display.
        self.0.insert(field.name(), Value::Str(format!("{value:?}")));
    }
}

impl Fields {
    fn u64(&self, name: &str) -> Option<u64> {
        match self.0.get(name)? {
            Value::U64(v) => Some(*v),
            Value::I64(v) => u64::try_from(*v).ok(),
            _ => None,
        }
    }
    fn i64(&self, name: &str) -> Option<i64> {
        match self.0.get(name)? {
            Value::I64(v) => Some(*v),
            Value::U64(v) => i64::try_from(*v).ok(),
            _ => None,
        }
    }
    fn u32(&self, name: &str) -> Option<u32> {
        self.u64(name).and_then(|v| u32::try_from(v).ok())
    }
    fn f64(&self, name: &str) -> Option<f64> {
        match self.0.get(name)? {
            Value::F64(v) => Some(*v),
            Value::U64(v) => Some(*v as f64),
            Value::I64(v) => Some(*v as f64),
            _ => None,
        }
    }
    fn bool(&self, name: &str) -> Option<bool> {
        match self.0.get(name)? {
            Value::Bool(v) => Some(*v),
            _ => None,
        }
    }
    fn str(&self, name: &str) -> Option<String> {
        match self.0.get(name)? {
            Value::Str(v) => Some(v.clone()),
            _ => None,
        }
    }
    /// A time field; `u64::MAX` is core's "no frontier left".
    fn time(&self, name: &str) -> Option<Option<u64>> {
        self.u64(name).map(|t| (t != u64::MAX).then_some(t))
    }
}

/// The typed event for a core event, or `None` if it is not one the schema knows (other
/// messages on the same targets, such as warnings, are left to other layers).
fn convert(target: &str, f: &Fields) -> Option<Event> {
    Some(match target {
        "megaflux::job" => match f.str("phase")?.as_str() {
            "started" => Event::JobStarted {
                worker: f.u32("worker")?,
                peers: f.u32("peers")?,
                base: f.u64("base")?,
                records: f.u64("records"),
            },
            "finished" => Event::JobFinished {
                worker: f.u32("worker")?,
                records: f.u64("records")?,
                outputs: f.u64("outputs"),
            },
            "restart" => Event::Restart {
                generation: f.u32("generation")?,
                from: f.u64("from")?,
                lost: f.str("lost")?,
                survivors: f.str("survivors")?,
                joined: f.str("joined").unwrap_or_default(),
            },
            "draining" => Event::Draining {
                input_end: f.u64("input_end")?,
                gate: f.u64("gate")?,
                bins: f.u64("bins")?,
                next: f.u64("next"),
                for_ms: f.u64("for_ms")?,
            },
            _ => return None,
        },
        "megaflux::state" => match f.str("kind")?.as_str() {
            // Parsed off the worker thread, by `event::expand`.
            "bins" => Event::BinSizes {
                worker: f.u32("worker")?,
                operator: f.str("operator")?,
                sizes: f.str("sizes")?,
            },
            "sampled" => Event::Sampled {
                worker: f.u32("worker")?,
                operator: f.str("operator")?,
                full: f.bool("full")?,
                bins: f.u64("bins")?,
                keys: f.u64("keys")?,
                bytes: f.u64("bytes")?,
            },
            _ => return None,
        },
        "megaflux::frontier" => Event::Frontier {
            worker: f.u32("worker")?,
            operator: f.str("operator")?,
            applied: f.time("applied")?,
            control: f.time("control").flatten(),
            input: f.u64("input")?,
        },
        "megaflux::worker" => Event::WorkerStats {
            worker: f.u32("worker")?,
            records: f.u64("records")?,
            applied: f.u64("applied"),
            outputs_total: f.u64("outputs_total"),
            busy_ns: f.u64("busy_ns")?,
            interval_ns: f.u64("interval_ns")?,
        },
        "megaflux::load" => Event::BinLoads {
            worker: f.u32("worker")?,
            operator: f.str("operator")?,
            interval_ns: f.u64("interval_ns")?,
            applied: f.u64("applied"),
            loads: f.str("loads")?,
        },
        "megaflux::output" => Event::OutputCommitted {
            upto: f.u64("upto")?,
            rows: f.u64("rows")?,
        },
        "megaflux::input" => match f.str("phase")?.as_str() {
            "partition" => Event::InputPartition {
                partition: f.u32("partition")?,
                offset: f.u64("offset")?,
                end: f.u64("end")?,
            },
            "retry" => Event::InputRetry {
                partition: f.u32("partition")?,
                offset: f.u64("offset")?,
                reason: f.str("reason")?,
            },
            _ => return None,
        },
        "megaflux::balance" => Event::Balance {
            phase: match f.str("phase")?.as_str() {
                "measured" => BalancePhase::Measured,
                "suggested" => BalancePhase::Suggested,
                "issued" => BalancePhase::Issued,
                "withdrawn" => BalancePhase::Withdrawn,
                "refused" => BalancePhase::Refused,
                "achieved" => BalancePhase::Achieved,
                "refreshed" => BalancePhase::Refreshed,
                _ => return None,
            },
            run_s: f.f64("run_s")?,
            imbalance: f.f64("imbalance"),
            predicted: f.f64("predicted"),
            bins: f.u64("bins"),
            bytes: f.u64("bytes"),
            serving: f.u64("serving"),
            needed: f.u64("needed"),
            strategy: f.str("strategy"),
            reason: f.str("reason"),
        },
        "megaflux::latency" => Event::Latency {
            window: f.u64("window")?,
            t_s: f.f64("t_s")?,
            count: f.u64("count")?,
            p50: f.u64("p50")?,
            p99: f.u64("p99")?,
            max: f.u64("max")?,
            histogram: f.str("histogram")?,
        },
        "megaflux::migration" => {
            let phase = match f.str("phase")?.as_str() {
                "issued" => Phase::Issued,
                "extracted" => Phase::Extracted,
                "received" => Phase::Received,
                "installed" => Phase::Installed,
                "completed" => Phase::Completed,
                _ => return None,
            };
            Event::Migration {
                phase,
                bin: f.u32("bin")?,
                time: f.u64("time")?,
                operator: f.str("operator"),
                worker: f.u32("worker").or(match phase {
                    Phase::Extracted => f.u32("from"),
                    _ => None,
                }),
                from: f.u32("from"),
                to: f.u32("to"),
                bytes: f.u64("bytes"),
                chunks: f.u64("chunks"),
                step: f.u64("step"),
                primary: f.u32("primary"),
                standby: f.i64("standby"),
                copy: f.bool("copy"),
            }
        }
        "megaflux::plan" => match f.str("phase")?.as_str() {
            "planned" => Event::PlanStarted {
                strategy: f.str("strategy")?,
                target: f.str("target")?,
                steps: f.u64("steps")?,
                bins: f.u64("bins")?,
                purpose: f.str("purpose"),
                id: f.u64("id"),
                time: f.u64("time"),
                run_s: f.f64("run_s"),
            },
            "completed" => Event::PlanCompleted {
                strategy: f.str("strategy")?,
                steps: f.u64("steps")?,
                seconds: f.f64("seconds")?,
                id: f.u64("id"),
                cancelled: f.bool("cancelled"),
                run_s: f.f64("run_s"),
            },
            "latency" => Event::PlanLatency {
                id: f.u64("id")?,
                p50: f.u64("p50")?,
                p99: f.u64("p99")?,
                max: f.u64("max")?,
            },
            _ => return None,
        },
        "megaflux::replica" => match f.str("phase")?.as_str() {
            "placement" => Event::Placement {
                time: f.u64("time")?,
                holders: f.str("holders")?,
            },
            "failed" => Event::Failure {
                worker: f.u32("worker")?,
                reason: f.str("reason").unwrap_or_else(|| "fail-stop".into()),
                time: f.u64("time"),
                promoted: f.u64("promoted"),
                degraded: f.u64("degraded"),
                suspects: f.u64("suspects"),
                lost: f.str("lost").filter(|l| !l.is_empty()),
            },
            "takeover" => Event::Takeover {
                operator: f.str("operator")?,
                worker: f.u32("worker")?,
                bin: f.u32("bin")?,
                time: f.u64("time")?,
            },
            "rejoin" => Event::Rejoin {
                worker: f.u32("worker")?,
                time: f.u64("time")?,
            },
            "recovered" => Event::Recovery {
                worker: f.u32("worker")?,
                bins: crate::event::parse_bins(&f.str("bins")?, megaflux::bins::MAX_BINS as u32),
            },
            "lost" => Event::Lost {
                time: f.u64("time")?,
                bins: f.str("bins")?,
            },
            _ => return None,
        },
        "megaflux::command" => Event::Command {
            outcome: match f.str("outcome")?.as_str() {
                "applied" => Outcome::Applied,
                "rejected" => Outcome::Rejected,
                _ => return None,
            },
            id: f.u64("id"),
            time: f.u64("time"),
            command: f.str("command")?,
            request: f.str("request").and_then(|r| serde_json::from_str(&r).ok()),
            source: f.str("source"),
            reason: f.str("reason"),
        },
        _ => return None,
    })
}
