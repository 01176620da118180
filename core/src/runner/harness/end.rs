//! The end of a run, the same on every worker of every process: a stop on worker 0 fixes
//! the last epoch, and every worker, here or in another process, hears it on a broadcast
//! stream of its own (the control plane's handle only reaches this process). The same
//! stream carries the drain's gate (see `harness/drain.rs`), and a second one takes each
//! worker's drain reports to worker 0.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use timely::dataflow::InputHandleVec;
use timely::dataflow::Scope;
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Exchange, Inspect};

use super::drain::{GateNews, GateReport};
use crate::Time;
use crate::control::ControlHandle;
use crate::epoch::EpochLen;

/// How far past the epoch a stop request reached the run ends: far enough that every
/// worker, of every process, learns the last epoch before it gets there.
const STOP_AHEAD: Duration = Duration::from_millis(50);

/// What worker 0 tells every worker about the end of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum News {
    /// The run's last measured epoch.
    Last(u64),
    /// The drain's gate.
    Gate(GateNews),
}

/// What a worker heard so far.
#[derive(Default)]
struct Heard {
    last: Option<u64>,
    gate: Option<Time>,
    finish: Option<Time>,
    /// On worker 0: the workers' drain reports not yet taken.
    reports: Vec<GateReport>,
}

/// One worker's end of the broadcast.
pub(super) struct RunEnd {
    input: InputHandleVec<Time, News>,
    reports: InputHandleVec<Time, GateReport>,
    heard: Rc<RefCell<Heard>>,
    told: bool,
}

impl RunEnd {
    pub(super) fn new() -> Self {
        RunEnd {
            input: InputHandleVec::new(),
            reports: InputHandleVec::new(),
            heard: Rc::default(),
            told: false,
        }
    }

    /// Adds the broadcast and the reports to the dataflow being built. Nothing waits on
    /// their frontiers: their inputs stay at their first time until the run ends.
    pub(super) fn build(&mut self, scope: Scope<'_, Time>) {
        let heard = Rc::clone(&self.heard);
        self.input.to_stream(scope).broadcast().inspect(move |news| {
            let mut heard = heard.borrow_mut();
            match *news {
                News::Last(end) => heard.last = Some(heard.last.map_or(end, |h| h.min(end))),
                News::Gate(GateNews::Raise(to)) => heard.gate = Some(heard.gate.map_or(to, |g| g.max(to))),
                News::Gate(GateNews::Finish(at)) => heard.finish = Some(at),
            }
        });
        let heard = Rc::clone(&self.heard);
        // An input that never advances never tells an exchange its batch is done, and the
        // exchange holds what it was given until then: an operator's output does, at the
        // end of each activation.
        self.reports
            .to_stream(scope)
            .inspect(|_| {})
            .exchange(|_| 0)
            .inspect(move |report| heard.borrow_mut().reports.push(*report));
    }

    /// On worker 0: once a stop is requested, fixes the last epoch `STOP_AHEAD` past the
    /// one the run has `reached` and tells every worker.
    pub(super) fn on_stop(&mut self, control: &ControlHandle, len: EpochLen, reached: impl FnOnce() -> u64) {
        if self.told || !control.stop_requested() {
            return;
        }
        self.end_past(control, len, reached());
    }

    /// On worker 0: the input ended (its last record went in by the epoch the run has
    /// `reached`): the run ends as it does on a stop.
    pub(super) fn on_input_end(
        &mut self,
        control: &ControlHandle,
        len: EpochLen,
        reached: impl FnOnce() -> u64,
    ) {
        if !self.told {
            self.end_past(control, len, reached());
        }
    }

    /// Fixes the last epoch `STOP_AHEAD` past `reached` (unless a stop fixed one already) and
    /// tells every worker.
    fn end_past(&mut self, control: &ControlHandle, len: EpochLen, reached: u64) {
        control.set_end(reached + len.in_duration(STOP_AHEAD));
        if let Some(epoch) = control.end() {
            self.tell(epoch);
        }
    }

    /// The last epoch a stop fixed, if one did: from this process's handle or heard from
    /// worker 0.
    pub(super) fn last(&self, control: &ControlHandle) -> Option<u64> {
        control.end().into_iter().chain(self.heard.borrow().last).min()
    }

    /// Tells every worker that the run ends at measured epoch `epoch` (once).
    fn tell(&mut self, epoch: u64) {
        if !self.told {
            self.told = true;
            self.send(News::Last(epoch));
        }
    }

    fn send(&mut self, news: News) {
        self.input.send(news);
        self.input.flush();
    }

    /// On worker 0: tells every worker of the drain's gate.
    pub(super) fn gate(&mut self, news: GateNews) {
        self.send(News::Gate(news));
    }

    /// The highest gate heard, and the gate the drain ends at once worker 0 said so.
    pub(super) fn gate_heard(&self) -> (Option<Time>, Option<Time>) {
        let heard = self.heard.borrow();
        (heard.gate, heard.finish)
    }

    /// Sends worker 0 this worker's drain report.
    pub(super) fn report(&mut self, report: GateReport) {
        self.reports.send(report);
        self.reports.flush();
    }

    /// On worker 0: the reports that arrived since the last call.
    pub(super) fn take_reports(&self) -> Vec<GateReport> {
        std::mem::take(&mut self.heard.borrow_mut().reports)
    }
}
