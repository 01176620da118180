//! A computation stopped at a cut — every time before it applied — hands out its bins, and a
//! new computation seeded with them goes on from the committed frontier `C` at or before
//! the cut, as a crashed cluster's survivors do: the first computation's outputs before `C`
//! count (the sink wrote them), the rest do not, and the second is sent every record from
//! `C` on again. For random records, random moves on both sides of the cut and of `C` and
//! at the cut itself (a crash in the middle of a migration: their bins not yet shipped, in
//! flight, which the crash loses, arrived, or installed), one or two replicas, and
//! operators with scheduled work, the survivors agree on a placement as a restart does,
//! every copy survives, and the counted outputs of the two together equal the sequential
//! model's (nothing lost, nothing twice).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use megaflux::config::Placement;
use megaflux::operator::{Handout, Seed, survivors};
use megaflux::{Bins, ControlInst, StatefulConfig, Time};
use proptest::prelude::*;

mod common;

use common::{Op, Order, Out, Rec, Rounds, WINDOW, model, step_until};

const BINS: usize = 16;

/// The most rounds in which every worker steps once after the moves at the cut were sent
/// before the crash, each round after all workers finished the previous one: a round
/// carries a message (progress or data) one hop, and a handful of hops make the moves
/// final and ship and deliver their bins.
const SETTLE_ROUNDS: usize = 20;

#[derive(Clone, Debug)]
struct Case {
    left: Vec<(Time, Rec)>,
    right: Vec<(Time, Rec)>,
    /// (time, bin, new primary).
    moves: Vec<(Time, u32, u32)>,
    cut: Time,
    /// The committed frontier at the cut: at or before it.
    committed: Time,
    /// Rounds the workers step after the moves at the cut before the crash: the bins of
    /// those moves may be anywhere from not yet shipped to installed, and what is in
    /// flight is lost.
    settle: usize,
}

fn arb_case() -> impl Strategy<Value = Case> {
    let rec = || (0u64..20, 1u64..100);
    (
        proptest::collection::vec((0u64..16, rec()), 0..60),
        proptest::collection::vec((0u64..16, rec()), 0..30),
        proptest::collection::vec((0u64..16, 0u32..BINS as u32, 0u32..4), 0..10),
        proptest::collection::vec((0u32..BINS as u32, 0u32..4), 0..4),
        1u64..16,
        0u64..16,
        0..=SETTLE_ROUNDS,
    )
        .prop_map(|(left, right, mut moves, at_cut, cut, behind, settle)| Case {
            left,
            right,
            moves: {
                // Moves at the cut are what a crash can cut in the middle.
                moves.extend(at_cut.into_iter().map(|(bin, to)| (cut, bin, to)));
                moves
            },
            cut,
            committed: cut.saturating_sub(behind),
            settle,
        })
}

