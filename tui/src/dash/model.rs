//! The dashboard's state: the job as its events describe it, plus what the person looking at
//! it has selected. It changes only through [`Dash::update`] with a [`Msg`]; drawing reads it.
//! Live subscriptions, trace files and tests all feed it the same messages.

use std::collections::{BTreeMap, VecDeque};

use megaflux_probe::event::{Event, Outcome, Phase, Stamped};
use megaflux_probe::model::JobModel;
use megaflux_probe::wire::CommandRequest;
use megaflux_replay::player::{Output, Position, Request, Timeline};
use ratatui::crossterm::event::KeyEvent;

use super::keys::{self, Action};
use super::timeline::{self, Replay};

/// Lines the log keeps.
pub const LOG_LINES: usize = 2000;
/// Moves remembered per bin.
const BIN_HISTORY: usize = 16;

/// A bin's move: (logical time, from, to).
pub type PastMove = (u64, Option<u32>, Option<u32>);

/// The views, in tab order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tab {
    Bins,
    Workers,
    Latency,
    Frontiers,
    Migrations,
    Log,
}

pub const TABS: [Tab; 6] = [
    Tab::Bins,
    Tab::Workers,
    Tab::Latency,
    Tab::Frontiers,
    Tab::Migrations,
    Tab::Log,
];

impl Tab {
    pub fn title(self) -> &'static str {
        match self {
            Tab::Bins => "Bins",
            Tab::Workers => "Workers",
            Tab::Latency => "Latency",
            Tab::Frontiers => "Frontiers",
            Tab::Migrations => "Migrations",
            Tab::Log => "Log",
        }
    }
    fn index(self) -> usize {
        TABS.iter().position(|t| *t == self).unwrap_or(0)
    }
}

/// Where the dashboard's events come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Connection {
    Connecting(String),
    Live(String),
    Trace(String),
    Closed(String),
}

/// What the log shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFilter {
    All,
    Migrations,
    Commands,
    Problems,
}

