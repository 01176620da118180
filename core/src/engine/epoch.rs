//! The length of an epoch, which is also the unit of logical time.
//!
//! Measured epoch `e` (1-based) closes `e` epoch lengths after the run starts, and records
//! due before that go in with it. Lengths divide a millisecond, so that milliseconds (NEXMark
//! windows and auction lengths) and the 250 ms latency windows are whole numbers of epochs.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Time;
use crate::error::ConfigError;

/// The epoch of a run that does not choose one, in every build: 100 us, the best per-record
/// latency at 400k records/s on 2 workers without losing throughput (README,
/// *Performance*). Debug builds keep it too, so that a job's logical times mean the same in
/// its tests as in production (a debug build keeps up at the default 200k records/s).
pub const DEFAULT_EPOCH_US: u64 = 100;
/// The epoch of a run with adaptive epochs that does not choose one: 10 us. It is only the
/// grain of the records' due times there (a batch takes every epoch due since the last),
/// so it can be much finer than a fixed epoch; finer still costs worker 0 more steps when
/// it records latency, one per epoch (100,000 a second at 10 us).
pub const ADAPTIVE_EPOCH_US: u64 = 10;
/// Width of one latency timeline window.
pub const WINDOW: Duration = Duration::from_millis(250);

/// An epoch length in microseconds, a divisor of 1000.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct EpochLen(u64);

impl EpochLen {
    /// The one-millisecond epoch, which traces and configurations that do not name their
    /// epoch had.
    pub const MS: EpochLen = EpochLen(1000);

    /// An epoch of `us` microseconds, if it divides a millisecond.
    pub fn from_us(us: u64) -> Result<Self, ConfigError> {
        if us == 0 || !1000u64.is_multiple_of(us) {
            return Err(ConfigError::Invalid(format!(
                "an epoch of {us} us does not divide a millisecond (1, 2, 4, 5, 8, 10, 20, 25, 40, 50, 100, 125, 200, 250, 500 or 1000)"
            )));
        }
        Ok(EpochLen(us))
    }

    /// The length in microseconds (a divisor of 1000).
    pub fn us(self) -> u64 {
        self.0
    }

    /// The epoch a job's configuration names (as JSON: a trace header's or a hello's
    /// `epoch_us`), or 1 ms for configurations written before epochs could be finer.
    pub fn of_config(config: &serde_json::Value) -> EpochLen {
        config["epoch_us"]
            .as_u64()
            .and_then(|us| EpochLen::from_us(us).ok())
            .unwrap_or(EpochLen::MS)
    }

    /// Epochs in a millisecond: logical time per millisecond.
    pub fn per_ms(self) -> u64 {
        1000 / self.0
    }

    /// Epochs in `d`, rounded down: the epochs closed `d` into the run.
    pub fn in_duration(self, d: Duration) -> u64 {
        (d.as_micros() / self.0 as u128).try_into().unwrap_or(u64::MAX)
    }

    /// Epochs in `d`, rounded up: the logical time a span of `d` takes (a timeout of `d`
    /// from time `t` is due at `t + ticks(d)`, never before `d` has passed).
    pub fn ticks(self, d: Duration) -> Time {
        d.as_micros()
            .div_ceil(u128::from(self.0))
            .try_into()
            .unwrap_or(Time::MAX)
    }

    /// Epochs in `s` seconds, rounded down.
    pub fn in_secs(self, s: f64) -> u64 {
        (s.max(0.0) * 1e6 / self.0 as f64) as u64
    }

    /// When epoch `epoch` closes, after the run's start.
    pub fn closes_at(self, epoch: Time) -> Duration {
        Duration::from_micros(epoch.saturating_mul(self.0))
    }

    /// Epochs in one latency timeline window.
    pub fn per_window(self) -> u64 {
        self.in_duration(WINDOW)
    }

    /// The name of the unit, as trace headers spell it: `ms`, or `Nus`.
    pub fn unit(self) -> String {
        if self.0 == 1000 {
            "ms".to_string()
        } else {
            format!("{}us", self.0)
        }
    }
}

impl Default for EpochLen {
    fn default() -> Self {
        EpochLen(DEFAULT_EPOCH_US)
    }
}

impl TryFrom<u64> for EpochLen {
    type Error = ConfigError;
    fn try_from(us: u64) -> Result<Self, ConfigError> {
        EpochLen::from_us(us)
    }
}

impl From<EpochLen> for u64 {
    fn from(e: EpochLen) -> u64 {
        e.0
    }
}

/// As people say it: `1 ms`, `100 µs`.
impl fmt::Display for EpochLen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(1000) {
            write!(f, "{} ms", self.0 / 1000)
        } else {
            write!(f, "{} µs", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_divide_a_millisecond() {
        for us in [1, 2, 4, 5, 8, 10, 20, 25, 40, 50, 100, 125, 200, 250, 500, 1000] {
            let e = EpochLen::from_us(us).unwrap();
            assert_eq!(e.per_ms() * us, 1000);
            assert_eq!(e.per_window() * us, 250_000);
            assert_eq!(e.closes_at(e.per_ms()), Duration::from_millis(1));
        }
        for us in [0, 3, 300, 2000] {
            let err = EpochLen::from_us(us).unwrap_err().to_string();
            assert!(err.contains(&format!("{us} us")), "{err}");
        }
        assert_eq!(EpochLen::MS.unit(), "ms");
        assert_eq!(EpochLen::from_us(100).unwrap().unit(), "100us");
        assert_eq!(EpochLen::MS.to_string(), "1 ms");
        assert_eq!(EpochLen::from_us(100).unwrap().to_string(), "100 µs");
        let of = |v| EpochLen::of_config(&v);
        assert_eq!(of(serde_json::json!({"epoch_us": 250})).us(), 250);
        assert_eq!(of(serde_json::json!({"epoch_us": 300})), EpochLen::MS);
        assert_eq!(of(serde_json::json!({"workload": "keycount"})), EpochLen::MS);
        assert!(serde_json::from_str::<EpochLen>("7").is_err());
        assert_eq!(serde_json::from_str::<EpochLen>("250").unwrap().us(), 250);
    }
}
