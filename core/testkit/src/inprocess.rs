//! In-process runs with a deadline, where one worker's panic fails the test at once.
//!
//! Timely does not pass a worker's panic on: the other workers wait for the progress the
//! dead one will never make, and spin for ever. A [`Watch`] records the first panic of any
//! body it guards and makes every other guarded worker stop at its next [`Watch::check`];
//! [`within`] fails the test with that panic's message, or with the run's name when the
//! deadline passes first.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::deadline;

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(10);

/// How long the others get to stop after a worker panicked, before the test fails anyway.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The text of a check that stops a worker because another one failed: not a first panic.
const STOPPED: &str = "stopped by the test's watch";

/// Shared by the workers of one in-process run: the first panic of any of them, and
/// whether all must stop.
#[derive(Clone, Default)]
pub struct Watch {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    stop: AtomicBool,
    first_panic: Mutex<Option<String>>,
}

impl Watch {
    /// A watch of its own, for a run that [`within`] does not start.
    pub fn new() -> Self {
        Watch::default()
    }

    /// Runs `body`. If it panics, the panic's message is recorded (the first one of the
    /// run), every other worker stops at its next [`Watch::check`], and the panic goes on.
    pub fn guard<R>(&self, body: impl FnOnce() -> R) -> R {
        match catch_unwind(AssertUnwindSafe(body)) {
            Ok(r) => r,
            Err(payload) => {
                self.failed(message(payload.as_ref()));
                resume_unwind(payload)
            }
        }
    }

    /// Panics if the run must stop (a worker panicked, or the deadline passed). Call it in
    /// every loop that waits for other workers.
    pub fn check(&self) {
        if self.stopped() {
            panic!("{STOPPED}");
        }
    }

    /// Whether the run must stop.
    pub fn stopped(&self) -> bool {
        self.inner.stop.load(Ordering::Relaxed)
    }

    /// The first panic recorded, if any.
    pub fn first_panic(&self) -> Option<String> {
        self.lock().clone()
    }

    fn failed(&self, message: String) {
        let mut first = self.lock();
        if first.is_none() && message != STOPPED {
            *first = Some(message);
        }
        self.inner.stop.store(true, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.inner
            .first_panic
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Runs `run` on a thread of its own, named `what`, for at most `limit`, and returns what
/// it returned. Fails the test with the first panic of any body guarded by the [`Watch`]
/// it is given (or of `run` itself), or naming `what` when the deadline passes; in both
/// cases every guarded worker is told to stop.
pub fn within<R: Send + 'static>(
    what: &str,
    limit: Duration,
    run: impl FnOnce(&Watch) -> R + Send + 'static,
) -> R {
    let limit = deadline(limit);
    let watch = Watch::new();
    let (tx, rx) = channel();
    let w = watch.clone();
    let started = std::thread::Builder::new()
        .name(what.chars().take(60).collect())
        .spawn(move || {
            let _ = tx.send(catch_unwind(AssertUnwindSafe(|| run(&w))));
        });
    if let Err(e) = started {
        panic!("{what}: its thread did not start: {e}");
    }
    let until = Instant::now() + limit;
    let mut stopping: Option<Instant> = None;
    loop {
        match rx.recv_timeout(POLL) {
            Ok(Ok(r)) => match watch.first_panic() {
                // A run that swallowed a worker's panic still fails.
                Some(first) => panic!("{what}: a worker panicked: {first}"),
                None => return r,
            },
            Ok(Err(payload)) => {
                let first = watch.first_panic().unwrap_or_else(|| message(payload.as_ref()));
                panic!("{what}: panicked: {first}");
            }
            Err(RecvTimeoutError::Disconnected) => panic!("{what}: its thread vanished"),
            Err(RecvTimeoutError::Timeout) => {}
        }
        if let Some(first) = watch.first_panic() {
            // Let the others stop at their checks, so that nothing spins after the test.
            let since = *stopping.get_or_insert_with(Instant::now);
            if since.elapsed() >= deadline(STOP_GRACE) {
                panic!("{what}: a worker panicked (the others did not stop): {first}");
            }
        } else if Instant::now() >= until {
            watch.failed(STOPPED.to_string());
            panic!("{what}: did not finish within {limit:?}");
        }
    }
}

/// Polls `condition` until it holds, for at most `limit`; fails naming `what`.
pub fn wait_until(what: &str, limit: Duration, condition: impl FnMut() -> bool) {
    wait_until_every(what, limit, POLL, condition);
}

/// As [`wait_until`], looking every `every`: for a condition that costs (reading a whole
/// file) on a machine whose cores the awaited processes need.
pub fn wait_until_every(what: &str, limit: Duration, every: Duration, mut condition: impl FnMut() -> bool) {
    let limit = deadline(limit);
    let until = Instant::now() + limit;
    while !condition() {
        if Instant::now() >= until {
            panic!("waited {limit:?} for {what}");
        }
        std::thread::sleep(every);
    }
}

fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure_of(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
        let payload = catch_unwind(f).expect_err("it fails");
        message(payload.as_ref())
    }

    /// Two "workers" that wait for each other as timely's do: one panics, the other would
    /// spin for ever without its check.
    #[test]
    fn a_worker_that_panics_fails_the_run_at_once_with_its_message() {
        let message = failure_of(|| {
            within("two spinning workers", Duration::from_secs(600), |watch| {
                let other = watch.clone();
                let _spinner = std::thread::spawn(move || {
                    other.guard(|| {
                        loop {
                            other.check();
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    })
                });
                watch.guard(|| {
                    std::thread::sleep(Duration::from_millis(50));
                    panic!("worker 1 saw a wrong total: 3 != 4");
                });
                #[allow(unreachable_code)]
                {
                    let _ = _spinner.join();
                }
            })
        });
        assert!(message.contains("two spinning workers"), "{message}");
        assert!(
            message.contains("worker 1 saw a wrong total: 3 != 4"),
            "{message}"
        );
        // Failed by the panic, not by the deadline (600 s: the test would run that long).
        assert!(!message.contains("did not finish"), "{message}");
    }

    #[test]
    fn a_run_past_its_deadline_fails_naming_it_and_stops_its_workers() {
        let stopped = Arc::new(AtomicBool::new(false));
        let flag = stopped.clone();
        let message = failure_of(AssertUnwindSafe(|| {
            within("the endless run", Duration::from_millis(200), move |watch| {
                let r = catch_unwind(AssertUnwindSafe(|| {
                    loop {
                        watch.check();
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }));
                flag.store(r.is_err(), Ordering::Relaxed);
            })
        }));
        assert!(
            message.contains("the endless run: did not finish within"),
            "{message}"
        );
        wait_until("the worker to stop at its check", Duration::from_secs(30), || {
            stopped.load(Ordering::Relaxed)
        });
    }

    #[test]
    fn a_run_that_ends_returns_its_value() {
        assert_eq!(within("a quick run", Duration::from_secs(60), |_| 7), 7);
    }

    #[test]
    fn a_condition_that_never_holds_fails_naming_it() {
        let message = failure_of(|| wait_until("the cluster to form", Duration::from_millis(50), || false));
        assert!(message.contains("for the cluster to form"), "{message}");
    }
}
