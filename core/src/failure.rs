//! Which workers of a process have failed (fail-stop of their partitions), shared by the
//! process's worker threads and whoever injects failures.
//!
//! A failed worker's stateful operators check [`Failures::check`] at every *fail point*:
//! before each bin they apply, and before each bin they ship. The first check that sees the
//! worker failed stops it there, whatever time or bin it is in the middle of. Tests can arm
//! a worker to fail at its N-th fail point ([`Failures::arm`]), which puts a failure at an
//! exact, reproducible place; the job's driver learns of such failures through
//! [`Failures::newly_failed`], as a failure detector would.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::Time;
use crate::bins::list;

/// The failure state of the workers of a job, as one process sees it.
#[derive(Debug)]
pub struct Failures {
    failed: Vec<AtomicBool>,
    /// Fail points left before the worker fails; 0: not armed.
    countdown: Vec<AtomicU64>,
    /// Failures the driver has been told of.
    reported: Vec<AtomicBool>,
    /// How often each worker failed.
    count: Vec<AtomicU64>,
    /// The logical time of the failure that set each flag (0: not known, as for an armed
    /// fail point), so that a rejoin clears only failures older than itself.
    failed_at: Vec<AtomicU64>,
    /// Bins left without any replica, and the first time at which one was.
    lost: Mutex<(BTreeSet<u32>, Option<Time>)>,
    any_lost: AtomicBool,
}

impl Failures {
    /// No failures among `workers` workers.
    pub fn new(workers: usize) -> Self {
        let flags = || (0..workers).map(|_| AtomicBool::new(false)).collect();
        Failures {
            failed: flags(),
            countdown: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            count: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            failed_at: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            reported: flags(),
            lost: Mutex::default(),
            any_lost: AtomicBool::new(false),
        }
    }

    /// Fails `worker` now: its operators stop at their next fail point.
    pub fn fail(&self, worker: u32) {
        let w = worker as usize;
        if let (Some(f), Some(c)) = (self.failed.get(w), self.count.get(w))
            && !f.swap(true, Ordering::AcqRel)
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Fails `worker` now for a failure issued at logical time `time`.
    pub fn fail_at(&self, worker: u32, time: Time) {
        if let Some(at) = self.failed_at.get(worker as usize) {
            at.fetch_max(time, Ordering::AcqRel);
        }
        self.fail(worker);
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
        self.failed
            .get(worker as usize)
            .is_some_and(|f| f.load(Ordering::Acquire))
    }

    /// One fail point of `worker`: counts down an armed failure, and says whether the
    /// worker has failed.
    #[inline]
    pub fn check(&self, worker: u32) -> bool {
        if let Some(c) = self.countdown.get(worker as usize)
            && c.load(Ordering::Relaxed) > 0
            && c.fetch_sub(1, Ordering::AcqRel) == 1
        {
            self.fail(worker);
        }
        self.is_failed(worker)
    }

    /// `worker` serves again from `time` (a rejoin): its failures before `time` are over,
    /// and its next failure is a new one. A failure at or after `time` stays (every operator
    /// of the worker revives it, some perhaps after that failure was issued).
    pub fn revive(&self, worker: u32, time: Time) {
        let w = worker as usize;
        if let (Some(f), Some(r), Some(at)) =
            (self.failed.get(w), self.reported.get(w), self.failed_at.get(w))
            && at.load(Ordering::Acquire) < time
        {
            f.store(false, Ordering::Release);
            r.store(false, Ordering::Release);
        }
    }

    /// Marks `worker`'s failure as known to the driver (it made it, or was told).
    pub fn mark_reported(&self, worker: u32) {
        if let Some(r) = self.reported.get(worker as usize) {
            r.store(true, Ordering::Release);
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

    /// Failed workers the driver has not been told of yet; each is returned once.
    pub fn newly_failed(&self) -> Vec<u32> {
        (0..self.failed.len() as u32)
            .filter(|w| self.is_failed(*w) && !self.reported[*w as usize].swap(true, Ordering::AcqRel))
            .collect()
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
        // A failure issued after the rejoin stays, whoever revives late.
        f.fail_at(1, 20);
        f.revive(1, 10);
        assert!(f.is_failed(1));
        f.revive(1, 30);
        assert!(!f.is_failed(1));
        f.fail(2);
        f.mark_reported(2);
        assert!(f.newly_failed().is_empty());
        // Out of range: ignored.
        f.fail(7);
        assert!(!f.is_failed(7));
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
