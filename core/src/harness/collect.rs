//! What a worker collects about its run beside the dataflow's work: the digest of the
//! outputs that belong to the run, and every worker's report, gathered on worker 0.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use timely::ExchangeData;
use timely::dataflow::operators::{Exchange, Inspect, Probe};
use timely::dataflow::{InputHandleVec, ProbeHandle, StreamVec};
use timely::worker::Worker;

use crate::Time;
use crate::bins::hash_key;
use crate::sink::Sink;
use crate::summary::WorkerReport;

/// An order-independent hash and a count of the outputs at logical times up to the run's
/// last: a cluster drains its scheduled later work (Q4's auction closings, say) and one
/// process drops it, but both count only the outputs up to the last epoch.
#[derive(Clone)]
pub(super) struct Digest {
    sums: Rc<RefCell<(u64, u64)>>,
    last_time: Rc<Cell<Time>>,
}

impl Digest {
    pub(super) fn new() -> Self {
        Digest {
            sums: Rc::default(),
            last_time: Rc::new(Cell::new(Time::MAX)),
        }
    }

    /// Counts `output` (the digest sits before the probe: once the probe has passed a time,
    /// every output at that time was counted) and probes it with `probe`. With `sink`
    /// (a run with `--output`), every worker sends its outputs to worker 0, which writes
    /// them if it holds the file; the probe then also waits for them to be written.
    pub(super) fn count<'s, O: ExchangeData + Clone + std::hash::Hash>(
        &self,
        output: StreamVec<'s, Time, O>,
        probe: &ProbeHandle<Time>,
        sink: Option<Option<Rc<RefCell<Sink>>>>,
    ) {
        let (sums, last_time) = (Rc::clone(&self.sums), Rc::clone(&self.last_time));
        let counted = output.inspect_core(move |event| {
            if let Ok((stamp, batch)) = event
                && let Some(&time) = stamp.least()
                && time <= last_time.get()
            {
                let mut d = sums.borrow_mut();
                for out in batch.iter() {
                    d.0 = d.0.wrapping_add(hash_key(&(time, out)));
                }
                d.1 += batch.len() as u64;
            }
        });
        let Some(writer) = sink else {
            counted.probe_with(probe);
            return;
        };
        counted.clone().probe_with(probe);
        let last_time = Rc::clone(&self.last_time);
        counted
            .exchange(|_| 0)
            .inspect_core(move |event| {
                if let Ok((stamp, batch)) = event
                    && let Some(&time) = stamp.least()
                    && time <= last_time.get()
                    && let Some(writer) = &writer
                {
                    writer.borrow_mut().write(batch.iter());
                }
            })
            .probe_with(probe);
    }

    /// The run ended at logical time `last`: later outputs are not the run's.
    pub(super) fn end_at(&self, last: Time) {
        self.last_time.set(last);
    }

    /// The hash and the number of the outputs counted.
    pub(super) fn get(&self) -> (u64, u64) {
        *self.sums.borrow()
    }
}

/// Every worker's report, sent to worker 0 over timely itself, so that it also works across
/// processes.
pub(super) struct Reports {
    input: InputHandleVec<Time, WorkerReport>,
    gathered: Rc<RefCell<Vec<WorkerReport>>>,
    probe: ProbeHandle<Time>,
}

impl Reports {
    /// Builds the reports' dataflow on `worker`.
    pub(super) fn new(worker: &mut Worker) -> Self {
        let mut input = InputHandleVec::<Time, WorkerReport>::new();
        let gathered: Rc<RefCell<Vec<WorkerReport>>> = Rc::default();
        let probe = ProbeHandle::new();
        {
            let gathered = Rc::clone(&gathered);
            let probe = probe.clone();
            let input = &mut input;
            worker.dataflow::<Time, _, _>(move |scope| {
                input
                    .to_stream(scope)
                    .exchange(|_| 0)
                    .inspect(move |r: &WorkerReport| gathered.borrow_mut().push(r.clone()))
                    .probe_with(&probe);
            });
        }
        Reports {
            input,
            gathered,
            probe,
        }
    }

    /// Sends this worker's report; `step` until every worker's is in. Returns them (all of
    /// them on worker 0, none elsewhere).
    pub(super) fn exchange<E>(
        self,
        report: WorkerReport,
        mut step: impl FnMut() -> Result<(), E>,
    ) -> Result<Vec<WorkerReport>, E> {
        let Reports {
            mut input,
            gathered,
            probe,
        } = self;
        input.send(report);
        drop(input);
        while !probe.done() {
            step()?;
        }
        Ok(gathered.take())
    }
}
