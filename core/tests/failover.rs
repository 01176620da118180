//! Property tests of high availability: with two replicas per bin, a worker that fails at
//! any point (between two bins of a time, while it ships a bin, during a migration or a
//! recovery) leaves the outputs at every time equal to the failure-free run's, nothing lost
//! and nothing twice, on 2, 3 and 4 workers; order-sensitive logic leaves both replicas of
//! every bin byte-identical; and a second failure that takes a bin's last replica is
//! reported, never turned into output.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use megaflux::config::{ControlInst, Replicas};
use megaflux::driver::PlanDriver;
use megaflux::failover::Placements;
use megaflux::failure::Failures;
use megaflux::plan::{Schedule, Strategy as Plan, Target};
use megaflux::{Bins, StatefulConfig, Time};
use proptest::prelude::*;

mod common;

use common::{Op, Order, Out, Rec, WINDOW, model};
use megaflux_testkit::deadline;

const BINS: usize = 16;
/// A run whose output frontier has not moved for this long after its inputs closed is
/// stuck: it is stopped and the case fails with what every worker holds, rather than the
/// test hanging. A bound against a hang (times `MEGAFLUX_TEST_SLACK`): the frontier of such
/// a small run moves within milliseconds, even on a loaded machine.
const STUCK_AFTER: Duration = Duration::from_secs(30);

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
    /// Plans the real driver runs: (start, strategy, target, pipelined).
    plans: Vec<(Time, Plan, Target, bool)>,
    steps: Vec<u8>,
    /// Workers per process for handing bins over as they are (moves between these groups
    /// travel encoded); `None`: every bin travels encoded.
    per_process: Option<usize>,
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
    /// The output frontier where the job got stuck, if it did.
    stuck: Option<Vec<Time>>,
    /// When stuck: per worker and operator, what it may hold capabilities for.
    holds: Vec<String>,
}

