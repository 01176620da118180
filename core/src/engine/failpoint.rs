//! Fault injection for tests: `MEGAFLUX_FAILPOINT=<point>` makes the process exit at once,
//! as `kill -9` would (no cleanup, its connections closed by the system), the first time it
//! reaches that point of a restart, of a move or of the end of a run. A crash at the exact phase is
//! otherwise a matter of luck in the timing of a signal.

use std::sync::OnceLock;

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
        }
    }
}

/// Exits the process if `MEGAFLUX_FAILPOINT` names `point`.
pub(crate) fn hit(point: Point) {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| std::env::var(VARIABLE).ok());
    if armed.as_deref() == Some(point.name()) {
        eprintln!("megaflux: {VARIABLE}={}: exiting here", point.name());
        // As `kill -9` ends it: no atexit handlers, no flushing, while other threads run.
        let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        // Unreachable unless the signal could not be sent.
        std::process::abort();
    }
}
