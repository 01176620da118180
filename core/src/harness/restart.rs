//! A job that survives a crash: when a process other than process 0 goes away, the
//! survivors leave their broken timely computation with their bins and start a new one among
//! themselves (a *generation*), seeded with those bins, from the committed frontier.
//!
//! Invariant (with `operator/seed.rs`'s, which makes it exactly once): generation `g + 1`
//! starts from the committed frontier `C` process 0's sink had reached when `g` stopped;
//! its inputs carry every record from `C` on again, its operators hold the surviving copies
//! of every bin, each handed out at a resume point at or after `C`, and the sink had
//! written every output before `C` and drops every later one it had not written. So every
//! (time, bin)'s outputs are written once, whatever the moment of the crash.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::rc::Rc;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Inspect, Probe};
use timely::dataflow::{InputHandleVec, ProbeHandle};
use timely::worker::Worker;

use super::collect::Committed;
use super::{RunConfig, RunError};
use crate::Time;
use crate::config::{NONE, Placement, Replicas};
use crate::job::Job;
use crate::operator::{Observers, Seed};
use crate::source::Source;

/// How long the survivors' workers have to leave a broken computation and hand out their
/// bins (they do at their next loop turn: milliseconds).
pub(super) const LEAVE_WAIT: Duration = Duration::from_secs(5);
/// How often a survivor tries again to connect to another for a restarted computation
/// (timely's own cluster start tries once a second: a restart connects its processes itself).
const CONNECT_RETRY: Duration = Duration::from_millis(5);
/// How long a member waits for the coordinator's restart order once it left its computation.
pub(super) const ORDER_WAIT: Duration = Duration::from_secs(10);

/// Whether `job` with `config` on `processes` processes restarts after a crash: it is
/// replicated across processes, migrateable, and its records can be made again from any
/// time (a generator's; records read from an input are read once).
pub(super) fn possible<J: Job + ?Sized>(job: &J, config: &RunConfig, processes: usize) -> bool {
    processes > 1
        && config.replicas > 1
        && !config.native
        && matches!(job.source(config), Source::Generated(_))
}

/// What one worker hands out when it leaves a computation for a restart: its bins by
/// operator and bin, and whether it held each as the standby.
#[derive(Clone, Debug, Default)]
pub(super) struct Handed {
    bins: BTreeMap<String, BTreeMap<u32, Vec<u8>>>,
    roles: BTreeMap<u32, bool>,
    /// The operators whose roles disagree with the first operator's here.
    mismatched: Vec<u32>,
}

impl Handed {
    /// Every bin the operators registered with `observers` hold on this worker.
    pub(super) fn take(observers: &Observers) -> Self {
        let mut handed = Handed::default();
        let mut first = true;
        observers.each(|probe| {
            let bins = (probe.handout)();
            let roles: BTreeMap<u32, bool> = bins.iter().map(|(b, h)| (*b, h.standby)).collect();
            if first {
                handed.roles = roles;
                first = false;
            } else if roles != handed.roles {
                let all: std::collections::BTreeSet<u32> =
                    roles.keys().chain(handed.roles.keys()).copied().collect();
                handed
                    .mismatched
                    .extend(all.into_iter().filter(|b| roles.get(b) != handed.roles.get(b)));
            }
            let encoded = bins.into_iter().map(|(b, h)| (b, h.bytes)).collect();
            handed.bins.insert(probe.name.clone(), encoded);
        });
        handed
    }
}

/// One computation of a run. Generation 0 starts the job; each later one restarts it among
/// the survivors of a crash.
pub(super) struct Generation {
    pub(super) index: u32,
    /// The committed frontier it starts from (0 for generation 0).
    pub(super) from: Time,
    /// What each local worker starts with (generations after 0).
    seeds: Mutex<Vec<Option<Handed>>>,
    /// What each local worker handed out when it left this computation for a restart.
    handed: Mutex<Vec<Option<Handed>>>,
    /// The committed frontier the operators keep their outputs from, if the job restarts.
    pub(super) keep: Option<Arc<AtomicU64>>,
    /// Process 0's committed outputs, across generations.
    pub(super) committed: Option<Committed>,
    /// Worker 0's measured epochs, each with when it completed, across computations.
    measured: Mutex<Vec<(u64, u64)>>,
    /// Every restart so far, the one that started this computation last.
    crashes: Mutex<Vec<Crash>>,
}

/// One loss of processes, and the restart that followed, as process 0 saw them.
#[derive(Clone, Debug)]
struct Crash {
    lost: Vec<usize>,
    detected: Instant,
    from: Time,
    /// When the new computation had agreed where the bins survived, and how many of them
    /// were promoted or left with one copy.
    formed: Option<(Instant, usize, usize)>,
}

