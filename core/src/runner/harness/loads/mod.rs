//! Load reports: every worker, of every process, tells worker 0 what its bins cost it, on a
//! stream of their own, so that worker 0's control plane knows each bin's load and size
//! wherever the bin is ([`Board`]), for the `balance` target and the balancer.
//!
//! A report covers one [`REPORT_EVERY`] of a worker's run: per bin whose primary or standby
//! it holds, the records its operators applied to the bin and the bin's share of the time
//! they were busy, and the bin's bytes. A load is busy time where the activations were
//! timed (every run's are): a saturated or straggling worker applies fewer records and
//! would look lighter by them; records are the fallback for reports without it. The board adds them
//! up in windows of [`WINDOW`] and keeps the last whole one: a worker's load is its records
//! over the time its own reports covered (not over worker 0's window, which a report landing
//! across its tick would stretch or shrink), a bin's load its records over the time of its
//! reporter's reports. A report whose interval began before the board last started afresh
//! (a plan ended) is not counted: it may hold work from before the bins moved. Memory is a
//! few numbers per bin and worker, whatever the run's length.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use timely::dataflow::operators::{Exchange, Inspect};
use timely::dataflow::{InputHandleVec, Scope};

use crate::Time;

/// How often a worker reports its bins' load to worker 0: once per latency window, so that
/// each window's imbalance is known.
pub const REPORT_EVERY: Duration = crate::epoch::WINDOW;
/// The window a bin's load is measured over.
pub const WINDOW: Duration = Duration::from_secs(1);

/// One worker's report: what its primaries cost it over `interval_ns`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// The reporting worker.
    pub worker: u32,
    /// The latency window (of [`REPORT_EVERY`], on the worker's clock of the run) the report
    /// closes: it covers the time since the worker's last report.
    pub window: u64,
    /// The report's interval, in nanoseconds.
    pub interval_ns: u64,
    /// When the interval ended, in nanoseconds on the worker's clock of the run.
    #[serde(default)]
    pub ended_ns: u64,
    /// Time the worker's operators were busy in it (0 unless timed).
    pub busy_ns: u64,
    /// Records the worker's source sent in it: the load offered, which what the workers
    /// apply falls short of when they cannot keep up.
    #[serde(default)]
    pub sent: u64,
    /// Per bin whose primary the worker holds and that had work: (bin, records, bytes).
    pub bins: Vec<(u32, u64, u64)>,
    /// Per bin whose standby the worker holds and that had work: (bin, records). A standby
    /// applies every record its primary does: work of the worker's, no load of the bin's.
    #[serde(default)]
    pub standbys: Vec<(u32, u64)>,
    /// Per entry of `bins`, the bin's share of the busy time of the activations that
    /// applied it, in nanoseconds; empty when the activations were not timed.
    #[serde(default)]
    pub bins_busy_ns: Vec<u64>,
    /// Per entry of `standbys`, likewise.
    #[serde(default)]
    pub standbys_busy_ns: Vec<u64>,
    /// Per stateful operator, in the order the job built them (the same on every worker):
    /// its work on this worker in the interval.
    #[serde(default)]
    pub operators: Vec<OperatorWork>,
    /// Per bin whose primary the worker holds that had no work, whose bytes changed since
    /// the worker last said them: (bin, bytes). What a plan that moves idle bins (packing an
    /// elastic run) moves.
    #[serde(default)]
    pub idle: Vec<(u32, u64)>,
}

/// One stateful operator's work on one worker over one report's interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorWork {
    /// Records the worker's router sent it (each replica's copy counted): its input,
    /// whether or not it keeps up.
    pub routed: u64,
    /// Records it applied here, as primary or standby.
    pub applied: u64,
    /// Its busy time here (its bins' shares), in nanoseconds; 0 unless timed.
    pub busy_ns: u64,
}

impl LoadReport {
    /// Whether the report says its bins' busy time (its activations were timed).
    pub fn timed(&self) -> bool {
        self.bins_busy_ns.len() == self.bins.len()
            && self.standbys_busy_ns.len() == self.standbys.len()
            && (self
                .bins_busy_ns
                .iter()
                .chain(&self.standbys_busy_ns)
                .any(|b| *b > 0)
                || (self.bins.is_empty() && self.standbys.is_empty()))
    }
}

mod board;
mod meter;

pub use board::Board;
pub(crate) use board::WindowSums;
pub(crate) use meter::Meter;

/// Every worker's end of the reports stream: worker 0 hears them all.
pub(super) struct LoadReports {
    input: InputHandleVec<Time, LoadReport>,
    heard: Rc<RefCell<Vec<LoadReport>>>,
}

impl LoadReports {
    pub(super) fn new() -> Self {
        LoadReports {
            input: InputHandleVec::new(),
            heard: Rc::default(),
        }
    }

    /// Adds the stream to the dataflow being built. Nothing waits on its frontier: its input
    /// stays at its first time until the run ends.
    pub(super) fn build(&mut self, scope: Scope<'_, Time>) {
        let heard = Rc::clone(&self.heard);
        // The first inspect makes an operator's output, which hands each batch on at the end
        // of its activation (see `end.rs`).
        self.input
            .to_stream(scope)
            .inspect(|_| {})
            .exchange(|_| 0)
            .inspect(move |report| heard.borrow_mut().push(report.clone()));
    }

    /// Sends worker 0 this worker's report.
    pub(super) fn send(&mut self, report: LoadReport) {
        self.input.send(report);
        self.input.flush();
    }

    /// On worker 0: the reports that arrived since the last call.
    pub(super) fn take(&self) -> Vec<LoadReport> {
        std::mem::take(&mut self.heard.borrow_mut())
    }
}

/// The latency window a worker's clock of the run is in.
pub(super) fn window_at(now: Duration) -> u64 {
    (now.as_nanos() / REPORT_EVERY.as_nanos()) as u64
}
