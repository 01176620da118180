//! Every view, drawn from a sample trace at a fixed clock, at 80×24 and 160×48.

use std::path::PathBuf;

use megaflux_probe::event::{Event, Phase};
use megaflux_probe::record;
use megaflux_tui::dash::keys::Action;
use megaflux_tui::dash::model::{Connection, Dash, Msg, TABS};
use megaflux_tui::dash::view::{self, Theme};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

/// The keycount sample up to the middle of its first migration.
fn dash() -> Dash {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces/keycount-fluid.jsonl");
    let trace = record::read(&path).unwrap();
    let issued: Vec<f64> = trace
        .events
        .iter()
        .filter(|e| {
            matches!(
                e.event,
                Event::Migration {
                    phase: Phase::Issued,
                    ..
                }
            )
        })
        .map(|e| e.at_s)
        .collect();
    // The clock: just after the tenth bin of the first plan was issued.
    let clock = issued[9];
    let events = trace.events.into_iter().filter(|e| e.at_s <= clock).collect();
    let mut d = Dash::new(Connection::Trace("traces/keycount-fluid.jsonl".into()), None);
    d.update(Msg::Events(events));
    d.update(Msg::Clock(clock));
    d
}

fn render(d: &Dash, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal
        .draw(|f| view::draw(f, d, Theme { color: false }))
        .unwrap();
    format!("{}", terminal.backend())
}

#[test]
fn every_view_at_two_sizes() {
    let mut d = dash();
    assert!(d.job.plan.is_some(), "the clock is inside the first plan");
    assert!(!d.job.moving.is_empty());
    for (i, tab) in TABS.iter().enumerate() {
        d.update(Msg::Action(Action::Tab(i)));
        for (w, h) in [(80, 24), (160, 48)] {
            insta::assert_snapshot!(
                format!("{}_{w}x{h}", tab.title().to_lowercase()),
                render(&d, w, h)
            );
        }
    }
}

#[test]
fn dialogs() {
    let mut d = dash();
    d.commandable = true;
    d.update(Msg::Action(Action::Help));
    insta::assert_snapshot!("help_80x24", render(&d, 80, 24));
    d.update(Msg::Action(Action::Back));
    d.update(Msg::Action(Action::Move));
    insta::assert_snapshot!("move_80x24", render(&d, 80, 24));
    d.update(Msg::Action(Action::Back));
    d.update(Msg::Action(Action::Plan));
    insta::assert_snapshot!("plan_80x24", render(&d, 80, 24));
}

/// The failover sample (three workers, two replicas) just after worker 1 failed, with the
/// recovery of its bins' standbys in flight.
fn failover() -> Dash {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces/keycount-failover.jsonl");
    let trace = record::read(&path).unwrap();
    let failed = trace
        .events
        .iter()
        .find(|e| matches!(e.event, Event::Failure { .. }))
        .map(|e| e.at_s)
        .expect("the sample has a failure");
    // The clock: the fifth bin the recovery copied.
    let clock = trace
        .events
        .iter()
        .filter(|e| {
            e.at_s > failed
                && matches!(
                    e.event,
                    Event::Migration {
                        phase: Phase::Issued,
                        ..
                    }
                )
        })
        .nth(4)
        .map(|e| e.at_s)
        .expect("the recovery copies bins");
    let events = trace.events.into_iter().filter(|e| e.at_s <= clock).collect();
    let mut d = Dash::new(Connection::Trace("traces/keycount-failover.jsonl".into()), None);
    d.update(Msg::Events(events));
    d.update(Msg::Clock(clock));
    d
}