/// Runs the times `[from, to)` of `case` on `workers` workers, keeping outputs from the
/// case's committed frontier on: from empty bins when `seeds` is empty, else from the seeds
/// at `from` (with the placement they hold; the moves before the cut were made before
/// them). Returns the outputs, and what every worker holds at the end.
fn phase(
    op: Op,
    case: &Case,
    workers: usize,
    replicas: usize,
    (from, to): (Time, Time),
    seeds: Option<(Placement, Vec<Seed>)>,
) -> (Vec<(Time, Out)>, Vec<Handout>) {
    let outputs: Arc<Mutex<Vec<(Time, Out)>>> = Arc::default();
    let handed: Arc<Mutex<Vec<Handout>>> = Arc::new(Mutex::new(vec![Handout::default(); workers]));
    let case = Arc::new(case.clone());
    let seeds = Arc::new(seeds);
    let (sink, handed_sink) = (Arc::clone(&outputs), Arc::clone(&handed));
    let rounds = Arc::new(Rounds::new(workers));
    let what = format!("{op:?} on {workers} workers, {replicas} replicas, times {from}..{to}");
    common::execute(&what, workers, move |worker, watch| {
        let (index, peers) = (worker.index(), worker.peers());
        let bins = Bins::new(BINS).unwrap();
        let mut config = if replicas > 1 {
            StatefulConfig::replicated(bins, peers, peers)
        } else {
            StatefulConfig::uniform(bins, peers)
        };
        config.committed = Some(Arc::new(AtomicU64::new(case.committed)));
        if let Some((placement, seeds)) = seeds.as_ref() {
            config.initial = placement.clone();
            config.seed = Some(Arc::new(seeds[index].clone()));
        }
        let (mut inputs, probe) = common::dataflow(worker, op, &config, Arc::clone(&sink));
        for input in [&mut inputs.left, &mut inputs.right] {
            input.advance_to(from);
        }
        inputs.control.advance_to(from);
        // The restarted computation numbers its workers afresh: the same records come from
        // other senders than before.
        let renumbered = usize::from(seeds.is_some());
        for t in from..to {
            for (i, (_, rec)) in case.left.iter().enumerate().filter(|(_, (rt, _))| *rt == t) {
                if (i + renumbered) % peers == index {
                    inputs.left.send(*rec);
                }
            }
            for (i, (_, rec)) in case.right.iter().enumerate().filter(|(_, (rt, _))| *rt == t) {
                if (i + renumbered) % peers == index {
                    inputs.right.send(*rec);
                }
            }
            if index == 0 && (seeds.is_none() || t > case.cut) {
                for (_, bin, to) in case.moves.iter().filter(|(mt, _, _)| *mt == t) {
                    let worker = to % peers as u32;
                    inputs.control.send(ControlInst::Move { bin: *bin, worker });
                }
            }
            for input in [&mut inputs.left, &mut inputs.right] {
                input.advance_to(t + 1);
            }
            inputs.control.advance_to(t + 1);
            worker.step();
        }
        if seeds.is_none() {
            // The cut: every time before it applied everywhere, then the moves at the cut,
            // and the crash some rounds later (its bins left, in flight, arrived or not).
            // Then hand out; the dataflow is dropped with what was in flight.
            step_until(worker, watch, || !probe.less_than(&to));
            if index == 0 {
                for (_, bin, to) in case.moves.iter().filter(|(mt, _, _)| *mt == case.cut) {
                    let worker = to % peers as u32;
                    inputs.control.send(ControlInst::Move { bin: *bin, worker });
                }
            }
            inputs.control.advance_to(to + 1);
            for _ in 0..case.settle {
                worker.step();
                rounds.wait(watch);
            }
            // Every worker stops at the same round.
            rounds.wait(watch);
            let mut mine = Handout::default();
            config.observers.each(|p| {
                mine.bins.insert(p.name.clone(), (p.handout)());
            });
            handed_sink.lock().unwrap()[index] = mine;
            for dataflow in worker.installed_dataflows() {
                worker.drop_dataflow(dataflow);
            }
            return;
        }
        drop(inputs);
        step_until(worker, watch, || probe.done());
    });
    let outputs = std::mem::take(&mut *outputs.lock().unwrap());
    let handed = std::mem::take(&mut *handed.lock().unwrap());
    (outputs, handed)
}

fn check(op: Op, case: &Case, workers: usize, replicas: usize) -> Result<(), TestCaseError> {
    let moves = case.moves.iter().map(|m| m.0);
    let end = common::last_time(&case.left, &case.right, moves).max(case.cut) + WINDOW + 1;
    let (mut outputs, handed) = phase(op, case, workers, replicas, (0, case.cut), None);
    // The sink had written the times before the committed frontier, and no later one.
    outputs.retain(|(t, _)| *t < case.committed);
    // The survivors agree on a placement as a restart does.
    let heard: Vec<(u32, u32, bool)> = handed
        .iter()
        .enumerate()
        .flat_map(|(w, h)| {
            h.roles(case.committed)
                .into_iter()
                .map(move |(b, s)| (w as u32, b, s))
        })
        .collect();
    let placement = survivors(BINS, replicas, workers, &heard);
    prop_assert!(
        placement.is_ok(),
        "every bin has a copy at the cut: {placement:?}"
    );
    let (placement, survived) = placement.unwrap();
    prop_assert!(
        replicas == 1 || survived.degraded == 0,
        "no copy was lost: {survived:?}, {placement:?}"
    );
    let seeds = handed
        .into_iter()
        .enumerate()
        .map(|(w, h)| h.seed(case.committed, |b| placement[b as usize].holds(w as u32)))
        .collect();
    let (after, _) = phase(
        op,
        case,
        workers,
        replicas,
        (case.committed, end),
        Some((placement, seeds)),
    );
    outputs.extend(after);
    let mut got: BTreeMap<Time, Vec<Out>> = BTreeMap::new();
    for (t, o) in outputs {
        got.entry(t).or_default().push(o);
    }
    for v in got.values_mut() {
        v.sort_unstable();
    }
    // A job that restarts orders each (time, bin)'s records by their encoding.
    let expected = model(op, &case.left, &case.right, Order::Content);
    prop_assert_eq!(
        got,
        expected,
        "{:?} on {} workers, {} replicas",
        op,
        workers,
        replicas
    );
    Ok(())
}

proptest! {
    // Shrinking is bounded in time: a case whose run hangs costs `common::RUN_LIMIT` a try.
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_time: 300_000, ..ProptestConfig::default() })]

    #[test]
    fn a_seeded_computation_goes_on_from_the_cut(case in arb_case(), workers in 1usize..4) {
        for op in [Op::Sum, Op::Window, Op::Append, Op::Join] {
            for replicas in [1, 2] {
                if replicas == 2 && workers == 1 {
                    continue;
                }
                check(op, &case, workers, replicas)?;
            }
        }
    }
}
