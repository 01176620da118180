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
