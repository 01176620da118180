//! The job's numbers in the Prometheus exposition format: a [`Snapshot`] taken from a
//! [`JobModel`] (by whoever owns the model, in its own loop), encoded by `prometheus-client`
//! as the classic text format or OpenMetrics, and served over HTTP by [`serve`].
//!
//! Every family has its unit in its name and labels of bounded cardinality: per worker
//! (at most [`crate::model::MAX_PEERS`]), per operator, per partition of the input (at most
//! [`crate::model::MAX_PARTITIONS`]), per plan strategy and maker (at most
//! [`crate::model::PLAN_KINDS`]); never per bin or per key. A snapshot costs one pass over
//! the model's workers, operators, partitions and placement (one entry per bin), never over
//! its events.

mod serve;

use std::borrow::Cow;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::model::{JobModel, LATENCY_BUCKETS_S, PLAN_BUCKETS_S, TAKEOVER_BUCKETS_S, saturating_sum};

pub use serve::{MAX_CONNECTIONS, Requests, SCRAPE_WAIT, Scrape, Scrapes, channel, next_scrape, serve};

/// The families every scrape has besides `megaflux_workers` and `megaflux_run_finished`, as a
/// scraper names them (units and `_total` added).
pub const FAMILIES: &[&str] = &[
    "megaflux_records_applied_total",
    "megaflux_records_in_total",
    "megaflux_outputs_total",
    "megaflux_latency_seconds",
    "megaflux_frontier_lag_seconds",
    "megaflux_state_bytes",
    "megaflux_state_keys",
    "megaflux_bins",
    "megaflux_imbalance",
    "megaflux_worker_load_ratio",
    "megaflux_migrations_total",
    "megaflux_migration_duration_seconds",
    "megaflux_migration_bytes_total",
    "megaflux_failures_total",
    "megaflux_crash_restarts_total",
    "megaflux_takeover_seconds",
    "megaflux_balance_decisions_total",
    "megaflux_probe_events_dropped_total",
    "megaflux_source_lag_records",
    "megaflux_sink_committed_time",
];

/// The content type of the classic text format.
pub const PROMETHEUS_TEXT: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
/// The content type of OpenMetrics text.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Which exposition format a scraper gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus' text format 0.0.4 (what `curl` and `promtool check metrics` read).
    Prometheus,
    /// OpenMetrics 1.0 text (what Prometheus asks for first).
    OpenMetrics,
}

impl Format {
    /// The format a request's `Accept` header asks for: OpenMetrics when it names it, the
    /// classic text format otherwise.
    pub fn of_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }

    /// The response's content type.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => PROMETHEUS_TEXT,
            Format::OpenMetrics => OPENMETRICS_TEXT,
        }
    }
}

/// One value of a family.
#[derive(Clone, Debug)]
enum Value {
    Counter(u64),
    Gauge(f64),
    Histogram {
        sum: f64,
        count: u64,
        /// Each bucket's upper bound and own count, `+Inf` last.
        buckets: Vec<(f64, u64)>,
    },
}

/// One family: its name (without unit and `_total`), help, unit and values by labels.
#[derive(Clone, Debug)]
struct Family {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    kind: MetricType,
    samples: Vec<(Vec<(&'static str, String)>, Value)>,
}

/// The job's numbers at one moment, ready to encode.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    families: Vec<Family>,
}

impl Snapshot {
    /// The numbers `model` holds; `finished` once the run has ended and the model holds its
    /// last events.
    pub fn of(model: &JobModel, finished: bool) -> Snapshot {
        let mut s = Snapshot::default();
        s.flow(model);
        s.placement(model);
        s.plans_and_failures(&model.totals);
        s.edges(model, finished);
        s
    }

    /// The families of records in and out, applied, latency, and how far the output is behind.
    fn flow(&mut self, model: &JobModel) {
        let totals = &model.totals;
        self.counter(
            "megaflux_records_in",
            "Records the job's sources sent, over all workers (the preload's included).",
            None,
            vec![(vec![], totals.records_in())],
        );
        self.counter(
            "megaflux_outputs",
            "Outputs the job made, over all workers.",
            None,
            vec![(vec![], totals.outputs())],
        );
        let applied = totals
            .workers
            .iter()
            .flat_map(|(w, t)| {
                t.applied
                    .iter()
                    .map(move |(op, n)| (vec![("worker", w.to_string()), ("operator", op.clone())], *n))
            })
            .collect();
        self.counter(
            "megaflux_records_applied",
            "Records each stateful operator applied on each worker (a standby's included).",
            None,
            applied,
        );
        self.histogram(
            "megaflux_latency",
            "Per-record latency, from the record's due time to its epoch's output (the job's latency windows).",
            Some(Unit::Seconds),
            vec![],
            &totals.latency_seconds,
            LATENCY_BUCKETS_S,
        );
        let epoch_s = model.epoch().us() as f64 / 1e6;
        let lag = model
            .frontiers
            .iter()
            .filter(|(w, _)| !model.failed.contains(w))
            .filter_map(|(_, ops)| ops.get("output").map(|f| f.lag().unwrap_or(0)))
            .max();
        self.gauge(
            "megaflux_frontier_lag",
            "How far the job's output frontier is behind its input, on the slowest live worker.",
            Some(Unit::Seconds),
            lag.map(|l| (vec![], l as f64 * epoch_s)).into_iter().collect(),
        );
    }