fn run(op: Op, case: &Case, workers: usize, real: bool) -> Outcome {
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
    let stuck: Arc<Mutex<Option<Vec<Time>>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let (stuck_sink, stop_all) = (Arc::clone(&stuck), Arc::clone(&stop));
    let holds: Arc<Mutex<Vec<String>>> = Arc::default();
    let holds_sink = Arc::clone(&holds);
    let case = Arc::new(case.clone());
    let handoffs = case
        .per_process
        .map(|p| Arc::new(megaflux::operator::Handoffs::new(p)));
    let (sink, held_sink, end_sink, shared) = (
        Arc::clone(&results),
        Arc::clone(&held),
        Arc::clone(&driver_end),
        Arc::clone(&failures),
    );
    let stuck_after = deadline(STUCK_AFTER);
    let what = format!(
        "{op:?} on {workers} workers ({} driver)",
        if real { "real" } else { "scripted" }
    );
    common::execute(&what, workers, move |worker, watch| {
        let index = worker.index();
        let peers = worker.peers();
        let mut config = StatefulConfig::replicated(Bins::new(BINS).unwrap(), peers, peers);
        config.failures = Arc::clone(&shared);
        config.handoffs = handoffs.clone();
        let sink = Arc::clone(&sink);
        let (common::Inputs { left, right, control }, probe) = common::dataflow(worker, op, &config, sink);
        let end = common::last_time(&case.left, &case.right, case.moves.iter().map(|m| m.0)) + 1;
        // Only worker 0 sends control; it keeps it open until the data is complete, so that
        // failures late in the run are still noticed and handled.
        let mut control = (index == 0).then_some(control);
        let mut inputs = Some((left, right));
        let mut driver = (index == 0).then(|| Driver::new(&config, peers, &case, real));
        let mut t = 0;
        let mut last_move = (Vec::new(), Instant::now());
        loop {
            // Worker 0 waits here for the others' progress (and they for its control).
            watch.check();
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
            // As the job's control plane does, worker 0 keeps control open until it issued
            // every failure and rejoin it took.
            let issuing = driver.as_ref().is_some_and(Driver::urgent);
            if t > end && (index != 0 || (!probe.less_than(&(end + WINDOW + 1)) && !issuing)) {
                break;
            }
            if index == 0 && t > end {
                let frontier = probe.with_frontier(|f| f.to_vec());
                if frontier != last_move.0 {
                    last_move = (frontier, Instant::now());
                } else if last_move.1.elapsed() > stuck_after {
                    *stuck_sink.lock().unwrap() = Some(frontier);
                    stop_all.store(true, Ordering::Release);
                    break;
                }
            }
        }
        drop(control);
        while !probe.done() {
            watch.check();
            if stop_all.load(Ordering::Acquire) {
                let mut dump = holds_sink.lock().unwrap();
                config
                    .observers
                    .each(|p| dump.push(format!("worker {index} {}: {:?}", p.name, (p.holds)())));
                for dataflow in worker.installed_dataflows() {
                    worker.drop_dataflow(dataflow);
                }
                return;
            }
            worker.step();
        }
        if let Some(driver) = driver {
            let late = !shared.newly_failed().is_empty() || driver.pending();
            *end_sink.lock().unwrap() = (driver.placement().clone(), late);
        }
        // A finished job holds nothing back: the mirror a stuck run is reported with says so.
        config.observers.each(|p| {
            let h = (p.holds)();
            let held = [
                h.outgoing,
                h.pending_control,
                h.held_records,
                h.pending_work,
                h.standby_held,
            ];
            if held.iter().any(Option::is_some) {
                holds_sink
                    .lock()
                    .unwrap()
                    .push(format!("worker {index} {} finished holding {h:?}", p.name));
            }
        });
        let mut held = held_sink.lock().unwrap();
        for (name, bin, hash) in common::holdings(&config) {
            held.entry((name, bin)).or_default().push((index as u32, hash));
        }
    });
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
        stuck: stuck.lock().unwrap().clone(),
        holds: holds.lock().unwrap().clone(),
    }
}

/// A failure detector: a failure is noticed once the output frontier has moved on by a
/// delay (or after 20 rounds if the job stalls).
struct Detector {
    delay: Time,
    /// Failures that happened, and the frontier or round at which they will be noticed.
    seen: Vec<(Time, Time, u32)>,
}

impl Detector {
    fn noticed(&mut self, t: Time, frontier: Time, failures: &Failures) -> Vec<u32> {
        for w in failures.newly_failed() {
            self.seen.push((frontier.saturating_add(self.delay), t + 20, w));
        }
        let (now, later): (Vec<_>, Vec<_>) = self
            .seen
            .iter()
            .partition(|(f, round, _)| frontier >= *f || t >= *round);
        self.seen = later;
        now.into_iter().map(|(_, _, w)| w).collect()
    }
}

/// The test's control plane on worker 0: notices failures and issues what follows.
enum Driver {
    /// Scripted: the case's moves of single bins (primaries and standbys), recovery bin by
    /// bin or all at once, on `Placements` directly.
    Scripted(Box<Scripted>),
    /// The job's own plan driver: plans, recovery and rebalances as `megaflux run` has them.
    Real(Box<Real>),
}

impl Driver {
    fn new(config: &StatefulConfig, peers: usize, case: &Case, real: bool) -> Self {
        let detector = Detector {
            delay: case.detect_delay,
            seen: Vec::new(),
        };
        if real {
            let recovery = Schedule {
                strategy: if case.recovery_fluid {
                    Plan::Fluid
                } else {
                    Plan::Matched
                },
                pipelined: case.recovery_delay % 2 == 1,
            };
            Driver::Real(Box::new(Real {
                driver: PlanDriver::new(config.initial.clone(), peers, peers, 2, recovery),
                plans: case.plans.clone(),
                rejoin_delay: case.rejoin_delay,
                rejoins: Vec::new(),
                detector,
            }))
        } else {
            Driver::Scripted(Box::new(Scripted {
                placements: Placements::new(config.initial.clone(), peers, peers),
                moves: case.moves.clone(),
                recovery_delay: case.recovery_delay,
                recovery_fluid: case.recovery_fluid,
                rejoin_delay: case.rejoin_delay,
                recovering: Vec::new(),
                recover_at: None,
                rejoins: Vec::new(),
                detector,
            }))
        }
    }

