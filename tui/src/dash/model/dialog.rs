//! The dialogs over the views, and what keys do in them.

use megaflux_probe::wire::CommandRequest;
use megaflux_replay::player::Request;

use super::super::keys::Action;
use super::super::timeline;
use super::{Dash, Effect, describe_bins};

/// Strategies and targets the plan dialog offers.
pub const STRATEGIES: [&str; 5] = ["fluid", "matched", "batched:8", "all-at-once", "fluid+pipelined"];

/// The balancer's modes the mode dialog offers, in order.
pub const MODES: [&str; 3] = ["off", "suggest", "auto"];

/// A dialog over the current view.
#[derive(Clone, Debug, PartialEq)]
pub enum Dialog {
    /// Move `bins` to `worker`: the view previews every worker's state after it.
    Move {
        /// The bins to move, sorted (the selection when the dialog opened).
        bins: Vec<usize>,
        /// The worker they go to, in the whole job (←→ or a digit changes it).
        worker: usize,
    },
    /// Start a plan: `strategy` indexes [`STRATEGIES`], `target` [`Dash::targets`].
    Plan {
        /// Index into [`STRATEGIES`] (←→ changes it).
        strategy: usize,
        /// Index into [`Dash::targets`] (↑↓ changes it).
        target: usize,
    },
    /// Fail `worker` (`rejoin`: bring a failed one back).
    Worker {
        /// The worker the command names, in the whole job (arrows or a digit change it).
        worker: usize,
        /// Bring `worker` back (`J`) rather than fail it (`F`).
        rejoin: bool,
    },
    /// Set the balancer's mode to [`MODES`]`[mode]`.
    Balance {
        /// Index into [`MODES`] (←→ changes it).
        mode: usize,
    },
    /// Exclude `worker` from placements by load (`exclude: false`: include it again).
    Exclude {
        /// The worker, in the whole job (←→ or a digit changes it).
        worker: usize,
        /// Exclude rather than include (↑↓ changes it).
        exclude: bool,
    },
    /// Pin `bins` where they are (`pin: false`: free them).
    Pin {
        /// The bins, sorted (the selection when the dialog opened).
        bins: Vec<usize>,
        /// Pin rather than free (↑↓ changes it).
        pin: bool,
    },
    /// Replays: go to the time typed so far (seconds on the trace's clock).
    GoTo {
        /// The digits and point typed so far.
        typed: String,
    },
    /// Every key and what it does (`?`); any key the dashboard knows closes it, `q` too.
    Help,
}

impl Dash {
    pub(super) fn act_in_dialog(&mut self, dialog: Dialog, action: Action) -> Vec<Effect> {
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
            (Dialog::Balance { mode }, action) => {
                let n = MODES.len();
                let mode = match action {
                    Action::Left | Action::Up => (mode + n - 1) % n,
                    Action::Right | Action::Down => (mode + 1) % n,
                    Action::Confirm => {
                        self.dialog = None;
                        let mode = MODES[mode % n].to_string();
                        let what = format!("balance {mode}");
                        return self.send(CommandRequest::Balance { mode }, what);
                    }
                    _ => mode,
                };
                self.dialog = Some(Dialog::Balance { mode });
            }
            (Dialog::Exclude { worker, exclude }, action) => {
                let peers = self.peers().max(1);
                let (worker, exclude) = match action {
                    Action::Left => ((worker + peers - 1) % peers, exclude),
                    Action::Right => ((worker + 1) % peers, exclude),
                    Action::Up | Action::Down => (worker, !exclude),
                    Action::Digit(d) if (d as usize) < peers => (d as usize, exclude),
                    Action::Confirm => {
                        self.dialog = None;
                        let what = format!("{} worker {worker}", if exclude { "exclude" } else { "include" });
                        return self.send(
                            CommandRequest::Exclude {
                                worker,
                                excluded: exclude,
                            },
                            what,
                        );
                    }
                    _ => (worker, exclude),
                };
                self.dialog = Some(Dialog::Exclude { worker, exclude });
            }
            (Dialog::Pin { bins, pin }, action) => {
                let pin = match action {
                    Action::Up | Action::Down | Action::Left | Action::Right => !pin,
                    Action::Confirm => {
                        self.dialog = None;
                        self.anchor = None;
                        let what = format!("{} {}", if pin { "pin" } else { "unpin" }, describe_bins(&bins));
                        return self.send(CommandRequest::Pin { bins, pinned: pin }, what);
                    }
                    _ => pin,
                };
                self.dialog = Some(Dialog::Pin { bins, pin });
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
}