impl Generation {
    /// The job's first computation.
    pub(super) fn first(workers: usize, keep: Option<Arc<AtomicU64>>, committed: Option<Committed>) -> Self {
        Generation {
            index: 0,
            from: 0,
            seeds: Mutex::new(vec![None; workers]),
            handed: Mutex::new(vec![None; workers]),
            keep,
            committed,
            measured: Mutex::default(),
            crashes: Mutex::default(),
        }
    }

    /// The computation after this one, from `from`, seeded with what this one's workers
    /// handed out.
    pub(super) fn next(&self, index: u32, from: Time, crash_seen: Instant, lost: Vec<usize>) -> Self {
        let handed = self
            .handed
            .lock()
            .map(|mut h| std::mem::take(&mut *h))
            .unwrap_or_default();
        let mut crashes = self.crashes.lock().map(|c| c.clone()).unwrap_or_default();
        crashes.push(Crash {
            lost,
            detected: crash_seen,
            from,
            formed: None,
        });
        let workers = handed.len();
        Generation {
            index,
            from,
            seeds: Mutex::new(handed),
            handed: Mutex::new(vec![None; workers]),
            keep: self.keep.clone(),
            committed: self.committed.clone(),
            measured: Mutex::new(
                self.measured
                    .lock()
                    .map(|mut m| std::mem::take(&mut *m))
                    .unwrap_or_default(),
            ),
            crashes: Mutex::new(crashes),
        }
    }

    /// Local worker `local` left the computation with `handed`.
    pub(super) fn hand_out(&self, local: usize, handed: Handed) {
        if let Ok(mut all) = self.handed.lock()
            && let Some(slot) = all.get_mut(local)
        {
            *slot = Some(handed);
        }
    }

    /// The restarted computation formed now, with `promoted` and `degraded` bins.
    pub(super) fn formed(&self, (promoted, degraded): (usize, usize)) {
        if let Ok(mut crashes) = self.crashes.lock()
            && let Some(last) = crashes.last_mut()
        {
            last.formed = Some((Instant::now(), promoted, degraded));
        }
    }

    /// The summary of every restart, on the run's clock from `start`; `done_at` gives the
    /// nanoseconds after the start at which the first epoch at or after a logical time
    /// completed.
    pub(super) fn crash_summaries(
        &self,
        start: Instant,
        done_at: impl Fn(Time) -> Option<u64>,
    ) -> Vec<crate::summary::CrashSummary> {
        let crashes = self.crashes.lock().map(|c| c.clone()).unwrap_or_default();
        crashes
            .into_iter()
            .map(|c| {
                let detected_s = c.detected.saturating_duration_since(start).as_secs_f64();
                let (formed, promoted, degraded) = match c.formed {
                    Some((at, p, d)) => (Some(at), p, d),
                    None => (None, 0, 0),
                };
                crate::summary::CrashSummary {
                    processes: c.lost,
                    detected_s,
                    restart_ms: formed.map(|f| f.saturating_duration_since(c.detected).as_secs_f64() * 1e3),
                    takeover_ms: done_at(c.from).map(|ns| (ns as f64 / 1e6 - detected_s * 1e3).max(0.0)),
                    from_time: c.from,
                    bins_promoted: promoted,
                    bins_degraded: degraded,
                }
            })
            .collect()
    }

    /// Worker 0 left this computation having measured `epochs`.
    pub(super) fn keep_measured(&self, epochs: &[(u64, u64)]) {
        if let Ok(mut m) = self.measured.lock() {
            *m = epochs.to_vec();
        }
    }

    /// The epochs an earlier computation measured (taken once).
    pub(super) fn measured(&self) -> Vec<(u64, u64)> {
        self.measured
            .lock()
            .map(|mut m| std::mem::take(&mut *m))
            .unwrap_or_default()
    }

    /// Whether every local worker handed out its bins.
    pub(super) fn all_handed(&self) -> bool {
        self.handed.lock().is_ok_and(|h| h.iter().all(Option::is_some))
    }

    /// What local worker `local` starts with: its seed (at this generation's start) and its
    /// roles; `None` in generation 0.
    pub(super) fn seed(&self, local: usize) -> Option<(Seed, BTreeMap<u32, bool>, Vec<u32>)> {
        let handed = self.seeds.lock().ok()?.get_mut(local)?.take()?;
        let seed = Seed {
            at: self.from,
            bins: handed.bins,
        };
        Some((seed, handed.roles, handed.mismatched))
    }
}

