//! The drain: after a run's last epoch, the work its operators scheduled for later times
//! (sessions that close, timeouts) runs, as far as the job's [`Drain`] says, under a gate.
//!
//! Every worker holds its data input at the *gate*, a logical time that only worker 0 moves:
//! no operator can apply a time at or after it, so at any moment the outputs of every time
//! before the gate are all made (or will be, without any new input) and none after it is.
//! Worker 0 raises the gate in rounds: each worker reports the work its bins have scheduled
//! once the output has passed the gate, and with every report in, worker 0 moves the gate
//! past the earliest scheduled time (a stride further, grown while rounds are quick), or
//! finishes the drain when nothing is left, the horizon is reached, a stop was asked for or
//! the run's `--duration` is up. To finish at gate `g`, it tells every worker `g`; each
//! leaves the dataflow once its output has passed `g`: every output before `g` is counted
//! and written, and the run ends however much work later times still had (a periodic timer
//! re-arms for ever). The gate is the data input's frontier, so the native twin and the
//! user's own timely operators are held by it alike.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use timely::dataflow::{InputHandleVec, ProbeHandle};

use super::end::RunEnd;
use super::worker::Stopped;
use crate::Time;
use crate::control::{ControlHandle, DrainProgress};
use crate::epoch::EpochLen;
use crate::error::ConfigError;
use crate::operator::{Observers, Scheduled};

/// The first stride of the gate past the earliest scheduled work, in wall-clock terms of
/// logical time: a latency window's worth.
const FIRST_STRIDE: Duration = Duration::from_millis(250);
/// The longest stride: a round's work stays bounded where scheduled work thickens after a
/// sparse stretch (the gate jumps over empty stretches anyway, to the earliest work).
const MAX_STRIDE: Duration = Duration::from_secs(1);
/// A round quicker than this doubles the stride; one slower halves it. A cut then waits at
/// most about this long for the times before the gate.
const QUICK_ROUND: Duration = Duration::from_millis(20);
const SLOW_ROUND: Duration = Duration::from_millis(200);
/// The longest `--drain` takes, in seconds of logical time: a day, as `--duration`.
pub const MAX_DRAIN_SECS: f64 = 86_400.0;
/// How often worker 0 reports the drain's progress.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// The longest a draining worker waits for news before it looks again (worker 0 watches the
/// clock and the stop request).
const PARK: Duration = Duration::from_millis(5);

/// How long after its last record a job's scheduled work still matters: how far the end of a
/// run lets it run ([`crate::job::Job::drain`], or `--drain`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Drain {
    /// Not at all: the run ends with its last epoch (the generated workloads, whose
    /// scheduled work reaches minutes past the end and belongs to no measured epoch).
    Off,
    /// Work scheduled up to this long (of logical time) after the last epoch runs (a session
    /// window of 30 s: the last sessions close within 30 s).
    For(Duration),
    /// Until no work is left. `--duration` still caps the run, drain included.
    All,
}

impl Drain {
    /// The first logical time whose work does not run, for a run whose last epoch has time
    /// `last` and whose epochs are `len` long: the drain's horizon.
    pub fn horizon(self, last: Time, len: EpochLen) -> Time {
        let after = last.saturating_add(1);
        match self {
            Drain::Off => after,
            Drain::For(d) => after.saturating_add(len.ticks(d)),
            Drain::All => Time::MAX,
        }
    }
}

/// As `--drain` takes it: `off`, `all`, or seconds.
impl FromStr for Drain {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "off" => Ok(Drain::Off),
            "all" => Ok(Drain::All),
            secs => match secs.parse::<f64>() {
                Ok(x) if x.is_finite() && (0.0..=MAX_DRAIN_SECS).contains(&x) => {
                    Ok(Drain::For(Duration::from_secs_f64(x)))
                }
                _ => Err(ConfigError::Invalid(format!(
                    "`{s}` is not a drain: give off, all, or seconds of logical time (0 to {})",
                    MAX_DRAIN_SECS
                ))),
            },
        }
    }
}

impl fmt::Display for Drain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Drain::Off => f.write_str("off"),
            Drain::All => f.write_str("all"),
            Drain::For(d) => write!(f, "{}", d.as_secs_f64()),
        }
    }
}

impl Serialize for Drain {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Drain {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// What worker 0 tells every worker during the drain (on the run's end broadcast).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum GateNews {
    /// Every data input may move to this time.
    Raise(Time),
    /// The drain ends at this gate: leave once the output has passed it.
    Finish(Time),
}

/// One worker's report to worker 0 once its output passed `gate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct GateReport {
    pub(super) worker: u32,
    pub(super) gate: Time,
    pub(super) scheduled: Scheduled,
}

