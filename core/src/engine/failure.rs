//! Which workers of a process have failed (fail-stop of their partitions), shared by the
//! process's worker threads and whoever injects failures.
//!
//! A failed worker's stateful operators look at [`Failures::times_failed`] at every *fail
//! point* (after [`Failures::tick`]): before each bin they apply, and before each bin they
//! ship. The first look that finds a failure the operator has not stopped for stops it there,
//! whatever time or bin it is in the middle of. Each operator keeps its own account of the
//! failures it stopped for and the rejoins that ended them (`operator::Local`): a worker runs
//! several stateful operators, which hear a failure and its rejoin at different moments, so
//! the shared flag ([`Failures::is_failed`]) is only the failure detector's. Tests can arm
//! a worker to fail at its N-th fail point ([`Failures::arm`]), which puts a failure at an
//! exact, reproducible place; the job's driver learns of such failures through
//! [`Failures::newly_failed`], as a failure detector would.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use crate::Time;
use crate::bins::list;

/// A worker's state bit: it has failed.
const FAILED: u8 = 1;
/// A worker's state bit: the driver knows of its failure.
const REPORTED: u8 = 2;

/// The failure state of the workers of a job, as one process sees it.
#[derive(Debug)]
pub struct Failures {
    /// Per worker, [`FAILED`] and [`REPORTED`] in one atomic: a rejoin clears both at once,
    /// so that the driver's detector, on another thread, can never take the cleared
    /// `REPORTED` of a failure that is over for the flag of a new one.
    state: Vec<AtomicU8>,
    /// Fail points left before the worker fails; 0: not armed.
    countdown: Vec<AtomicU64>,
    /// How often each worker failed.
    count: Vec<AtomicU64>,
    /// One past the logical time of the latest failure issued for each worker (0: none known,
    /// as for an armed fail point), so that a rejoin clears only failures older than itself
    /// and a failure heard again (by another operator) is not a new one.
    failed_at: Vec<AtomicU64>,
    /// Bins left without any replica, and the first time at which one was.
    lost: Mutex<(BTreeSet<u32>, Option<Time>)>,
    any_lost: AtomicBool,
    /// Per worker, whether another process reported it failed (process 0's membership) and
    /// the driver has not been told yet: reports repeated meanwhile are one, so that a
    /// process streaming reports costs nothing but a flag.
    reported: Vec<AtomicBool>,
}