#[test]
fn replicas_failures_and_recovery() {
    let mut d = failover();
    assert!(d.job.failed.contains(&1));
    assert!(
        (0..d.bins()).any(|b| d.degraded(b)),
        "bins with one replica are in the view"
    );
    assert!((0..d.bins()).all(|b| d.owner(b) != Some(1) && d.standby(b) != Some(1)));
    for (i, name) in [(0, "bins"), (1, "workers"), (5, "log")] {
        d.update(Msg::Action(Action::Tab(i)));
        for (w, h) in [(80, 24), (160, 48)] {
            insta::assert_snapshot!(format!("failover_{name}_{w}x{h}"), render(&d, w, h));
        }
    }
    d.commandable = true;
    d.update(Msg::Action(Action::Tab(0)));
    d.update(Msg::Action(Action::Fail));
    insta::assert_snapshot!("fail_80x24", render(&d, 80, 24));
    d.update(Msg::Action(Action::Back));
    d.update(Msg::Action(Action::Rejoin));
    insta::assert_snapshot!("rejoin_80x24", render(&d, 80, 24));
}

/// The fluid sample in the time machine: after the second mark, one step on, at 2x.
fn replay() -> Dash {
    use megaflux_replay::player::{Output, Player, Request};
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces/keycount-fluid.jsonl");
    let mut player = Player::new(record::TraceReader::open(&path).unwrap()).unwrap();
    let mut d = Dash::new(Connection::Trace("traces/keycount-fluid.jsonl".into()), None);
    let mut outputs = player.start();
    for r in [
        Request::PlayPause,
        Request::NextMark,
        Request::NextMark,
        Request::Step,
        Request::Faster,
    ] {
        outputs.extend(player.request(r));
    }
    for o in outputs {
        assert!(!matches!(o, Output::Problem(_)), "{o:?}");
        d.update(Msg::from(o));
    }
    d
}

#[test]
fn a_replay_shows_its_timeline() {
    let mut d = replay();
    let position = &d.replay.as_ref().unwrap().position;
    assert!(!position.playing);
    assert_eq!(position.speed, 2.0);
    insta::assert_snapshot!("replay_bins_80x24", render(&d, 80, 24));
    d.update(Msg::Action(Action::Tab(4)));
    insta::assert_snapshot!("replay_migrations_120x30", render(&d, 120, 30));
    for a in [Action::GoTo, Action::Digit(2), Action::Step, Action::Digit(5)] {
        d.update(Msg::Action(a));
    }
    insta::assert_snapshot!("replay_goto_80x24", render(&d, 80, 24));
}

/// The cells whose style carries meaning, run by run: `row col+len "text" style`.
fn styles(d: &Dash, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal
        .draw(|f| view::draw(f, d, Theme { color: true }))
        .unwrap();
    let buffer = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..height {
        let mut x = 0;
        while x < width {
            let style = buffer[(x, y)].style();
            let start = x;
            let mut text = String::new();
            while x < width && buffer[(x, y)].style() == style {
                text.push_str(buffer[(x, y)].symbol());
                x += 1;
            }
            let unset =
                |c: Option<ratatui::style::Color>| c.is_none_or(|c| c == ratatui::style::Color::Reset);
            let plain = unset(style.fg) && unset(style.bg) && style.add_modifier.is_empty();
            if !plain && !text.trim().is_empty() {
                let fg = style.fg.map_or(String::new(), |c| format!(" fg:{c}"));
                let mods = if style.add_modifier.is_empty() {
                    String::new()
                } else {
                    format!(" {:?}", style.add_modifier)
                };
                out.push_str(&format!(
                    "{y:>2} {start:>3}+{:<3} {text:?}{fg}{mods}\n",
                    x - start
                ));
            }
        }
    }
    out
}

/// What colour and emphasis say in the bins view: the cursor (reversed), a selected range
/// (underlined), moving bins (magenta, bold, their phase's letter), heat; and the header
/// and the status bar.
#[test]
fn the_bins_view_styles_cursor_selection_and_moves() {
    let mut d = dash();
    d.update(Msg::Action(Action::Tab(0)));
    d.update(Msg::Action(Action::Select));
    for _ in 0..3 {
        d.update(Msg::Action(Action::Right));
    }
    assert_eq!(d.selection().len(), 4);
    insta::assert_snapshot!("bins_styles_80x24", styles(&d, 80, 24));
}