impl LogFilter {
    fn next(self) -> Self {
        match self {
            LogFilter::All => LogFilter::Migrations,
            LogFilter::Migrations => LogFilter::Commands,
            LogFilter::Commands => LogFilter::Problems,
            LogFilter::Problems => LogFilter::All,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            LogFilter::All => "all",
            LogFilter::Migrations => "migrations",
            LogFilter::Commands => "commands",
            LogFilter::Problems => "problems",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogKind {
    Job,
    Migration,
    Command,
    Problem,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LogLine {
    pub at_s: f64,
    pub kind: LogKind,
    pub text: String,
}

/// Strategies and targets the plan dialog offers.
pub const STRATEGIES: [&str; 5] = ["fluid", "matched", "batched:8", "all-at-once", "fluid+pipelined"];

/// A dialog over the current view.
#[derive(Clone, Debug, PartialEq)]
pub enum Dialog {
    /// Move `bins` to `worker`: the view previews every worker's state after it.
    Move {
        bins: Vec<usize>,
        worker: usize,
    },
    /// Start a plan: `strategy` indexes [`STRATEGIES`], `target` [`Dash::targets`].
    Plan {
        strategy: usize,
        target: usize,
    },
    /// Fail `worker` (`rejoin`: bring a failed one back).
    Worker {
        worker: usize,
        rejoin: bool,
    },
    /// Replays: go to the time typed so far (seconds on the trace's clock).
    GoTo {
        typed: String,
    },
    Help,
}

/// What the dashboard asks of the world.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    Send {
        request: u64,
        command: CommandRequest,
    },
    /// Replays: ask the player.
    Play(Request),
    Quit,
}

/// Everything the dashboard knows from outside.
#[derive(Clone, Debug)]
pub enum Msg {
    Snapshot(Box<JobModel>),
    Events(Vec<Stamped>),
    Answer {
        request: u64,
        outcome: Outcome,
        reason: Option<String>,
    },
    Connection(Connection),
    /// The probe's clock now (for the views of a live job).
    Clock(f64),
    Action(Action),
    /// A key press, read as an action in the dashboard's state (digits pick a worker in a
    /// dialog, a view outside one).
    Key(KeyEvent),
    /// Replays: the trace's span and marks, sent first.
    Timeline(Timeline),
    /// Replays: the job at the player's new position; the view starts over from it.
    Reset(Box<JobModel>),
    /// Replays: where the player stands.
    Position(Position),
    /// Something went wrong that the person should know of (a replay's unreadable line).
    Problem(String),
    /// Events this view had no room for so far (its queue was full): its own drops, apart
    /// from the job's (`dropped` events).
    Lost(u64),
}

impl From<Output> for Msg {
    /// A replay player's output as the dashboard takes it.
    fn from(o: Output) -> Msg {
        match o {
            Output::Timeline(t) => Msg::Timeline(t),
            Output::Reset(m) => Msg::Reset(m),
            Output::Events(e) => Msg::Events(e),
            Output::Position(p) => Msg::Position(p),
            Output::Problem(p) => Msg::Problem(p),
        }
    }
}

/// The dashboard's whole state.
#[derive(Clone, Debug)]
pub struct Dash {
    pub job: JobModel,
    /// The job as it was when the view was paused.
    pub frozen: Option<JobModel>,
    pub tab: Tab,
    /// The bin under the cursor.
    pub cursor: usize,
    /// The other end of a selected range, if one is being selected.
    pub anchor: Option<usize>,
    /// Which operator the bins view shows (index into the job's operators).
    pub operator: usize,
    pub dialog: Option<Dialog>,
    pub connection: Connection,
    pub recording: Option<String>,
    pub log: VecDeque<LogLine>,
    pub log_filter: LogFilter,
    /// Moves of each bin.
    pub history: BTreeMap<u32, VecDeque<PastMove>>,
    next_request: u64,
    /// Commands sent and not answered: request → what it was.
    pub pending: BTreeMap<u64, String>,
    /// The last answer or notice, for the status bar.
    pub notice: Option<String>,
    pub now_s: f64,
    /// Whether the job can take commands (live, not a trace).
    pub commandable: bool,
    /// Bins in one row of the bins view as last drawn (for up and down).
    pub row_len: usize,
    /// The timeline, when the dashboard plays a trace.
    pub replay: Option<Replay>,
    /// Events this view lost because it fell behind.
    pub lost: u64,
}

impl Dash {
    /// `recording` names the trace file, if the job writes one.
    pub fn new(connection: Connection, recording: Option<String>) -> Self {
        let commandable = !matches!(connection, Connection::Trace(_));
        Dash {
            job: JobModel::new(),
            frozen: None,
            tab: Tab::Bins,
            cursor: 0,
            anchor: None,
            operator: 0,
            dialog: None,
            connection,
            recording,
            log: VecDeque::new(),
            log_filter: LogFilter::All,
            history: BTreeMap::new(),
            next_request: 0,
            pending: BTreeMap::new(),
            notice: None,
            now_s: 0.0,
            commandable,
            row_len: 32,
            replay: None,
            lost: 0,
        }
    }

    /// The job as the views show it: frozen while paused.
    pub fn view(&self) -> &JobModel {
        self.frozen.as_ref().unwrap_or(&self.job)
    }

    pub fn paused(&self) -> bool {
        self.frozen.is_some()
    }

    /// Bins per operator (0 before the job said hello).
    pub fn bins(&self) -> usize {
        self.job.bins().unwrap_or(0) as usize
    }

    pub fn peers(&self) -> usize {
        self.job.peers as usize
    }

    /// The bins in the order the bins view shows them: by owner, then by number.
    pub fn order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.bins()).collect();
        order.sort_by_key(|b| (self.owner(*b).unwrap_or(u32::MAX), *b));
        order
    }

