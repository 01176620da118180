//! Operators the property tests run, and their plain sequential meaning.

#![allow(dead_code)] // Each test crate uses some of them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use megaflux::bins::hash_key;
use megaflux::{ControlInst, StatefulConfig, Time, stateful_binary, stateful_unary};
use megaflux_testkit::{Watch, within};
use timely::dataflow::operators::{Inspect, Probe};
use timely::dataflow::{InputHandleVec, ProbeHandle, StreamVec};
use timely::worker::Worker;

/// The deadline of one in-process run of a test dataflow (a property test's case runs a
/// few): a bound against a hang on a loaded machine, not a judgement of speed. Such a run
/// takes well under a second, a few on a busy machine.
pub const RUN_LIMIT: Duration = Duration::from_secs(120);

/// The deadline of one run of a job through the public runner (`run_job`, `workload::run`)
/// whose configured length is a few seconds: a bound against a hang on a loaded machine,
/// not a judgement of speed.
pub const JOB_LIMIT: Duration = Duration::from_secs(600);

/// Runs `run` (a job through the public runner, whose workers the runner guards) on a
/// thread of its own, for at most [`JOB_LIMIT`]: a run that hangs fails its test naming
/// `what` instead of hanging the suite.
pub fn in_time<R: Send + 'static>(what: &str, run: impl FnOnce() -> R + Send + 'static) -> R {
    within(what, JOB_LIMIT, move |_| run())
}

/// How long a wait for another worker sleeps before it looks at the watch again.
const POLL: Duration = Duration::from_millis(10);

