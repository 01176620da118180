//! Fault injection for tests: `MEGAFLUX_FAILPOINT=<point>` makes the process exit at once,
//! as `kill -9` would (no cleanup, its connections closed by the system), the first time it
//! reaches that point of a restart, of a move, of a sink's commit or of the end of a run; with
//! `<point>:N`, the `N`th time. A crash at the exact phase is otherwise a matter of luck in the
//! timing of a signal.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable that names the point.
pub const VARIABLE: &str = "MEGAFLUX_FAILPOINT";

/// Where a process can be made to crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Point {
    /// Once process 0 admitted this one, before the first computation's connections.
    Form,
    /// Before connecting to the other survivors.
    Connect,
    /// Once connected, before agreeing where the bins are.
    Agree,
    /// At the start of the drain, once the last epoch is complete.
    Drain,
    /// Before the final exchange of the workers' reports.
    Report,
    /// Once this process's part of the run finished, before it says so.
    Finished,
    /// In a move, once a worker sent part of its bins' chunks to another process, before it
    /// sends the rest: chunks are in flight.
    Shipping,
    /// In a sink's commit, once the outputs are sent (a PostgreSQL `COPY`), before the
    /// commit itself.
    SinkCopied,
    /// In a sink's commit, once it is committed, before the writer learns it was.
    SinkCommitted,
}

impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::Form => "form-connect",
            Point::Connect => "restart-connect",
            Point::Agree => "restart-agree",
            Point::Drain => "end-drain",
            Point::Report => "end-report",
            Point::Finished => "end-finished",
            Point::Shipping => "move-shipping",
            Point::SinkCopied => "sink-copied",
            Point::SinkCommitted => "sink-committed",
        }
    }
}

/// Exits the process if `MEGAFLUX_FAILPOINT` names `point` (and, with `:N`, this is the
/// `N`th time it is reached).
pub(crate) fn hit(point: Point) {
    static ARMED: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static REACHED: AtomicU64 = AtomicU64::new(0);
    let armed = ARMED.get_or_init(|| std::env::var(VARIABLE).ok().map(|v| armed(&v)));
    let Some((name, nth)) = armed else { return };
    if name == point.name() && REACHED.fetch_add(1, Ordering::AcqRel) + 1 == *nth {
        eprintln!("megaflux: {VARIABLE}={name}:{nth}: exiting here");
        // As `kill -9` ends it: no atexit handlers, no flushing, while other threads run.
        let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        // Unreachable unless the signal could not be sent.
        std::process::abort();
    }
}

/// The point a variable names, and at which time it is reached (the first if not said).
fn armed(value: &str) -> (String, u64) {
    match value.rsplit_once(':') {
        Some((name, n)) if n.parse::<u64>().is_ok_and(|n| n > 0) => {
            (name.to_string(), n.parse().unwrap_or(1))
        }
        _ => (value.to_string(), 1),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_point_is_armed_for_its_first_or_its_nth_time() {
        assert_eq!(super::armed("sink-copied"), ("sink-copied".into(), 1));
        assert_eq!(super::armed("sink-copied:3"), ("sink-copied".into(), 3));
        assert_eq!(super::armed("sink-copied:0"), ("sink-copied:0".into(), 1));
    }
}
