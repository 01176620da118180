//! The end of a run, the same on every worker of every process: a stop on worker 0 fixes
//! the last epoch, and every worker, here or in another process, hears it on a broadcast
//! stream of its own (the control plane's handle only reaches this process).

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use timely::dataflow::InputHandleVec;
use timely::dataflow::Scope;
use timely::dataflow::operators::Inspect;
use timely::dataflow::operators::vec::Broadcast;

use crate::Time;
use crate::control::ControlHandle;
use crate::epoch::EpochLen;

/// How far past the epoch a stop request reached the run ends: far enough that every
/// worker, of every process, learns the last epoch before it gets there.
const STOP_AHEAD: Duration = Duration::from_millis(50);

/// One worker's end of the broadcast.
pub(super) struct RunEnd {
    input: InputHandleVec<Time, u64>,
    heard: Rc<Cell<Option<u64>>>,
    told: bool,
}

impl RunEnd {
    pub(super) fn new() -> Self {
        RunEnd {
            input: InputHandleVec::new(),
            heard: Rc::default(),
            told: false,
        }
    }

    /// Adds the broadcast to the dataflow being built. Nothing waits on its frontier: its
    /// input stays at its first time until the run ends.
    pub(super) fn build(&mut self, scope: Scope<'_, Time>) {
        let heard = Rc::clone(&self.heard);
        self.input
            .to_stream(scope)
            .broadcast()
            .inspect(move |end| heard.set(Some(heard.get().map_or(*end, |h| h.min(*end)))));
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
        control.end().into_iter().chain(self.heard()).min()
    }

    /// Tells every worker that the run ends at measured epoch `epoch` (once).
    fn tell(&mut self, epoch: u64) {
        if !self.told {
            self.told = true;
            self.input.send(epoch);
            self.input.flush();
        }
    }

    /// The last epoch a worker told, once this worker heard it.
    fn heard(&self) -> Option<u64> {
        self.heard.get()
    }
}
