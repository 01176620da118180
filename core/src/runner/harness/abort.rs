//! Stopping a run early, for a reason: a worker panicked, a peer process went away, or bins
//! lost their last replica. Timely has no way out of a dataflow whose worker died: its peers
//! spin on frozen frontiers forever, and a lost connection panics every thread of every
//! process. Here the first such event of a run becomes its error, the run's workers stop
//! stepping, and [`Abort::wait`] returns the error to the caller within a loop turn.
//!
//! A process-wide panic hook (installed once) attributes panics: a worker thread's to the
//! run it works for (a thread-local set by [`Abort::enter`]), a timely network thread's to
//! the cluster run of this process. Panics it attributes are not printed (the run's error
//! says what happened, once); any other panic goes to the previous hook.
//!
//! A job that can restart after a crash ([`Abort::restartable`]) does not stop when another
//! process than process 0 goes away: its computation *restarts* instead ([`Outcome::Restart`]).
//! The workers leave the broken computation at their next turn and hand out their bins; the
//! panics that computation still raises (its workers' channels to the lost process are
//! poisoned) belong to it and are dropped. A process that joins the job in a lost one's
//! place ([`Abort::join`]) restarts it too, once the computation has formed.

use std::cell::RefCell;
use std::panic::PanicHookInfo;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::Duration;

use crate::harness::RunError;
use crate::membership::Restart;

/// How a run ends: every local worker finished, or the first error.
pub struct Abort {
    stopped: AtomicBool,
    state: Mutex<State>,
    changed: Condvar,
    /// The address of each process of the cluster (empty for one process).
    peers: Vec<String>,
    /// The index at the job's start of each process of this computation.
    originals: Vec<usize>,
    local_workers: usize,
    restartable: AtomicBool,
}

#[derive(Default)]
struct State {
    error: Option<RunError>,
    finished: usize,
    /// Processes lost from a job that restarts, by their index at the job's start.
    lost: Vec<usize>,
    /// The coordinator's restart order, once known.
    order: Option<Restart>,
    /// When the computation began to be left for a restart.
    since: Option<std::time::Instant>,
    /// Processes that joined the job (by their index at the job's start) for it to take in.
    joined: Vec<usize>,
    /// Whether the computation has formed: a join waits for it (leaving a computation that
    /// forms costs another restart; a crash cannot wait, a join can).
    formed: bool,
}

impl State {
    /// Whether the computation is to be left for a restart. A join waits for it to form,
    /// and is not taken once a local worker finished (the job ends without it).
    fn restarts(&self) -> bool {
        let join = self.formed && self.finished == 0 && !self.joined.is_empty();
        !self.lost.is_empty() || self.order.is_some() || join
    }
}

/// How a computation of a run ended, if not with an error.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every local worker finished.
    Finished,
    /// A process was lost and the job restarts without it.
    Restart,
}

thread_local! {
    static RUN: RefCell<Option<(Weak<Abort>, usize)>> = const { RefCell::new(None) };
}

/// The name of the thread that joins the threads of a computation left for a restart.
pub const LEAVING_THREAD: &str = "megaflux-leave";

/// The cluster computations of this process, for panics of timely's network threads: each
/// with the number of a thread made just before its own, so that a network thread's panic
/// goes to the computation that made it (a restart leaves the old one's threads behind).
static CLUSTER: Mutex<Vec<(u64, Weak<Abort>)>> = Mutex::new(Vec::new());
static HOOK: OnceLock<()> = OnceLock::new();

impl Abort {
    /// A run with `local_workers` workers in this process, whose processes listen at
    /// `peers` (empty: one process).
    pub fn new(local_workers: usize, peers: Vec<String>) -> Arc<Self> {
        let originals = (0..peers.len()).collect();
        Abort::of_generation(local_workers, peers, originals)
    }

    /// A run's computation among the processes that were `originals` at the job's start
    /// (listening at `peers` now).
    pub fn of_generation(local_workers: usize, peers: Vec<String>, originals: Vec<usize>) -> Arc<Self> {
        install_hook();
        let abort = Arc::new(Abort {
            stopped: AtomicBool::new(false),
            state: Mutex::default(),
            changed: Condvar::new(),
            peers,
            originals,
            local_workers,
            restartable: AtomicBool::new(false),
        });
        if !abort.peers.is_empty() {
            let mark = std::thread::spawn(|| thread_number(std::thread::current().id()))
                .join()
                .unwrap_or(0);
            if let Ok(mut cluster) = CLUSTER.lock() {
                cluster.retain(|(_, w)| w.strong_count() > 0);
                cluster.push((mark, Arc::downgrade(&abort)));
            }
        }
        abort
    }

