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
//!
//! A process started again for a lost place (`--join`) is taken in the same way: the
//! running computation is left as if for a crash (nothing lost), the process that joins
//! starts the next generation empty, and a rebalance under `--recovery` moves bins onto it.

mod agree;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::collect::Committed;
use super::liveness::Liveness;
use super::{RunConfig, RunError};
use crate::Time;
use crate::bins::list;
use crate::driver::MigrationRecord;
use crate::harness::abort::Abort;
use crate::job::Job;
use crate::job::Takes;
use crate::latency::Done;
use crate::membership::Restart;
use crate::operator::{Handout, Observers, Survived, TransferTotals};
use crate::source::Source;
use crate::summary::{CrashSummary, JoinSummary, MigrationSummary, RecoverySummary};
pub(super) use agree::{Disagreed, agree};
/// How long the survivors' workers have to leave a broken computation and hand out their
/// bins (they do at their next loop turn: milliseconds).
pub(super) const LEAVE_WAIT: Duration = Duration::from_secs(5);
/// How long process 0 waits, once its computation is left, before it orders the restart.
const ORDER_GRACE: Duration = Duration::from_millis(50);
/// How long a member waits for the coordinator's restart order once it left its computation.
pub(super) const ORDER_WAIT: Duration = Duration::from_secs(10);

/// Whether `job` with `config` on `processes` processes restarts after a crash.
pub(super) fn possible<J: Job + ?Sized>(job: &J, config: &RunConfig, processes: usize) -> bool {
    processes > 1 && why_not(job, config).is_none()
}

/// Why a crash stops a run of `job` with `config` (see [`crash_stops`]); `None` if it
/// restarts.
pub(super) fn why_not<J: Job + ?Sized>(job: &J, config: &RunConfig) -> Option<String> {
    let takes = match job.source(config) {
        Source::Generated(_) => Takes::Generated,
        Source::Read(r) => Takes::Input {
            event_time: r.has_event_time(),
        },
    };
    crash_stops(takes, config)
}

/// Why a crash of a cluster process (other than process 0, which a job never survives)
/// stops a run of `config` for a job that takes its records as `takes`, instead of
/// restarting it among the survivors; `None` if it restarts. A restart needs a standby of
/// every bin in another process, migrateable bins, and records it can make or read again
/// from any time: a generator's, or a file's.
pub fn crash_stops(takes: Takes, config: &RunConfig) -> Option<String> {
    let input = config.input.as_ref().map(|i| (i.name(), i.rereadable()));
    if let (Takes::Input { .. }, Some((name, false))) = (takes, input) {
        return Some(format!(
            "its records come from {name}, which cannot be read again"
        ));
    }
    if config.native {
        return Some("its bins are native (--native): they cannot move".to_string());
    }
    if config.replicas < 2 {
        return Some(
            "it keeps one copy of each bin (--replicas 2 keeps a standby in another process)".to_string(),
        );
    }
    None
}

/// Every bin the operators registered with `observers` hold on this worker, as it leaves a
/// computation for a restart.
pub(super) fn hand_out(observers: &Observers) -> Handout {
    let mut handout = Handout::default();
    observers.each(|probe| {
        handout.bins.insert(probe.name.clone(), (probe.handout)());
    });
    handout
}

/// One computation of a run. Generation 0 starts the job; each later one restarts it among
/// the survivors of a crash.
pub(super) struct Generation {
    pub(super) index: u32,
    /// The committed frontier it starts from (0 for generation 0).
    pub(super) from: Time,
    /// What each local worker starts with (generations after 0).
    seeds: Mutex<Vec<Option<Handout>>>,
    /// What each local worker handed out when it left this computation for a restart.
    handed: Mutex<Vec<Option<Handout>>>,
    /// The committed frontier the operators keep their outputs from, if the job restarts.
    pub(super) keep: Option<Arc<AtomicU64>>,
    /// Process 0's committed outputs, across generations.
    pub(super) committed: Option<Committed>,
    /// Worker 0's measured epochs, each with when it completed, across computations.
    measured: Mutex<Vec<Done>>,
    /// Worker 0's plans of the earlier computations, and what each local worker shipped
    /// in them: the summary covers the whole run.
    earlier: Mutex<Earlier>,
    /// Every restart so far, the one that started this computation last.
    crashes: Mutex<Vec<Crash>>,
    /// The processes that joined the job at the restart that started this computation
    /// (or at an earlier one whose rebalance onto them never started).
    pub(super) joined: Vec<usize>,
    /// Whether the rebalance onto `joined` started.
    rebalanced: std::sync::atomic::AtomicBool,
}

