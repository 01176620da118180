//! Property tests of high availability: with two replicas per bin, a worker that fails at
//! any point (between two bins of a time, while it ships a bin, during a migration or a
//! recovery) leaves the outputs at every time equal to the failure-free run's, nothing lost
//! and nothing twice, on 2, 3 and 4 workers; order-sensitive logic leaves both replicas of
//! every bin byte-identical; and a second failure that takes a bin's last replica is
//! reported, never turned into output.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use megaflux::bins::hash_key;
use megaflux::config::{ControlInst, Replicas};
use megaflux::failover::Placements;
use megaflux::failure::Failures;
use megaflux::{Bins, StatefulConfig, Time, stateful_binary, stateful_unary};
use proptest::prelude::*;
use timely::dataflow::InputHandleVec;
use timely::dataflow::operators::{Inspect, Probe};

const BINS: usize = 16;
const WINDOW: Time = 4;

type Rec = (u64, u64);
type Out = (u64, u64, u64);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Sum,
    Join,
    Window,
    /// Order-sensitive: appends each value to its key's list and outputs the list's hash.
    Append,
}

/// A moves issued by the driver at a time: (bin, worker, to the standby's place).
type MoveSpec = (Time, u32, u32, bool);

#[derive(Clone, Debug)]
struct Case {
    left: Vec<(Time, Rec)>,
    right: Vec<(Time, Rec)>,
    moves: Vec<MoveSpec>,
    /// (worker, fail point): each worker fails at its fail point, if it gets that far.
    failures: Vec<(u32, u64)>,
    /// How far the job's output frontier moves on between a failure and the driver noticing
    /// it (a failure detector's delay; it notices after 20 rounds if the job stalls).
    detect_delay: Time,
    /// Times between noticing a failure and starting recovery; recovery one bin per time?
    recovery_delay: Time,
    recovery_fluid: bool,
    /// Times between noticing a failure and the worker's rejoin (`None`: it stays out).
    rejoin_delay: Option<Time>,
    steps: Vec<u8>,
}

/// Per operator and bin: (worker, hash of the encoded bin) for every worker holding it.
type Held = BTreeMap<(String, u32), Vec<(u32, u64)>>;

/// What a run gave.
#[derive(Debug)]
struct Outcome {
    outputs: BTreeMap<Time, Vec<Out>>,
    /// Bins the job reported lost.
    lost: Option<Vec<u32>>,
    /// Armed failures that happened.
    fired: usize,
    /// A failure happened after the control input closed (nobody could react to it).
    late: bool,
    held: Held,
    /// The placement the driver ends with.
    placement: Vec<Replicas>,
}

