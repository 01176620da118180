//! Open-loop latency: per epoch, the wall time at which the output frontier passed the
//! epoch minus the epoch's scheduled close, in HdrHistograms overall and per window.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer, V2Serializer};
use serde::{Deserialize, Serialize};

use crate::Time;

/// Width of one timeline window, in milliseconds (epochs).
pub const WINDOW_MS: u64 = 250;
/// Largest latency the histograms track exactly: one minute.
const MAX_TRACKED_NS: u64 = 60_000_000_000;

/// Percentiles of a set of latencies, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub count: u64,
}

impl Percentiles {
    /// Percentiles of a histogram (all zero for an empty one).
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            count: h.len(),
        }
    }
}

/// One window of the latency timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowStats {
    /// Start of the window, in seconds since the measured run began.
    pub t_s: f64,
    #[serde(flatten)]
    pub latency_ns: Percentiles,
}

/// Records the latency of each epoch as the output frontier passes it.
pub struct LatencyRecorder {
    epochs: Vec<(Time, u64)>,
}

fn histogram() -> Histogram<u64> {
    // Three significant digits up to one minute: the bounds are constants, so this cannot fail.
    match Histogram::new_with_bounds(1, MAX_TRACKED_NS, 3) {
        Ok(h) => h,
        Err(e) => unreachable!("constant histogram bounds rejected: {e}"),
    }
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyRecorder {
    pub fn new() -> Self {
        LatencyRecorder { epochs: Vec::new() }
    }

    /// Records that epoch `epoch` completed `latency_ns` after its scheduled close.
    pub fn record(&mut self, epoch: Time, latency_ns: u64) {
        self.epochs.push((epoch, latency_ns));
    }

    /// Number of epochs recorded.
    pub fn len(&self) -> usize {
        self.epochs.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.epochs.is_empty()
    }

    /// Percentiles over the epochs whose close falls in `[from_ms, to_ms]`.
    pub fn between(&self, from_ms: u64, to_ms: u64) -> Percentiles {
        let mut h = histogram();
        for (_, l) in self.epochs.iter().filter(|(e, _)| (from_ms..=to_ms).contains(e)) {
            h.saturating_record(*l);
        }
        Percentiles::of(&h)
    }

    /// Reports window `window` (epochs `window * WINDOW_MS + 1 ..= (window + 1) * WINDOW_MS`)
    /// as a `megaflux::latency` event: its percentiles and its histogram, serialized with
    /// HdrHistogram's V2 format and base64-encoded.
    pub fn report_window(&self, window: u64) {
        let (from, to) = (window * WINDOW_MS + 1, (window + 1) * WINDOW_MS);
        let mut h = histogram();
        // Epochs are recorded in order: the window is at the end.
        for (_, l) in self
            .epochs
            .iter()
            .rev()
            .skip_while(|(e, _)| *e > to)
            .take_while(|(e, _)| *e >= from)
        {
            h.saturating_record(*l);
        }
        let p = Percentiles::of(&h);
        let mut bytes = Vec::new();
        let encoded = match V2Serializer::new().serialize(&h, &mut bytes) {
            Ok(_) => BASE64.encode(&bytes),
            Err(e) => {
                tracing::warn!(target: "megaflux::latency", window, error = %e, "histogram not serialized");
                String::new()
            }
        };
        tracing::info!(
            target: "megaflux::latency",
            window, t_s = (window * WINDOW_MS) as f64 / 1000.0, count = p.count, p50 = p.p50, p99 = p.p99,
            max = p.max, histogram = %encoded
        );
    }

    /// Percentiles over every epoch.
    pub fn overall(&self) -> Percentiles {
        self.between(0, u64::MAX)
    }

    /// The complementary CDF of all epochs' latencies: (latency, fraction of epochs slower),
    /// at quantiles dense enough for a log-scale plot down to one in 100,000.
    pub fn ccdf(&self) -> Vec<(u64, f64)> {
        let mut h = histogram();
        for (_, l) in &self.epochs {
            h.saturating_record(*l);
        }
        if h.is_empty() {
            return Vec::new();
        }
        let mut quantiles: Vec<f64> = (0..10).map(|i| i as f64 / 10.0).collect();
        for nines in 1..=5 {
            let tail = 10f64.powi(-nines);
            quantiles.extend((1..10).rev().map(|k| 1.0 - tail * k as f64));
        }
        quantiles.push(1.0);
        quantiles.sort_by(f64::total_cmp);
        quantiles.dedup();
        quantiles
            .into_iter()
            .map(|q| (h.value_at_quantile(q), 1.0 - q))
            .collect()
    }

    /// The timeline, one entry per `WINDOW_MS` window.
    pub fn timeline(&self) -> Vec<WindowStats> {
        let Some(last) = self.epochs.iter().map(|(e, _)| *e).max() else {
            return Vec::new();
        };
        let windows = last.div_ceil(WINDOW_MS) as usize;
        let mut hs: Vec<Histogram<u64>> = (0..windows).map(|_| histogram()).collect();
        for (e, l) in &self.epochs {
            let w = (e.saturating_sub(1) / WINDOW_MS) as usize;
            hs[w].saturating_record(*l);
        }
        hs.iter()
            .enumerate()
            .map(|(i, h)| WindowStats {
                t_s: (i as u64 * WINDOW_MS) as f64 / 1000.0,
                latency_ns: Percentiles::of(h),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_windows() {
        let mut r = LatencyRecorder::new();
        for e in 1..=500 {
            r.record(e, if e == 300 { 50_000_000 } else { 1_000_000 });
        }
        let all = r.overall();
        assert_eq!(all.count, 500);
        assert!((999_000..=1_001_000).contains(&all.p50));
        assert!(all.max >= 49_900_000);
        let tl = r.timeline();
        assert_eq!(tl.len(), 2);
        assert!(tl[0].latency_ns.max < 2_000_000);
        assert!(tl[1].latency_ns.max >= 49_900_000);
        assert_eq!(r.between(1, 250).count, 250);
    }
}
