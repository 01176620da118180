//! The Latency view and the run's summary agree on every plan's p99 and max during it:
//! migrations, a failure's recovery and a rejoin's rebalance, each as the view draws it
//! from the recorded events.

use megaflux_probe::event::Event;
use megaflux_probe::record;
use megaflux_tui::dash::keys::Action;
use megaflux_tui::dash::model::{Connection, Dash, Msg, TABS, Tab};
use megaflux_tui::dash::view::{self, Theme};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use serde_json::Value;

mod common;

fn ms(ns: u64) -> String {
    format!("{:.2} ms", ns as f64 / 1e6)
}

#[test]
fn the_latency_view_says_what_the_summary_says() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    let out = common::megaflux(&[
        "run",
        "--headless",
        "--workers",
        "3",
        "--replicas",
        "2",
        "--keys",
        "20000",
        "--rate",
        "20000",
        "--bins",
        "32",
        "--duration",
        "4",
        "--migrate",
        "fluid@0.5:pack:2",
        "--fail",
        "1@1.5",
        "--rejoin",
        "1@2.5",
        "--record",
        trace.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = common::summary(&out);

    // Every plan the summary has: (issued_s, p99, max).
    let mut expected: Vec<(f64, u64, u64)> = Vec::new();
    let during = |d: &Value| (d["p99"].as_u64().unwrap(), d["max"].as_u64().unwrap());
    for m in summary["migrations"].as_array().unwrap() {
        let (p99, max) = during(&m["latency_ns_during"]);
        expected.push((m["issued_s"].as_f64().unwrap(), p99, max));
    }
    for f in summary["failures"].as_array().unwrap() {
        if let Some(r) = f["recovery"].as_object() {
            let (p99, max) = during(&r["latency_ns_during"]);
            expected.push((r["issued_s"].as_f64().unwrap(), p99, max));
        }
    }
    assert!(
        expected.len() >= 3,
        "a migration, a recovery, a rebalance: {summary}"
    );

    // The dashboard fed the recorded events, as a live one or a replay is.
    let recorded = record::read(&trace).unwrap();
    let events: Vec<_> = recorded
        .events
        .into_iter()
        .filter(|e| !matches!(e.event, Event::Summary { .. }))
        .collect();
    let mut d = Dash::new(Connection::Trace("t.jsonl".into()), None);
    d.update(Msg::Events(events));
    let index = TABS.iter().position(|t| *t == Tab::Latency).unwrap();
    d.update(Msg::Action(Action::Tab(index)));
    let plans: Vec<_> = d.job.finished_plans.iter().chain(d.job.plan.iter()).collect();
    assert_eq!(plans.len(), expected.len(), "{plans:?}");
    for (issued_s, p99, max) in &expected {
        let plan = plans
            .iter()
            .find(|p| p.issued_run_s == Some(*issued_s))
            .unwrap_or_else(|| panic!("no plan issued at {issued_s}: {plans:?}"));
        let seen = plan.during.expect("a figure during the plan");
        assert!(seen.exact, "{plan:?}");
        assert_eq!((seen.p99, seen.max), (*p99, *max), "{plan:?}");
    }

    // And the view draws those figures, for each plan it lists.
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    terminal
        .draw(|f| view::draw(f, &d, Theme { color: false }))
        .unwrap();
    let screen = format!("{}", terminal.backend());
    for (issued_s, p99, max) in &expected {
        let row = screen
            .lines()
            .find(|l| l.contains(&format!("{issued_s:.1} s")))
            .unwrap_or_else(|| panic!("no row for the plan at {issued_s:.1} s:\n{screen}"));
        assert!(
            row.contains(&ms(*p99)) && row.contains(&ms(*max)),
            "{row}\n{screen}"
        );
    }
}
