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

use std::cell::RefCell;
use std::panic::PanicHookInfo;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::Duration;

use crate::harness::RunError;

/// How a run ends: every local worker finished, or the first error.
pub struct Abort {
    stopped: AtomicBool,
    state: Mutex<State>,
    changed: Condvar,
    /// The address of each process of the cluster (empty for one process).
    peers: Vec<String>,
    local_workers: usize,
}

#[derive(Default)]
struct State {
    error: Option<RunError>,
    finished: usize,
}

thread_local! {
    static RUN: RefCell<Option<(Weak<Abort>, usize)>> = const { RefCell::new(None) };
}

/// The cluster run of this process, for panics of timely's network threads.
static CLUSTER: Mutex<Option<Weak<Abort>>> = Mutex::new(None);
static HOOK: OnceLock<()> = OnceLock::new();

impl Abort {
    /// A run with `local_workers` workers in this process, whose processes listen at
    /// `peers` (empty: one process).
    pub fn new(local_workers: usize, peers: Vec<String>) -> Arc<Self> {
        install_hook();
        let abort = Arc::new(Abort {
            stopped: AtomicBool::new(false),
            state: Mutex::default(),
            changed: Condvar::new(),
            peers,
            local_workers,
        });
        if !abort.peers.is_empty()
            && let Ok(mut cluster) = CLUSTER.lock()
        {
            *cluster = Some(Arc::downgrade(&abort));
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

    /// A worker of this process finished its run normally.
    pub fn finished(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.finished += 1;
            self.changed.notify_all();
        }
        RUN.with(|r| *r.borrow_mut() = None);
    }

    /// Waits until every local worker finished (`Ok`) or the run stopped (its error).
    pub fn wait(&self) -> Result<(), RunError> {
        let Ok(mut state) = self.state.lock() else {
            return Err(RunError::Worker("the run's state was poisoned".into()));
        };
        loop {
            if let Some(error) = state.error.take() {
                // Later waiters see the run as stopped, not as a success.
                state.error = Some(RunError::Worker(error.to_string()));
                return Err(error);
            }
            if state.finished >= self.local_workers {
                return Ok(());
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
        if let Ok(mut cluster) = CLUSTER.lock()
            && cluster.as_ref().is_some_and(|w| w.strong_count() == 0)
        {
            *cluster = None;
        }
    }
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
            if !attribute(info) {
                previous(info);
            }
        }));
    });
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
    if let Some((abort, index)) = RUN.with(|r| r.borrow().clone())
        && let Some(abort) = abort.upgrade()
    {
        abort.stop(RunError::Worker(format!(
            "worker {index} panicked: {message}{place}"
        )));
        return true;
    }
    let name = std::thread::current().name().unwrap_or("").to_string();
    let network = name
        .strip_prefix("timely:recv-")
        .or_else(|| name.strip_prefix("timely:send-"));
    if let Some(process) = network.and_then(|n| n.parse::<usize>().ok())
        && let Some(abort) = CLUSTER
            .lock()
            .ok()
            .and_then(|c| c.as_ref().and_then(Weak::upgrade))
    {
        let cause = message
            .strip_prefix("timely communication error: ")
            .unwrap_or(&message)
            .to_string();
        abort.stop(RunError::PeerLost {
            process,
            address: abort.peer(process),
            cause,
        });
        return true;
    }
    false
}