    /// The families of where the state is and how evenly the work falls.
    fn placement(&mut self, model: &JobModel) {
        let peers = model.peers.min(crate::model::MAX_PEERS);
        let worker = |w: u32| vec![("worker", w.to_string())];
        let held = |f: fn(&crate::model::Held) -> u64| {
            (0..peers)
                .map(|w| {
                    let n = model
                        .workers
                        .get(&w)
                        .map_or(0, |v| saturating_sum(v.held.values().map(f)));
                    (worker(w), n as f64)
                })
                .collect()
        };
        self.gauge(
            "megaflux_state",
            "Shallow estimate of the state each worker holds (standbys included).",
            Some(Unit::Bytes),
            held(|h| h.bytes),
        );
        self.gauge(
            "megaflux_state_keys",
            "Keys each worker holds (standbys included).",
            None,
            held(|h| h.keys),
        );
        let mut bins = vec![(0u64, 0u64); peers as usize];
        for h in &model.placement {
            if let Some(b) = h.primary.and_then(|w| bins.get_mut(w as usize)) {
                b.0 += 1;
            }
            if let Some(b) = h.standby.and_then(|w| bins.get_mut(w as usize)) {
                b.1 += 1;
            }
        }
        let bins = bins
            .iter()
            .enumerate()
            .flat_map(|(w, (p, sb))| {
                let w = w.to_string();
                [
                    (
                        vec![("worker", w.clone()), ("role", "primary".to_string())],
                        *p as f64,
                    ),
                    (vec![("worker", w), ("role", "standby".to_string())], *sb as f64),
                ]
            })
            .collect();
        self.gauge("megaflux_bins", "Bins each worker holds, by role.", None, bins);
        self.gauge(
            "megaflux_imbalance",
            "The busiest live worker's applied records per second over the mean (1 is even).",
            None,
            model.imbalance().map(|i| (vec![], i)).into_iter().collect(),
        );
        let live: Vec<(u32, f64)> = model
            .workers
            .iter()
            .filter(|(w, _)| !model.failed.contains(w))
            .filter_map(|(w, v)| v.applied_per_s.map(|a| (*w, a)))
            .collect();
        let mean = live.iter().map(|(_, a)| a).sum::<f64>() / live.len().max(1) as f64;
        self.gauge(
            "megaflux_worker_load_ratio",
            "Each live worker's applied records per second over the mean.",
            None,
            live.iter()
                .filter(|_| mean > 0.0)
                .map(|(w, a)| (worker(*w), a / mean))
                .collect(),
        );
    }

    /// The families of plans, their moves, failures, restarts, takeovers and the balancer's decisions.
    fn plans_and_failures(&mut self, totals: &crate::model::Totals) {
        self.counter(
            "megaflux_migrations",
            "Plans started, by strategy and by what made them (command, balancer, recovery, rebalance).",
            None,
            totals
                .plans
                .iter()
                .map(|p| {
                    (
                        vec![("strategy", p.strategy.clone()), ("by", p.by.clone())],
                        p.count,
                    )
                })
                .collect(),
        );
        self.histogram(
            "megaflux_migration_duration",
            "How long finished plans ran, from their making to their completion.",
            Some(Unit::Seconds),
            vec![],
            &totals.plan_seconds,
            PLAN_BUCKETS_S,
        );
        self.counter(
            "megaflux_migration",
            "State the moves shipped, as their senders serialized it.",
            Some(Unit::Bytes),
            vec![(vec![], totals.moved_bytes)],
        );
        self.counter(
            "megaflux_failures",
            "Worker failures.",
            None,
            vec![(vec![], totals.failures)],
        );
        self.counter(
            "megaflux_crash_restarts",
            "Restarts among the surviving processes after processes of the cluster crashed.",
            None,
            vec![(vec![], totals.crash_restarts)],
        );
        self.histogram(
            "megaflux_takeover",
            "From a worker's failure to each replica's first work for a bin it took over.",
            Some(Unit::Seconds),
            vec![],
            &totals.takeover_seconds,
            TAKEOVER_BUCKETS_S,
        );
        let decisions = ["suggest", "auto"]
            .iter()
            .map(|mode| {
                let n = totals.balance_decisions.get(*mode).copied().unwrap_or(0);
                (vec![("mode", mode.to_string())], n)
            })
            .collect();
        self.counter(
            "megaflux_balance_decisions",
            "Plans the balancer proposed (mode suggest) or started (mode auto).",
            None,
            decisions,
        );
    }