    /// Marks the current thread as worker `index` of this run.
    pub fn enter(self: &Arc<Self>, index: usize) {
        RUN.with(|r| *r.borrow_mut() = Some((Arc::downgrade(self), index)));
    }

    /// Whether the run must stop.
    #[inline]
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Stops the run with `error`, unless it already stopped for another reason.
    pub fn stop(&self, error: RunError) {
        if let Ok(mut state) = self.state.lock()
            && state.error.is_none()
        {
            state.error = Some(error);
            self.stopped.store(true, Ordering::Release);
            self.changed.notify_all();
        }
    }

    /// Makes a lost process other than process 0 restart the job rather than stop it.
    pub fn restartable(&self) {
        self.restartable.store(true, Ordering::Release);
    }

    /// Whether a lost process other than process 0 restarts the job.
    pub fn can_restart(&self) -> bool {
        self.restartable.load(Ordering::Acquire)
    }

    /// Whether the computation is being left for a restart.
    pub fn restarting(&self) -> bool {
        self.state.lock().is_ok_and(|s| s.error.is_none() && s.restarts())
    }

    /// Process `process` (its index at the job's start) went away: the job restarts
    /// without it if it can, else stops with `error`.
    pub fn lose(&self, process: usize, error: RunError) {
        if process == 0 || !self.restartable.load(Ordering::Acquire) {
            return self.stop(error);
        }
        if let Ok(mut state) = self.state.lock()
            && state.error.is_none()
            && state.finished < self.local_workers
        {
            // A process that joined and was not taken in yet: this computation goes on.
            if !self.originals.contains(&process) {
                state.joined.retain(|p| *p != process);
                return;
            }
            if !state.lost.contains(&process) {
                state.lost.push(process);
            }
            state.since.get_or_insert_with(std::time::Instant::now);
            self.stopped.store(true, Ordering::Release);
            self.changed.notify_all();
        }
    }

    /// The coordinator ordered a restart: the computation is left for it.
    pub fn ordered(&self, order: Restart) {
        if let Ok(mut state) = self.state.lock()
            && state.error.is_none()
        {
            state.order = Some(order);
            state.since.get_or_insert_with(std::time::Instant::now);
            self.stopped.store(true, Ordering::Release);
            self.changed.notify_all();
        }
    }

    /// A process joined the job in the place of lost process `process`: the computation is
    /// left to restart with it, now or once it has formed.
    pub fn join(&self, process: usize) {
        if let Ok(mut state) = self.state.lock()
            && state.error.is_none()
        {
            // News of a join the order of this computation took in already.
            if self.originals.contains(&process) && !state.lost.contains(&process) {
                return;
            }
            if !state.joined.contains(&process) {
                state.joined.push(process);
            }
            self.leave_if_restarting(&mut state);
        }
    }

