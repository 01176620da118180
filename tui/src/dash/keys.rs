//! Every key the dashboard knows, in one table: it maps key presses to actions and it is
//! what the help screen lists.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// Something a person asks the dashboard to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Quit the dashboard, and stop a job it started (`q`, Ctrl-C).
    Quit,
    /// The next view, wrapping around (`tab`).
    NextTab,
    /// The previous view, wrapping around (`shift-tab`).
    PrevTab,
    /// The view at this index in [`TABS`](super::model::TABS) (`1`–`6` give 0–5).
    Tab(usize),
    /// The cursor one bin back in view order; in dialogs, the previous choice.
    Left,
    /// The cursor one bin on in view order; in dialogs, the next choice.
    Right,
    /// The cursor one row of the bins view up; in dialogs, the previous choice (the plan
    /// dialog's: the previous target).
    Up,
    /// The cursor one row of the bins view down; in dialogs, the next choice (the plan
    /// dialog's: the next target).
    Down,
    /// Start or end a range of bins at the cursor.
    Select,
    /// The bins view shows the job's next operator, wrapping around (`o`).
    NextOperator,
    /// The bins view's heat shows the next measure: keys, bytes, load (`v`).
    Heat,
    /// Open the move dialog for the selected bins (`m`; live jobs only).
    Move,
    /// Open the plan dialog (`p`; live jobs only).
    Plan,
    /// Cancel the running plan's steps not issued yet (`c`; live jobs only).
    Cancel,
    /// Start the plan the balancer proposes (`a`; live jobs only).
    Accept,
    /// Open the dialog that sets the balancer's mode: off, suggest, auto (`B`; live jobs).
    BalanceMode,
    /// Open the dialog that excludes a worker from placements by load, or includes it
    /// again (`X`; live jobs).
    Exclude,
    /// Open the dialog that pins the selected bins where they are, or frees them (`K`;
    /// live jobs).
    Pin,
    /// Open the dialog that fails a worker, proposing the first live one (`F`).
    Fail,
    /// Open the dialog that brings a failed worker back, proposing the first one (`J`).
    Rejoin,
    /// Freeze or unfreeze the view while the job goes on (`P`; in a replay, play or pause).
    Pause,
    /// Pause or resume the job's trace (`R`; jobs run with `--record`).
    Record,
    /// Open the help: every key and what it does (`?`).
    Help,
    /// The log's next filter: all, migrations, commands, problems (`f`).
    LogFilter,
    /// Confirm the open dialog (`enter`, `y`).
    Confirm,
    /// Close the open dialog (`esc`, `n`).
    Back,
    /// A digit (0–9) typed in a dialog: a worker in the move and worker dialogs, part of
    /// the time in the go-to dialog. Outside dialogs digits pick views ([`Action::Tab`]).
    Digit(u8),
    /// Replays: one event on or back.
    Step,
    /// Replays: one event back.
    StepBack,
    /// Replays: to the next or previous migration or failure.
    NextMark,
    /// Replays: to the previous migration or failure.
    PrevMark,
    /// Replays: play at the next speed up (up to 64×).
    Faster,
    /// Replays: play at the next speed down (down to 0.25×).
    Slower,
    /// Replays: [`SEEK_STEP_S`] on or back.
    SeekForward,
    /// Replays: [`SEEK_STEP_S`] back.
    SeekBack,
    /// Replays: go to a time (a dialog).
    GoTo,
    /// In the go-to dialog: erase the last character.
    Erase,
}

/// How far `<` and `>` seek in a replay, in seconds.
pub const SEEK_STEP_S: f64 = 10.0;

/// One line of the table: the keys, what they are called in the help, and the action.
pub struct Binding {
    /// The keys that give the action, whatever the modifiers (but Ctrl-C always quits).
    pub keys: &'static [KeyCode],
    /// The keys as the help names them, `/` between them (`←/h`); the status bar's hint
    /// shows the first.
    pub label: &'static str,
    /// What the keys do, as the help says it.
    pub help: &'static str,
    /// The action the keys give.
    pub action: Action,
}