    /// The families of the probe's losses, the connectors, the workers and the run's end.
    fn edges(&mut self, model: &JobModel, finished: bool) {
        let totals = &model.totals;
        let peers = model.peers.min(crate::model::MAX_PEERS);
        let (queue, viewers) = model.dropped.iter().fold((0u64, 0u64), |(q, v), (place, n)| {
            if place.ends_with(" queue") {
                (q.saturating_add(*n), v)
            } else {
                (q, v.saturating_add(*n))
            }
        });
        self.counter(
            "megaflux_probe_events_dropped",
            "Events lost on the way to this endpoint: in a process's queue (the job's), or to a slow viewer.",
            None,
            vec![
                (vec![("place", "queue".to_string())], queue),
                (vec![("place", "viewer".to_string())], viewers),
            ],
        );
        self.gauge(
            "megaflux_source_lag_records",
            "Messages of each partition of the Kafka input not read yet, as of the last fetch.",
            None,
            model
                .partitions
                .iter()
                .map(|(p, v)| (vec![("partition", p.to_string())], v.lag() as f64))
                .collect(),
        );
        self.gauge(
            "megaflux_sink_committed_time",
            "Every output at a logical time before this one is committed to the output sink.",
            None,
            totals
                .sink_committed
                .map(|t| (vec![], t as f64))
                .into_iter()
                .collect(),
        );
        let failed = model.failed.len() as f64;
        let done = model.workers.values().filter(|w| w.finished).count() as f64;
        self.gauge(
            "megaflux_workers",
            "Workers in the job, and of them those failed and those that finished their last epoch.",
            None,
            vec![
                (vec![("state", "all".to_string())], f64::from(peers)),
                (vec![("state", "failed".to_string())], failed),
                (vec![("state", "finished".to_string())], done),
            ],
        );
        self.gauge(
            "megaflux_run_finished",
            "1 once the run has ended and these numbers are its last.",
            None,
            vec![(vec![], if finished { 1.0 } else { 0.0 })],
        );
    }

    fn counter(
        &mut self,
        name: &'static str,
        help: &'static str,
        unit: Option<Unit>,
        samples: Vec<(Vec<(&'static str, String)>, u64)>,
    ) {
        self.families.push(Family {
            name,
            help,
            unit,
            kind: MetricType::Counter,
            samples: samples.into_iter().map(|(l, v)| (l, Value::Counter(v))).collect(),
        });
    }

    fn gauge(
        &mut self,
        name: &'static str,
        help: &'static str,
        unit: Option<Unit>,
        samples: Vec<(Vec<(&'static str, String)>, f64)>,
    ) {
        self.families.push(Family {
            name,
            help,
            unit,
            kind: MetricType::Gauge,
            samples: samples.into_iter().map(|(l, v)| (l, Value::Gauge(v))).collect(),
        });
    }

    fn histogram(
        &mut self,
        name: &'static str,
        help: &'static str,
        unit: Option<Unit>,
        labels: Vec<(&'static str, String)>,
        b: &crate::model::Buckets,
        bounds: &[f64],
    ) {
        let value = Value::Histogram {
            sum: b.sum,
            count: b.count,
            buckets: b.per_bucket(bounds),
        };
        self.families.push(Family {
            name,
            help,
            unit,
            kind: MetricType::Histogram,
            samples: vec![(labels, value)],
        });
    }

    /// The snapshot in `format`.
    pub fn encode(self, format: Format) -> Result<String, std::fmt::Error> {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        match format {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?,
            Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry)?,
        }
        Ok(out)
    }

    /// The names of its families as a scraper reads them (units and `_total` added).
    pub fn names(&self) -> Vec<String> {
        self.families
            .iter()
            .map(|f| {
                let mut name = f.name.to_string();
                if let Some(unit) = &f.unit {
                    name = format!("{name}_{}", unit.as_str());
                }
                if matches!(f.kind, MetricType::Counter) {
                    name.push_str("_total");
                }
                name
            })
            .collect()
    }
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in &self.families {
            let mut metric =
                encoder.encode_descriptor(family.name, family.help, family.unit.as_ref(), family.kind)?;
            for (labels, value) in &family.samples {
                if labels.is_empty() {
                    encode_value(&mut metric, value)?;
                } else {
                    let labels: Vec<(&str, Cow<'_, str>)> = labels
                        .iter()
                        .map(|(k, v)| (*k, Cow::Borrowed(v.as_str())))
                        .collect();
                    encode_value(&mut metric.encode_family(&labels)?, value)?;
                }
            }
        }
        Ok(())
    }
}

fn encode_value(m: &mut MetricEncoder<'_>, value: &Value) -> Result<(), std::fmt::Error> {
    match value {
        Value::Counter(v) => m.encode_counter::<NoLabelSet, _, u64>(v, None),
        Value::Gauge(v) => m.encode_gauge(v),
        Value::Histogram { sum, count, buckets } => {
            m.encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)
        }
    }
}

#[cfg(test)]
mod tests;