/// Worker 0's side: raises the gate round by round and decides when the drain ends.
pub(super) struct Lead {
    horizon: Time,
    /// How far past the earliest scheduled work the gate rises (see [`FIRST_STRIDE`]), and
    /// at most ([`MAX_STRIDE`]).
    stride: Time,
    max_stride: Time,
    /// The gate last raised, and when.
    gate: Time,
    raised: Instant,
    /// Each worker's latest report: the output frontier it reported at and what its bins had
    /// scheduled then. A report counts for every gate up to its own: the output passed
    /// them all.
    reports: Vec<Option<(Time, Scheduled)>>,
    /// What the last complete round found.
    found: Scheduled,
    began: Instant,
    finished: bool,
}

impl Lead {
    /// Worker 0's lead of a drain among `peers` workers from gate `gate` (the time after the
    /// last epoch) up to `horizon`, with epochs of `len`.
    pub(super) fn new(peers: usize, gate: Time, horizon: Time, len: EpochLen, now: Instant) -> Self {
        Lead {
            horizon,
            stride: len.ticks(FIRST_STRIDE).max(1),
            max_stride: len.ticks(MAX_STRIDE).max(1),
            gate,
            raised: now,
            reports: vec![None; peers],
            found: Scheduled::default(),
            began: now,
            finished: false,
        }
    }

    /// Takes a worker's report (one of an earlier gate than its last is stale).
    pub(super) fn report(&mut self, report: GateReport) {
        if let Some(slot) = self.reports.get_mut(report.worker as usize)
            && slot.is_none_or(|(gate, _)| report.gate >= gate)
        {
            *slot = Some((report.gate, report.scheduled));
        }
    }

    /// What to tell the workers now, if anything: `stop` when a stop was asked for or the
    /// run's time is up (the drain ends at the current gate, whatever later times still
    /// have).
    pub(super) fn decide(&mut self, stop: bool, now: Instant) -> Option<GateNews> {
        if self.finished {
            return None;
        }
        let gate = self.gate;
        let round = self.reports.iter().try_fold(Scheduled::default(), |all, r| {
            r.filter(|(at, _)| *at >= gate).map(|(_, s)| all.and(s))
        });
        if let Some(found) = round {
            self.found = found;
        }
        let next = match (stop, round.map(|r| r.next)) {
            (true, _) | (false, Some(None)) => None,
            (false, None) => return None,
            (false, Some(Some(_))) if self.gate >= self.horizon => None,
            (false, Some(Some(next))) => Some(next),
        };
        let Some(next) = next else {
            self.finished = true;
            return Some(GateNews::Finish(self.gate));
        };
        let took = now.saturating_duration_since(self.raised);
        if took < QUICK_ROUND {
            self.stride = self.stride.saturating_mul(2).min(self.max_stride);
        } else if took > SLOW_ROUND {
            self.stride = (self.stride / 2).max(1);
        }
        let raised = next.max(self.gate).saturating_add(self.stride).min(self.horizon);
        self.gate = raised;
        self.raised = now;
        Some(GateNews::Raise(raised))
    }

    /// Where the drain stands.
    pub(super) fn progress(&self, input_end: Time, now: Instant) -> DrainProgress {
        DrainProgress {
            input_end,
            gate: self.gate,
            scheduled: self.found,
            for_ms: now.saturating_duration_since(self.began).as_millis() as u64,
        }
    }
}

/// What one worker's drain works with: its data input (the gate), its output's probe, the
/// run's end broadcast and its operators' observers.
pub(super) struct Gated<'a, R: Clone + 'static> {
    /// Raised to the gate as it moves (see [`super::worker::Shared::reached`]).
    pub(super) reached: &'a std::sync::atomic::AtomicU64,
    pub(super) data: &'a mut InputHandleVec<Time, R>,
    pub(super) probe: &'a ProbeHandle<Time>,
    pub(super) end: &'a mut RunEnd,
    pub(super) observers: &'a Observers,
}

/// The drain of one run, as every worker runs it.
pub(super) struct Plan<'a> {
    pub(super) index: usize,
    pub(super) peers: usize,
    /// The logical time of the run's last epoch.
    pub(super) last_time: Time,
    pub(super) drain: Drain,
    pub(super) len: EpochLen,
    /// When the run's time is up (`--duration`): the drain is cut then.
    pub(super) deadline: Instant,
    pub(super) control: &'a ControlHandle,
}

