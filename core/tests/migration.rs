//! Property tests: any migration schedule gives, at every time, the same multiset of outputs
//! as no migration and as a plain sequential model, on 1, 2 and 4 workers, with bins split
//! into chunks of any size or handed between workers of one process as they are; and every
//! change of a bin's owner really moved the bin, handed over exactly when both owners share a
//! process.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use megaflux::config::{next_placement, single, uniform};
use megaflux::operator::Handoffs;
use megaflux::plan::Strategy as Plan;
use megaflux::{Bins, ControlInst, StatefulConfig, Time};
use proptest::prelude::*;

mod common;

use common::{Op, Order, Out, Rec, model, step_until};

const BINS: usize = 16;

/// What a test run feeds in: records per side, control per time, and how many scheduler
/// steps each worker takes after each time (varying it varies the interleavings).
#[derive(Clone, Debug)]
struct Case {
    left: Vec<(Time, Rec)>,
    right: Vec<(Time, Rec)>,
    control: Vec<(Time, ControlInst)>,
    steps: Vec<u8>,
    /// The largest state message: small ones split every bin into many chunks.
    chunk_bytes: usize,
    /// Workers per process for handing bins over as they are (the test runs in one process;
    /// moves between these groups travel encoded). `None`: every bin travels encoded.
    per_process: Option<usize>,
}

/// What the F operators shipped in one run, over all workers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Shipped {
    bins: u64,
    chunks: u64,
    handed: u64,
}

fn run(op: Op, case: &Case, workers: usize, with_control: bool) -> BTreeMap<Time, Vec<Out>> {
    run_counting(op, case, workers, with_control).0
}

/// Runs `case`; returns its outputs by time and what was shipped.
fn run_counting(
    op: Op,
    case: &Case,
    workers: usize,
    with_control: bool,
) -> (BTreeMap<Time, Vec<Out>>, Shipped) {
    let results: Arc<Mutex<Vec<(Time, Out)>>> = Arc::default();
    let shipped: Arc<Mutex<Shipped>> = Arc::default();
    let sink = Arc::clone(&results);
    let shipped_sink = Arc::clone(&shipped);
    let case = Arc::new(case.clone());
    let handoffs = case.per_process.map(|p| Arc::new(Handoffs::new(p)));
    let what = format!("{op:?} on {workers} workers (control: {with_control})");
    common::execute(&what, workers, move |worker, watch| {
        let index = worker.index();
        let peers = worker.peers();
        let mut config = StatefulConfig::uniform(Bins::new(BINS).unwrap(), peers);
        config.chunk_bytes = case.chunk_bytes;
        config.handoffs = handoffs.clone();
        let transfers = Rc::clone(&config.transfers);
        let sink = Arc::clone(&sink);
        let (
            common::Inputs {
                mut left,
                mut right,
                mut control,
            },
            probe,
        ) = common::dataflow(worker, op, &config, sink);
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
        step_until(worker, watch, || probe.done());
        let mut total = shipped_sink.lock().unwrap();
        for t in transfers.borrow().values() {
            total.bins += t.bins;
            total.chunks += t.chunks;
            total.handed += t.handed;
        }
    });
    let mut by_time: BTreeMap<Time, Vec<Out>> = BTreeMap::new();
    for (t, o) in results.lock().unwrap().drain(..) {
        by_time.entry(t).or_default().push(o);
    }
    for v in by_time.values_mut() {
        v.sort_unstable();
    }
    let shipped = *shipped.lock().unwrap();
    (by_time, shipped)
}

