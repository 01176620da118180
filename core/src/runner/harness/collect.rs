//! What a worker collects about its run beside the dataflow's work: the digest of the
//! outputs that belong to the run, and every worker's report, gathered on worker 0.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::collections::BTreeMap;

use timely::ExchangeData;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::{Capability, Exchange as _, Inspect, Probe};
use timely::dataflow::{InputHandleVec, ProbeHandle, StreamVec};
use timely::worker::Worker;

use crate::Time;
use crate::bins::hash_key;
use crate::sink::Writer;
use crate::summary::{SpanSums, WorkerReport};

/// An order-independent hash and a count of the outputs at logical times up to the run's
/// last: a cluster drains its scheduled later work (Q4's auction closings, say) and one
/// process drops it, but both count only the outputs up to the last epoch.
#[derive(Clone)]
pub(super) struct Digest {
    sums: Rc<RefCell<Sums>>,
    last_time: Rc<Cell<Time>>,
    timed: bool,
}

/// A digest: the outputs' hash sum, their count, and both per span of logical time.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sums {
    pub(crate) hash: u64,
    pub(crate) count: u64,
    pub(crate) spans: SpanSums,
}

impl Sums {
    /// Counts `count` outputs of logical `time` whose hashes sum to `hash`.
    fn add(&mut self, time: Time, hash: u64, count: u64) {
        self.hash = self.hash.wrapping_add(hash);
        self.count += count;
        self.spans.add(time, hash, count);
    }
}

/// An output's share of a digest: with its time (`timed`), or, under adaptive epochs,
/// whose times depend on how the run's batches fell, without.
fn output_hash<O: std::hash::Hash>(timed: bool, time: Time, out: &O) -> u64 {
    if timed {
        hash_key(&(time, out))
    } else {
        hash_key(out)
    }
}

impl Digest {
    /// A digest of outputs with their times if `timed`.
    pub(super) fn new(timed: bool) -> Self {
        Digest {
            sums: Rc::default(),
            last_time: Rc::new(Cell::new(Time::MAX)),
            timed,
        }
    }

    /// Counts `output` (the digest sits before the probe: once the probe has passed a time,
    /// every output at that time was counted) and probes it with `probe`. With `sink`
    /// (a run with `--output`), every worker sends its outputs to worker 0, which writes
    /// them if it holds the file; the probe then also waits for them to be written. With
    /// `committed` (a run that can restart after a crash), the outputs go to worker 0 too,
    /// and are counted there as their times are committed (`Some(Some(_))` on worker 0),
    /// not where they were made: a lost process's share would be lost with it.
    pub(super) fn count<'s, O: ExchangeData + Clone + std::hash::Hash>(
        &self,
        output: StreamVec<'s, Time, O>,
        probe: &ProbeHandle<Time>,
        sink: Option<Option<Rc<RefCell<Writer>>>>,
        committed: Option<Option<Committed>>,
    ) {
        let (sums, last_time, timed) = (Rc::clone(&self.sums), Rc::clone(&self.last_time), self.timed);
        let here = committed.is_none();
        let counted = output.inspect_core(move |event| {
            if !here {
                return;
            }
            if let Ok((stamp, batch)) = event
                && let Some(&time) = stamp.least()
                && time <= last_time.get()
            {
                let hash = batch
                    .iter()
                    .fold(0u64, |h, out| h.wrapping_add(output_hash(timed, time, out)));
                sums.borrow_mut().add(time, hash, batch.len() as u64);
            }
        });
        // Every worker builds the same operators (only worker 0 holds the file).
        let (last_time, sinking) = (Rc::clone(&self.last_time), sink.is_some());
        let writer = sink.flatten();
        match committed {
            None if !sinking => {
                counted.probe_with(probe);
            }
            // No file to write: each worker sends worker 0 only each time's sum.
            Some(committed) if !sinking => {
                counted.clone().probe_with(probe);
                commit_sums(sums_per_time(counted, last_time, timed), committed).probe_with(probe);
            }
            committed => {
                counted.clone().probe_with(probe);
                commit(counted, last_time, timed, writer, committed.flatten()).probe_with(probe);
            }
        }
    }

    /// The run ended at logical time `last`: later outputs are not the run's.
    pub(super) fn end_at(&self, last: Time) {
        self.last_time.set(last);
    }

    /// The hash and the number of the outputs counted, and both per span.
    pub(super) fn get(&self) -> Sums {
        self.sums.borrow().clone()
    }

    /// The number of the outputs counted so far (what a sample reports, without the spans).
    pub(super) fn outputs(&self) -> u64 {
        self.sums.borrow().count
    }
}

