//! Two runs of one job side by side: a recorded run and its re-run, as a table of what
//! must match (the output digest) and what may differ (each migration's and recovery's
//! duration, bins, bytes and latency).

use std::fmt::Write;

use megaflux::size::human as bytes;

use megaflux::summary::{DuringLatency, MigrationSummary, Parting, RecoverySummary, Summary};

/// A recorded run's summary and its re-run's.
pub struct Comparison<'a> {
    /// The summary the trace recorded (its `summary` line).
    pub recorded: &'a Summary,
    /// The summary of the re-run.
    pub rerun: &'a Summary,
    /// Whether each run's latencies mean anything (not at `--speed max`).
    pub recorded_latency: bool,
    /// Whether the re-run's latencies mean anything (it did not run at `--speed max`).
    pub rerun_latency: bool,
}

/// Width of the row names, and of each run's column.
const NAME: usize = 30;
const COLUMN: usize = 24;

impl Comparison<'_> {
    /// Whether the two runs gave the same outputs.
    pub fn digests_match(&self) -> bool {
        self.recorded.output_digest == self.rerun.output_digest && self.recorded.outputs == self.rerun.outputs
    }

    /// Where the two runs' outputs first part, when both summaries hold their spans.
    pub fn parting(&self) -> Option<Parting> {
        match (&self.recorded.output_spans, &self.rerun.output_spans) {
            (Some(a), Some(b)) => a.parting(b),
            _ => None,
        }
    }

    /// Why the digests differ, for people: the span of logical time (in `unit`, the trace's
    /// `time_unit`) where the outputs first part, beside where each run's input and drain
    /// ended, so that a drain that ended elsewhere tells itself from a real difference.
    pub fn parting_words(&self, unit: &str) -> String {
        let Some(p) = self.parting() else {
            return if self.recorded.output_spans.is_none() || self.rerun.output_spans.is_none() {
                "the summaries do not say where (the recorded one holds no output spans: an older trace, or adaptive epochs)".to_string()
            } else {
                "their outputs agree at every logical time, their counts do not".to_string()
            };
        };
        let mut words = format!(
            "they first part at logical times {}..{} ({unit}): {} outputs there recorded, {} re-run",
            p.from, p.to, p.outputs.0, p.outputs.1
        );
        for (run, summary) in [("recorded run's", self.recorded), ("re-run's", self.rerun)] {
            if let Some(d) = &summary.drain {
                let _ = write!(
                    words,
                    "; the {run} input ended at {}, its drain at {}{}",
                    d.input_end,
                    d.ended_at,
                    if d.cut { " (cut)" } else { "" }
                );
            }
        }
        words
    }

    /// The table, one row per line.
    pub fn table(&self) -> String {
        let (a, b) = (self.recorded, self.rerun);
        let mut t = Table::default();
        t.row("", "recorded", "re-run");
        t.row(
            "output digest",
            &a.output_digest,
            &format!(
                "{} {}",
                b.output_digest,
                if self.digests_match() {
                    "(same)"
                } else {
                    "(DIFFERS)"
                }
            ),
        );
        t.row("records in / outputs", &counts(a), &counts(b));
        t.row(
            "latency p99 / max",
            &latency(a.latency_ns.p99, a.latency_ns.max, self.recorded_latency),
            &latency(b.latency_ns.p99, b.latency_ns.max, self.rerun_latency),
        );
        let n = a.migrations.len().max(b.migrations.len());
        for i in 0..n {
            let (ma, mb) = (a.migrations.get(i), b.migrations.get(i));
            let title = ma.or(mb).map_or(String::new(), |m| {
                format!("to {} at {:.1}s", m.target, m.issued_s)
            });
            t.section(&format!("migration {} {title}", i + 1));
            t.row(
                "  strategy",
                &opt(ma, |m| m.strategy.clone()),
                &opt(mb, |m| m.strategy.clone()),
            );
            t.row(
                "  duration",
                &opt(ma, migration_duration),
                &opt(mb, migration_duration),
            );
            t.row("  steps / bins / bytes", &opt(ma, moved), &opt(mb, moved));
            t.row(
                "  latency during p99 / max",
                &opt(ma, |m| during(&m.latency_ns_during, self.recorded_latency)),
                &opt(mb, |m| during(&m.latency_ns_during, self.rerun_latency)),
            );
        }
        let n = a.failures.len().max(b.failures.len());
        for i in 0..n {
            let (fa, fb) = (a.failures.get(i), b.failures.get(i));
            let title = fa.or(fb).map_or(String::new(), |f| {
                format!("worker {} at time {}", f.worker, f.time)
            });
            t.section(&format!("failure {} {title}", i + 1));
            let takeover = |f: &megaflux::summary::FailureSummary| {
                format!(
                    "{} promoted, {}",
                    f.bins_promoted,
                    f.takeover_ms
                        .map_or("takeover not seen".into(), |ms| format!("{ms:.1} ms"))
                )
            };
            t.row("  takeover", &opt(fa, takeover), &opt(fb, takeover));
            let (ra, rb) = (
                fa.and_then(|f| f.recovery.as_ref()),
                fb.and_then(|f| f.recovery.as_ref()),
            );
            if ra.is_some() || rb.is_some() {
                t.row(
                    "  recovery strategy",
                    &opt(ra, |r| r.strategy.clone()),
                    &opt(rb, |r| r.strategy.clone()),
                );
                t.row(
                    "  recovery duration",
                    &opt(ra, recovery_duration),
                    &opt(rb, recovery_duration),
                );
                t.row("  bins / bytes copied", &opt(ra, copied), &opt(rb, copied));
                t.row(
                    "  latency during p99 / max",
                    &opt(ra, |r| during(&r.latency_ns_during, self.recorded_latency)),
                    &opt(rb, |r| during(&r.latency_ns_during, self.rerun_latency)),
                );
            }
        }
        t.text
    }
}

#[derive(Default)]
struct Table {
    text: String,
}

impl Table {
    fn row(&mut self, name: &str, a: &str, b: &str) {
        let _ = writeln!(self.text, "{name:<NAME$} {a:<COLUMN$} {b}");
    }

    fn section(&mut self, title: &str) {
        let _ = writeln!(self.text, "{title}");
    }
}

fn opt<T>(value: Option<&T>, show: impl Fn(&T) -> String) -> String {
    value.map_or_else(|| "-".into(), show)
}

fn counts(s: &Summary) -> String {
    format!("{} / {}", s.records_in, s.outputs)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn latency(p99: u64, max: u64, meaningful: bool) -> String {
    if meaningful {
        format!("{:.2} / {:.2} ms", ms(p99), ms(max))
    } else {
        "n/a (max speed)".into()
    }
}

fn during(d: &DuringLatency, meaningful: bool) -> String {
    latency(d.p99, d.max, meaningful)
}

fn seconds(d: Option<f64>, cancelled: bool) -> String {
    match d {
        Some(d) if cancelled => format!("{d:.3} s (cancelled)"),
        Some(d) => format!("{d:.3} s"),
        None => "unfinished".into(),
    }
}

fn migration_duration(m: &MigrationSummary) -> String {
    seconds(m.duration_s, m.cancelled)
}

fn recovery_duration(r: &RecoverySummary) -> String {
    seconds(r.duration_s, r.cancelled)
}

fn moved(m: &MigrationSummary) -> String {
    format!("{} / {} / {}", m.steps, m.bins_moved, bytes(m.bytes_moved))
}

fn copied(r: &RecoverySummary) -> String {
    format!("{} / {}", r.bins_copied, bytes(r.bytes))
}