/// The dashboard's keys. Digits (worker numbers in the move dialog, views elsewhere) and
/// Ctrl-C (quit) are handled in [`action`].
pub const BINDINGS: &[Binding] = &[
    Binding {
        keys: &[KeyCode::Char('q')],
        label: "q",
        help: "quit (and stop a job this dashboard started)",
        action: Action::Quit,
    },
    Binding {
        keys: &[KeyCode::Char('?')],
        label: "?",
        help: "this help",
        action: Action::Help,
    },
    Binding {
        keys: &[KeyCode::Tab],
        label: "tab",
        help: "next view (1-6 picks one)",
        action: Action::NextTab,
    },
    Binding {
        keys: &[KeyCode::BackTab],
        label: "shift-tab",
        help: "previous view",
        action: Action::PrevTab,
    },
    Binding {
        keys: &[KeyCode::Left, KeyCode::Char('h')],
        label: "←/h",
        help: "previous bin (in dialogs: previous choice)",
        action: Action::Left,
    },
    Binding {
        keys: &[KeyCode::Right, KeyCode::Char('l')],
        label: "→/l",
        help: "next bin (in dialogs: next choice)",
        action: Action::Right,
    },
    Binding {
        keys: &[KeyCode::Up, KeyCode::Char('k')],
        label: "↑/k",
        help: "bin one row up (plan dialog: previous target)",
        action: Action::Up,
    },
    Binding {
        keys: &[KeyCode::Down, KeyCode::Char('j')],
        label: "↓/j",
        help: "bin one row down (plan dialog: next target)",
        action: Action::Down,
    },
    Binding {
        keys: &[KeyCode::Char(' ')],
        label: "space",
        help: "range of bins from the cursor, or clear it (replay: play/pause)",
        action: Action::Select,
    },
    Binding {
        keys: &[KeyCode::Char('.')],
        label: ".",
        help: "replay: one event on (in the go-to dialog: a decimal point)",
        action: Action::Step,
    },
    Binding {
        keys: &[KeyCode::Char(',')],
        label: ",",
        help: "replay: one event back",
        action: Action::StepBack,
    },
    Binding {
        keys: &[KeyCode::Char(']')],
        label: "]",
        help: "replay: next migration or failure",
        action: Action::NextMark,
    },
    Binding {
        keys: &[KeyCode::Char('[')],
        label: "[",
        help: "replay: previous migration or failure",
        action: Action::PrevMark,
    },
    Binding {
        keys: &[KeyCode::Char('+'), KeyCode::Char('=')],
        label: "+",
        help: "replay: faster (up to 64x)",
        action: Action::Faster,
    },
    Binding {
        keys: &[KeyCode::Char('-')],
        label: "-",
        help: "replay: slower (down to 0.25x)",
        action: Action::Slower,
    },
    Binding {
        keys: &[KeyCode::Char('>')],
        label: ">",
        help: "replay: 10 s on",
        action: Action::SeekForward,
    },
    Binding {
        keys: &[KeyCode::Char('<')],
        label: "<",
        help: "replay: 10 s back",
        action: Action::SeekBack,
    },
    Binding {
        keys: &[KeyCode::Char('g')],
        label: "g",
        help: "replay: go to a time (type the seconds, enter)",
        action: Action::GoTo,
    },
    Binding {
        keys: &[KeyCode::Backspace],
        label: "backspace",
        help: "erase (in the go-to dialog)",
        action: Action::Erase,
    },
    Binding {
        keys: &[KeyCode::Char('o')],
        label: "o",
        help: "next operator in the bins view",
        action: Action::NextOperator,
    },
    Binding {
        keys: &[KeyCode::Char('v')],
        label: "v",
        help: "bins view heat: keys, bytes, load (records/s)",
        action: Action::Heat,
    },
    Binding {
        keys: &[KeyCode::Char('m')],
        label: "m",
        help: "move the selected bins to a worker (preview, then enter)",
        action: Action::Move,
    },
    Binding {
        keys: &[KeyCode::Char('p')],
        label: "p",
        help: "start a plan: ←→ strategy, ↑↓ target, enter",
        action: Action::Plan,
    },
    Binding {
        keys: &[KeyCode::Char('c')],
        label: "c",
        help: "cancel the running plan's steps not issued yet",
        action: Action::Cancel,
    },
    Binding {
        keys: &[KeyCode::Char('a')],
        label: "a",
        help: "accept the balancer's proposal: start its balance plan",
        action: Action::Accept,
    },
    Binding {
        keys: &[KeyCode::Char('B')],
        label: "B",
        help: "the balancer's mode: off (measure only), suggest, auto",
        action: Action::BalanceMode,
    },
    Binding {
        keys: &[KeyCode::Char('X')],
        label: "X",
        help: "exclude a worker from placements by load (or include it again)",
        action: Action::Exclude,
    },
    Binding {
        keys: &[KeyCode::Char('K')],
        label: "K",
        help: "pin the selected bins where they are (or free them)",
        action: Action::Pin,
    },
    Binding {
        keys: &[KeyCode::Char('F')],
        label: "F",
        help: "fail a worker: its partitions stop, their standbys take over",
        action: Action::Fail,
    },
    Binding {
        keys: &[KeyCode::Char('J')],
        label: "J",
        help: "a failed worker rejoins, empty; bins rebalance onto it",
        action: Action::Rejoin,
    },
    Binding {
        keys: &[KeyCode::Char('P')],
        label: "P",
        help: "pause the view, the job goes on (replay: play/pause)",
        action: Action::Pause,
    },
    Binding {
        keys: &[KeyCode::Char('R')],
        label: "R",
        help: "pause or resume recording the trace (jobs run with --record)",
        action: Action::Record,
    },
    Binding {
        keys: &[KeyCode::Char('f')],
        label: "f",
        help: "log filter: all, migrations, commands, problems",
        action: Action::LogFilter,
    },
    Binding {
        keys: &[KeyCode::Enter, KeyCode::Char('y')],
        label: "enter/y",
        help: "confirm the dialog",
        action: Action::Confirm,
    },
    Binding {
        keys: &[KeyCode::Esc, KeyCode::Char('n')],
        label: "esc/n",
        help: "close the dialog",
        action: Action::Back,
    },
];