    /// The selected bins: from the anchor to the cursor in view order, or the cursor's bin.
    pub fn selection(&self) -> Vec<usize> {
        if self.bins() == 0 {
            return Vec::new();
        }
        let order = self.order();
        let at = |bin: usize| order.iter().position(|b| *b == bin).unwrap_or(0);
        let (a, c) = (at(self.anchor.unwrap_or(self.cursor)), at(self.cursor));
        let mut chosen = order[a.min(c)..=a.max(c)].to_vec();
        chosen.sort_unstable();
        chosen
    }

    /// Moves the cursor `delta` places in view order.
    fn step(&mut self, delta: isize) {
        let order = self.order();
        if order.is_empty() {
            return;
        }
        let at = order.iter().position(|b| *b == self.cursor).unwrap_or(0) as isize;
        let to = (at + delta).clamp(0, order.len() as isize - 1);
        self.cursor = order[to as usize];
    }

    /// The operator the bins view shows, and its bins.
    pub fn operator_bins(&self) -> Option<(&String, &Vec<megaflux_probe::model::BinView>)> {
        let ops = &self.view().operators;
        ops.iter().nth(self.operator.min(ops.len().saturating_sub(1)))
    }

    /// The primary of a bin: where the control plane placed it, else where the first
    /// operator that knows it reported it.
    pub fn owner(&self, bin: usize) -> Option<u32> {
        let job = self.view();
        match job.placement.get(bin) {
            Some(holders) => holders.primary,
            None => job
                .operators
                .values()
                .find_map(|bins| bins.get(bin).and_then(|b| b.owner)),
        }
    }

    /// The standby of a bin, if the job keeps one and it has one.
    pub fn standby(&self, bin: usize) -> Option<u32> {
        let job = self.view();
        match job.placement.get(bin) {
            Some(h) => h.standby,
            None => job
                .operators
                .values()
                .find_map(|bins| bins.get(bin).and_then(|b| b.standby)),
        }
    }

    /// Whether a bin of a replicated job has one replica left.
    pub fn degraded(&self, bin: usize) -> bool {
        let job = self.view();
        job.replicated && job.placement.get(bin).is_some_and(|h| h.degraded())
    }

    /// Whether a bin lost every replica.
    pub fn lost(&self, bin: usize) -> bool {
        self.view()
            .placement
            .get(bin)
            .is_some_and(|h| h.primary.is_none())
    }

    /// Targets the plan dialog offers for this job.
    pub fn targets(&self) -> Vec<String> {
        let mut t = vec!["uniform".to_string()];
        t.extend((1..self.peers()).map(|n| format!("pack:{n}")));
        t.extend((0..self.peers()).map(|w| format!("drain:{w}")));
        t
    }

    /// Every worker's (bins, keys, bytes) summed over operators, after moving `bins` to
    /// `worker` (or as it is, when `moved` is empty).
    pub fn worker_totals(&self, moved: &[usize], worker: usize) -> Vec<(u64, u64, u64)> {
        let mut totals = vec![(0u64, 0u64, 0u64); self.peers().max(1)];
        let bins = self.bins();
        for bin in 0..bins {
            let owner = if moved.contains(&bin) {
                Some(worker as u32)
            } else {
                self.owner(bin)
            };
            let Some(owner) = owner else { continue };
            let Some(t) = totals.get_mut(owner as usize) else {
                continue;
            };
            t.0 += 1;
            for ops in self.view().operators.values() {
                if let Some(b) = ops.get(bin) {
                    t.1 += b.keys;
                    t.2 += b.bytes;
                }
            }
        }
        totals
    }

