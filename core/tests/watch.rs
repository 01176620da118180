//! A worker that panics in an in-process run fails its test within seconds, with the
//! panic's message. Timely does not pass a worker's panic on: the other workers wait for
//! progress the dead one will never make, and spin for ever. Run through the test kit's
//! `within`, with each worker's body guarded by the run's watch and every loop that waits
//! for other workers looking at it, the others stop and the test fails with the message.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use megaflux_testkit::{deadline, wait_until, within};
use timely::dataflow::operators::Probe;
use timely::dataflow::{InputHandleVec, ProbeHandle};

/// The run's deadline: far longer than the test waits for its failure.
const LIMIT: Duration = Duration::from_secs(600);

/// What worker 1 panics with.
const MESSAGE: &str = "worker 1 found a wrong total: 3 != 4";

/// Sets its flag when dropped: when the worker that holds it has left its body, by
/// returning or by a panic.
struct Left(Arc<AtomicBool>);

impl Drop for Left {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

fn message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
fn a_worker_that_panics_fails_the_run_at_once_with_its_message() {
    let started = Instant::now();
    let spinner_left = Arc::new(AtomicBool::new(false));
    let left = Arc::clone(&spinner_left);
    let failure = catch_unwind(AssertUnwindSafe(|| {
        within("two timely workers, one of which panics", LIMIT, move |watch| {
            let watch = watch.clone();
            let guards = timely::execute(timely::Config::process(2), move |worker| {
                let _left = (worker.index() == 0).then(|| Left(Arc::clone(&left)));
                watch.guard(|| {
                    let mut input = InputHandleVec::<u64, u64>::new();
                    let probe = ProbeHandle::new();
                    worker.dataflow::<u64, _, _>(|scope| {
                        input.to_stream(scope).probe_with(&probe);
                    });
                    if worker.index() == 1 {
                        input.send(1);
                        worker.step();
                        // Its input still open at time 0: nobody's probe passes time 1.
                        panic!("{MESSAGE}");
                    }
                    input.advance_to(1);
                    // Without the check this loop spins for ever: worker 1's input never
                    // moves on.
                    while probe.less_than(&1) {
                        watch.check();
                        worker.step();
                    }
                })
            })
            .expect("timely starts");
            for r in guards.join() {
                r.expect("a worker finished");
            }
        })
    }));
    let failed_in = started.elapsed();
    let payload = failure.expect_err("a run with a panicking worker fails");
    let text = message(payload.as_ref());
    assert!(
        text.contains(MESSAGE),
        "the failure names worker 1's panic: {text}"
    );
    assert!(
        text.contains("two timely workers, one of which panics"),
        "the failure names the run: {text}"
    );
    // By the panic, not by the deadline (which would fail naming the deadline, after it).
    assert!(!text.contains("did not finish"), "{text}");
    eprintln!(
        "the run failed {failed_in:?} after it started (its deadline: {:?})",
        deadline(LIMIT)
    );
    // And nothing spins on after the test: worker 0 stopped at its check.
    wait_until("worker 0 to stop at its check", Duration::from_secs(60), || {
        spinner_left.load(Ordering::Acquire)
    });
}