    /// The computation has formed (its processes are connected): a join may leave it.
    pub fn formed(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.formed = true;
            self.leave_if_restarting(&mut state);
        }
    }

    fn leave_if_restarting(&self, state: &mut State) {
        if state.error.is_none() && state.restarts() {
            state.since.get_or_insert_with(std::time::Instant::now);
            self.stopped.store(true, Ordering::Release);
            self.changed.notify_all();
        }
    }

    /// Forgets `order` if it is the one known (a process that joins waits for an order
    /// that takes it in; one ordered before it was taken in does not).
    pub fn forget_order(&self, order: &Restart) {
        if let Ok(mut state) = self.state.lock()
            && state.order.as_ref() == Some(order)
        {
            state.order = None;
        }
    }

    /// When the computation began to be left for a restart, if it is.
    pub fn restarting_since(&self) -> Option<std::time::Instant> {
        self.state.lock().ok().and_then(|s| s.since)
    }

    /// The processes lost so far, by their index at the job's start.
    pub fn lost(&self) -> Vec<usize> {
        self.state.lock().map(|s| s.lost.clone()).unwrap_or_default()
    }

    /// Waits up to `wait` for the coordinator's restart order (or an error).
    pub fn wait_order(&self, wait: Duration) -> Result<Option<Restart>, RunError> {
        let Ok(mut state) = self.state.lock() else {
            return Err(RunError::Worker("the run's state was poisoned".into()));
        };
        let since = std::time::Instant::now();
        loop {
            if let Some(error) = state.error.take() {
                state.error = Some(RunError::Worker(error.to_string()));
                return Err(error);
            }
            if let Some(order) = &state.order {
                return Ok(Some(order.clone()));
            }
            let Some(left) = wait.checked_sub(since.elapsed()) else {
                return Ok(None);
            };
            state = match self
                .changed
                .wait_timeout(state, left.min(Duration::from_millis(50)))
            {
                Ok((s, _)) => s,
                Err(_) => return Err(RunError::Worker("the run's state was poisoned".into())),
            };
        }
    }

    /// A worker of this process finished its run normally.
    pub fn finished(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.finished += 1;
            self.changed.notify_all();
        }
        RUN.with(|r| *r.borrow_mut() = None);
    }

    /// Waits until every local worker finished, a restart began, or the run stopped (its
    /// error).
    pub fn wait(&self) -> Result<Outcome, RunError> {
        let Ok(mut state) = self.state.lock() else {
            return Err(RunError::Worker("the run's state was poisoned".into()));
        };
        loop {
            // Workers finish only once every worker of the job exchanged its final report:
            // a process lost after that (process 0 included) takes nothing from the run.
            if state.finished >= self.local_workers {
                return Ok(Outcome::Finished);
            }
            if let Some(error) = state.error.take() {
                // Later waiters see the run as stopped, not as a success.
                state.error = Some(RunError::Worker(error.to_string()));
                return Err(error);
            }
            if state.restarts() {
                return Ok(Outcome::Restart);
            }
            state = match self.changed.wait_timeout(state, Duration::from_millis(200)) {
                Ok((s, _)) => s,
                Err(_) => return Err(RunError::Worker("the run's state was poisoned".into())),
            };
        }
    }

    /// The address of process `index`, if the run is a cluster.
    fn peer(&self, index: usize) -> String {
        self.peers
            .get(index)
            .cloned()
            .unwrap_or_else(|| "an unknown address".into())
    }
}

impl Drop for Abort {
    fn drop(&mut self) {
        if let Ok(mut cluster) = CLUSTER.lock() {
            cluster.retain(|(_, w)| w.strong_count() > 0);
        }
    }
}

/// A thread's number: threads are numbered in the order they were made.
fn thread_number(id: std::thread::ThreadId) -> u64 {
    let text = format!("{id:?}");
    text.chars()
        .filter(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or(u64::MAX)
}

/// The cluster computation the calling thread was made for: the last one made before it.
fn cluster_of_thread() -> Option<Arc<Abort>> {
    let me = thread_number(std::thread::current().id());
    let cluster = CLUSTER.lock().ok()?;
    cluster
        .iter()
        .rev()
        .find(|(mark, _)| *mark < me)
        .and_then(|(_, w)| w.upgrade())
}

/// Parks the calling worker thread for good: a cluster worker that stopped must not return,
/// or timely would shut its connections down cleanly and leave its peers waiting forever;
/// the process exits instead, which its peers see at once.
pub fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}

fn install_hook() {
    HOOK.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // A panic that cannot unwind (out of a destructor during unwinding, or out of a
            // function called from C) aborts the process right after this hook: say where,
            // whoever it belongs to, or the abort is all anyone sees.
            if cannot_unwind(info) {
                // The panics before it on this thread went to the run, quietly: say them.
                let _ = ATTRIBUTED.try_with(|a| {
                    if let Ok(a) = a.try_borrow() {
                        for earlier in a.iter() {
                            eprintln!("megaflux: before it, this thread panicked: {earlier}");
                        }
                    }
                });
                previous(info);
            } else if !attribute(info) {
                previous(info);
            }
        }));
    });
}

thread_local! {
    /// The last few panics of this thread given to a run (their messages and places), said
    /// if a panic that cannot unwind follows them.
    static ATTRIBUTED: std::cell::RefCell<std::collections::VecDeque<String>> =
        const { std::cell::RefCell::new(std::collections::VecDeque::new()) };
}