    /// Applies one message; returns what the world must do.
    pub fn update(&mut self, msg: Msg) -> Vec<Effect> {
        match msg {
            Msg::Snapshot(model) => {
                self.job = *model;
                self.now_s = self.now_s.max(self.job.now_s);
                Vec::new()
            }
            Msg::Events(events) => {
                for e in &events {
                    self.note(e);
                    self.job.apply(e);
                }
                self.now_s = self.now_s.max(self.job.now_s);
                Vec::new()
            }
            Msg::Answer {
                request,
                outcome,
                reason,
            } => {
                let what = self
                    .pending
                    .remove(&request)
                    .unwrap_or_else(|| format!("command {request}"));
                let text = match (outcome, reason) {
                    (Outcome::Rejected, Some(r)) => format!("rejected: {what}: {r}"),
                    (outcome, _) => format!("{}: {what}", outcome.name()),
                };
                self.push_log(self.now_s, LogKind::Command, text.clone());
                self.notice = Some(text);
                Vec::new()
            }
            Msg::Connection(c) => {
                let text = match &c {
                    Connection::Connecting(a) => format!("connecting to {a}"),
                    Connection::Live(a) => format!("connected to {a}"),
                    Connection::Trace(p) => format!("reading trace {p}"),
                    Connection::Closed(why) => format!("disconnected: {why}"),
                };
                let kind = if matches!(c, Connection::Closed(_)) {
                    LogKind::Problem
                } else {
                    LogKind::Job
                };
                self.push_log(self.now_s, kind, text);
                self.connection = c;
                Vec::new()
            }
            Msg::Clock(now) => {
                self.now_s = self.now_s.max(now);
                Vec::new()
            }
            Msg::Action(action) => self.act(action),
            Msg::Key(key) => match keys::action(key, self.dialog.is_some()) {
                Some(action) => self.act(action),
                None => Vec::new(),
            },
            Msg::Timeline(timeline) => {
                self.replay = Some(Replay::new(timeline));
                Vec::new()
            }
            Msg::Reset(model) => {
                // The events before the new position are in the model, not in the log.
                self.log.clear();
                self.history.clear();
                self.frozen = None;
                self.job = *model;
                self.now_s = self.job.now_s;
                Vec::new()
            }
            Msg::Problem(text) => {
                self.push_log(self.now_s, LogKind::Problem, text.clone());
                self.notice = Some(text);
                Vec::new()
            }
            Msg::Lost(total) => {
                self.lost = self.lost.max(total);
                Vec::new()
            }
            Msg::Position(position) => {
                self.now_s = position.at_s;
                if let Some(r) = self.replay.as_mut() {
                    r.position = position;
                }
                Vec::new()
            }
        }
    }