fn run(op: Op, case: &Case, workers: usize) -> Outcome {
    let failures = Arc::new(Failures::new(workers));
    let mut armed = Vec::new();
    for (w, after) in &case.failures {
        let w = w % workers as u32;
        if !armed.contains(&w) {
            failures.arm(w, *after);
            armed.push(w);
        }
    }
    let results: Arc<Mutex<Vec<(Time, Out)>>> = Arc::default();
    let held: Arc<Mutex<Held>> = Arc::default();
    let driver_end: Arc<Mutex<(Vec<Replicas>, bool)>> = Arc::default();
    let case = Arc::new(case.clone());
    let (sink, held_sink, end_sink, shared) = (
        Arc::clone(&results),
        Arc::clone(&held),
        Arc::clone(&driver_end),
        Arc::clone(&failures),
    );
    let guards = timely::execute(timely::Config::process(workers), move |worker| {
        let index = worker.index();
        let peers = worker.peers();
        let mut left = InputHandleVec::<Time, Rec>::new();
        let mut right = InputHandleVec::<Time, Rec>::new();
        let mut control = InputHandleVec::<Time, ControlInst>::new();
        let mut config = StatefulConfig::replicated(Bins::new(BINS).unwrap(), peers, peers);
        config.failures = Arc::clone(&shared);
        let sink = Arc::clone(&sink);
        let probe = worker.dataflow::<Time, _, _>(|scope| {
            let (l, r, c) = (
                left.to_stream(scope),
                right.to_stream(scope),
                control.to_stream(scope),
            );
            let key = |r: &Rec| hash_key(&r.0);
            let out = match op {
                Op::Sum => stateful_unary(l, c, &config, "sum", key, sum_logic),
                Op::Window => stateful_unary(l, c, &config, "window", key, window_logic),
                Op::Append => stateful_unary(l, c, &config, "append", key, append_logic),
                Op::Join => stateful_binary(l, r, c, &config, "join", key, key, join_logic),
            };
            let probe = timely::dataflow::ProbeHandle::new();
            out.inspect_core(move |event| {
                if let Ok((stamp, data)) = event {
                    let t = *stamp.least().expect("outputs carry a time");
                    sink.lock().unwrap().extend(data.iter().map(|x| (t, *x)));
                }
            })
            .probe_with(&probe);
            probe
        });
        let end = case
            .left
            .iter()
            .chain(&case.right)
            .map(|(t, _)| *t)
            .chain(case.moves.iter().map(|m| m.0))
            .max()
            .unwrap_or(0)
            + 1;
        // Only worker 0 sends control; it keeps it open until the data is complete, so that
        // failures late in the run are still noticed and handled.
        let mut control = (index == 0).then_some(control);
        let mut inputs = Some((left, right));
        let mut driver = (index == 0).then(|| Driver::new(&config, peers, &case));
        let mut t = 0;
        loop {
            if let Some((left, right)) = inputs.as_mut() {
                for (i, (_, rec)) in case.left.iter().enumerate().filter(|(_, (rt, _))| *rt == t) {
                    if i % peers == index {
                        left.send(*rec);
                    }
                }
                for (i, (_, rec)) in case.right.iter().enumerate().filter(|(_, (rt, _))| *rt == t) {
                    if i % peers == index {
                        right.send(*rec);
                    }
                }
                left.advance_to(t + 1);
                right.advance_to(t + 1);
            }
            if t + 1 == end {
                inputs = None;
            }
            if let (Some(driver), Some(control)) = (driver.as_mut(), control.as_mut()) {
                let frontier = probe.with_frontier(|f| f.first().copied().unwrap_or(Time::MAX));
                for inst in driver.step(t, frontier, &shared) {
                    control.send(inst);
                }
                control.advance_to(t + 1);
            }
            for _ in 0..case.steps.get(t as usize).copied().unwrap_or(1) {
                worker.step();
            }
            t += 1;
            if t > end && (index != 0 || !probe.less_than(&(end + WINDOW + 1))) {
                break;
            }
        }
        drop(control);
        while !probe.done() {
            worker.step();
        }
        if let Some(driver) = driver {
            let late = !shared.newly_failed().is_empty() || !driver.detected.is_empty();
            *end_sink.lock().unwrap() = (driver.placements.current().clone(), late);
        }
        let mut digests = Vec::new();
        config.observers.each(|op| {
            digests.clear();
            (op.digests)(&mut digests);
            let mut held = held_sink.lock().unwrap();
            for (bin, hash) in &digests {
                held.entry((op.name.clone(), *bin))
                    .or_default()
                    .push((index as u32, *hash));
            }
        });
    })
    .expect("timely starts");
    for r in guards.join() {
        r.expect("worker finished");
    }
    let mut outputs: BTreeMap<Time, Vec<Out>> = BTreeMap::new();
    for (t, o) in results.lock().unwrap().drain(..) {
        outputs.entry(t).or_default().push(o);
    }
    for v in outputs.values_mut() {
        v.sort_unstable();
    }
    let (placement, late) = driver_end.lock().unwrap().clone();
    Outcome {
        outputs,
        lost: failures.lost().map(|(bins, _)| bins),
        fired: armed.iter().map(|w| failures.times_failed(*w)).sum::<u64>() as usize,
        late,
        held: held.lock().unwrap().clone(),
        placement,
    }
}

/// The test's control plane on worker 0: notices failures, issues their consequences,
/// recovery and rejoins, and the case's moves.
struct Driver {
    placements: Placements,
    moves: Vec<MoveSpec>,
    recovery_delay: Time,
    recovery_fluid: bool,
    rejoin_delay: Option<Time>,
    /// Recovery changes to issue, from a time on.
    recovering: Vec<(u32, Replicas)>,
    recover_at: Option<Time>,
    rejoins: Vec<(Time, u32)>,
    detect_delay: Time,
    /// Failures that happened, and the frontier or round at which they will be noticed.
    detected: Vec<(Time, Time, u32)>,
}

impl Driver {
    fn new(config: &StatefulConfig, peers: usize, case: &Case) -> Self {
        Driver {
            placements: Placements::new(config.initial.clone(), peers, peers),
            moves: case.moves.clone(),
            recovery_delay: case.recovery_delay,
            recovery_fluid: case.recovery_fluid,
            rejoin_delay: case.rejoin_delay,
            recovering: Vec::new(),
            recover_at: None,
            rejoins: Vec::new(),
            detect_delay: case.detect_delay,
            detected: Vec::new(),
        }
    }