/// The action for a key press, if any. Digits mean a worker inside a dialog and a view
/// outside one.
pub fn action(key: KeyEvent, in_dialog: bool) -> Option<Action> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
        return Some(Action::Quit);
    }
    if let KeyCode::Char(c @ '0'..='9') = key.code {
        let d = c as u8 - b'0';
        return Some(if in_dialog {
            Action::Digit(d)
        } else if (1..=6).contains(&d) {
            Action::Tab(d as usize - 1)
        } else {
            return None;
        });
    }
    BINDINGS
        .iter()
        .find(|b| b.keys.contains(&key.code))
        .map(|b| b.action)
}

/// The status bar's reminder of the main keys of a live job: actions, and what to call
/// them there. Their keys come from [`BINDINGS`].
const LIVE_HINTS: &[(&[Action], &str)] = &[
    (&[Action::Help], "help"),
    (&[Action::Quit], "quit"),
    (&[Action::NextTab], "view"),
    (&[Action::Left, Action::Right, Action::Up, Action::Down], "bin"),
    (&[Action::Select], "range"),
    (&[Action::Move], "move"),
    (&[Action::Plan], "plan"),
    (&[Action::Cancel], "cancel"),
    (&[Action::Pause], "pause"),
];
/// The reminder in a replay.
const REPLAY_HINTS: &[(&[Action], &str)] = &[
    (&[Action::Help], "help"),
    (&[Action::Quit], "quit"),
    (&[Action::Select], "play/pause"),
    (&[Action::StepBack, Action::Step], "step"),
    (&[Action::PrevMark, Action::NextMark], "marks"),
    (&[Action::Slower, Action::Faster], "speed"),
    (&[Action::SeekBack, Action::SeekForward], "10 s"),
    (&[Action::GoTo], "go to"),
];

/// The key of `action` as the status bar shows it: the first of its labels (`←` of `←/h`).
fn key_of(action: Action) -> &'static str {
    BINDINGS
        .iter()
        .find(|b| b.action == action)
        .map_or("?", |b| b.label.split('/').next().unwrap_or(b.label))
}

/// The status bar's reminder of the main keys (of a replay's, with `replay`), from the
/// key table.
pub fn hint(replay: bool) -> String {
    let hints = if replay { REPLAY_HINTS } else { LIVE_HINTS };
    hints
        .iter()
        .map(|(actions, what)| {
            let keys: String = actions.iter().map(|a| key_of(*a)).collect();
            format!("{keys} {what}")
        })
        .collect::<Vec<_>>()
        .join("  ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_binding_is_reachable() {
        for b in BINDINGS {
            for k in b.keys {
                let got = action(KeyEvent::new(*k, KeyModifiers::NONE), false);
                assert_eq!(got, Some(b.action), "{}", b.label);
            }
        }
        let d = KeyEvent::new(KeyCode::Char('1'), KeyModifiers::NONE);
        assert_eq!(action(d, true), Some(Action::Digit(1)));
        assert_eq!(action(d, false), Some(Action::Tab(0)));
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(action(ctrl_c, false), Some(Action::Quit));
    }

    /// The hints name the keys the table gives.
    #[test]
    fn hints_come_from_the_table() {
        assert_eq!(
            hint(false),
            "? help  q quit  tab view  ←→↑↓ bin  space range  m move  p plan  c cancel  P pause"
        );
        assert!(hint(true).contains(",. step"), "{}", hint(true));
        assert!(hint(true).contains("[] marks"), "{}", hint(true));
    }
}