/// Runs the drain on one worker, stepping it with `step` (which waits up to the given time
/// for news), until every output before the gate it ends at is out. Returns that gate.
pub(super) fn run<R: Clone + 'static>(
    io: Gated<'_, R>,
    plan: Plan<'_>,
    mut step: impl FnMut(Duration) -> Result<(), Stopped>,
) -> Result<Time, Stopped> {
    let horizon = plan.drain.horizon(plan.last_time, plan.len);
    // A computation restarted during the drain starts from the committed gate, past the
    // last epoch: its input stays where it is.
    let mut gate = plan.last_time.saturating_add(1).max(*io.data.time());
    io.data.advance_to(gate);
    io.reached.fetch_max(gate, std::sync::atomic::Ordering::AcqRel);
    let output = || {
        io.probe
            .with_frontier(|f| f.first().copied().unwrap_or(Time::MAX))
    };
    let began = Instant::now();
    let mut lead = (plan.index == 0).then(|| Lead::new(plan.peers, gate, horizon, plan.len, began));
    // The output frontier this worker last reported at.
    let mut reported: Option<Time> = None;
    let mut shown = began;
    loop {
        // At the horizon every worker knows the drain is over: none waits for word of it
        // (a run that does not drain ends here at once). Worker 0's gate never passes the
        // horizon, nor does the output; a worker whose input stands past it (it went past
        // the last epoch before it heard which that was) ends at the horizon too. (Waiting
        // for the output to pass its own gate, such a worker waited for ever: worker 0 had
        // left.)
        if gate >= horizon && output() >= horizon {
            return Ok(horizon);
        }
        let (raised, finish) = io.end.gate_heard();
        if let Some(to) = raised.filter(|to| *to > gate) {
            gate = to;
            io.data.advance_to(gate);
            io.reached.fetch_max(gate, std::sync::atomic::Ordering::AcqRel);
        }
        // Worker 0 asks whether the output passed its gate: the last it raised, or the one
        // after the last epoch. This worker's own input may stand later (it went past the
        // last epoch before it heard which that was), but the output never passes worker
        // 0's input: a report waits for what worker 0 asks, never for this worker's gate.
        // (Waiting for the output to pass its own later gate, a worker of a 3-process job
        // under load never reported, and the drain waited for ever.)
        let asked = raised.unwrap_or(plan.last_time.saturating_add(1));
        let at = output().min(gate);
        match finish {
            Some(end) if output() >= end => return Ok(end),
            Some(_) => {}
            None if at >= asked && reported.is_none_or(|r| at > r) => {
                let scheduled = io.observers.scheduled();
                io.end.report(GateReport {
                    worker: plan.index as u32,
                    gate: at,
                    scheduled,
                });
                reported = Some(at);
            }
            None => {}
        }
        if let Some(lead) = lead.as_mut() {
            for report in io.end.take_reports() {
                lead.report(report);
            }
            let now = Instant::now();
            let stop = plan.control.stop_requested() || now >= plan.deadline;
            if let Some(news) = lead.decide(stop, now) {
                io.end.gate(news);
            }
            if now.saturating_duration_since(shown) >= PROGRESS_EVERY {
                shown = now;
                let progress = lead.progress(plan.last_time, now);
                plan.control.set_draining(progress);
                tracing::info!(
                    target: "megaflux::job",
                    phase = "draining",
                    worker = 0u32,
                    input_end = progress.input_end,
                    gate = progress.gate,
                    bins = progress.scheduled.bins,
                    next = progress.scheduled.next,
                    for_ms = progress.for_ms,
                );
            }
        }
        step(PARK)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(worker: u32, gate: Time, bins: u64, next: Option<Time>) -> GateReport {
        GateReport {
            worker,
            gate,
            scheduled: Scheduled { bins, next },
        }
    }

    #[test]
    fn drains_parse_and_print_as_the_flag_takes_them() {
        for text in ["off", "all", "30", "0.5"] {
            let drain: Drain = text.parse().unwrap();
            assert_eq!(drain.to_string(), text);
        }
        assert_eq!("2".parse::<Drain>().unwrap(), Drain::For(Duration::from_secs(2)));
        for bad in ["", "-1", "soon", "NaN", "1e30"] {
            let e = bad.parse::<Drain>().unwrap_err().to_string();
            assert!(e.contains("is not a drain"), "{e}");
        }
    }

    #[test]
    fn horizons_count_the_drain_in_epochs() {
        let len = EpochLen::from_us(100).unwrap();
        assert_eq!(Drain::Off.horizon(99, len), 100);
        assert_eq!(Drain::For(Duration::from_millis(30)).horizon(99, len), 400);
        assert_eq!(Drain::All.horizon(99, len), Time::MAX);
        assert_eq!(
            Drain::For(Duration::from_secs(1)).horizon(Time::MAX - 1, len),
            Time::MAX
        );
    }

    #[test]
    fn the_gate_rises_past_the_earliest_work_until_none_is_left() {
        let len = EpochLen::MS;
        let t0 = Instant::now();
        let mut lead = Lead::new(2, 100, Time::MAX, len, t0);
        assert_eq!(lead.decide(false, t0), None, "no reports yet");
        lead.report(report(0, 100, 3, Some(5_000)));
        assert_eq!(lead.decide(false, t0), None, "one of two");
        lead.report(report(1, 100, 1, Some(900)));
        // Quick: the stride doubles from 250 epochs, from the earliest work.
        assert_eq!(lead.decide(false, t0), Some(GateNews::Raise(900 + 500)));
        assert_eq!(
            lead.progress(99, t0).scheduled,
            Scheduled {
                bins: 4,
                next: Some(900)
            }
        );
        // A stale report counts for nothing.
        lead.report(report(0, 100, 0, None));
        lead.report(report(1, 100, 0, None));
        assert_eq!(lead.decide(false, t0), None);
        lead.report(report(0, 1400, 0, None));
        lead.report(report(1, 1400, 0, None));
        assert_eq!(lead.decide(false, t0), Some(GateNews::Finish(1400)));
        assert_eq!(lead.decide(true, t0), None, "decided once");
    }

    #[test]
    fn slow_rounds_shorten_the_stride_and_the_horizon_bounds_the_gate() {
        let t0 = Instant::now();
        let mut lead = Lead::new(1, 10, 1_000, EpochLen::MS, t0);
        lead.report(report(0, 10, 1, Some(10)));
        let slow = t0 + Duration::from_secs(1);
        assert_eq!(lead.decide(false, slow), Some(GateNews::Raise(10 + 125)));
        lead.report(report(0, 135, 1, Some(990)));
        assert_eq!(
            lead.decide(false, slow),
            Some(GateNews::Raise(1_000)),
            "at most the horizon"
        );
        lead.report(report(0, 1_000, 2, Some(1_500)));
        // Work beyond the horizon is not the drain's: it ends, not cut.
        assert_eq!(lead.decide(false, slow), Some(GateNews::Finish(1_000)));
    }

    #[test]
    fn quick_rounds_grow_the_stride_to_a_second_at_most() {
        let t0 = Instant::now();
        let mut lead = Lead::new(1, 0, Time::MAX, EpochLen::MS, t0);
        let mut gate = 0;
        for _ in 0..10 {
            lead.report(report(0, gate, 1, Some(gate)));
            match lead.decide(false, t0) {
                Some(GateNews::Raise(g)) => gate = g,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(lead.progress(0, t0).gate, gate);
        lead.report(report(0, gate, 1, Some(gate)));
        assert_eq!(lead.decide(false, t0), Some(GateNews::Raise(gate + 1000)));
    }

    #[test]
    fn a_worker_whose_input_stood_past_the_gate_counts_for_it() {
        let t0 = Instant::now();
        // Worker 1 sent epochs past the last before it heard of it: its drain starts at 130.
        let mut lead = Lead::new(2, 100, Time::MAX, EpochLen::MS, t0);
        lead.report(report(1, 130, 0, None));
        lead.report(report(0, 100, 1, Some(105)));
        assert_eq!(lead.decide(false, t0), Some(GateNews::Raise(105 + 500)));
        // Raised past it, worker 1 reports again; a late report of its older gate is stale.
        lead.report(report(0, 605, 0, None));
        assert_eq!(
            lead.decide(false, t0),
            None,
            "worker 1's report at 130 is behind 605"
        );
        lead.report(report(1, 605, 0, None));
        lead.report(report(1, 130, 4, Some(200)));
        assert_eq!(lead.decide(false, t0), Some(GateNews::Finish(605)));

        let mut lead = Lead::new(2, 100, Time::MAX, EpochLen::MS, t0);
        lead.report(report(1, 2_000, 0, None));
        lead.report(report(0, 100, 0, None));
        assert_eq!(lead.decide(false, t0), Some(GateNews::Finish(100)));
    }

    #[test]
    fn a_stop_ends_the_drain_at_the_gate_without_waiting_for_a_round() {
        let t0 = Instant::now();
        let mut lead = Lead::new(2, 50, Time::MAX, EpochLen::MS, t0);
        lead.report(report(0, 50, 3, Some(70)));
        assert_eq!(lead.decide(true, t0), Some(GateNews::Finish(50)));
        assert_eq!(lead.decide(true, t0), None);
    }
}
