//! The dashboard's state: the job as its events describe it, plus what the person looking at
//! it has selected. It changes only through [`Dash::update`] with a [`Msg`]; drawing reads it.
//! Live subscriptions, trace files and tests all feed it the same messages.
//!
//! * `bins`: the bins as the views order and select them, and what a move would do.
//! * `dialog`: the dialogs and what keys do in them.
//! * `log`: the log's lines, made from events, and how commands and bins are said.
//! * `feed`: what the header and the status bar say of the feed: throughput, losses,
//!   staleness.

mod bins;
mod dialog;
mod feed;
mod log;

use std::collections::{BTreeMap, VecDeque};

use megaflux_probe::event::{Event, Outcome, Stamped};
use megaflux_probe::model::{JobModel, MAX_AT_S};
use megaflux_probe::wire::CommandRequest;
use megaflux_replay::player::{Output, Position, Request, Timeline};
use ratatui::crossterm::event::KeyEvent;

use super::keys::{self, Action};
use super::timeline::Replay;

pub use dialog::{Dialog, MODES, STRATEGIES};
pub use feed::STALE_AFTER_S;
pub use log::{LOG_LINES, LogFilter, LogKind, LogLine, PastMove, describe_bins, describe_request};

/// The views, in tab order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tab {
    /// Every bin grouped by its worker, shaded by keys, moves marked by phase; the
    /// selected bin's details.
    Bins,
    /// Per worker: bins, standbys, keys and state held, records applied and sent per
    /// second, busy %, and the skew.
    Workers,
    /// p50/p99/max per latency window on a log scale, migrations marked, each plan's
    /// p99 and max during it.
    Latency,
    /// Per worker and operator: the applied and control frontiers, the lag behind the
    /// input, and why pending moves have not applied.
    Frontiers,
    /// The running plan's progress and ETA, and finished plans with their figures.
    Migrations,
    /// Events and command answers, filtered by [`Dash::log_filter`].
    Log,
}

/// Every view in tab order: `1`–`6` pick them by index.
pub const TABS: [Tab; 6] = [
    Tab::Bins,
    Tab::Workers,
    Tab::Latency,
    Tab::Frontiers,
    Tab::Migrations,
    Tab::Log,
];

impl Tab {
    /// The view's name on its tab.
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
    /// Trying to reach the collector at this address.
    Connecting(String),
    /// Subscribed to the collector at this address: a live job.
    Live(String),
    /// Reading the trace file at this path: no commands.
    Trace(String),
    /// The feed ended, for this reason; the views keep showing the job as it last was.
    Closed(String),
}

/// What the dashboard asks of the world.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Send a command to the live job; its answer comes back as [`Msg::Answer`].
    Send {
        /// The dashboard's number for the command, from 0 on; the answer carries it.
        request: u64,
        /// The command.
        command: CommandRequest,
    },
    /// Replays: ask the player.
    Play(Request),
    /// The person quit: close the dashboard.
    Quit,
    /// Paint the whole screen again: a cluster forming or restarting may have written over
    /// it (timely prints while it waits for connections).
    Repaint,
}

/// Everything the dashboard knows from outside.
#[derive(Clone, Debug)]
pub enum Msg {
    /// The collector's whole model of the job, sent once on subscribing: it replaces the
    /// dashboard's.
    Snapshot(Box<JobModel>),
    /// The job's events, in order, from its collector or a replay's player: each goes to
    /// the log and bin histories, then into the model.
    Events(Vec<Stamped>),
    /// The job's answer to a command this dashboard sent: logged and shown in the status
    /// bar.
    Answer {
        /// The number [`Effect::Send`] gave the command.
        request: u64,
        /// Whether the job applied or rejected it.
        outcome: Outcome,
        /// Why it was rejected, if it was.
        reason: Option<String>,
    },
    /// Where the events come from, or how that stands, changed: logged and shown in the
    /// status bar.
    Connection(Connection),
    /// The probe's clock now (for the views of a live job).
    Clock(f64),
    /// Seconds since the dashboard started, from its own clock, every few hundred
    /// milliseconds: how long ago the feed last said anything.
    Tick(f64),
    /// The collector's number for this view (its drops are reported under it).
    Subscribed(u64),
    /// An action, taken as it is whatever the state (unlike a [`Msg::Key`]); tests send
    /// these.
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

/// What the bins view's heat shows of each bin (`v` goes to the next).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heat {
    /// Keys in the bin.
    Keys,
    /// Its state's estimated bytes.
    Bytes,
    /// Records applied per second (its load).
    Load,
}