/// How many times a bin changes owner under `control` on `workers` workers: the bins each
/// time's instructions leave on another worker than before that time (the instructions of
/// one time apply in `ControlInst` order, as `next_placement` applies them); and of them,
/// those whose old and new owner share a process of `per_process` workers.
fn owner_changes(control: &[(Time, ControlInst)], workers: usize, per_process: Option<usize>) -> (u64, u64) {
    let mut placement = single(&uniform(BINS, workers));
    let mut times: Vec<Time> = control.iter().map(|(t, _)| *t).collect();
    times.sort_unstable();
    times.dedup();
    let (mut changes, mut within) = (0, 0);
    for t in times {
        let mut insts: Vec<ControlInst> = control
            .iter()
            .filter(|(ct, _)| *ct == t)
            .map(|(_, i)| i.clone())
            .collect();
        let next = next_placement(&placement, &mut insts, workers);
        for (a, b) in placement
            .iter()
            .zip(&next)
            .filter(|(a, b)| a.primary != b.primary)
        {
            changes += 1;
            if let Some(p) = per_process {
                within += u64::from(a.primary as usize / p == b.primary as usize / p);
            }
        }
        placement = next;
    }
    (changes, within)
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
        prop_oneof![Just(megaflux::operator::DEFAULT_CHUNK_BYTES), 1usize..200],
        proptest::option::of(1usize..5),
    )
        .prop_map(|(left, right, control, steps, chunk_bytes, per_process)| Case {
            left,
            right,
            control,
            steps,
            chunk_bytes,
            per_process,
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

fn check_plans(op: Op, case: &Case, plans: &Plans) -> Result<(), TestCaseError> {
    for workers in [2usize, 4] {
        let expected = model(op, &case.left, &case.right, Order::Senders(workers));
        let case = Case {
            control: common::plan_control(plans, BINS, workers),
            ..case.clone()
        };
        let (moved, shipped) = run_counting(op, &case, workers, true);
        prop_assert_eq!(&moved, &expected, "pipelined plans, {} workers", workers);
        check_shipped(&case, workers, shipped)?;
    }
    Ok(())
}

/// Every change of owner shipped its bin once, handed over as it is exactly when both
/// owners share a process; small chunks split the encoded bins (an empty bin's encoding has
/// a few bytes already).
fn check_shipped(case: &Case, workers: usize, shipped: Shipped) -> Result<(), TestCaseError> {
    let (changes, within) = owner_changes(&case.control, workers, case.per_process);
    prop_assert_eq!(shipped.bins, changes, "bins shipped, {} workers", workers);
    prop_assert_eq!(shipped.handed, within, "bins handed over, {} workers", workers);
    let encoded = shipped.bins - shipped.handed;
    prop_assert!(shipped.chunks >= encoded);
    if case.chunk_bytes < 4 && encoded > 0 {
        prop_assert!(
            shipped.chunks > encoded,
            "{:?} with chunks of {} bytes",
            shipped,
            case.chunk_bytes
        );
    }
    Ok(())
}

fn check(op: Op, case: &Case) -> Result<(), TestCaseError> {
    for workers in [1usize, 2, 4] {
        let expected = model(op, &case.left, &case.right, Order::Senders(workers));
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
        let (moved, shipped) = run_counting(op, &case, workers, true);
        prop_assert_eq!(&moved, &expected, "with migration, {} workers", workers);
        check_shipped(&case, workers, shipped)?;
    }
    Ok(())
}

proptest! {
    // Shrinking is bounded in time: a case whose run hangs costs `common::RUN_LIMIT` a try.
    #![proptest_config(ProptestConfig { cases: 128, max_shrink_time: 300_000, ..ProptestConfig::default() })]

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
    fn order_sensitive_logic_is_schedule_independent(case in arb_case(4)) {
        check(Op::Append, &case)?;
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
        chunk_bytes: 3,
        per_process: None,
    };
    for op in [Op::Sum, Op::Window, Op::Append] {
        let expected = model(op, &case.left, &case.right, Order::Senders(2));
        assert_eq!(run(op, &case, 2, true), expected);
        let handed = Case {
            per_process: Some(2),
            ..case.clone()
        };
        let (outputs, shipped) = run_counting(op, &handed, 2, true);
        assert_eq!(outputs, expected);
        assert_eq!((shipped.handed, shipped.chunks), (shipped.bins, 0));
    }
}