    /// The instructions to send at `t`, with the output frontier at `frontier`. A time with
    /// a failure carries nothing else (the workers and the driver must derive the same
    /// transfers, and they do when each time's instructions are issued together).
    fn step(&mut self, t: Time, frontier: Time, failures: &Failures) -> Vec<ControlInst> {
        let peers = self.placements.workers() as u32;
        self.placements.completed(frontier);
        for w in failures.newly_failed() {
            self.detected
                .push((frontier.saturating_add(self.detect_delay), t + 20, w));
        }
        let (failed, later): (Vec<_>, Vec<_>) = self
            .detected
            .iter()
            .partition(|(f, round, _)| frontier >= *f || t >= *round);
        self.detected = later;
        let failed: Vec<u32> = failed.into_iter().map(|(_, _, w)| w).collect();
        if !failed.is_empty() {
            let mut insts = Vec::new();
            for w in failed {
                insts.extend(self.placements.fail(w, frontier, t).insts);
                if let Some(d) = self.rejoin_delay {
                    self.rejoins.push((t + 1 + d, w));
                }
            }
            self.recover_at = Some(t + 1 + self.recovery_delay);
            return insts;
        }
        let mut insts = Vec::new();
        for (at, w) in std::mem::take(&mut self.rejoins) {
            if at <= t {
                insts.push(ControlInst::Rejoin { worker: w });
            } else {
                self.rejoins.push((at, w));
            }
        }
        if self.recover_at.is_some_and(|r| r <= t) {
            self.recover_at = None;
            self.recovering = self.placements.recovery();
        }
        let mut placed: Vec<u32> = Vec::new();
        let mut later = Vec::new();
        for (bin, replicas) in std::mem::take(&mut self.recovering) {
            // A bin changes only once its last change completed, and recovers only if nothing
            // changed it since the recovery was planned.
            if self.placements.busy(bin) || (self.recovery_fluid && !placed.is_empty()) {
                later.push((bin, replicas));
            } else if self.placements.current()[bin as usize] == Replicas::single(replicas.primary)
                && !self.placements.is_failed(replicas.standby)
            {
                insts.push(ControlInst::Place { bin, replicas });
                placed.push(bin);
            }
        }
        self.recovering = later;
        for (at, bin, w, standby) in &self.moves {
            let (bin, w) = (*bin % BINS as u32, *w % peers);
            if *at != t || placed.contains(&bin) || self.placements.busy(bin) || self.placements.is_failed(w)
            {
                continue;
            }
            let current = self.placements.current()[bin as usize];
            if current.is_lost() {
                continue;
            }
            let inst = if *standby {
                if w == current.primary {
                    continue;
                }
                ControlInst::Place {
                    bin,
                    replicas: Replicas {
                        primary: current.primary,
                        standby: w,
                    },
                }
            } else {
                ControlInst::Move { bin, worker: w }
            };
            placed.push(bin);
            insts.push(inst);
        }
        self.placements.issue(t, &insts);
        insts
    }
}

