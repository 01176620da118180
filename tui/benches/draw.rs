//! Drawing a full frame of the bins view with 4096 bins on 16 workers, a plan in flight and
//! an hour of latency windows, at 160×48.

use criterion::{Criterion, criterion_group, criterion_main};
use megaflux_probe::event::{Event, Phase, Stamped};
use megaflux_tui::dash::keys::Action;
use megaflux_tui::dash::model::{Connection, Dash, Msg, TABS};
use megaflux_tui::dash::view::{self, Theme};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

const BINS: u32 = 4096;
const WORKERS: u32 = 16;

fn at(at_s: f64, event: Event) -> Stamped {
    Stamped {
        at_s,
        process: 0,
        event,
    }
}

fn big_job() -> Dash {
    let mut events = vec![at(
        0.0,
        Event::Hello {
            processes: 1,
            workers: WORKERS,
            peers: WORKERS,
            bins: BINS,
            config: serde_json::json!({}),
            anchor_unix_s: None,
        },
    )];
    for bin in 0..BINS {
        events.push(at(
            0.1,
            Event::BinSize {
                worker: bin % WORKERS,
                operator: "count".into(),
                bin,
                keys: 1000 + u64::from(bin * 7919 % 5000),
                bytes: 16_000,
                standby: false,
            },
        ));
    }
    for window in 0..14_400u64 {
        events.push(at(
            window as f64 * 0.25,
            Event::Latency {
                window,
                t_s: window as f64 * 0.25,
                count: 250,
                p50: 50_000,
                p99: 900_000 + window % 7 * 100_000,
                max: 2_000_000,
                histogram: String::new(),
            },
        ));
    }
    events.push(at(
        3600.0,
        Event::PlanStarted {
            strategy: "fluid".into(),
            target: "uniform".into(),
            steps: 256,
            bins: 256,
            purpose: None,
            id: None,
            time: None,
            run_s: None,
        },
    ));
    for bin in 0..64 {
        events.push(at(
            3600.1,
            Event::Migration {
                phase: Phase::Extracted,
                bin,
                time: 3_600_000,
                operator: Some("count".into()),
                worker: Some(bin % WORKERS),
                from: Some(bin % WORKERS),
                to: Some(0),
                bytes: Some(16_000),
                chunks: Some(1),
                step: None,
                primary: None,
                standby: None,
                copy: None,
            },
        ));
    }
    let mut d = Dash::new(Connection::Live("bench".into()), None);
    d.update(Msg::Events(events));
    d
}

fn draw(c: &mut Criterion) {
    let mut d = big_job();
    let theme = Theme { color: true };
    let mut terminal = Terminal::new(TestBackend::new(160, 48)).expect("a test terminal");
    for (i, tab) in TABS.iter().enumerate() {
        d.update(Msg::Action(Action::Tab(i)));
        c.bench_function(
            &format!("draw {} 4096 bins x 16 workers 160x48", tab.title()),
            |b| {
                b.iter(|| {
                    terminal.draw(|f| view::draw(f, &d, theme)).expect("drawn");
                })
            },
        );
    }
}

criterion_group!(benches, draw);
criterion_main!(benches);