/// Runs `body` on `workers` timely workers of this process, named `what` in failures, for
/// at most [`RUN_LIMIT`]; returns what each worker returned, in worker order. Each worker's
/// body is guarded by the run's [`Watch`], which it is given: a worker that panics fails
/// the run at once with its message, and every loop that waits for other workers must call
/// `watch.check()` so that it stops then rather than spin for ever.
pub fn execute<T, F>(what: &str, workers: usize, body: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(&mut Worker, &Watch) -> T + Send + Sync + 'static,
{
    let name = what.to_string();
    within(what, RUN_LIMIT, move |watch| {
        let watch = watch.clone();
        let guards = timely::execute(timely::Config::process(workers), move |worker| {
            watch.guard(|| body(worker, &watch))
        })
        .unwrap_or_else(|e| panic!("{name}: timely did not start: {e}"));
        guards
            .join()
            .into_iter()
            .map(|r| r.unwrap_or_else(|e| panic!("{name}: a worker failed: {e}")))
            .collect()
    })
}

/// Steps `worker` until `done` holds, looking at the watch at every turn.
pub fn step_until(worker: &mut Worker, watch: &Watch, mut done: impl FnMut() -> bool) {
    while !done() {
        watch.check();
        worker.step();
    }
}

/// Where workers meet between rounds, as at a `Barrier`; but a worker waiting there looks
/// at the run's watch, so that it stops when another one panicked (which would never come)
/// instead of waiting for ever.
pub struct Rounds {
    workers: usize,
    /// (workers arrived at the current round, rounds completed).
    state: Mutex<(usize, u64)>,
    turned: Condvar,
}

impl Rounds {
    pub fn new(workers: usize) -> Self {
        Rounds {
            workers,
            state: Mutex::new((0, 0)),
            turned: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, (usize, u64)> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until every worker arrived at this round.
    pub fn wait(&self, watch: &Watch) {
        let mut state = self.lock();
        let round = state.1;
        state.0 += 1;
        if state.0 == self.workers {
            *state = (0, round + 1);
            self.turned.notify_all();
            return;
        }
        while state.1 == round {
            state = self
                .turned
                .wait_timeout(state, POLL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if state.1 == round {
                // Not while holding the lock: a stop panics here.
                drop(state);
                watch.check();
                state = self.lock();
            }
        }
    }
}

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

/// An event a run logged: the thread that logged it (a run's worker 0 logs its commands,
/// plans and balancer's decisions), its target and its fields.
#[derive(Clone, Debug)]
pub struct Logged {
    pub thread: std::thread::ThreadId,
    pub target: String,
    pub fields: BTreeMap<String, String>,
}

impl Logged {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    /// Whether it is an event of `target` in `phase`.
    pub fn is(&self, target: &str, phase: &str) -> bool {
        self.target == target && self.field("phase") == Some(phase)
    }
}

/// The targets collected.
const WATCHED: [&str; 3] = ["megaflux::command", "megaflux::plan", "megaflux::balance"];

/// Every event of a watched target that any run of this test binary logged, in order. The
/// first call makes the collector the binary's global `tracing` subscriber.
pub fn logged() -> &'static Mutex<Vec<Logged>> {
    static LOGGED: std::sync::OnceLock<&'static Mutex<Vec<Logged>>> = std::sync::OnceLock::new();
    LOGGED.get_or_init(|| {
        use tracing_subscriber::layer::SubscriberExt;
        let all: &'static Mutex<Vec<Logged>> = Box::leak(Box::default());
        let subscriber = tracing_subscriber::registry().with(Collect(all));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        all
    })
}

struct Collect(&'static Mutex<Vec<Logged>>);

struct Fields(BTreeMap<String, String>);

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Collect {
    fn enabled(
        &self,
        metadata: &tracing::Metadata<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        WATCHED.contains(&metadata.target())
    }

    fn on_event(&self, event: &tracing::Event<'_>, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        let target = event.metadata().target();
        if !WATCHED.contains(&target) {
            return;
        }
        let mut fields = Fields(BTreeMap::new());
        event.record(&mut fields);
        let logged = Logged {
            thread: std::thread::current().id(),
            target: target.to_string(),
            fields: fields.0,
        };
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(logged);
    }
}

type Ran = Result<Option<megaflux::summary::Summary>, megaflux::RunError>;

/// A run of a built-in workload (`megaflux::workload::run`) on a thread of its own, that
/// a test sends commands to, waits on for the events it logs, and stops: a test that
/// waits for what a run did rather than for how long it ran.
pub struct Running {
    what: String,
    handle: megaflux::control::ControlHandle,
    ended: std::sync::mpsc::Receiver<Ran>,
    result: Option<Ran>,
    /// Where the events of this run begin among those logged.
    mark: usize,
}

impl Running {
    /// Starts `config`, named `what` in failures.
    pub fn start(what: &str, config: megaflux::RunConfig) -> Self {
        let mark = logged().lock().unwrap_or_else(PoisonError::into_inner).len();
        let handle = megaflux::control::ControlHandle::new();
        let (done, ended) = std::sync::mpsc::channel();
        let h = handle.clone();
        std::thread::spawn(move || {
            let _ = done.send(megaflux::workload::run(config, h));
        });
        Running {
            what: what.to_string(),
            handle,
            ended,
            result: None,
            mark,
        }
    }

    /// The run's control handle.
    pub fn handle(&self) -> &megaflux::control::ControlHandle {
        &self.handle
    }

    /// Whether the run ended (it keeps what it gave).
    fn ended(&mut self) -> bool {
        if self.result.is_none() {
            match self.ended.try_recv() {
                Ok(r) => self.result = Some(r),
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    panic!("{}: its thread vanished", self.what)
                }
            }
        }
        self.result.is_some()
    }

    /// Waits for `condition` (`what`), for at most [`JOB_LIMIT`]; fails at once if the run
    /// ends first.
    pub fn wait_for(&mut self, what: &str, mut condition: impl FnMut(&Running) -> bool) {
        let waited = format!("{what} ({})", self.what);
        megaflux_testkit::wait_until(&waited, JOB_LIMIT, || condition(self) || self.ended());
        if !condition(self) {
            let how = match &self.result {
                Some(Err(e)) => format!("failed: {e}"),
                Some(Ok(_)) => "ended".to_string(),
                None => "still runs".to_string(),
            };
            panic!("{}: {how} before {what}", self.what);
        }
    }

    /// Every event logged since the run started, by any run of the binary.
    pub fn events(&self) -> Vec<Logged> {
        let all = logged().lock().unwrap_or_else(PoisonError::into_inner);
        all[self.mark.min(all.len())..].to_vec()
    }

    /// Stops the run and waits for its summary, for at most [`JOB_LIMIT`].
    pub fn stop(mut self) -> megaflux::summary::Summary {
        self.handle.stop();
        if self.result.is_none() {
            let limit = megaflux_testkit::deadline(JOB_LIMIT);
            let r = self
                .ended
                .recv_timeout(limit)
                .unwrap_or_else(|e| panic!("{}: still ran {limit:?} after its stop ({e})", self.what));
            self.result = Some(r);
        }
        let what = self.what.clone();
        self.result
            .take()
            .expect("it ended")
            .unwrap_or_else(|e| panic!("{what} failed: {e}"))
            .expect("this process hosts worker 0")
    }
}

/// A measured run's length as its summary gives it (whole epochs of a microsecond or more):
/// a run as long as a stopped one.
pub fn length_of(summary: &megaflux::summary::Summary) -> Duration {
    Duration::from_micros((summary.duration_s * 1e6).round() as u64)
}