fn sum_logic(_t: Time, bin: &mut megaflux::Bin<HashMap<u64, u64>>, recs: &mut Vec<Rec>, out: &mut Vec<Out>) {
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

fn window_logic(
    t: Time,
    bin: &mut megaflux::Bin<BTreeMap<(Time, u64), u64>>,
    recs: &mut Vec<Rec>,
    out: &mut Vec<Out>,
) {
    for (k, v) in recs.drain(..) {
        let end = (t / WINDOW + 1) * WINDOW;
        *bin.state.entry((end, k)).or_default() += v;
        bin.schedule(end);
    }
    let later = bin.state.split_off(&(t + 1, 0));
    for ((end, k), sum) in std::mem::replace(&mut bin.state, later) {
        out.push((k, end, sum));
    }
}

fn append_logic(
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

type JoinState = HashMap<u64, (Vec<u64>, Vec<u64>)>;

fn join_logic(
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

/// The sequential meaning of each operator. Append's depends on the order the job promises:
/// per time and bin, by sending worker (record `i` is sent by worker `i mod workers`), then
/// in the order each worker sent them.
fn model(op: Op, case: &Case, workers: usize) -> BTreeMap<Time, Vec<Out>> {
    let mut out: BTreeMap<Time, Vec<Out>> = BTreeMap::new();
    let end = case
        .left
        .iter()
        .chain(&case.right)
        .map(|(t, _)| *t)
        .max()
        .unwrap_or(0)
        + 1;
    match op {
        Op::Sum => {
            let mut totals: HashMap<u64, u64> = HashMap::new();
            for t in 0..end {
                let mut at: BTreeMap<u64, u64> = BTreeMap::new();
                for (_, (k, v)) in case.left.iter().filter(|(rt, _)| *rt == t) {
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
            for (t, (k, v)) in &case.left {
                *sums.entry(((t / WINDOW + 1) * WINDOW, *k)).or_default() += v;
            }
            for ((end, k), sum) in sums {
                out.entry(end).or_default().push((k, end, sum));
            }
        }
        Op::Append => {
            let mut lists: HashMap<u64, Vec<u64>> = HashMap::new();
            for t in 0..end {
                let mut at: Vec<(usize, usize, Rec)> = case
                    .left
                    .iter()
                    .enumerate()
                    .filter(|(_, (rt, _))| *rt == t)
                    .map(|(i, (_, r))| (i % workers, i, *r))
                    .collect();
                at.sort_unstable();
                for (_, _, (k, v)) in at {
                    let list = lists.entry(k).or_default();
                    list.push(v);
                    out.entry(t)
                        .or_default()
                        .push((k, list.len() as u64, hash_key(list)));
                }
            }
        }
        Op::Join => {
            for (tl, (kl, a)) in &case.left {
                for (tr, (kr, b)) in &case.right {
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

fn arb_case() -> impl Strategy<Value = Case> {
    let recs = || proptest::collection::vec((0u64..24, (0u64..12, 1u64..100)), 0..60);
    let moves = proptest::collection::vec((0u64..26, 0u32..BINS as u32, 0u32..4, any::<bool>()), 0..16);
    let failures = proptest::collection::vec((0u32..4, 1u64..60), 1..3);
    (
        recs(),
        recs(),
        moves,
        failures,
        (0u64..4, any::<bool>(), proptest::option::of(0u64..6), 0u64..4),
        proptest::collection::vec(0u8..3, 40),
    )
        .prop_map(
            |(
                left,
                right,
                moves,
                failures,
                (recovery_delay, recovery_fluid, rejoin_delay, detect_delay),
                steps,
            )| Case {
                left,
                right,
                moves,
                failures,
                recovery_delay,
                recovery_fluid,
                rejoin_delay,
                detect_delay,
                steps,
            },
        )
}

fn check(op: Op, case: &Case) -> Result<(), TestCaseError> {
    for workers in [2usize, 3, 4] {
        let expected = model(op, case, workers);
        let got = run(op, case, workers);
        if let Some(lost) = &got.lost {
            // Only a second failure can take a bin's last replica.
            prop_assert!(
                got.fired >= 2,
                "lost {:?} with {} failure(s), {} workers",
                lost,
                got.fired,
                workers
            );
            continue;
        }
        if got.late && got.fired >= 2 {
            // Nobody was left to notice the second failure: the run ended with it.
            continue;
        }
        prop_assert_eq!(
            &got.outputs,
            &expected,
            "{:?}, {} workers, {} failure(s)",
            op,
            workers,
            got.fired
        );
        if got.late {
            continue;
        }
        // Every bin is held exactly where the driver placed it, and its two replicas are
        // the same bytes where the state's encoding is canonical (ordered maps).
        for ((name, bin), holders) in &got.held {
            let mut workers_holding: Vec<u32> = holders.iter().map(|(w, _)| *w).collect();
            workers_holding.sort_unstable();
            let mut placed: Vec<u32> = got.placement[*bin as usize].holders().collect();
            placed.sort_unstable();
            prop_assert_eq!(&workers_holding, &placed, "{} bin {} held by", name, bin);
            if matches!(op, Op::Window | Op::Append) {
                prop_assert!(
                    holders.windows(2).all(|w| w[0].1 == w[1].1),
                    "{} bin {}: replicas differ: {:?}",
                    name,
                    bin,
                    holders
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn unary_sum_survives_a_failure_anywhere(case in arb_case()) {
        check(Op::Sum, &case)?;
    }

    #[test]
    fn binary_join_survives_a_failure_anywhere(case in arb_case()) {
        check(Op::Join, &case)?;
    }

    #[test]
    fn window_with_scheduled_work_survives_a_failure_anywhere(case in arb_case()) {
        check(Op::Window, &case)?;
    }

    #[test]
    fn order_sensitive_replicas_stay_identical(case in arb_case()) {
        check(Op::Append, &case)?;
    }
}