/// What process 0 knows of a restartable run's committed outputs, across its restarts: the
/// committed frontier (every output before it is written and counted, none after it) and
/// the digest of the committed outputs.
#[derive(Clone, Default)]
pub(crate) struct Committed {
    pub(crate) frontier: Arc<AtomicU64>,
    pub(crate) sums: Arc<Mutex<Sums>>,
}

impl Committed {
    /// The hash and the number of the committed outputs, and both per span.
    pub(crate) fn get(&self) -> Sums {
        self.sums.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The number of the committed outputs.
    pub(crate) fn outputs(&self) -> u64 {
        self.sums.lock().map(|s| s.count).unwrap_or_default()
    }
}

/// Sends every output to worker 0, which writes the outputs of each time, in time order,
/// once its input has passed that time: a time is *committed* when its lines are written
/// (and counted into `committed`'s digest), and never before all of its outputs arrived.
/// What the restart of a crashed cluster builds on: outputs of times not yet committed are
/// dropped and produced again. The returned stream carries nothing; its frontier passes a
/// time once that time is written.
fn commit<'s, O: ExchangeData + Clone + std::hash::Hash>(
    outputs: StreamVec<'s, Time, O>,
    last_time: Rc<Cell<Time>>,
    timed: bool,
    writer: Option<Rc<RefCell<Writer>>>,
    committed: Option<Committed>,
) -> StreamVec<'s, Time, ()> {
    outputs.unary_frontier::<CapacityContainerBuilder<Vec<()>>, _, _, _>(
        Exchange::new(|_| 0),
        "commit",
        move |_cap, _info| {
            let mut pending: BTreeMap<Time, (Capability<Time>, Vec<O>)> = BTreeMap::new();
            move |(input, frontier), _output| {
                input.for_each_stamp(|cap, batches| {
                    let Some(&time) = cap.least() else { return };
                    if time > last_time.get() || (writer.is_none() && committed.is_none()) {
                        return;
                    }
                    let entry = pending
                        .entry(time)
                        .or_insert_with(|| (cap.delayed(&time, 0), Vec::new()));
                    for batch in batches {
                        entry.1.append(batch);
                    }
                });
                while let Some(entry) = pending.first_entry()
                    && !frontier.less_equal(entry.key())
                {
                    let (time, (_cap, outputs)) = entry.remove_entry();
                    if let Some(writer) = &writer {
                        writer.borrow_mut().write(time, outputs.iter());
                    }
                    if let Some(committed) = &committed
                        && let Ok(mut sums) = committed.sums.lock()
                    {
                        let hash = outputs
                            .iter()
                            .fold(0u64, |h, out| h.wrapping_add(output_hash(timed, time, out)));
                        sums.add(time, hash, outputs.len() as u64);
                    }
                }
                if let Some(committed) = &committed {
                    let now = frontier.frontier().first().copied().unwrap_or(Time::MAX);
                    let upto = pending.keys().next().map_or(now, |t| now.min(*t));
                    committed.frontier.fetch_max(upto, Ordering::AcqRel);
                }
            }
        },
    )
}

/// The digest (hash sum and count) of this worker's outputs at each time up to the run's
/// last, sent once this worker's outputs have passed the time (times with outputs only).
fn sums_per_time<'s, O: ExchangeData + std::hash::Hash>(
    outputs: StreamVec<'s, Time, O>,
    last_time: Rc<Cell<Time>>,
    timed: bool,
) -> StreamVec<'s, Time, (u64, u64)> {
    outputs.unary_frontier::<CapacityContainerBuilder<Vec<(u64, u64)>>, _, _, _>(
        timely::dataflow::channels::pact::Pipeline,
        "sums",
        move |_cap, _info| {
            let mut pending: BTreeMap<Time, (Capability<Time>, (u64, u64))> = BTreeMap::new();
            move |(input, frontier), output| {
                input.for_each_stamp(|cap, batches| {
                    let Some(&time) = cap.least() else { return };
                    if time > last_time.get() {
                        return;
                    }
                    let entry = pending
                        .entry(time)
                        .or_insert_with(|| (cap.delayed(&time, 0), (0, 0)));
                    for out in batches.flat_map(|b| b.iter()) {
                        entry.1.0 = entry.1.0.wrapping_add(output_hash(timed, time, out));
                        entry.1.1 += 1;
                    }
                });
                while let Some(entry) = pending.first_entry()
                    && !frontier.less_equal(entry.key())
                {
                    let (cap, sums) = entry.remove();
                    output.session(&cap).give(sums);
                }
            }
        },
    )
}

