//! The log: its lines, made from the job's events (and bin histories with them), and how
//! commands and bins are said to a person.

use megaflux_probe::event::{BalancePhase, Event, Outcome, Phase, Stamped};
use megaflux_probe::model::{MAX_BINS, TEXT_CHARS};
use megaflux_probe::wire::CommandRequest;

use super::Dash;

/// Lines the log keeps.
pub const LOG_LINES: usize = 2000;
/// Moves remembered per bin.
const BIN_HISTORY: usize = 16;

/// A bin's move: (logical time, from, to).
pub type PastMove = (u64, Option<u32>, Option<u32>);

/// What the log shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFilter {
    /// Every line.
    All,
    /// Plans and bin moves ([`LogKind::Migration`]).
    Migrations,
    /// Commands and their answers ([`LogKind::Command`]).
    Commands,
    /// What went wrong ([`LogKind::Problem`]).
    Problems,
}

impl LogFilter {
    pub(super) fn next(self) -> Self {
        match self {
            LogFilter::All => LogFilter::Migrations,
            LogFilter::Migrations => LogFilter::Commands,
            LogFilter::Commands => LogFilter::Problems,
            LogFilter::Problems => LogFilter::All,
        }
    }
    /// The filter's name in the log view's title.
    pub fn name(self) -> &'static str {
        match self {
            LogFilter::All => "all",
            LogFilter::Migrations => "migrations",
            LogFilter::Commands => "commands",
            LogFilter::Problems => "problems",
        }
    }
}

/// What a log line is about: the filters pick by it, and the log view colours by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogKind {
    /// The job and the feed: processes joining, the run starting and finishing, rejoins,
    /// recoveries, connections.
    Job,
    /// Plans starting and completing, bins moving.
    Migration,
    /// Commands: those this dashboard sent and the answers to them, and the job's
    /// reports of commands received and applied.
    Command,
    /// Something gone wrong: commands the job reports rejected, failures, lost bins,
    /// dropped events, a closed feed, a replay's unreadable line.
    Problem,
}

/// The most of a reason from the network a log line shows.
const REASON_CHARS: usize = 160;

/// One line of the log.
#[derive(Clone, Debug, PartialEq)]
pub struct LogLine {
    /// When, on the probe's clock, in seconds: the event's time, or the dashboard's
    /// [`Dash::now_s`] for its own lines.
    pub at_s: f64,
    /// What it is about.
    pub kind: LogKind,
    /// What happened, as a person reads it.
    pub text: String,
}

impl Dash {
    pub(super) fn push_log(&mut self, at_s: f64, kind: LogKind, text: String) {
        if self.log.len() == LOG_LINES {
            self.log.pop_front();
        }
        self.log.push_back(LogLine { at_s, kind, text });
    }

