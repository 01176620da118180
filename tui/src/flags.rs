//! Parsers of flag values, shared by the subcommands: each names the bad value and what it
//! expected.

use megaflux::epoch::EpochLen;
use megaflux::harness::{Idle, Pacing, WorkerAt};
use megaflux::plan::{MigrationSpec, Schedule};
use megaflux::source::Input;
use megaflux::{Bins, ConfigError};

/// The longest run a flag can ask for: a day.
pub const MAX_SECS: f64 = 86_400.0;

pub(crate) fn auctions(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("`{s}` is not a number of auctions (at least 1)")),
    }
}

pub(crate) fn bins(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    Bins::new(n).map(Bins::count).map_err(|e| e.to_string())
}

pub(crate) fn duration(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= MAX_SECS => Ok(x),
        _ => Err(format!(
            "`{s}` is not a duration in seconds (0 < SECS <= {MAX_SECS})"
        )),
    }
}

pub(crate) fn migration(s: &str) -> Result<MigrationSpec, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

pub(crate) fn worker_at(s: &str) -> Result<WorkerAt, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

pub(crate) fn schedule(s: &str) -> Result<Schedule, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

pub(crate) fn idle(s: &str) -> Result<Idle, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

pub(crate) fn pacing(s: &str) -> Result<Pacing, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

pub(crate) fn input(s: &str) -> Result<Input, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

pub(crate) fn speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!(
            "`{s}` is not a speed factor (a number above 0, e.g. 2 or 0.5)"
        )),
    }
}

pub(crate) fn epoch(s: &str) -> Result<u64, String> {
    let us = s
        .parse::<u64>()
        .map_err(|_| format!("`{s}` is not a number of microseconds"))?;
    EpochLen::from_us(us).map(EpochLen::us).map_err(|e| e.to_string())
}

pub(crate) fn chunk(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 64 => Ok(n),
        _ => Err(format!("`{s}` is not a chunk size of at least 64 bytes")),
    }
}