    fn act(&mut self, action: Action) -> Vec<Effect> {
        if let Some(dialog) = self.dialog.clone() {
            return self.act_in_dialog(dialog, action);
        }
        if let Some(replay) = &self.replay {
            if let Some(request) = replay.request(action) {
                return vec![Effect::Play(request)];
            }
            if action == Action::GoTo {
                self.dialog = Some(Dialog::GoTo { typed: String::new() });
                return Vec::new();
            }
        }
        let bins = self.bins();
        let row = self.row_len.max(1) as isize;
        match action {
            Action::Quit => return vec![Effect::Quit],
            Action::NextTab => self.tab = TABS[(self.tab.index() + 1) % TABS.len()],
            Action::PrevTab => self.tab = TABS[(self.tab.index() + TABS.len() - 1) % TABS.len()],
            Action::Tab(i) => self.tab = TABS[i.min(TABS.len() - 1)],
            Action::Left => self.step(-1),
            Action::Right => self.step(1),
            Action::Up => self.step(-row),
            Action::Down => self.step(row),
            Action::Select => {
                self.anchor = match self.anchor {
                    Some(_) => None,
                    None => Some(self.cursor),
                }
            }
            Action::NextOperator => {
                let n = self.view().operators.len().max(1);
                self.operator = (self.operator + 1) % n;
            }
            Action::Move => {
                if !self.commandable {
                    self.notice = Some("a trace cannot be commanded".into());
                } else if bins > 0 && self.peers() > 0 {
                    let owner = self.owner(self.cursor).unwrap_or(0) as usize;
                    self.dialog = Some(Dialog::Move {
                        bins: self.selection(),
                        worker: (owner + 1) % self.peers(),
                    });
                }
            }
            Action::Plan => {
                if !self.commandable {
                    self.notice = Some("a trace cannot be commanded".into());
                } else if self.peers() > 0 {
                    self.dialog = Some(Dialog::Plan {
                        strategy: 0,
                        target: 0,
                    });
                }
            }
            Action::Cancel => {
                if self.commandable {
                    return self.send(CommandRequest::CancelPlan, "cancel the running plan".into());
                }
            }
            Action::Fail | Action::Rejoin => {
                let rejoin = action == Action::Rejoin;
                let failed = &self.job.failed;
                // Propose a worker the command applies to: a live one to fail, a failed one
                // to bring back.
                let worker = (0..self.peers()).find(|w| failed.contains(&(*w as u32)) == rejoin);
                match worker {
                    _ if !self.commandable => self.notice = Some("a trace cannot be commanded".into()),
                    Some(worker) => self.dialog = Some(Dialog::Worker { worker, rejoin }),
                    None if rejoin => self.notice = Some("no worker has failed".into()),
                    None => self.notice = Some("every worker has failed".into()),
                }
            }
            Action::Pause => {
                self.frozen = match self.frozen {
                    Some(_) => None,
                    None => Some(self.job.clone()),
                }
            }
            Action::Record => match self.job.recording {
                Some(on) if self.commandable => {
                    let what = if on { "pause recording" } else { "resume recording" };
                    return self.send(CommandRequest::Record { on: !on }, what.into());
                }
                _ => self.notice = Some("this job records nothing (run it with --record FILE)".into()),
            },
            Action::Help => self.dialog = Some(Dialog::Help),
            Action::LogFilter => self.log_filter = self.log_filter.next(),
            Action::Confirm | Action::Back | Action::Digit(_) | Action::Erase => {}
            Action::Step
            | Action::StepBack
            | Action::NextMark
            | Action::PrevMark
            | Action::Faster
            | Action::Slower
            | Action::SeekForward
            | Action::SeekBack
            | Action::GoTo => self.notice = Some("that key is for replays (megaflux replay FILE)".into()),
        }
        Vec::new()
    }