impl Heat {
    /// The next one, wrapping around.
    pub fn next(self) -> Heat {
        match self {
            Heat::Keys => Heat::Bytes,
            Heat::Bytes => Heat::Load,
            Heat::Load => Heat::Keys,
        }
    }

    /// As the legend names it.
    pub fn name(self) -> &'static str {
        match self {
            Heat::Keys => "keys",
            Heat::Bytes => "bytes",
            Heat::Load => "records/s",
        }
    }
}

/// The dashboard's whole state.
#[derive(Clone, Debug)]
pub struct Dash {
    /// The job as the feed describes it, always current (also while the view is paused);
    /// the views read [`Dash::view`].
    pub job: JobModel,
    /// The job as it was when the view was paused.
    pub frozen: Option<JobModel>,
    /// The view shown.
    pub tab: Tab,
    /// The bin under the cursor.
    pub cursor: usize,
    /// The other end of a selected range, if one is being selected.
    pub anchor: Option<usize>,
    /// Which operator the bins view shows (index into the job's operators).
    pub operator: usize,
    /// What the bins view's heat shows.
    pub heat: Heat,
    /// The dialog over the view, if one is open: it takes the keys.
    pub dialog: Option<Dialog>,
    /// Where the events come from, and how that stands (the status bar says it).
    pub connection: Connection,
    /// The trace file a live job writes, to name it in the status bar (whether it is being
    /// written is the job's [`JobModel::recording`]).
    pub recording: Option<String>,
    /// The log's lines, oldest first (at most [`LOG_LINES`]).
    pub log: VecDeque<LogLine>,
    /// Which lines the log view shows (`f` goes to the next filter).
    pub log_filter: LogFilter,
    /// Moves of each bin.
    pub history: BTreeMap<u32, VecDeque<PastMove>>,
    next_request: u64,
    /// Commands sent and not answered: request → what it was.
    pub pending: BTreeMap<u64, String>,
    /// The last answer or notice, for the status bar.
    pub notice: Option<String>,
    /// The probe's clock as the views read it, in seconds: the latest event's time, moved
    /// on by ticks while a live feed is quiet; in a replay, the player's position.
    pub now_s: f64,
    /// Whether the job can take commands (live, not a trace).
    pub commandable: bool,
    /// Bins in one row of the bins view as last drawn (for up and down).
    pub row_len: usize,
    /// The timeline, when the dashboard plays a trace.
    pub replay: Option<Replay>,
    /// Events this view lost because it fell behind.
    pub lost: u64,
    /// The dashboard's own clock (the latest tick), and its reading when the feed last
    /// said something.
    pub tick: f64,
    /// The dashboard's clock (`tick`) when the feed last sent a snapshot or events (for
    /// [`Dash::stale_s`]).
    pub heard_at: f64,
    /// The collector's number for this view.
    pub subscriber: Option<u64>,
    /// Whether the feed was ever live (an `attach` that never connected failed).
    pub connected: bool,
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
            heat: Heat::Keys,
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
            tick: 0.0,
            heard_at: 0.0,
            subscriber: None,
            connected: false,
        }
    }

    /// The job as the views show it: frozen while paused.
    pub fn view(&self) -> &JobModel {
        self.frozen.as_ref().unwrap_or(&self.job)
    }

    /// Whether the view is paused (`P`): it shows [`Dash::frozen`] while the job goes on.
    pub fn paused(&self) -> bool {
        self.frozen.is_some()
    }

    /// Bins per operator (0 before the job said hello).
    pub fn bins(&self) -> usize {
        self.job.bins().unwrap_or(0) as usize
    }

    /// Workers in the whole job (0 before the job said hello).
    pub fn peers(&self) -> usize {
        self.job.peers as usize
    }

    /// Targets the plan dialog offers for this job.
    pub fn targets(&self) -> Vec<String> {
        let mut t = vec!["uniform".to_string(), "balance".to_string()];
        t.extend((1..self.peers()).map(|n| format!("pack:{n}")));
        t.extend((0..self.peers()).map(|w| format!("drain:{w}")));
        t
    }

    /// Applies one message; returns what the world must do.
    pub fn update(&mut self, msg: Msg) -> Vec<Effect> {
        match msg {
            Msg::Snapshot(model) => {
                self.heard_at = self.tick;
                self.job = *model;
                self.now_s = self.now_s.max(clock(self.job.now_s).unwrap_or(0.0));
                Vec::new()
            }
            Msg::Events(events) => {
                self.heard_at = self.tick;
                let mut effects = Vec::new();
                for e in &events {
                    self.note(e);
                    self.job.apply(e);
                    let formed = matches!(
                        e.event,
                        Event::JobStarted { worker: 0, .. } | Event::Restart { .. }
                    );
                    if formed && effects.is_empty() {
                        effects.push(Effect::Repaint);
                    }
                }
                self.now_s = self.now_s.max(clock(self.job.now_s).unwrap_or(0.0));
                effects
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
                self.connected |= matches!(c, Connection::Live(_));
                self.connection = c;
                Vec::new()
            }
            Msg::Clock(now) => {
                self.now_s = self.now_s.max(clock(now).unwrap_or(0.0));
                Vec::new()
            }
            Msg::Tick(at) => {
                self.tick(at);
                Vec::new()
            }
            Msg::Subscribed(id) => {
                self.subscriber = Some(id);
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
                self.now_s = clock(self.job.now_s).unwrap_or(0.0);
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
                if let Some(at_s) = clock(position.at_s) {
                    self.now_s = at_s;
                }
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
            Action::Heat => self.heat = self.heat.next(),
            Action::Move => {
                if !self.commandable {
                    self.notice = Some("a trace cannot be commanded".into());
                } else if bins > 0 && self.peers() > 0 {
                    let owner = self.owner(self.cursor).unwrap_or(0) as usize;
                    self.dialog = Some(Dialog::Move {
                        bins: self.selection(),
                        // The next worker (an owner the job cannot have wraps too).
                        worker: (owner % self.peers() + 1) % self.peers(),
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
            Action::Accept => match &self.job.balance.suggestion {
                _ if !self.commandable => self.notice = Some("a trace cannot be commanded".into()),
                Some(s) => {
                    let change = match s.workers {
                        Some([from, to]) => format!("{from} to {to} workers"),
                        None => format!("{:.2}x to {:.2}x predicted", s.imbalance, s.predicted),
                    };
                    let what = format!(
                        "the balancer's plan: {} to balance ({} bins, {change})",
                        s.strategy, s.bins
                    );
                    let command = CommandRequest::StartPlan {
                        schedule: s.strategy.clone(),
                        target: "balance".into(),
                    };
                    return self.send(command, what);
                }
                None => self.notice = Some("the balancer proposes nothing now".into()),
            },
            Action::BalanceMode | Action::Exclude | Action::Pin if !self.commandable => {
                self.notice = Some("a trace cannot be commanded".into())
            }
            Action::BalanceMode => self.dialog = Some(Dialog::Balance { mode: 1 }),
            Action::Exclude => {
                if self.peers() > 0 {
                    self.dialog = Some(Dialog::Exclude {
                        worker: 0,
                        exclude: true,
                    })
                }
            }
            Action::Pin => {
                if bins > 0 {
                    self.dialog = Some(Dialog::Pin {
                        bins: self.selection(),
                        pin: true,
                    })
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

    pub(super) fn send(&mut self, command: CommandRequest, what: String) -> Vec<Effect> {
        let request = self.next_request;
        self.next_request += 1;
        self.notice = Some(format!("sent: {what}"));
        self.push_log(self.now_s, LogKind::Command, format!("sent: {what}"));
        self.pending.insert(request, what);
        vec![Effect::Send { request, command }]
    }
}

/// `at_s` if the views take it as a time: as the job's model takes them (from 0 to
/// [`MAX_AT_S`], a number), so that no snapshot, clock or position pins the views' clock.
fn clock(at_s: f64) -> Option<f64> {
    (0.0..=MAX_AT_S).contains(&at_s).then_some(at_s)
}

#[cfg(test)]
mod tests {
    use megaflux_probe::event::Event;

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
    fn a_crash_and_a_join_each_say_what_restarted_the_job() {
        let mut d = job();
        let restart = |lost: &str, joined: &str, generation| Stamped {
            at_s: 1.0,
            process: 0,
            event: Event::Restart {
                generation,
                from: 40,
                lost: lost.into(),
                survivors: if joined.is_empty() { "0-1" } else { "0-2" }.into(),
                joined: joined.into(),
            },
        };
        d.update(Msg::Events(vec![restart("2", "", 1), restart("", "2", 2)]));
        let lines: Vec<(LogKind, &str)> = d.log.iter().map(|l| (l.kind, l.text.as_str())).collect();
        assert!(lines.contains(&(
            LogKind::Problem,
            "process 2 lost: the job restarted on processes 0-1 from time 40 (restart 1)"
        )));
        assert!(lines.contains(&(
            LogKind::Job,
            "process 2 joined: the job restarted on processes 0-2 from time 40 (restart 2)"
        )));
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
    fn the_operators_word_goes_out_as_commands() {
        let mut d = job();
        let sent = |effects: Vec<Effect>| match effects.as_slice() {
            [Effect::Send { command, .. }] => command.clone(),
            other => panic!("{other:?}"),
        };
        d.update(Msg::Action(Action::BalanceMode));
        assert_eq!(d.dialog, Some(Dialog::Balance { mode: 1 }));
        d.update(Msg::Action(Action::Right));
        let command = sent(d.update(Msg::Action(Action::Confirm)));
        assert_eq!(command, CommandRequest::Balance { mode: "auto".into() });
        d.update(Msg::Action(Action::Exclude));
        d.update(Msg::Action(Action::Digit(1)));
        d.update(Msg::Action(Action::Down));
        let command = sent(d.update(Msg::Action(Action::Confirm)));
        assert_eq!(
            command,
            CommandRequest::Exclude {
                worker: 1,
                excluded: false
            }
        );
        d.update(Msg::Action(Action::Select));
        d.update(Msg::Action(Action::Right));
        d.update(Msg::Action(Action::Pin));
        let command = sent(d.update(Msg::Action(Action::Confirm)));
        assert_eq!(
            command,
            CommandRequest::Pin {
                bins: vec![0, 2],
                pinned: true
            }
        );
        assert!(d.dialog.is_none());
    }

    /// Keys queued back to back are read in the state each finds: `m` opens the move
    /// dialog, so the `1` right after it picks worker 1 rather than the first view.
    #[test]
    fn keys_typed_fast_are_read_in_order() {
        use ratatui::crossterm::event::{KeyCode, KeyModifiers};
        let key = |c| Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
        let mut d = job();
        d.update(Msg::Action(Action::Tab(1)));
        d.update(key('m'));
        d.update(key('1'));
        assert_eq!(d.tab, Tab::Workers);
        assert!(
            matches!(d.dialog, Some(Dialog::Move { worker: 1, .. })),
            "{:?}",
            d.dialog
        );
    }

    #[test]
    fn plans_pick_strategy_and_target() {
        let mut d = job();
        d.update(Msg::Action(Action::Plan));
        d.update(Msg::Action(Action::Right));
        // uniform, balance, pack:1, ...
        d.update(Msg::Action(Action::Down));
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