/// Where the bins survived, agreed by every worker of a new computation: each sends the
/// roles it holds to all; each then builds the same placement (a surviving standby whose
/// primary is gone is promoted; a bin left with one copy runs with one). `Err` names the
/// bins with no copy left, or whose operators survived in different places.
pub(super) fn agree(
    worker: &mut Worker,
    bins: usize,
    roles: &BTreeMap<u32, bool>,
    mismatched: &[u32],
) -> Result<(Placement, (usize, usize)), Vec<u32>> {
    let mut input = InputHandleVec::<Time, (u32, u32, u8)>::new();
    let heard: Rc<std::cell::RefCell<Vec<(u32, u32, u8)>>> = Rc::default();
    let probe = ProbeHandle::new();
    {
        let (heard, probe) = (Rc::clone(&heard), probe.clone());
        let input = &mut input;
        worker.dataflow::<Time, _, _>(move |scope| {
            input
                .to_stream(scope)
                .broadcast()
                .inspect(move |r| heard.borrow_mut().push(*r))
                .probe_with(&probe);
        });
    }
    let me = worker.index() as u32;
    for (bin, standby) in roles {
        input.send((me, *bin, u8::from(*standby)));
    }
    for bin in mismatched {
        input.send((me, *bin, 2));
    }
    drop(input);
    while !probe.done() {
        worker.step();
    }
    let mut heard = heard.take();
    heard.sort_unstable();
    placement(bins, &heard)
}

/// The placement the copies `heard` (worker, bin, 0 primary / 1 standby / 2 mismatched)
/// hold: per bin, a primary copy stays primary, a lone standby is promoted; two copies of
/// one role (a move that changed roles, cut in the middle) are ordered by worker. With it,
/// how many bins were promoted and how many are left with one copy.
fn placement(bins: usize, heard: &[(u32, u32, u8)]) -> Result<(Placement, (usize, usize)), Vec<u32>> {
    let mut copies: Vec<Vec<(u8, u32)>> = vec![Vec::new(); bins];
    let mut bad = Vec::new();
    for &(worker, bin, role) in heard {
        match copies.get_mut(bin as usize) {
            Some(c) if role < 2 => c.push((role, worker)),
            _ => bad.push(bin),
        }
    }
    let mut placement = Vec::with_capacity(bins);
    let (mut promoted, mut degraded) = (0, 0);
    for (bin, mut c) in copies.into_iter().enumerate() {
        c.sort_unstable();
        promoted += usize::from(c.first().is_some_and(|(role, _)| *role == 1));
        degraded += usize::from(c.len() == 1);
        match c.as_slice() {
            [] => bad.push(bin as u32),
            [(_, only)] => placement.push(Replicas {
                primary: *only,
                standby: NONE,
            }),
            [(_, first), (_, second), ..] => placement.push(Replicas {
                primary: *first,
                standby: *second,
            }),
        }
    }
    bad.sort_unstable();
    bad.dedup();
    if bad.is_empty() {
        Ok((placement, (promoted, degraded)))
    } else {
        Err(bad)
    }
}

