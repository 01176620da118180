//! Operators the property tests run, and their plain sequential meaning.

#![allow(dead_code)] // Each test crate uses some of them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use megaflux::bins::hash_key;
use megaflux::{ControlInst, StatefulConfig, Time, stateful_binary, stateful_unary};
use timely::dataflow::operators::{Inspect, Probe};
use timely::dataflow::{InputHandleVec, ProbeHandle, StreamVec};
use timely::worker::Worker;

/// The window of [`window_logic`].
pub const WINDOW: Time = 4;

pub type Rec = (u64, u64);
pub type Out = (u64, u64, u64);

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    Sum,
    Join,
    Window,
    /// Order-sensitive: appends each value to its key's list and outputs the list's hash.
    Append,
}

/// Every bin this worker's operators hold: (operator, bin, hash of the encoded bin).
pub fn holdings(config: &StatefulConfig) -> Vec<(String, u32, u64)> {
    let mut out = Vec::new();
    let mut digests = Vec::new();
    config.observers.each(|op| {
        digests.clear();
        (op.digests)(&mut digests);
        out.extend(digests.iter().map(|(bin, hash)| (op.name.clone(), *bin, *hash)));
    });
    out
}

/// The inputs of a test dataflow.
pub struct Inputs {
    pub left: InputHandleVec<Time, Rec>,
    pub right: InputHandleVec<Time, Rec>,
    pub control: InputHandleVec<Time, ControlInst>,
}

/// Builds `op` on `worker` with `config`, fed by new inputs; its outputs go to `sink`.
pub fn dataflow(
    worker: &mut Worker,
    op: Op,
    config: &StatefulConfig,
    sink: Arc<Mutex<Vec<(Time, Out)>>>,
) -> (Inputs, ProbeHandle<Time>) {
    let mut inputs = Inputs {
        left: InputHandleVec::new(),
        right: InputHandleVec::new(),
        control: InputHandleVec::new(),
    };
    let probe = worker.dataflow::<Time, _, _>(|scope| {
        let l = inputs.left.to_stream(scope);
        let r = inputs.right.to_stream(scope);
        let c = inputs.control.to_stream(scope);
        operator(op, l, r, c, config, sink)
    });
    (inputs, probe)
}

/// `op` as a migrateable operator on `left` (and `right`, for the join), keyed by the
/// records' first field; its outputs go to `sink` with their times, and the returned probe
/// follows them.
pub fn operator<'s>(
    op: Op,
    left: StreamVec<'s, Time, Rec>,
    right: StreamVec<'s, Time, Rec>,
    control: StreamVec<'s, Time, ControlInst>,
    config: &StatefulConfig,
    sink: Arc<Mutex<Vec<(Time, Out)>>>,
) -> ProbeHandle<Time> {
    let key = |r: &Rec| hash_key(&r.0);
    let (l, c) = (left, control);
    let out = match op {
        Op::Sum => stateful_unary(l, c, config, "sum", key, sum_logic),
        Op::Window => stateful_unary(l, c, config, "window", key, window_logic),
        Op::Append => stateful_unary(l, c, config, "append", key, append_logic),
        Op::Join => stateful_binary(l, right, c, config, "join", key, key, join_logic),
    };
    let probe = ProbeHandle::new();
    out.inspect_core(move |event| {
        if let Ok((stamp, data)) = event {
            let t = *stamp.least().expect("outputs carry a time");
            sink.lock().unwrap().extend(data.iter().map(|x| (t, *x)));
        }
    })
    .probe_with(&probe);
    probe
}

/// Per time and key, adds the time's values and outputs the key's new total once.
pub fn sum_logic(
    _t: Time,
    bin: &mut megaflux::Bin<HashMap<u64, u64>>,
    recs: &mut Vec<Rec>,
    out: &mut Vec<Out>,
) {
    recs.sort_unstable();
    let mut touched = Vec::new();
    for (k, v) in recs.drain(..) {
        *bin.state.entry(k).or_default() += v;
        if touched.last() != Some(&k) {
            touched.push(k);
        }
    }
    for k in touched {
        out.push((k, bin.state[&k], 0));
    }
}

/// A key no record has: the window logic outputs it when it is run wrongly.
pub const WRONG: u64 = u64::MAX;

/// The window logic's state: open windows' sums, and the last time the logic ran for the bin.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct WindowState {
    sums: BTreeMap<(Time, u64), u64>,
    last_run: Option<Time>,
}

impl megaflux::StateSize for WindowState {
    fn keys(&self) -> usize {
        self.sums.len()
    }
    fn bytes(&self) -> usize {
        megaflux::StateSize::bytes(&self.sums) + std::mem::size_of::<Option<Time>>()
    }
}

/// Tumbling windows of `WINDOW`: at each window's end, outputs (key, end, sum). The logic
/// must run for a bin at most once per time and in time order (records and scheduled work of
/// one time together); a run that breaks this (a duplicate or a late-coming earlier time)
/// outputs `(WRONG, time, last run)`, and a scheduled run before its window's end outputs the
/// sums too early: either differs from the model.
pub fn window_logic(t: Time, bin: &mut megaflux::Bin<WindowState>, recs: &mut Vec<Rec>, out: &mut Vec<Out>) {
    if let Some(last) = bin.state.last_run
        && last >= t
    {
        out.push((WRONG, t, last));
    }
    bin.state.last_run = Some(t);
    for (k, v) in recs.drain(..) {
        let end = (t / WINDOW + 1) * WINDOW;
        *bin.state.sums.entry((end, k)).or_default() += v;
        bin.schedule(end);
    }
    let later = bin.state.sums.split_off(&(t + 1, 0));
    for ((end, k), sum) in std::mem::replace(&mut bin.state.sums, later) {
        out.push((k, end, sum));
    }
}

