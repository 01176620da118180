//! Parsers of flag values, shared by the subcommands: each names the bad value and what it
//! expected.

use megaflux::epoch::EpochLen;
use megaflux::harness::{EpochMode, Idle, Pacing, WorkerAt};
use megaflux::plan::{MigrationSpec, Schedule};
use megaflux::source::Input;
use megaflux::{Bins, ConfigError};

/// The longest run a flag can ask for: a day.
pub const MAX_SECS: f64 = 86_400.0;

/// A collector's address: `HOST:PORT`, the host a name (`localhost`) or an IP address; of
/// the addresses a name resolves to, the first IPv4 one (collectors serve on 127.0.0.1 by
/// default, and `localhost` often resolves to ::1 first), else the first.
pub(crate) fn address(s: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!("`{s}`: give HOST:PORT, e.g. localhost:6650"));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!(
            "`{s}`: give HOST:PORT, e.g. localhost:6650 (the port a number up to 65535)"
        ));
    }
    match s.to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<std::net::SocketAddr> = addrs.collect();
            let v4 = addrs.iter().find(|a| a.is_ipv4());
            v4.or(addrs.first())
                .copied()
                .ok_or_else(|| format!("`{host}` has no address"))
        }
        Err(e) => Err(format!("`{host}` could not be resolved: {e}")),
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

/// The most `--metrics-linger` waits: an hour.
const MAX_LINGER_SECS: f64 = 3600.0;

/// How long the run's last numbers stay served: 0 up to an hour.
pub(crate) fn linger(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.0..=MAX_LINGER_SECS).contains(&x) => Ok(x),
        _ => Err(format!(
            "`{s}` is not a time in seconds (0 <= SECS <= {MAX_LINGER_SECS})"
        )),
    }
}

/// A peer timeout: a duration of at least three heartbeats, or every peer is lost between
/// two of its beats.
pub(crate) fn peer_timeout(s: &str) -> Result<f64, String> {
    let least = 3.0 * megaflux::membership::HEARTBEAT.as_secs_f64();
    match duration(s)? {
        x if x >= least => Ok(x),
        x => Err(format!(
            "{x} s is shorter than three heartbeats ({least} s): every peer would be lost between two of its beats"
        )),
    }
}

pub(crate) fn drain(s: &str) -> Result<megaflux::job::Drain, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
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

pub(crate) fn balance(s: &str) -> Result<megaflux::harness::balancer::BalanceMode, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

pub(crate) fn target(s: &str) -> Result<megaflux::plan::Target, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

pub(crate) fn idle(s: &str) -> Result<Idle, String> {
    s.parse().map_err(|e: ConfigError| e.to_string())
}

/// `--epochs`: a mode, or `auto` (adaptive for the runs that allow it, fixed for the rest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Epochs {
    Auto,
    Given(EpochMode),
}

impl Epochs {
    /// The mode for a run that `allows` adaptive epochs (asked only for `auto`).
    pub(crate) fn resolve(self, allows: impl FnOnce() -> bool) -> EpochMode {
        match self {
            Epochs::Auto if allows() => EpochMode::Adaptive,
            Epochs::Auto => EpochMode::Fixed,
            Epochs::Given(mode) => mode,
        }
    }
}

pub(crate) fn epochs(s: &str) -> Result<Epochs, String> {
    match s {
        "auto" => Ok(Epochs::Auto),
        s => s
            .parse()
            .map(Epochs::Given)
            .map_err(|_: ConfigError| format!("`{s}` is not auto, fixed or adaptive")),
    }
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