/// Leaves a computation once every local worker handed out its bins: its threads are
/// joined in the background (those of a lost or hung process's connections may never end;
/// their panics stay with this computation).
pub(super) fn leave(
    guards: timely::communication::WorkerGuards<()>,
    generation: &Generation,
    abort: &crate::abort::Abort,
) -> Result<(), RunError> {
    let since = Instant::now();
    while !generation.all_handed() {
        // A process lost for good (process 0, say) ends the wait with its error.
        abort.wait_order(Duration::ZERO)?;
        if since.elapsed() > LEAVE_WAIT {
            std::mem::forget(guards);
            return Err(RunError::Worker(format!(
                "the workers did not leave the broken computation within {} s",
                LEAVE_WAIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let joined = std::thread::Builder::new()
        .name(crate::abort::LEAVING_THREAD.into())
        .spawn(move || {
            drop(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                guards.join()
            })))
        });
    joined
        .map(drop)
        .map_err(|e| RunError::Worker(format!("leaving the computation: {e}")))
}

/// Starts a restarted computation among the processes at `addresses`, this one at `rank`,
/// with `workers` workers each: the survivors connect to each other at once (each listens
/// for those after it and connects to those before it, trying again every few
/// milliseconds, for up to `wait`), then timely runs `work` over those connections.
pub(super) fn execute<F>(
    addresses: &[String],
    rank: usize,
    workers: usize,
    worker_config: timely::WorkerConfig,
    wait: Duration,
    work: F,
) -> Result<timely::communication::WorkerGuards<()>, RunError>
where
    F: Fn(&mut timely::worker::Worker) + Send + Sync + 'static,
{
    use timely::communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
    use timely::communication::allocator::{AllocatorBuilder, ProcessBuilder};
    let sockets =
        mesh(addresses, rank, wait).map_err(|e| RunError::Timely(format!("restarting the cluster: {e}")))?;
    let hooks = timely::communication::Hooks::default();
    let local = ProcessBuilder::new_typed_vector(workers, hooks.refill.clone(), hooks.spill.clone());
    let (builders, guard) = initialize_networking_from_sockets(local, sockets, rank, workers, hooks)
        .map_err(|e| RunError::Timely(format!("restarting the cluster: {e}")))?;
    let builders = builders.into_iter().map(AllocatorBuilder::Tcp).collect();
    timely::execute::execute_from(builders, Box::new(guard), worker_config, work).map_err(RunError::Timely)
}

/// One connection to every other process at `addresses` (`None` for this one, at `rank`).
fn mesh(addresses: &[String], rank: usize, wait: Duration) -> std::io::Result<Vec<Option<TcpStream>>> {
    let first = |a: &String| a.split_whitespace().next().unwrap_or_default().to_string();
    let listener = TcpListener::bind(first(&addresses[rank]))?;
    listener.set_nonblocking(true)?;
    let since = Instant::now();
    let late = || {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the other survivors did not connect in time",
        )
    };
    let mut sockets: Vec<Option<TcpStream>> = (0..addresses.len()).map(|_| None).collect();
    for (index, address) in addresses.iter().enumerate().take(rank) {
        let stream = loop {
            match TcpStream::connect(first(address)) {
                Ok(stream) => break stream,
                Err(_) if since.elapsed() < wait => std::thread::sleep(CONNECT_RETRY),
                Err(_) => return Err(late()),
            }
        };
        stream.set_nodelay(true)?;
        (&stream).write_all(&(rank as u64).to_le_bytes())?;
        sockets[index] = Some(stream);
    }
    while sockets.iter().skip(rank + 1).any(Option::is_none) {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                stream.set_read_timeout(Some(wait))?;
                let mut index = [0u8; 8];
                (&stream).read_exact(&mut index)?;
                stream.set_read_timeout(None)?;
                stream.set_nodelay(true)?;
                let index = u64::from_le_bytes(index) as usize;
                match sockets.get_mut(index) {
                    Some(slot) if index > rank && slot.is_none() => *slot = Some(stream),
                    _ => {
                        return Err(std::io::Error::other(format!(
                            "a connection claimed to be process {index}"
                        )));
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && since.elapsed() < wait => {
                std::thread::sleep(CONNECT_RETRY)
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Err(late()),
            Err(e) => return Err(e),
        }
    }
    Ok(sockets)
}

/// Timely's configuration for a computation among `survivors` (by their index at the
/// job's start, at their addresses then), this process being `me`.
pub(super) fn timely_config(
    first: &timely::Config,
    workers: usize,
    survivors: &[usize],
    addresses: &[String],
    me: usize,
) -> timely::Config {
    let addresses: Vec<String> = survivors
        .iter()
        .filter_map(|p| addresses.get(*p).cloned())
        .collect();
    let process = survivors.iter().position(|p| *p == me).unwrap_or(0);
    timely::Config {
        communication: timely::CommunicationConfig::Cluster {
            threads: workers,
            process,
            addresses,
            report: false,
            zerocopy: false,
        },
        worker: first.worker.clone(),
    }
}

/// The settings of a restarted computation: scheduled plans, failures, rejoins and panics
/// name the first computation's workers and times, and are not made again.
pub(super) fn later_config(config: &RunConfig) -> RunConfig {
    RunConfig {
        migrations: Vec::new(),
        failures: Vec::new(),
        rejoins: Vec::new(),
        panics: Vec::new(),
        script: Vec::new(),
        ..config.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_standby_is_promoted_and_a_bin_with_no_copy_is_named() {
        let heard = [(0, 0, 0), (1, 0, 1), (1, 1, 1), (2, 2, 0)];
        let (p, counts) = placement(3, &heard).unwrap();
        assert_eq!(counts, (1, 2));
        assert_eq!((p[0].primary, p[0].standby), (0, 1));
        assert_eq!((p[1].primary, p[1].standby), (1, NONE));
        assert_eq!((p[2].primary, p[2].standby), (2, NONE));
        assert_eq!(placement(4, &heard).unwrap_err(), vec![3]);
        assert_eq!(
            placement(3, &[(0, 0, 0), (0, 1, 0), (0, 2, 2)]).unwrap_err(),
            vec![2]
        );
    }
}