/// Appends each value to its key's list, in the order the records come; outputs (key,
/// length, hash of the list).
pub fn append_logic(
    _t: Time,
    bin: &mut megaflux::Bin<BTreeMap<u64, Vec<u64>>>,
    recs: &mut Vec<Rec>,
    out: &mut Vec<Out>,
) {
    for (k, v) in recs.drain(..) {
        let list = bin.state.entry(k).or_default();
        list.push(v);
        out.push((k, list.len() as u64, hash_key(list)));
    }
}

pub type JoinState = HashMap<u64, (Vec<u64>, Vec<u64>)>;

/// Equi-join on the key: every left value meets every right value once.
pub fn join_logic(
    _t: Time,
    bin: &mut megaflux::Bin<JoinState>,
    lefts: &mut Vec<Rec>,
    rights: &mut Vec<Rec>,
    out: &mut Vec<Out>,
) {
    for (k, a) in lefts.drain(..) {
        let entry = bin.state.entry(k).or_default();
        for b in &entry.1 {
            out.push((k, a, *b));
        }
        entry.0.push(a);
    }
    for (k, b) in rights.drain(..) {
        let entry = bin.state.entry(k).or_default();
        for a in &entry.0 {
            out.push((k, *a, b));
        }
        entry.1.push(b);
    }
}

/// The last time of any record of `left` and `right` or of `more`.
pub fn last_time(left: &[(Time, Rec)], right: &[(Time, Rec)], more: impl Iterator<Item = Time>) -> Time {
    left.iter()
        .chain(right)
        .map(|(t, _)| *t)
        .chain(more)
        .max()
        .unwrap_or(0)
}

/// The order in which a (time, bin)'s records reach the logic, as the job promises it.
#[derive(Clone, Copy, Debug)]
pub enum Order {
    /// By sending worker (record `i` is sent by worker `i mod workers`), then in the order
    /// each worker sent them.
    Senders(usize),
    /// By their encoding (a job that can restart after a crash).
    Content,
}

/// The plain sequential meaning of each operator on `left` and `right`, outputs sorted per
/// time. Append's depends on the order the job promises (`order`).
pub fn model(op: Op, left: &[(Time, Rec)], right: &[(Time, Rec)], order: Order) -> BTreeMap<Time, Vec<Out>> {
    let mut out: BTreeMap<Time, Vec<Out>> = BTreeMap::new();
    let end = left.iter().chain(right).map(|(t, _)| *t).max().unwrap_or(0) + 1;
    match op {
        Op::Sum => {
            let mut totals: HashMap<u64, u64> = HashMap::new();
            for t in 0..end {
                let mut at: BTreeMap<u64, u64> = BTreeMap::new();
                for (_, (k, v)) in left.iter().filter(|(rt, _)| *rt == t) {
                    *at.entry(*k).or_default() += v;
                }
                for (k, v) in at {
                    let total = totals.entry(k).or_default();
                    *total += v;
                    out.entry(t).or_default().push((k, *total, 0));
                }
            }
        }
        Op::Window => {
            let mut sums: BTreeMap<(Time, u64), u64> = BTreeMap::new();
            for (t, (k, v)) in left {
                *sums.entry(((t / WINDOW + 1) * WINDOW, *k)).or_default() += v;
            }
            for ((end, k), sum) in sums {
                out.entry(end).or_default().push((k, end, sum));
            }
        }
        Op::Append => {
            let mut lists: HashMap<u64, Vec<u64>> = HashMap::new();
            for t in 0..end {
                let mut at: Vec<(usize, Vec<u8>, usize, Rec)> = left
                    .iter()
                    .enumerate()
                    .filter(|(_, (rt, _))| *rt == t)
                    .map(|(i, (_, r))| match order {
                        Order::Senders(workers) => (i % workers, Vec::new(), i, *r),
                        Order::Content => (0, bincode::serialize(r).unwrap(), 0, *r),
                    })
                    .collect();
                at.sort_unstable();
                for (_, _, _, (k, v)) in at {
                    let list = lists.entry(k).or_default();
                    list.push(v);
                    out.entry(t)
                        .or_default()
                        .push((k, list.len() as u64, hash_key(list)));
                }
            }
        }
        Op::Join => {
            for (tl, (kl, a)) in left {
                for (tr, (kr, b)) in right {
                    if kl == kr {
                        out.entry(*tl.max(tr)).or_default().push((*kl, *a, *b));
                    }
                }
            }
        }
    }
    for v in out.values_mut() {
        v.sort_unstable();
    }
    out
}

/// The control instructions of pipelined plans (strategy, target primaries, start) on `bins`
/// bins and `workers` workers, starting from the uniform map: one step per time from each
/// plan's start, each step's moves at its time. Targets fold onto existing workers.
pub fn plan_control(
    plans: &[(megaflux::plan::Strategy, Vec<u32>, Time)],
    bins: usize,
    workers: usize,
) -> Vec<(Time, ControlInst)> {
    use megaflux::config::{single, uniform};
    use megaflux::plan;
    let mut placement = single(&uniform(bins, workers));
    let mut control = Vec::new();
    for (strategy, target, start) in plans {
        let target = single(&target.iter().map(|w| w % workers as u32).collect());
        let steps = plan::steps(*strategy, plan::changes(&placement, &target));
        for (i, step) in steps.into_iter().enumerate() {
            for c in step {
                control.push((
                    start + i as u64,
                    ControlInst::Move {
                        bin: c.bin,
                        worker: c.to.primary,
                    },
                ));
            }
        }
        placement = target;
    }
    control
}