/// What the computations before the running one did, for the summary.
#[derive(Clone, Debug, Default)]
pub(super) struct Earlier {
    /// Worker 0's plans, in the order they finished; those a restart cut short marked
    /// `cancelled`.
    pub(super) plans: Vec<MigrationRecord>,
    /// Per local worker, the bins it shipped, by the time of the move.
    pub(super) shipped: Vec<BTreeMap<Time, TransferTotals>>,
}

/// One restart, for the loss of processes or for processes that joined, as process 0 saw
/// it.
#[derive(Clone, Debug)]
struct Crash {
    lost: Vec<usize>,
    joined: Vec<usize>,
    detected: Instant,
    from: Time,
    /// When the new computation had agreed where the bins survived, and how many of them
    /// were promoted or left with one copy.
    formed: Option<(Instant, Survived)>,
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
            earlier: Mutex::new(Earlier {
                plans: Vec::new(),
                shipped: vec![BTreeMap::new(); workers],
            }),
            crashes: Mutex::default(),
            joined: Vec::new(),
            rebalanced: Default::default(),
        }
    }

    /// The first computation of a process that joins the job (`--join`): generation
    /// `index` from `from`, with no bins.
    pub(super) fn joining(workers: usize, keep: Option<Arc<AtomicU64>>, index: u32, from: Time) -> Self {
        Generation {
            index,
            from,
            seeds: Mutex::new(vec![Some(Handout::default()); workers]),
            ..Generation::first(workers, keep, None)
        }
    }

    /// The computation after this one, from `from`, seeded with what this one's workers
    /// handed out.
    pub(super) fn next(
        &self,
        (index, from): (u32, Time),
        crash_seen: Instant,
        (lost, mut joined): (Vec<usize>, Vec<usize>),
    ) -> Self {
        // Processes this computation took in but never rebalanced onto (it was left first)
        // are still to be.
        if !self.rebalanced.load(std::sync::atomic::Ordering::Acquire) {
            for p in &self.joined {
                if !joined.contains(p) && !lost.contains(p) {
                    joined.push(*p);
                }
            }
        }
        let handed = self
            .handed
            .lock()
            .map(|mut h| std::mem::take(&mut *h))
            .unwrap_or_default();
        let mut crashes = self.crashes.lock().map(|c| c.clone()).unwrap_or_default();
        crashes.push(Crash {
            lost,
            joined: joined.clone(),
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
            earlier: Mutex::new(self.earlier.lock().map(|e| e.clone()).unwrap_or_default()),
            crashes: Mutex::new(crashes),
            joined,
            rebalanced: Default::default(),
        }
    }

    /// The rebalance onto the processes that joined has started.
    pub(super) fn rebalanced(&self) {
        self.rebalanced.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Worker 0 left this computation with `plans` (listed, the running one last): they
    /// go on in the summary, a plan not completed as cut short.
    pub(super) fn keep_plans(&self, plans: Vec<MigrationRecord>) {
        if let Ok(mut earlier) = self.earlier.lock() {
            earlier.plans.extend(plans.into_iter().map(|mut p| {
                p.cancelled |= p.completed_s.is_none();
                p
            }));
        }
    }

    /// Local worker `local` left this computation having shipped `shipped`.
    pub(super) fn keep_shipped(&self, local: usize, shipped: &BTreeMap<Time, TransferTotals>) {
        if let Ok(mut earlier) = self.earlier.lock()
            && let Some(log) = earlier.shipped.get_mut(local)
        {
            for (time, t) in shipped {
                *log.entry(*time).or_default() += *t;
            }
        }
    }

    /// What the computations before this one did.
    pub(super) fn earlier(&self) -> Earlier {
        self.earlier.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Local worker `local` left the computation with `handed`.
    pub(super) fn hand_out(&self, local: usize, handed: Handout) {
        if let Ok(mut all) = self.handed.lock()
            && let Some(slot) = all.get_mut(local)
        {
            *slot = Some(handed);
        }
    }

    /// The restarted computation formed now, having found the bins as `survived` says.
    pub(super) fn formed(&self, survived: Survived) {
        if let Ok(mut crashes) = self.crashes.lock()
            && let Some(last) = crashes.last_mut()
        {
            last.formed = Some((Instant::now(), survived));
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
            .enumerate()
            .filter(|(_, c)| !c.lost.is_empty())
            .map(|(i, c)| {
                let detected_s = c.detected.saturating_duration_since(start).as_secs_f64();
                let (formed, survived) = match c.formed {
                    Some((at, survived)) => (Some(at), survived),
                    None => (None, Survived::default()),
                };
                crate::summary::CrashSummary {
                    processes: c.lost,
                    detected_s,
                    restart_ms: formed.map(|f| f.saturating_duration_since(c.detected).as_secs_f64() * 1e3),
                    takeover_ms: done_at(c.from).map(|ns| (ns as f64 / 1e6 - detected_s * 1e3).max(0.0)),
                    from_time: c.from,
                    bins_promoted: survived.promoted,
                    bins_degraded: survived.degraded,
                    generation: i as u32 + 1,
                    recovery: None,
                }
            })
            .collect()
    }

    /// The summary of every process that joined, as [`Generation::crash_summaries`]: for
    /// each, the last restart that took it in (an earlier one was left before it
    /// rebalanced onto it).
    pub(super) fn join_summaries(
        &self,
        start: Instant,
        done_at: impl Fn(Time) -> Option<u64>,
    ) -> Vec<JoinSummary> {
        let crashes = self.crashes.lock().map(|c| c.clone()).unwrap_or_default();
        let mut joins = Vec::new();
        for (i, c) in crashes.iter().enumerate() {
            let asked_s = c.detected.saturating_duration_since(start).as_secs_f64();
            for process in &c.joined {
                joins.retain(|j: &JoinSummary| j.process != *process);
                joins.push(JoinSummary {
                    process: *process,
                    asked_s,
                    restart_ms: c
                        .formed
                        .as_ref()
                        .map(|(at, _)| at.saturating_duration_since(c.detected).as_secs_f64() * 1e3),
                    takeover_ms: done_at(c.from).map(|ns| (ns as f64 / 1e6 - asked_s * 1e3).max(0.0)),
                    from_time: c.from,
                    generation: i as u32 + 1,
                    rebalance: None,
                });
            }
        }
        joins
    }

    /// Worker 0 left this computation having measured `epochs`.
    pub(super) fn keep_measured(&self, epochs: &[Done]) {
        if let Ok(mut m) = self.measured.lock() {
            *m = epochs.to_vec();
        }
    }

    /// The epochs an earlier computation measured (taken once).
    pub(super) fn measured(&self) -> Vec<Done> {
        self.measured
            .lock()
            .map(|mut m| std::mem::take(&mut *m))
            .unwrap_or_default()
    }

    /// The computation never ran (it was left while it formed): what its workers were to
    /// start with is what they hand out.
    pub(super) fn unseed(&self) {
        let (Ok(mut seeds), Ok(mut handed)) = (self.seeds.lock(), self.handed.lock()) else {
            return;
        };
        for (seed, slot) in seeds.iter_mut().zip(handed.iter_mut()) {
            if let Some(seed) = seed.take() {
                *slot = Some(seed);
            }
        }
    }

    /// Whether every local worker handed out its bins.
    pub(super) fn all_handed(&self) -> bool {
        self.handed.lock().is_ok_and(|h| h.iter().all(Option::is_some))
    }

    /// What local worker `local` starts with: what it handed out when the last computation
    /// stopped; `None` in generation 0.
    pub(super) fn handout(&self, local: usize) -> Option<Handout> {
        self.seeds.lock().ok()?.get_mut(local)?.take()
    }
}

/// Leaves a computation once every local worker handed out its bins: its threads are
/// joined in the background (those of a lost or hung process's connections may never end;
/// their panics stay with this computation).
pub(super) fn leave(
    guards: timely::communication::WorkerGuards<()>,
    generation: &Generation,
    abort: &Abort,
) -> Result<(), RunError> {
    let since = Instant::now();
    while !generation.all_handed() {
        // A process lost for good (process 0, say) ends the wait with its error. The
        // workers then park rather than hand out: joining them would wait for ever (the
        // process exits instead).
        if let Err(e) = abort.wait_order(Duration::ZERO) {
            std::mem::forget(guards);
            return Err(e);
        }
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
        .name(crate::harness::abort::LEAVING_THREAD.into())
        .spawn(move || {
            drop(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                guards.join()
            })))
        });
    joined
        .map(drop)
        .map_err(|e| RunError::Worker(format!("leaving the computation: {e}")))
}

/// The restart that follows a computation left: process 0's coordinator orders it (from
/// the committed frontier, without the processes lost), the others wait for its order.
/// `Err` if this process cannot take part.
pub(super) fn order(
    liveness: Option<&Liveness>,
    left: &Generation,
    (abort, clock, end): (&Abort, Option<Instant>, Option<u64>),
    me: usize,
) -> Result<Restart, RunError> {
    let order = match liveness.and_then(Liveness::coordinator) {
        Some(coordinator) => {
            // Processes killed together are seen apart by a few milliseconds: one order
            // for them all, rather than a restart that waits for one of them.
            std::thread::sleep(ORDER_GRACE);
            let from = left
                .committed
                .as_ref()
                .map_or(0, |c| c.frontier.load(std::sync::atomic::Ordering::Acquire));
            let clock_ns = clock.map_or(0, |start| start.elapsed().as_nanos() as u64);
            coordinator.restart((left.index + 1, from, end), &abort.lost(), clock_ns)
        }
        None => abort.wait_order(ORDER_WAIT)?.ok_or_else(|| {
            RunError::Worker(format!(
                "process {me}: a process was lost and process 0 gave no restart order within {} s",
                ORDER_WAIT.as_secs()
            ))
        })?,
    };
    if !order.survivors.contains(&me) {
        return Err(RunError::Worker(format!(
            "process {me} was left out of the restart (process 0 lost it)"
        )));
    }
    Ok(order)
}

/// How the target of the plan that restores standbys after a crash begins.
pub const RESTORED_STANDBYS: &str = "standbys lost in a crash";
/// How the target of the plan that spreads bins onto processes that joined begins.
pub const REBALANCED_ONTO_JOINED: &str = "balanced onto process";

/// What the plan that follows restart `generation` is for (its migration's target in the
/// summary): the standbys lost in a crash, or a rebalance onto the processes that `joined`.
/// Observers tell these plans (migrations by purpose) by [`RESTORED_STANDBYS`] and
/// [`REBALANCED_ONTO_JOINED`].
pub(super) fn recovery_purpose(generation: u32, joined: &[usize]) -> String {
    if joined.is_empty() {
        return format!("{RESTORED_STANDBYS} (restart {generation})");
    }
    let joined: Vec<u32> = joined.iter().map(|p| *p as u32).collect();
    format!(
        "{REBALANCED_ONTO_JOINED} {} that joined (restart {generation})",
        list(&joined)
    )
}

/// The plan that ran for each restart in `crashes` and `joins`, from the `migrations`.
pub(super) fn attach_recoveries(
    crashes: &mut [CrashSummary],
    joins: &mut [JoinSummary],
    migrations: &[MigrationSummary],
) {
    let ran = |generation: u32| {
        let crash = recovery_purpose(generation, &[]);
        let join = format!("(restart {generation})");
        migrations
            .iter()
            .find(|m| {
                m.target == crash || (m.target.starts_with("balanced onto") && m.target.ends_with(&join))
            })
            .map(|m| RecoverySummary {
                strategy: m.strategy.clone(),
                bins_copied: m.bins_moved,
                bytes: m.bytes_moved,
                issued_s: m.issued_s,
                duration_s: m.duration_s,
                latency_ns_during: m.latency_ns_during.clone(),
                cancelled: m.cancelled,
            })
    };
    for crash in crashes.iter_mut() {
        crash.recovery = ran(crash.generation);
    }
    for join in joins.iter_mut() {
        join.rebalance = ran(join.generation);
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