    fn act_in_dialog(&mut self, dialog: Dialog, action: Action) -> Vec<Effect> {
        match (dialog, action) {
            (_, Action::Back) | (Dialog::Help, _) => self.dialog = None,
            (_, Action::Quit) => return vec![Effect::Quit],
            (Dialog::GoTo { typed: text }, action) => {
                if action == Action::Confirm {
                    self.dialog = None;
                    return match text.parse::<f64>() {
                        Ok(at_s) => vec![Effect::Play(Request::SeekTo(at_s))],
                        Err(_) => {
                            self.notice = Some(format!("`{text}` is not a time in seconds"));
                            Vec::new()
                        }
                    };
                }
                if let Some(typed) = timeline::typed(&text, action) {
                    self.dialog = Some(Dialog::GoTo { typed });
                }
            }
            (Dialog::Move { bins, worker }, action) => {
                let peers = self.peers().max(1);
                match action {
                    Action::Left | Action::Up => {
                        self.dialog = Some(Dialog::Move {
                            bins,
                            worker: (worker + peers - 1) % peers,
                        })
                    }
                    Action::Right | Action::Down => {
                        self.dialog = Some(Dialog::Move {
                            bins,
                            worker: (worker + 1) % peers,
                        })
                    }
                    Action::Digit(d) if (d as usize) < peers => {
                        self.dialog = Some(Dialog::Move {
                            bins,
                            worker: d as usize,
                        })
                    }
                    Action::Confirm => {
                        self.dialog = None;
                        self.anchor = None;
                        let what = format!("move {} to worker {worker}", describe_bins(&bins));
                        return self.send(
                            CommandRequest::MoveBins {
                                bins,
                                worker,
                                standby: false,
                            },
                            what,
                        );
                    }
                    _ => {}
                }
            }
            (Dialog::Worker { worker, rejoin }, action) => {
                let peers = self.peers().max(1);
                let worker = match action {
                    Action::Left | Action::Up => (worker + peers - 1) % peers,
                    Action::Right | Action::Down => (worker + 1) % peers,
                    Action::Digit(d) if (d as usize) < peers => d as usize,
                    Action::Confirm => {
                        self.dialog = None;
                        return if rejoin {
                            self.send(
                                CommandRequest::Rejoin { worker },
                                format!("rejoin worker {worker}"),
                            )
                        } else {
                            self.send(CommandRequest::Fail { worker }, format!("fail worker {worker}"))
                        };
                    }
                    _ => worker,
                };
                self.dialog = Some(Dialog::Worker { worker, rejoin });
            }
            (Dialog::Plan { strategy, target }, action) => {
                let targets = self.targets().len().max(1);
                let (s, t) = match action {
                    Action::Left => ((strategy + STRATEGIES.len() - 1) % STRATEGIES.len(), target),
                    Action::Right => ((strategy + 1) % STRATEGIES.len(), target),
                    Action::Up => (strategy, (target + targets - 1) % targets),
                    Action::Down => (strategy, (target + 1) % targets),
                    Action::Confirm => {
                        self.dialog = None;
                        let schedule = STRATEGIES[strategy].to_string();
                        let target = self
                            .targets()
                            .get(target)
                            .cloned()
                            .unwrap_or_else(|| "uniform".into());
                        let what = format!("{schedule} plan to {target}");
                        return self.send(CommandRequest::StartPlan { schedule, target }, what);
                    }
                    _ => (strategy, target),
                };
                self.dialog = Some(Dialog::Plan {
                    strategy: s,
                    target: t,
                });
            }
        }
        Vec::new()
    }

    fn send(&mut self, command: CommandRequest, what: String) -> Vec<Effect> {
        let request = self.next_request;
        self.next_request += 1;
        self.notice = Some(format!("sent: {what}"));
        self.push_log(self.now_s, LogKind::Command, format!("sent: {what}"));
        self.pending.insert(request, what);
        vec![Effect::Send { request, command }]
    }

    fn push_log(&mut self, at_s: f64, kind: LogKind, text: String) {
        if self.log.len() == LOG_LINES {
            self.log.pop_front();
        }
        self.log.push_back(LogLine { at_s, kind, text });
    }