    fn step(&mut self, t: Time, frontier: Time, failures: &Failures) -> Vec<ControlInst> {
        match self {
            Driver::Scripted(d) => d.step(t, frontier, failures),
            Driver::Real(d) => d.step(t, frontier, failures),
        }
    }

    fn placement(&self) -> &Vec<Replicas> {
        match self {
            Driver::Scripted(d) => d.placements.current(),
            Driver::Real(d) => d.driver.placement(),
        }
    }

    /// Failures or rejoins taken and not issued yet.
    fn urgent(&self) -> bool {
        match self {
            Driver::Scripted(_) => false,
            Driver::Real(d) => d.driver.urgent(),
        }
    }

    /// Failures that happened and were not acted on yet.
    fn pending(&self) -> bool {
        match self {
            Driver::Scripted(d) => !d.detector.seen.is_empty(),
            Driver::Real(d) => !d.detector.seen.is_empty(),
        }
    }
}

struct Real {
    driver: PlanDriver,
    plans: Vec<(Time, Plan, Target, bool)>,
    rejoin_delay: Option<Time>,
    rejoins: Vec<(Time, u32)>,
    detector: Detector,
}

impl Real {
    fn step(&mut self, t: Time, frontier: Time, failures: &Failures) -> Vec<ControlInst> {
        let now = t as f64 / 1000.0;
        for w in self.detector.noticed(t, frontier, failures) {
            // As `megaflux run` does with a failure it is told of.
            let _ = self.driver.fail(w, now);
            if let Some(d) = self.rejoin_delay {
                self.rejoins.push((t + 1 + d, w));
            }
        }
        for (at, w) in std::mem::take(&mut self.rejoins) {
            if at <= t {
                let _ = self.driver.rejoin(w, now);
            } else {
                self.rejoins.push((at, w));
            }
        }
        for (at, strategy, target, pipelined) in &self.plans {
            if *at == t {
                let schedule = Schedule {
                    strategy: *strategy,
                    pipelined: *pipelined,
                };
                // Refused while another plan (or a recovery) runs, or for a target that no
                // longer fits: as it would be from the command line.
                let _ = self.driver.start(schedule, target, now);
            }
        }
        self.driver.poll(t, frontier, now).0
    }
}

struct Scripted {
    placements: Placements,
    moves: Vec<MoveSpec>,
    recovery_delay: Time,
    recovery_fluid: bool,
    rejoin_delay: Option<Time>,
    /// Recovery changes to issue, from a time on.
    recovering: Vec<(u32, Replicas)>,
    recover_at: Option<Time>,
    rejoins: Vec<(Time, u32)>,
    detector: Detector,
}

