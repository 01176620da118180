//! A worker's failure and rejoin reaching it in an order the property tests rarely hit: the
//! two workers step in turns set by the test, so that each case is one exact schedule.
//!
//! * Fail and rejoin final before S looks: worker 1 hears its failure in one step and its
//!   rejoin in the next, before its S runs. It must still stop (dropping every bin it held)
//!   and serve again empty, in every stateful operator of the worker.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use megaflux::failure::Failures;
use megaflux::{Bins, ControlInst, StatefulConfig, Time};
use megaflux_testkit::Watch;
use timely::dataflow::InputHandleVec;

mod common;

use common::{Op, Rec, Rounds, step_until};

const BINS: usize = 16;

/// Whose turn it is to step: the schedule the test sets.
struct Baton {
    turn: Mutex<usize>,
    changed: Condvar,
}

impl Baton {
    fn new() -> Self {
        Baton {
            turn: Mutex::new(0),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, usize> {
        self.turn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for `me`'s turn, looking at the watch: a worker that panicked never passes.
    fn wait(&self, me: usize, watch: &Watch) {
        let mut turn = self.lock();
        while *turn != me {
            turn = self
                .changed
                .wait_timeout(turn, Duration::from_millis(10))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if *turn != me {
                // Not while holding the lock: a stop panics here.
                drop(turn);
                watch.check();
                turn = self.lock();
            }
        }
    }

    fn pass(&self, to: usize) {
        *self.lock() = to;
        self.changed.notify_all();
    }
}

/// Per (operator, bin): the workers holding it when the run ended.
type Held = BTreeMap<(String, u32), Vec<u32>>;

/// Runs `ops` on two workers with two replicas per bin. Worker 1's
/// failure at time 4 and its rejoin at 5 reach it in separate steps of worker 1's, one each,
/// with worker 0 stepping in between; then both run to the end. Returns who holds what.
fn fail_then_rejoin_in_turns(ops: &'static [Op]) -> Held {
    let failures = Arc::new(Failures::new(2));
    let held: Arc<Mutex<Held>> = Arc::default();
    let baton = Arc::new(Baton::new());
    let rounds = Arc::new(Rounds::new(2));
    let (shared, held_sink) = (Arc::clone(&failures), Arc::clone(&held));
    let what = format!("{ops:?}: worker 1 fails and rejoins in turns");
    common::execute(&what, 2, move |worker, watch| {
        let index = worker.index();
        let mut config = StatefulConfig::replicated(Bins::new(BINS).unwrap(), 2, 2);
        config.failures = Arc::clone(&shared);
        let sink = Arc::default();
        let mut left = InputHandleVec::<Time, Rec>::new();
        let mut right = InputHandleVec::<Time, Rec>::new();
        let mut control = InputHandleVec::<Time, ControlInst>::new();
        let probes = worker.dataflow::<Time, _, _>(|scope| {
            let (l, r, c) = (
                left.to_stream(scope),
                right.to_stream(scope),
                control.to_stream(scope),
            );
            ops.iter()
                .map(|op| common::operator(*op, l.clone(), r.clone(), c.clone(), &config, Arc::clone(&sink)))
                .collect::<Vec<_>>()
        });
        let mut control = (index == 0).then_some(control);
        // Every bin gets state: keys 0..64 at times 0..4, sent by worker 0.
        if index == 0 {
            for t in 0..4 {
                left.advance_to(t);
                for k in 0..64 {
                    left.send((k, t + 1));
                }
            }
        }
        left.advance_to(6);
        right.advance_to(6);
        if let Some(c) = control.as_mut() {
            c.advance_to(4);
        }
        step_until(worker, watch, || !probes.iter().any(|p| p.less_than(&4)));
        rounds.wait(watch);
        if index == 0 {
            // The failure, then the rejoin, each followed by one step of worker 1's.
            let turns = [
                (ControlInst::Fail { worker: 1 }, 5),
                (ControlInst::Rejoin { worker: 1 }, 6),
            ];
            for (turn, (inst, next)) in turns.into_iter().enumerate() {
                if turn > 0 {
                    baton.wait(0, watch);
                }
                let c = control.as_mut().unwrap();
                c.send(inst);
                c.advance_to(next);
                for _ in 0..20 {
                    worker.step();
                }
                baton.pass(1);
            }
        } else {
            baton.wait(1, watch);
            worker.step();
            baton.pass(0);
            baton.wait(1, watch);
        }
        drop(control);
        drop(left);
        drop(right);
        step_until(worker, watch, || probes.iter().all(|p| p.done()));
        let mut held = held_sink.lock().unwrap();
        for (name, bin, _) in common::holdings(&config) {
            held.entry((name, bin)).or_default().push(index as u32);
        }
    });
    held.lock().unwrap().clone()
}

/// After its failure worker 1 holds nothing: the standbys on worker 0 took over, and the
/// rejoin brings it back empty. Every operator holds every bin, on worker 0 only.
fn check(ops: &'static [Op]) {
    let held = fail_then_rejoin_in_turns(ops);
    assert_eq!(held.len(), ops.len() * BINS, "{held:?}");
    let wrong: Vec<_> = held.iter().filter(|(_, workers)| *workers != &vec![0]).collect();
    assert!(wrong.is_empty(), "held elsewhere than on worker 0: {wrong:?}");
}

#[test]
fn a_failure_and_rejoin_heard_apart_leave_the_worker_empty() {
    check(&[Op::Append]);
}

#[test]
fn a_failure_and_rejoin_heard_apart_leave_the_worker_empty_in_every_operator() {
    check(&[Op::Sum, Op::Append]);
}
