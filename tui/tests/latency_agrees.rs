//! The Latency view and the run's summary agree on every plan's p99 and max during it:
//! migrations, a failure's recovery and a rejoin's rebalance, each as the view draws it
//! from the recorded events.

use std::process::Stdio;
use std::time::Duration;

use megaflux_probe::event::Event;
use megaflux_probe::record;
use megaflux_tui::dash::keys::Action;
use megaflux_tui::dash::model::{Connection, Dash, Msg, TABS, Tab};
use megaflux_tui::dash::view::{self, Theme};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use serde_json::Value;

mod common;

/// A bound on the run of 4 s: against a hang, not a judgement of speed.
const LIMIT: Duration = Duration::from_secs(300);

fn ms(ns: u64) -> String {
    format!("{:.2} ms", ns as f64 / 1e6)
}

#[test]
fn the_latency_view_says_what_the_summary_says() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    let args = [
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
    ];
    let mut command = common::megaflux(&args);
    command.stdin(Stdio::null());
    let out = megaflux_testkit::run(format!("megaflux {}", args.join(" ")), &mut command, LIMIT);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = common::summary(&out);

    // Every plan the summary has: (issued_s, strategy, p99, max). Plans can be issued at
    // the same moment (a worker that fell behind takes what came due together), so a plan
    // is told by its strategy as well as its time.
    let mut expected: Vec<(f64, String, u64, u64)> = Vec::new();
    let during = |d: &Value| (d["p99"].as_u64().unwrap(), d["max"].as_u64().unwrap());
    let plan = |p: &Value| {
        let (p99, max) = during(&p["latency_ns_during"]);
        let strategy = p["strategy"].as_str().unwrap().to_string();
        (p["issued_s"].as_f64().unwrap(), strategy, p99, max)
    };
    for m in summary["migrations"].as_array().unwrap() {
        expected.push(plan(m));
    }
    for f in summary["failures"].as_array().unwrap() {
        if f["recovery"].is_object() {
            expected.push(plan(&f["recovery"]));
        }
    }
    // The plans of every kind: the migration at 0.5 s, the recovery of the failure at 1.5 s,
    // and the rebalance onto worker 1 once it rejoined at 2.5 s. A plan waits for the one
    // that runs, and a rebalance for the recovery; when the worker rejoins before its
    // failure's recovery started (the run fell behind and took both at once), the rebalance
    // is that recovery. So there is always the migration and a recovery; and a second
    // migration, the rebalance, unless the recovery still ran at the rejoin or is the
    // rebalance (how long a plan takes, and how far a run falls behind, are the machine's).
    let migrations = summary["migrations"].as_array().unwrap();
    let failures = summary["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{summary}");
    let recovery = &failures[0]["recovery"];
    assert!(recovery.is_object(), "the failure's recovery: {summary}");
    assert!(matches!(migrations.len(), 1 | 2), "{summary}");
    assert_eq!(migrations[0]["target"], "pack:2", "{summary}");
    let rejoined = failures[0]["rejoined_s"].as_f64().expect("worker 1 rejoined");
    if let Some(rebalance) = migrations.get(1) {
        assert!(
            rebalance["issued_s"].as_f64().unwrap() >= rejoined,
            "the second plan is the rebalance after the rejoin: {summary}"
        );
    } else {
        let issued = recovery["issued_s"].as_f64().unwrap();
        let ended = recovery["duration_s"].as_f64().map(|d| issued + d);
        assert!(
            issued >= rejoined || ended.is_none_or(|s| s > rejoined),
            "no rebalance after the rejoin at {rejoined} s, though the recovery ended at {ended:?} s: {summary}"
        );
    }

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
    for (issued_s, strategy, p99, max) in &expected {
        let plan = plans
            .iter()
            .find(|p| p.issued_run_s == Some(*issued_s) && p.strategy == *strategy)
            .unwrap_or_else(|| panic!("no {strategy} plan issued at {issued_s}: {plans:?}"));
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
    for (issued_s, strategy, p99, max) in &expected {
        let (at, what) = (format!("{issued_s:.1} s"), format!("{strategy} to "));
        let row = screen
            .lines()
            .find(|l| l.contains(&at) && l.contains(&what))
            .unwrap_or_else(|| panic!("no row for the {strategy} plan at {at}:\n{screen}"));
        assert!(
            row.contains(&ms(*p99)) && row.contains(&ms(*max)),
            "{row}\n{screen}"
        );
    }
}