impl Scripted {
    /// The instructions to send at `t`, with the output frontier at `frontier`. A time with
    /// a failure carries nothing else (the workers and the driver must derive the same
    /// transfers, and they do when each time's instructions are issued together).
    fn step(&mut self, t: Time, frontier: Time, failures: &Failures) -> Vec<ControlInst> {
        let peers = self.placements.workers() as u32;
        self.placements.completed(frontier);
        let failed = self.detector.noticed(t, frontier, failures);
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

fn arb_case() -> impl Strategy<Value = Case> {
    let recs = || proptest::collection::vec((0u64..24, (0u64..12, 1u64..100)), 0..60);
    let moves = proptest::collection::vec((0u64..26, 0u32..BINS as u32, 0u32..4, any::<bool>()), 0..16);
    let failures = proptest::collection::vec((0u32..4, 1u64..60), 1..3);
    let strategy = prop_oneof![
        Just(Plan::AllAtOnce),
        Just(Plan::Fluid),
        (1usize..4).prop_map(Plan::Batched),
        Just(Plan::Matched),
    ];
    let target = prop_oneof![
        Just(Target::Uniform),
        (1usize..4).prop_map(Target::Pack),
        (0usize..4).prop_map(Target::Drain),
    ];
    let plans = proptest::collection::vec((0u64..24, strategy, target, any::<bool>()), 0..3);
    (
        (recs(), recs()),
        moves,
        failures,
        (0u64..4, any::<bool>(), proptest::option::of(0u64..6), 0u64..4),
        plans,
        proptest::collection::vec(0u8..3, 40),
        proptest::option::of(1usize..5),
    )
        .prop_map(
            |(
                (left, right),
                moves,
                failures,
                (recovery_delay, recovery_fluid, rejoin_delay, detect_delay),
                plans,
                steps,
                per_process,
            )| Case {
                left,
                right,
                moves,
                failures,
                recovery_delay,
                recovery_fluid,
                rejoin_delay,
                detect_delay,
                plans,
                steps,
                per_process,
            },
        )
}

/// Runs `case` on 2, 3 and 4 workers with the scripted driver, or with the job's own plan
/// driver (`real`).
fn check(op: Op, case: &Case, real: bool) -> Result<(), TestCaseError> {
    for workers in [2usize, 3, 4] {
        let expected = model(op, &case.left, &case.right, Order::Senders(workers));
        let got = run(op, case, workers, real);
        prop_assert!(
            got.stuck.is_none(),
            "{:?}, {} workers: the job got stuck with its output frontier at {:?}; held:\n{}",
            op,
            workers,
            got.stuck,
            got.holds.join("\n")
        );
        prop_assert!(
            got.holds.is_empty(),
            "{:?}, {} workers:\n{}",
            op,
            workers,
            got.holds.join("\n")
        );
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

/// `PROPTEST_CASES` when set (for long runs), else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default)
}

proptest! {
    // Shrinking is bounded in time: a case that gets stuck costs `STUCK_AFTER` a try.
    #![proptest_config(ProptestConfig { cases: cases(128), max_shrink_time: 120_000, ..ProptestConfig::default() })]

    #[test]
    fn unary_sum_survives_a_failure_anywhere(case in arb_case()) {
        check(Op::Sum, &case, false)?;
    }

    #[test]
    fn binary_join_survives_a_failure_anywhere(case in arb_case()) {
        check(Op::Join, &case, false)?;
    }

    #[test]
    fn window_with_scheduled_work_survives_a_failure_anywhere(case in arb_case()) {
        check(Op::Window, &case, false)?;
    }

    #[test]
    fn order_sensitive_replicas_stay_identical(case in arb_case()) {
        check(Op::Append, &case, false)?;
    }

}

proptest! {
    // Issue 9 saw about one 4-worker run in 10,000 of the real plan driver stall. With the
    // fixes of issue 21 (6a, 6b: an operator whose S never stopped after another's rejoin),
    // 25,500 cases (51,000 4-worker runs) with the stuck-run dump on ran without a stall
    // (`PROPTEST_CASES=500 failover the_plan_driver` in a loop, release build): at the old
    // rate that had a 0.6 % chance. A stuck run fails its case with the dump of what every
    // worker holds, so a stall here is to be read, not retried.
    #![proptest_config(ProptestConfig { cases: cases(128), max_shrink_time: 120_000, ..ProptestConfig::default() })]

    #[test]
    fn the_plan_driver_survives_failures_during_plans_and_recoveries(case in arb_case()) {
        check(Op::Window, &case, true)?;
        check(Op::Append, &case, true)?;
    }
}