/// Adds every worker's sums of each time into `committed` on worker 0, once its input has
/// passed the time (every worker's sum of it arrived): the digest of a restartable run with
/// no file to write, committed per time like [`commit`]'s lines.
fn commit_sums<'s>(
    sums: StreamVec<'s, Time, (u64, u64)>,
    committed: Option<Committed>,
) -> StreamVec<'s, Time, ()> {
    sums.unary_frontier::<CapacityContainerBuilder<Vec<()>>, _, _, _>(
        Exchange::new(|_| 0),
        "commit",
        move |_cap, _info| {
            let mut pending: BTreeMap<Time, (Capability<Time>, (u64, u64))> = BTreeMap::new();
            move |(input, frontier), _output| {
                input.for_each_stamp(|cap, batches| {
                    let Some(&time) = cap.least() else { return };
                    let entry = pending
                        .entry(time)
                        .or_insert_with(|| (cap.delayed(&time, 0), (0, 0)));
                    for (hash, count) in batches.flat_map(|b| b.iter()) {
                        entry.1.0 = entry.1.0.wrapping_add(*hash);
                        entry.1.1 += count;
                    }
                });
                let Some(committed) = &committed else {
                    pending.clear();
                    return;
                };
                while let Some(entry) = pending.first_entry()
                    && !frontier.less_equal(entry.key())
                {
                    let (time, (_cap, (hash, count))) = entry.remove_entry();
                    if let Ok(mut sums) = committed.sums.lock() {
                        sums.add(time, hash, count);
                    }
                }
                let now = frontier.frontier().first().copied().unwrap_or(Time::MAX);
                let upto = pending.keys().next().map_or(now, |t| now.min(*t));
                committed.frontier.fetch_max(upto, Ordering::AcqRel);
            }
        },
    )
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use timely::dataflow::InputHandleVec;

    use super::*;

    /// Worker 0's output at time 1 reaches the sink before worker 1's at time 0: the file
    /// still has time 0 first, because a time is written only once it is complete.
    #[test]
    fn times_are_written_in_order_once_complete() {
        let dir = tempfile_dir();
        let path = dir.join("out.jsonl");
        let identity = crate::sink::RunIdentity {
            settings: serde_json::Map::new(),
            not_resumable: None,
        };
        let sink = Writer::open(&path.clone().into(), true, &identity).unwrap();
        let sink = Arc::new(std::sync::Mutex::new(Some(sink)));
        let arrived = Arc::new(AtomicBool::new(false));
        let guards = timely::execute(timely::Config::process(2), move |worker| {
            let index = worker.index();
            let writer = (index == 0)
                .then(|| sink.lock().unwrap().take().map(|s| Rc::new(RefCell::new(s))))
                .flatten();
            let mut input = InputHandleVec::<Time, String>::new();
            let probe = ProbeHandle::new();
            let (w, p) = (writer.clone(), probe.clone());
            worker.dataflow::<Time, _, _>(|scope| {
                commit(
                    input.to_stream(scope),
                    Rc::new(Cell::new(Time::MAX)),
                    true,
                    w,
                    None,
                )
                .probe_with(&p);
            });
            if index == 0 {
                input.advance_to(1);
                input.send("one".to_string());
                input.advance_to(2);
                // Worker 0's sink takes its own record of time 1 in first.
                for _ in 0..3 {
                    worker.step();
                }
                arrived.store(true, Ordering::Release);
            } else {
                while !arrived.load(Ordering::Acquire) {
                    worker.step();
                }
                input.send("zero".to_string());
                input.advance_to(2);
            }
            drop(input);
            while !probe.done() {
                worker.step();
            }
            if let Some(w) = writer {
                w.borrow_mut().finish().unwrap();
            }
        })
        .unwrap();
        for r in guards.join() {
            r.unwrap();
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "\"zero\"\n\"one\"\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("megaflux-commit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