    /// Log lines and bin histories from an event (before the model applies it).
    pub(super) fn note(&mut self, e: &Stamped) {
        let line = match &e.event {
            Event::Hello { peers, bins, .. } => Some((
                LogKind::Job,
                format!("process {} joined: {peers} workers, {bins} bins", e.process),
            )),
            Event::JobStarted { worker, .. } if *worker == 0 => {
                Some((LogKind::Job, "the measured run started".into()))
            }
            Event::JobFinished { worker, .. } if *worker == 0 => {
                Some((LogKind::Job, "the run finished".into()))
            }
            Event::PlanStarted {
                strategy,
                target,
                steps,
                bins,
                purpose,
                ..
            } => Some((
                LogKind::Migration,
                match purpose.as_deref() {
                    Some("recovery") => {
                        format!("recovery {strategy}: {bins} bins get new standbys in {steps} steps")
                    }
                    Some("rebalance") => format!("rebalance {strategy}: {bins} bins in {steps} steps"),
                    _ => format!("plan {strategy} to {target}: {bins} bins in {steps} steps"),
                },
            )),
            Event::PlanCompleted {
                strategy, seconds, ..
            } => Some((
                LogKind::Migration,
                format!("plan {strategy} completed in {seconds:.3} s"),
            )),
            Event::Migration {
                phase: Phase::Issued,
                bin,
                time,
                from,
                to,
                copy,
                ..
            } => {
                // Bins the job cannot have get no history: it stays within the job's bins.
                if *bin < self.job.bins().unwrap_or(MAX_BINS) {
                    let h = self.history.entry(*bin).or_default();
                    if h.len() == BIN_HISTORY {
                        h.pop_front();
                    }
                    h.push_back((*time, *from, *to));
                }
                let (from, to) = (worker_name(*from), worker_name(*to));
                Some((
                    LogKind::Migration,
                    if *copy == Some(true) {
                        format!("bin {bin}: copied from {from} to {to} (a new replica) at time {time}")
                    } else {
                        format!("bin {bin}: {from} -> {to} at time {time}")
                    },
                ))
            }
            Event::Migration {
                phase: Phase::Completed,
                bin,
                time,
                ..
            } => Some((
                LogKind::Migration,
                format!("bin {bin}: move at time {time} completed"),
            )),
            Event::Command {
                outcome,
                command,
                request,
                time,
                reason,
                ..
            } => {
                // The request as a person would say it (traces before format 2 have only
                // the command's Rust form).
                let what = request
                    .as_ref()
                    .and_then(|r| serde_json::from_value::<CommandRequest>(r.clone()).ok())
                    .map_or_else(|| command.clone(), |r| describe_request(&r));
                let at = time.map_or(String::new(), |t| format!(" at time {t}"));
                Some((
                    if *outcome == Outcome::Rejected {
                        LogKind::Problem
                    } else {
                        LogKind::Command
                    },
                    match reason {
                        Some(r) => format!("{}: {what}{at}: {r}", outcome.name()),
                        None => format!("{}: {what}{at}", outcome.name()),
                    },
                ))
            }
            Event::Balance {
                phase,
                imbalance,
                predicted,
                bins,
                bytes,
                strategy,
                reason,
                ..
            } => {
                // A trace's line may be long: the log keeps what a model keeps of a text.
                let reason = reason.as_deref().map(|r| megaflux::bins::cut(r, TEXT_CHARS));
                let strategy = strategy.as_deref().map(|s| megaflux::bins::cut(s, TEXT_CHARS));
                let plan = || {
                    format!(
                        "{} bins ({}) by {}, {:.2}x to {:.2}x predicted",
                        bins.unwrap_or(0),
                        megaflux::size::human(bytes.unwrap_or(0)),
                        strategy.as_deref().unwrap_or("?"),
                        imbalance.unwrap_or(f64::NAN),
                        predicted.unwrap_or(f64::NAN)
                    )
                };
                // The balancer's reason says the plan; an event without one, the figures.
                let what = || reason.clone().unwrap_or_else(plan);
                let why = reason.as_deref().map_or(String::new(), |r| format!(": {r}"));
                match phase {
                    BalancePhase::Measured | BalancePhase::Refreshed => None,
                    BalancePhase::Suggested => Some((
                        LogKind::Migration,
                        format!("balancer proposes (a accepts): {}", what()),
                    )),
                    BalancePhase::Issued => {
                        Some((LogKind::Migration, format!("balancer moves bins: {}", what())))
                    }
                    BalancePhase::Withdrawn => {
                        Some((LogKind::Migration, format!("balancer withdrew its proposal{why}")))
                    }
                    BalancePhase::Refused => {
                        Some((LogKind::Problem, format!("balancer's plan refused{why}")))
                    }
                    BalancePhase::Achieved => Some((
                        LogKind::Migration,
                        format!(
                            "balancer's plan achieved {:.2}x ({:.2}x predicted)",
                            imbalance.unwrap_or(f64::NAN),
                            predicted.unwrap_or(f64::NAN)
                        ),
                    )),
                }
            }
            Event::InputRetry {
                partition,
                offset,
                reason,
            } => Some((
                LogKind::Problem,
                format!(
                    "input: partition {partition} at offset {offset}: {}; asking again every second",
                    reason.chars().take(REASON_CHARS).collect::<String>()
                ),
            )),
            Event::Dropped { place, count } => Some((
                LogKind::Problem,
                format!("process {} dropped {count} events ({place})", e.process),
            )),
            Event::Failure {
                worker,
                promoted,
                degraded,
                lost,
                ..
            } => Some((
                LogKind::Problem,
                match lost {
                    Some(bins) => format!("worker {worker} failed: bins {bins} lost their last replica"),
                    None => format!(
                        "worker {worker} failed: {} standbys promoted, {} bins degraded",
                        promoted.unwrap_or(0),
                        degraded.unwrap_or(0)
                    ),
                },
            )),
            Event::Rejoin { worker, time } => Some((
                LogKind::Job,
                format!("worker {worker} rejoins at time {time}, empty"),
            )),
            Event::Recovery { worker, bins } => Some((
                LogKind::Job,
                format!(
                    "recovered from worker {worker}'s failure: {} bins have two replicas again",
                    bins.len()
                ),
            )),
            Event::Restart {
                generation,
                from,
                lost,
                survivors,
                joined,
            } => {
                let why = match (lost.is_empty(), joined.is_empty()) {
                    (false, true) => format!("process {lost} lost"),
                    (true, false) => format!("process {joined} joined"),
                    (false, false) => format!("process {lost} lost, process {joined} joined"),
                    (true, true) => "a restart".to_string(),
                };
                Some((
                    if lost.is_empty() {
                        LogKind::Job
                    } else {
                        LogKind::Problem
                    },
                    format!(
                        "{why}: the job restarted on processes {survivors} from time {from} (restart {generation})"
                    ),
                ))
            }
            Event::Lost { time, bins } => Some((
                LogKind::Problem,
                format!("bins {bins} lost their last replica at time {time}: the job stops"),
            )),
            _ => None,
        };
        if let Some((kind, text)) = line {
            self.push_log(e.at_s, kind, text);
        }
    }

    /// The log lines the filter lets through.
    pub fn filtered_log(&self) -> impl DoubleEndedIterator<Item = &LogLine> {
        let filter = self.log_filter;
        self.log.iter().filter(move |l| match filter {
            LogFilter::All => true,
            LogFilter::Migrations => l.kind == LogKind::Migration,
            LogFilter::Commands => l.kind == LogKind::Command,
            LogFilter::Problems => l.kind == LogKind::Problem,
        })
    }
}

fn worker_name(w: Option<u32>) -> String {
    w.map_or("?".into(), |w| format!("worker {w}"))
}

/// A command as the log says it: `move bins 1-3 to worker 2`, `fluid plan to pack:1`.
pub fn describe_request(r: &CommandRequest) -> String {
    r.describe()
}

/// "bin 3", "bins 3-9" or "bins 0-3,7" (sorted, each bin once; a long list cut).
pub fn describe_bins(bins: &[usize]) -> String {
    megaflux::bins::describe(bins)
}