/// How many of a thread's attributed panics [`ATTRIBUTED`] keeps.
const KEPT_PANICS: usize = 4;

/// Whether the runtime aborts the process after this panic: its message is one of those the
/// standard library gives a panic that cannot unwind.
fn cannot_unwind(info: &PanicHookInfo<'_>) -> bool {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
    message.is_some_and(|m| {
        m.starts_with("panic in a function that cannot unwind")
            || m.starts_with("panic in a destructor during cleanup")
    })
}

/// Gives a panic to the run it belongs to; `false` if it belongs to none.
fn attribute(info: &PanicHookInfo<'_>) -> bool {
    let message = match info.payload().downcast_ref::<&str>() {
        Some(s) => (*s).to_string(),
        None => info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "(no message)".into()),
    };
    let place = info
        .location()
        .map(|l| format!(" at {}:{}", l.file(), l.line()))
        .unwrap_or_default();
    let _ = ATTRIBUTED.try_with(|a| {
        if let Ok(mut a) = a.try_borrow_mut() {
            if a.len() == KEPT_PANICS {
                a.pop_front();
            }
            a.push_back(format!("{message}{place}"));
        }
    });
    if let Some((abort, index)) = RUN.with(|r| r.borrow().clone())
        && let Some(abort) = abort.upgrade()
    {
        // A computation left for a restart panics on its poisoned channels: that is not news.
        if !abort.restarting() {
            abort.stop(RunError::Worker(format!(
                "worker {index} panicked: {message}{place}"
            )));
        }
        return true;
    }
    let name = std::thread::current().name().unwrap_or("").to_string();
    // The threads of a computation left for a restart, joined in the background: their
    // panics (a lost process's connections) are that computation's end, already handled.
    if name == LEAVING_THREAD {
        return true;
    }
    let network = name
        .strip_prefix("timely:recv-")
        .or_else(|| name.strip_prefix("timely:send-"));
    let Some(process) = network.and_then(|n| n.parse::<usize>().ok()) else {
        return false;
    };
    // No computation this thread could serve is left: its run ended (or was left) before a
    // peer's connection broke, which is no news.
    let Some(abort) = cluster_of_thread() else {
        return true;
    };
    // A computation left for a restart breaks down as its processes leave it, each at its
    // own moment: its connections' errors are no news (membership still reports a process
    // that is really gone).
    if abort.restarting() {
        return true;
    }
    let cause = message
        .strip_prefix("timely communication error: ")
        .unwrap_or(&message)
        .to_string();
    let original = abort.originals.get(process).copied().unwrap_or(process);
    abort.lose(
        original,
        RunError::PeerLost {
            process: original,
            address: abort.peer(process),
            cause,
        },
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> Arc<Abort> {
        let abort = Abort::of_generation(1, vec!["a:1".into(), "b:1".into()], vec![0, 2]);
        abort.restartable();
        abort
    }

    #[test]
    fn a_join_waits_for_the_computation_to_form_and_is_not_taken_once_it_ends() {
        let abort = cluster();
        abort.join(1);
        assert!(
            !abort.is_stopped(),
            "a computation that forms is not left for a join"
        );
        abort.formed();
        assert!(abort.is_stopped());
        assert_eq!(abort.wait().ok(), Some(Outcome::Restart));

        let ending = cluster();
        ending.formed();
        ending.finished();
        ending.join(1);
        assert!(
            !ending.restarting(),
            "a join as the run ends would wait for workers done"
        );
    }

    #[test]
    fn news_of_processes_outside_the_computation_changes_nothing() {
        let abort = cluster();
        abort.formed();
        // Process 2 is in this computation: its join was taken in by the order already.
        abort.join(2);
        assert!(!abort.is_stopped());
        // Process 1 joined and went away before any order took it in.
        let other = cluster();
        other.join(1);
        other.lose(1, RunError::Worker("gone".into()));
        other.formed();
        assert!(!other.is_stopped(), "{:?}", other.lost());
        // Process 2, of this computation, lost: a restart.
        other.lose(2, RunError::Worker("gone".into()));
        assert_eq!(other.lost(), vec![2]);
        assert_eq!(other.wait().ok(), Some(Outcome::Restart));
    }
}