impl Failures {
    /// No failures among `workers` workers.
    pub fn new(workers: usize) -> Self {
        Failures {
            state: (0..workers).map(|_| AtomicU8::new(0)).collect(),
            countdown: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            count: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            failed_at: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            lost: Mutex::default(),
            any_lost: AtomicBool::new(false),
            reported: (0..workers).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Fails `worker` now: its operators stop at their next fail point.
    pub fn fail(&self, worker: u32) {
        self.set(worker, FAILED);
    }

    /// Fails `worker` now for a failure the driver issued at logical time `time` (so it is
    /// known to the driver). The same failure taken again (every operator of the worker hears
    /// it, some after the rejoin that ended it) changes nothing.
    pub fn fail_at(&self, worker: u32, time: Time) {
        let Some(at) = self.failed_at.get(worker as usize) else {
            return;
        };
        if at.fetch_max(time.saturating_add(1), Ordering::SeqCst) > time {
            return;
        }
        self.set(worker, FAILED | REPORTED);
    }

    /// Sets `bits` (which include [`FAILED`]) of `worker`, counting a new failure.
    fn set(&self, worker: u32, bits: u8) {
        let w = worker as usize;
        if let (Some(s), Some(c)) = (self.state.get(w), self.count.get(w))
            && s.fetch_or(bits, Ordering::SeqCst) & FAILED == 0
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How many times `worker` failed so far.
    pub fn times_failed(&self, worker: u32) -> u64 {
        self.count
            .get(worker as usize)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Fails `worker` at its `after`-th fail point from now (`after >= 1`).
    pub fn arm(&self, worker: u32, after: u64) {
        if let Some(c) = self.countdown.get(worker as usize) {
            c.store(after.max(1), Ordering::Release);
        }
    }

    /// Whether `worker` has failed.
    #[inline]
    pub fn is_failed(&self, worker: u32) -> bool {
        self.state
            .get(worker as usize)
            .is_some_and(|s| s.load(Ordering::Acquire) & FAILED != 0)
    }

    /// One fail point of `worker`: counts down an armed failure, and says whether the
    /// shared flag is set. Operators do not stop by it (another operator's rejoin may have
    /// cleared it): they count failures ([`Failures::times_failed`]) after [`Failures::tick`].
    #[inline]
    pub fn check(&self, worker: u32) -> bool {
        self.tick(worker);
        self.is_failed(worker)
    }

    /// One fail point of `worker`: counts down an armed failure (which fails it at zero).
    #[inline]
    pub fn tick(&self, worker: u32) {
        if let Some(c) = self.countdown.get(worker as usize)
            && c.load(Ordering::Relaxed) > 0
            && c.fetch_sub(1, Ordering::AcqRel) == 1
        {
            self.fail(worker);
        }
    }

    /// How many of `worker`'s failures a rejoin at `time` ends: all so far, unless one was
    /// issued at or after `time` (then `None`: the worker stays failed).
    pub fn ended_by(&self, worker: u32, time: Time) -> Option<u64> {
        let at = self.failed_at.get(worker as usize)?;
        // The count first: a failure counted after it was issued after this read, and its
        // time is already in `failed_at` when it is counted (see `fail_at`).
        let count = self.times_failed(worker);
        (at.load(Ordering::SeqCst) <= time).then_some(count)
    }

    /// `worker` serves again from `time` (a rejoin): its failures before `time` are over,
    /// and its next failure is a new one. A failure at or after `time` stays (every operator
    /// of the worker revives it, some perhaps after that failure was issued).
    pub fn revive(&self, worker: u32, time: Time) {
        let w = worker as usize;
        if let (Some(s), Some(at)) = (self.state.get(w), self.failed_at.get(w))
            && at.load(Ordering::SeqCst) <= time
        {
            s.store(0, Ordering::SeqCst);
            // A failure at or after `time` issued meanwhile (by the control plane, on
            // another thread) may have set its flag before the store: it stays.
            if at.load(Ordering::SeqCst) > time {
                self.set(worker, FAILED | REPORTED);
            }
        }
    }

    /// Marks `worker`'s failure as known to the driver (it made it, or was told).
    pub fn mark_reported(&self, worker: u32) {
        if let Some(s) = self.state.get(worker as usize) {
            s.fetch_or(REPORTED, Ordering::AcqRel);
        }
    }

    /// Records that `bins` have no replica left from `time` on (every operator of every
    /// worker finds the same; each bin is reported once).
    pub fn lose(&self, bins: &[u32], time: Time) {
        let Ok(mut lost) = self.lost.lock() else { return };
        let fresh: Vec<u32> = bins.iter().copied().filter(|b| lost.0.insert(*b)).collect();
        if fresh.is_empty() {
            return;
        }
        lost.1 = Some(lost.1.map_or(time, |t| t.min(time)));
        self.any_lost.store(true, Ordering::Release);
        tracing::error!(target: "megaflux::replica", phase = "lost", time, bins = %list(&fresh));
    }

    /// The bins lost so far and the time of the first loss, if any was.
    pub fn lost(&self) -> Option<(Vec<u32>, Time)> {
        if !self.any_lost.load(Ordering::Acquire) {
            return None;
        }
        let lost = self.lost.lock().ok()?;
        Some((lost.0.iter().copied().collect(), lost.1?))
    }

    /// A worker of another process failed, as its process reports: the driver hears of it
    /// through [`Failures::newly_failed`] here. (That process's own flags say whether the
    /// worker is failed; this process only passes the news on, once however often it is
    /// reported before the driver looks.)
    pub fn report(&self, worker: u32) {
        if let Some(r) = self.reported.get(worker as usize) {
            r.store(true, Ordering::Release);
        }
    }

    /// Failed workers the driver has not been told of yet, this process's and those other
    /// processes reported; each failure is returned once.
    pub fn newly_failed(&self) -> Vec<u32> {
        let mut failed: Vec<u32> = (0..self.state.len() as u32)
            .filter(|w| {
                self.state[*w as usize]
                    .compare_exchange(FAILED, FAILED | REPORTED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            })
            .collect();
        for (w, r) in self.reported.iter().enumerate() {
            if r.swap(false, Ordering::AcqRel) && !failed.contains(&(w as u32)) {
                failed.push(w as u32);
            }
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn armed_failures_fire_at_their_point() {
        let f = Failures::new(3);
        f.arm(1, 3);
        assert!(!f.check(1));
        assert!(!f.check(1));
        assert!(!f.check(0));
        assert!(f.check(1));
        assert!(f.check(1));
        assert_eq!(f.newly_failed(), vec![1]);
        assert!(f.newly_failed().is_empty());
        f.revive(1, 10);
        assert!(!f.check(1));
        // A failure issued after the rejoin stays, whoever revives late; the driver issued
        // it, so its detector does not report it.
        f.fail_at(1, 20);
        f.revive(1, 10);
        assert!(f.is_failed(1));
        assert!(f.newly_failed().is_empty());
        f.revive(1, 30);
        assert!(!f.is_failed(1));
        // A revived worker's reported failure is over: a later one is news.
        f.fail(1);
        assert_eq!(f.newly_failed(), vec![1]);
        assert_eq!(f.times_failed(1), 3);
        f.revive(1, 40);
        f.fail(2);
        f.mark_reported(2);
        assert!(f.newly_failed().is_empty());
        // Out of range: ignored.
        f.fail(7);
        assert!(!f.is_failed(7));
    }

    #[test]
    fn a_failure_heard_again_is_the_same_failure() {
        let f = Failures::new(2);
        f.fail_at(1, 0);
        assert_eq!(f.times_failed(1), 1);
        assert_eq!(f.ended_by(1, 3), Some(1));
        f.revive(1, 3);
        assert!(!f.is_failed(1));
        // Another operator of the worker hears the failure at 0 after the rejoin at 3.
        f.fail_at(1, 0);
        assert!(!f.is_failed(1));
        assert_eq!(f.times_failed(1), 1);
        // A failure at the rejoin's time or later is not ended by it.
        f.fail_at(1, 5);
        assert_eq!(f.ended_by(1, 5), None);
        assert_eq!(f.ended_by(1, 6), Some(2));
    }

    #[test]
    fn reports_from_other_processes_are_kept_once_per_worker_until_read() {
        let f = Failures::new(4);
        for _ in 0..10_000 {
            f.report(3);
        }
        f.report(u32::MAX);
        f.report(4);
        f.fail(3);
        assert_eq!(f.newly_failed(), vec![3]);
        assert!(f.newly_failed().is_empty());
        f.report(3);
        assert_eq!(
            f.newly_failed(),
            vec![3],
            "a report after the driver read is news"
        );
    }

    #[test]
    fn losses_are_kept_once_with_their_first_time() {
        let f = Failures::new(2);
        assert_eq!(f.lost(), None);
        f.lose(&[3, 1], 9);
        f.lose(&[1, 2], 7);
        assert_eq!(f.lost(), Some((vec![1, 2, 3], 7)));
    }
}