    /// Log lines and bin histories from an event (before the model applies it).
    fn note(&mut self, e: &Stamped) {
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
                let h = self.history.entry(*bin).or_default();
                if h.len() == BIN_HISTORY {
                    h.pop_front();
                }
                h.push_back((*time, *from, *to));
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
    match r {
        CommandRequest::MoveBins {
            bins,
            worker,
            standby,
        } => format!(
            "move {}{} to worker {worker}",
            if *standby { "the standbys of " } else { "" },
            describe_bins(bins)
        ),
        CommandRequest::StartPlan { schedule, target } => format!("{schedule} plan to {target}"),
        CommandRequest::CancelPlan => "cancel the running plan".into(),
        CommandRequest::Record { on: true } => "resume recording".into(),
        CommandRequest::Record { on: false } => "pause recording".into(),
        CommandRequest::Fail { worker } => format!("fail worker {worker}"),
        CommandRequest::Rejoin { worker } => format!("rejoin worker {worker}"),
    }
}

/// "bin 3", "bins 3-9" or "bins 0-3,7" (sorted, each bin once).
pub fn describe_bins(bins: &[usize]) -> String {
    let mut sorted: Vec<u32> = bins.iter().map(|b| *b as u32).collect();
    sorted.sort_unstable();
    sorted.dedup();
    match sorted.as_slice() {
        [] => "no bins".into(),
        [one] => format!("bin {one}"),
        many => format!("bins {}", megaflux::bins::list(many)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Stamped {
        Stamped {
            at_s: 0.0,
            process: 0,
            event: Event::Hello {
                processes: 1,
                workers: 2,
                peers: 2,
                bins: 16,
                config: serde_json::json!({}),
                anchor_unix_s: None,
            },
        }
    }

    fn bin(bin: u32, worker: u32, keys: u64) -> Stamped {
        Stamped {
            at_s: 0.1,
            process: 0,
            event: Event::BinSize {
                worker,
                operator: "count".into(),
                bin,
                keys,
                bytes: keys * 8,
                standby: false,
            },
        }
    }

    fn job() -> Dash {
        let mut d = Dash::new(Connection::Live("test".into()), None);
        let mut events = vec![hello()];
        events.extend((0..16).map(|b| bin(b, b % 2, 10)));
        d.update(Msg::Events(events));
        d
    }

    #[test]
    fn moving_the_selected_bins_asks_and_previews() {
        let mut d = job();
        // The view lists worker 0's bins (0, 2, ..., 14) then worker 1's (1, 3, ...).
        for _ in 0..8 {
            d.update(Msg::Action(Action::Right));
        }
        assert_eq!(d.cursor, 1);
        d.update(Msg::Action(Action::Select));
        d.update(Msg::Action(Action::Right));
        d.update(Msg::Action(Action::Right));
        assert_eq!(d.selection(), vec![1, 3, 5]);
        d.update(Msg::Action(Action::Move));
        // The bins live on worker 1: the dialog proposes the next worker.
        assert_eq!(
            d.dialog,
            Some(Dialog::Move {
                bins: vec![1, 3, 5],
                worker: 0
            })
        );
        assert_eq!(d.worker_totals(&[1, 3, 5], 0), vec![(11, 110, 880), (5, 50, 400)]);
        let effects = d.update(Msg::Action(Action::Confirm));
        assert_eq!(
            effects,
            vec![Effect::Send {
                request: 0,
                command: CommandRequest::MoveBins {
                    bins: vec![1, 3, 5],
                    worker: 0,
                    standby: false,
                }
            }]
        );
        assert!(d.dialog.is_none());
        d.update(Msg::Answer {
            request: 0,
            outcome: Outcome::Rejected,
            reason: Some("a migration plan is already running".into()),
        });
        assert!(d.notice.as_deref().unwrap_or("").contains("already running"));
        assert!(d.pending.is_empty());
    }

    #[test]
    fn plans_pick_strategy_and_target() {
        let mut d = job();
        d.update(Msg::Action(Action::Plan));
        d.update(Msg::Action(Action::Right));
        d.update(Msg::Action(Action::Down));
        let effects = d.update(Msg::Action(Action::Confirm));
        assert_eq!(
            effects,
            vec![Effect::Send {
                request: 0,
                command: CommandRequest::StartPlan {
                    schedule: "matched".into(),
                    target: "pack:1".into()
                }
            }]
        );
    }

    #[test]
    fn pausing_freezes_the_view_not_the_job() {
        let mut d = job();
        d.update(Msg::Action(Action::Pause));
        d.update(Msg::Events(vec![bin(0, 1, 99)]));
        assert_eq!(d.view().operators["count"][0].keys, 10);
        assert_eq!(d.job.operators["count"][0].keys, 99);
        d.update(Msg::Action(Action::Pause));
        assert_eq!(d.view().operators["count"][0].keys, 99);
    }

    #[test]
    fn traces_take_no_commands_and_tabs_wrap() {
        let mut d = Dash::new(Connection::Trace("t.jsonl".into()), None);
        d.update(Msg::Events(vec![hello()]));
        assert!(d.update(Msg::Action(Action::Move)).is_empty());
        assert!(d.dialog.is_none());
        d.update(Msg::Action(Action::PrevTab));
        assert_eq!(d.tab, Tab::Log);
        d.update(Msg::Action(Action::NextTab));
        assert_eq!(d.tab, Tab::Bins);
    }
}
