//! Property tests: any migration schedule gives, at every time, the same multiset of outputs
//! as no migration and as a plain sequential model, on 1, 2 and 4 workers.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use megaflux::bins::hash_key;
use megaflux::config::{single, uniform};
use megaflux::plan::{self, Strategy as Plan};
use megaflux::{Bins, ControlInst, StatefulConfig, Time, stateful_binary, stateful_unary};
use proptest::prelude::*;
use timely::dataflow::InputHandleVec;
use timely::dataflow::operators::Inspect;

const BINS: usize = 16;
const WINDOW: Time = 4;

type Rec = (u64, u64);

/// What a test run feeds in: records per side, control per time, and how many scheduler
/// steps each worker takes after each time (varying it varies the interleavings).
#[derive(Clone, Debug)]
struct Case {
    left: Vec<(Time, Rec)>,
    right: Vec<(Time, Rec)>,
    control: Vec<(Time, ControlInst)>,
    steps: Vec<u8>,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Sum,
    Join,
    Window,
}

type Out = (u64, u64, u64);

fn run(op: Op, case: &Case, workers: usize, with_control: bool) -> BTreeMap<Time, Vec<Out>> {
    let results: Arc<Mutex<Vec<(Time, Out)>>> = Arc::default();
    let sink = Arc::clone(&results);
    let case = Arc::new(case.clone());
    let guards = timely::execute(timely::Config::process(workers), move |worker| {
        let index = worker.index();
        let peers = worker.peers();
        let mut left = InputHandleVec::<Time, Rec>::new();
        let mut right = InputHandleVec::<Time, Rec>::new();
        let mut control = InputHandleVec::<Time, ControlInst>::new();
        let sink = Arc::clone(&sink);
        let config = StatefulConfig::uniform(Bins::new(BINS).unwrap(), peers);
        let probe = worker.dataflow::<Time, _, _>(|scope| {
            let l = left.to_stream(scope);
            let r = right.to_stream(scope);
            let c = control.to_stream(scope);
            let out = match op {
                Op::Sum => stateful_unary(l, c, &config, "sum", |r: &Rec| hash_key(&r.0), sum_logic),
                Op::Window => stateful_unary(l, c, &config, "window", |r: &Rec| hash_key(&r.0), window_logic),
                Op::Join => stateful_binary(
                    l,
                    r,
                    c,
                    &config,
                    "join",
                    |r: &Rec| hash_key(&r.0),
                    |r: &Rec| hash_key(&r.0),
                    join_logic,
                ),
            };
            let probe = timely::dataflow::ProbeHandle::new();
            use timely::dataflow::operators::Probe;
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
            .chain(case.control.iter().map(|(t, _)| *t))
            .max()
            .unwrap_or(0)
            + 1;
        for t in 0..end {
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
            if index == 0 && with_control {
                for (_, inst) in case.control.iter().filter(|(ct, _)| *ct == t) {
                    control.send(inst.clone());
                }
            }
            left.advance_to(t + 1);
            right.advance_to(t + 1);
            control.advance_to(t + 1);
            let steps = case.steps.get(t as usize).copied().unwrap_or(1);
            for _ in 0..steps {
                worker.step();
            }
        }
        drop((left, right, control));
        while !probe.done() {
            worker.step();
        }
    })
    .expect("timely starts");
    for r in guards.join() {
        r.expect("worker finished");
    }
    let mut by_time: BTreeMap<Time, Vec<Out>> = BTreeMap::new();
    for (t, o) in results.lock().unwrap().drain(..) {
        by_time.entry(t).or_default().push(o);
    }
    for v in by_time.values_mut() {
        v.sort_unstable();
    }
    by_time
}

/// Per time and key, adds the time's values and outputs the key's new total once.
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

/// Tumbling windows of `WINDOW`: at each window's end, outputs (key, end, sum).
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

type JoinState = HashMap<u64, (Vec<u64>, Vec<u64>)>;

/// Equi-join on the key: every left value meets every right value once.
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

/// The plain sequential meaning of each operator.
fn model(op: Op, case: &Case) -> BTreeMap<Time, Vec<Out>> {
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

fn arb_case(max_workers: u32) -> impl Strategy<Value = Case> {
    let recs = || proptest::collection::vec((0u64..24, (0u64..12, 1u64..100)), 0..60);
    let inst = prop_oneof![
        4 => (0u32..BINS as u32, 0u32..max_workers).prop_map(|(bin, worker)| ControlInst::Move { bin, worker }),
        1 => proptest::collection::vec(0u32..max_workers, BINS).prop_map(ControlInst::Map),
    ];
    (
        recs(),
        recs(),
        proptest::collection::vec((0u64..26, inst), 0..30),
        proptest::collection::vec(0u8..3, 30),
    )
        .prop_map(|(left, right, control, steps)| Case {
            left,
            right,
            control,
            steps,
        })
}

/// Plans issued pipelined, one step per time from `start`: (strategy, target map, start).
type Plans = Vec<(Plan, Vec<u32>, Time)>;

fn arb_plans() -> impl Strategy<Value = Plans> {
    let strategy = prop_oneof![
        Just(Plan::AllAtOnce),
        Just(Plan::Fluid),
        (1usize..4).prop_map(Plan::Batched),
        Just(Plan::Matched),
    ];
    proptest::collection::vec(
        (strategy, proptest::collection::vec(0u32..4, BINS), 0u64..20),
        1..3,
    )
}

/// The control instructions of `plans` for a job of `workers` workers.
fn plan_control(plans: &Plans, workers: usize) -> Vec<(Time, ControlInst)> {
    let mut placement = single(&uniform(BINS, workers));
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

fn check_plans(op: Op, case: &Case, plans: &Plans) -> Result<(), TestCaseError> {
    let expected = model(op, case);
    for workers in [2usize, 4] {
        let case = Case {
            control: plan_control(plans, workers),
            ..case.clone()
        };
        let moved = run(op, &case, workers, true);
        prop_assert_eq!(&moved, &expected, "pipelined plans, {} workers", workers);
    }
    Ok(())
}

fn check(op: Op, case: &Case) -> Result<(), TestCaseError> {
    let expected = model(op, case);
    for workers in [1usize, 2, 4] {
        // Moves to workers that do not exist are rejected before they reach the dataflow;
        // here they are folded onto existing workers instead.
        let mut case = case.clone();
        for (_, inst) in &mut case.control {
            match inst {
                ControlInst::Move { worker, .. } => *worker %= workers as u32,
                ControlInst::Map(m) => m.iter_mut().for_each(|w| *w %= workers as u32),
                _ => {}
            }
        }
        let still = run(op, &case, workers, false);
        prop_assert_eq!(&still, &expected, "no migration, {} workers", workers);
        let moved = run(op, &case, workers, true);
        prop_assert_eq!(&moved, &expected, "with migration, {} workers", workers);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn unary_sum_is_schedule_independent(case in arb_case(4)) {
        check(Op::Sum, &case)?;
    }

    #[test]
    fn binary_join_is_schedule_independent(case in arb_case(4)) {
        check(Op::Join, &case)?;
    }

    #[test]
    fn window_with_scheduled_work_is_schedule_independent(case in arb_case(4)) {
        check(Op::Window, &case)?;
    }

    #[test]
    fn pipelined_plans_are_schedule_independent(case in arb_case(4), plans in arb_plans()) {
        check_plans(Op::Sum, &case, &plans)?;
        check_plans(Op::Window, &case, &plans)?;
        check_plans(Op::Join, &case, &plans)?;
    }
}

/// Every bin moves back and forth at consecutive times, while earlier moves are in flight.
#[test]
fn bins_ping_pong_every_time() {
    let left: Vec<(Time, Rec)> = (0..40)
        .flat_map(|t| (0..8).map(move |k| (t, (k, t + 1))))
        .collect();
    let control = (0..40)
        .map(|t| (t, ControlInst::Map(vec![(t % 2) as u32; BINS])))
        .collect();
    let case = Case {
        left,
        right: Vec::new(),
        control,
        steps: vec![0; 40],
    };
    for op in [Op::Sum, Op::Window] {
        let expected = model(op, &case);
        assert_eq!(run(op, &case, 2, true), expected);
    }
}
