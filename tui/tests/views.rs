//! Every view, drawn from a sample trace at a fixed clock, at 80×24 and 160×48.

use std::path::PathBuf;

use megaflux_probe::event::{BalancePhase, Event, Outcome, Phase, Stamped};
use megaflux_probe::model::MAX_AT_S;
use megaflux_probe::record;
use megaflux_probe::wire::CommandRequest;
use megaflux_tui::dash::keys::Action;
use megaflux_tui::dash::model::{Connection, Dash, Effect, Msg, TABS};
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

/// The keycount sample's bins coloured by load: worker 0's bins carry little, one of worker
/// 1's nearly half of all (the view says moving bins cannot split it), then by bytes.
#[test]
fn the_bins_heat_shows_load_and_a_hot_bin() {
    let mut d = dash();
    let at_s = d.now_s;
    let loads = |worker: u32, loads: String| Stamped {
        at_s,
        process: 0,
        event: Event::BinLoads {
            applied: None,
            worker,
            operator: "keycount".into(),
            interval_ns: 250_000_000,
            loads,
        },
    };
    let owners: Vec<Option<u32>> = d
        .job
        .operators
        .values()
        .next()
        .unwrap()
        .iter()
        .map(|v| v.owner)
        .collect();
    let owned = |w: u32| {
        (0..owners.len() as u32)
            .filter(|b| owners[*b as usize] == Some(w))
            .collect::<Vec<u32>>()
    };
    let cold: String = owned(0).iter().map(|b| format!("{b}:250:1000000 ")).collect();
    let mut warm: Vec<String> = owned(1).iter().map(|b| format!("{b}:2500:10000000")).collect();
    let hot = owned(1)[0];
    warm[0] = format!("{hot}:60000:200000000");
    let events = vec![loads(0, cold), loads(1, warm.join(" "))];
    d.update(Msg::Events(events));
    d.cursor = hot as usize;
    d.update(Msg::Action(Action::Heat));
    d.update(Msg::Action(Action::Heat));
    insta::assert_snapshot!("bins_load_80x24", render(&d, 80, 24));
    let shown = render(&d, 120, 40);
    assert!(shown.contains("heat (records/s, v: next)"), "{shown}");
    assert!(shown.contains(&format!("bin {hot} carries")), "{shown}");
    assert!(shown.contains("moving bins cannot split it"), "{shown}");
    assert!(shown.contains("load 240k records/s"), "{shown}");
    d.update(Msg::Action(Action::Heat));
    assert!(render(&d, 120, 40).contains("heat (keys, v: next)"));
}

/// The balancer proposes a plan: the status bar offers it with the key that accepts it, the
/// log says why, `a` sends it, and once a plan runs the offer goes.
#[test]
fn a_suggestion_is_offered_and_accepted() {
    let mut d = dash();
    d.commandable = true;
    let at_s = d.now_s;
    let balance = |phase, reason: Option<&str>| Stamped {
        at_s,
        process: 0,
        event: Event::Balance {
            phase,
            run_s: 4.0,
            imbalance: Some(1.65),
            predicted: Some(1.01),
            bins: Some(6),
            bytes: Some(688_128),
            serving: None,
            needed: None,
            strategy: Some("fluid".into()),
            reason: reason.map(str::to_string),
        },
    };
    d.update(Msg::Events(vec![balance(
        BalancePhase::Suggested,
        Some("worker 1 at 1.65x mean for 2.0 s; 6 bins (672.0 KiB): 1 to worker 0, 5 to worker 1; predicted 1.01x"),
    )]));
    d.update(Msg::Action(Action::Tab(TABS.len() - 1)));
    insta::assert_snapshot!("suggestion_120x30", render(&d, 120, 30));
    let effects = d.update(Msg::Action(Action::Accept));
    match effects.as_slice() {
        [
            Effect::Send {
                command: CommandRequest::StartPlan { schedule, target },
                ..
            },
        ] => assert_eq!((schedule.as_str(), target.as_str()), ("fluid", "balance")),
        other => panic!("accepting sends the plan, not {other:?}"),
    }
    d.update(Msg::Events(vec![balance(
        BalancePhase::Withdrawn,
        Some("a plan runs"),
    )]));
    assert!(d.job.balance.suggestion.is_none());
    let shown = render(&d, 120, 30);
    let status = shown.lines().last().unwrap_or_default();
    assert!(!status.contains("balancer:"), "{status}");
    assert!(
        shown.contains("balancer withdrew its proposal: a plan runs"),
        "{shown}"
    );
    let effects = d.update(Msg::Action(Action::Accept));
    assert!(effects.is_empty());
    assert_eq!(d.notice.as_deref(), Some("the balancer proposes nothing now"));
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

/// Events whose every number is untrusted, as a collector may pass them on from another
/// process or a trace may hold them: sizes and counts of `u64::MAX` (whose sums overflow),
/// workers and bins past every bound, times of 1e300, NaN, -1 and infinity.
fn extreme_events() -> Vec<Stamped> {
    let max = u64::MAX;
    let at = |at_s: f64, process: u32, event: Event| Stamped { at_s, process, event };
    let mut events = vec![
        at(
            0.0,
            0,
            Event::Hello {
                processes: 2,
                workers: 2,
                peers: 4,
                bins: 16,
                config: serde_json::json!({"replicas": 2, "epoch_us": 250}),
                anchor_unix_s: Some(f64::NAN),
            },
        ),
        at(
            f64::NAN,
            1,
            Event::Hello {
                processes: u32::MAX,
                workers: u32::MAX,
                peers: u32::MAX,
                bins: u32::MAX,
                config: serde_json::json!({"replicas": max, "epoch_us": max}),
                anchor_unix_s: Some(1e300),
            },
        ),
    ];
    for operator in ["count", "sum"] {
        for bin in 0..16u32 {
            for (worker, standby) in [(bin % 4, false), ((bin + 1) % 4, true)] {
                events.push(at(
                    1.0,
                    0,
                    Event::BinSize {
                        worker,
                        operator: operator.into(),
                        bin,
                        keys: max,
                        bytes: max,
                        standby,
                    },
                ));
            }
        }
        for worker in 0..4 {
            events.push(at(
                1.0,
                0,
                Event::Sampled {
                    worker,
                    operator: operator.into(),
                    full: true,
                    bins: max,
                    keys: max,
                    bytes: max,
                },
            ));
        }
    }
    for worker in [0, 1, 2, 3, u32::MAX] {
        events.push(at(
            2.0,
            0,
            Event::WorkerStats {
                outputs_total: None,
                worker,
                records: max,
                applied: Some(max),
                busy_ns: max,
                interval_ns: u64::from(worker % 2),
            },
        ));
        events.push(at(
            2.0,
            0,
            Event::Frontier {
                worker,
                operator: "count".into(),
                applied: Some(0),
                control: Some(max),
                input: max,
            },
        ));
        events.push(at(
            2.0,
            0,
            Event::Frontier {
                worker,
                operator: "output".into(),
                applied: Some(max),
                control: None,
                input: 0,
            },
        ));
        events.push(at(
            2.0,
            0,
            Event::JobStarted {
                records: None,
                worker,
                peers: u32::MAX,
                base: max,
            },
        ));
    }
    let times = [
        1e300,
        f64::NAN,
        -1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        2.0,
    ];
    for (window, t_s) in times.into_iter().enumerate() {
        events.push(at(
            t_s,
            0,
            Event::Latency {
                window: max - window as u64,
                t_s,
                count: max,
                p50: max,
                p99: max,
                max,
                histogram: String::new(),
            },
        ));
    }
    let started = |bins: u64, run_s: f64| Event::PlanStarted {
        strategy: "fluid".into(),
        target: "uniform".into(),
        steps: bins,
        bins,
        purpose: None,
        id: Some(max),
        time: Some(max),
        run_s: Some(run_s),
    };
    let moved = |phase: Phase, bin: u32, time: u64| Event::Migration {
        phase,
        bin,
        time,
        operator: Some("count".into()),
        worker: Some(bin),
        from: Some(u32::MAX),
        to: Some(bin),
        bytes: Some(max),
        chunks: Some(max),
        step: Some(max),
        primary: Some(bin),
        standby: Some(i64::MAX),
        copy: None,
    };
    // A plan at no sane time, its moves' sizes overflowing, finished at none either.
    events.push(at(1e300, 0, started(max, f64::NAN)));
    for bin in [0, 1, 2, 3, u32::MAX] {
        for phase in [
            Phase::Issued,
            Phase::Extracted,
            Phase::Extracted,
            Phase::Received,
            Phase::Installed,
        ] {
            events.push(at(3.0, 0, moved(phase, bin, max)));
        }
    }
    events.push(at(3.0, 0, moved(Phase::Completed, 0, max)));
    events.push(at(
        f64::INFINITY,
        0,
        Event::PlanLatency {
            id: max,
            p50: max,
            p99: max,
            max,
        },
    ));
    events.push(at(
        4.0,
        0,
        Event::PlanCompleted {
            strategy: "fluid".into(),
            steps: max,
            seconds: f64::NAN,
            id: Some(max),
            cancelled: None,
            run_s: Some(f64::INFINITY),
        },
    ));
    // A running plan of no bins that completed more than it has, moves in flight.
    events.push(at(-1.0, 0, started(0, 1e300)));
    for bin in [4, 5] {
        for phase in [Phase::Issued, Phase::Extracted, Phase::Extracted] {
            events.push(at(5.0, 0, moved(phase, bin, 7)));
        }
    }
    events.push(at(5.0, 0, moved(Phase::Completed, 4, 7)));
    events.push(at(5.0, 0, moved(Phase::Completed, 6, 7)));
    let failure = |worker: u32, lost: Option<&str>| Event::Failure {
        worker,
        reason: "fail-stop".into(),
        time: Some(max),
        promoted: Some(max),
        degraded: Some(max),
        suspects: Some(max),
        lost: lost.map(str::to_string),
    };
    events.push(at(-1.0, 0, failure(3, None)));
    events.push(at(
        6.0,
        0,
        Event::Takeover {
            operator: "count".into(),
            worker: 0,
            bin: u32::MAX,
            time: max,
        },
    ));
    events.push(at(f64::INFINITY, 0, Event::Rejoin { worker: 3, time: max }));
    events.push(at(6.0, 0, failure(2, Some("0-65535"))));
    events.push(at(
        6.0,
        0,
        Event::Recovery {
            worker: 2,
            bins: vec![u32::MAX, 0],
        },
    ));
    for (outcome, reason) in [
        (Outcome::Applied, None),
        (Outcome::Rejected, Some("no".to_string())),
    ] {
        events.push(at(
            f64::NAN,
            0,
            Event::Command {
                outcome,
                id: Some(max),
                time: Some(max),
                command: "move".into(),
                request: None,
                source: None,
                reason,
            },
        ));
    }
    events.push(at(
        7.0,
        0,
        Event::Placement {
            time: max,
            holders: "0/1 1/2 4294967295/0 - 3/4294967295".into(),
        },
    ));
    for (process, place) in [(0, "queue"), (1, "queue"), (0, "subscriber 1"), (4, "queue")] {
        events.push(at(
            7.0,
            process,
            Event::Dropped {
                place: place.into(),
                count: max,
            },
        ));
    }
    events.push(at(
        8.0,
        0,
        Event::Recording {
            on: true,
            failed: None,
        },
    ));
    events.push(at(
        8.0,
        0,
        Event::Lost {
            time: max,
            bins: "0-4294967295".into(),
        },
    ));
    events
}

/// Every view, every dialog and a replay's timeline bar, drawn over a job fed numbers no
/// job sends: nothing panics (sums saturate, clocks take only times), and the losses add
/// up to the most a count can say.
#[test]
fn extreme_numbers_draw_in_every_view() {
    let mut d = Dash::new(Connection::Live("test".into()), None);
    d.update(Msg::Subscribed(1));
    d.update(Msg::Events(extreme_events()));
    for clock in [f64::NAN, f64::INFINITY, 1e300, -1.0] {
        d.update(Msg::Clock(clock));
    }
    d.update(Msg::Lost(u64::MAX));
    assert!((0.0..=MAX_AT_S).contains(&d.now_s), "{}", d.now_s);
    assert_eq!(d.job_lost(), u64::MAX);
    assert_eq!(d.view_lost(), u64::MAX);
    d.commandable = true;
    let draw_all = |d: &mut Dash| {
        for i in 0..TABS.len() {
            d.update(Msg::Action(Action::Tab(i)));
            for (w, h) in [(80, 24), (160, 48)] {
                render(d, w, h);
            }
        }
        d.update(Msg::Action(Action::Tab(0)));
        for dialog in [
            Action::Help,
            Action::Move,
            Action::Plan,
            Action::Fail,
            Action::Rejoin,
        ] {
            d.update(Msg::Action(dialog));
            render(d, 80, 24);
            d.update(Msg::Action(Action::Back));
        }
    };
    draw_all(&mut d);
    // Every operator, a range selected, the view paused.
    d.update(Msg::Action(Action::NextOperator));
    d.update(Msg::Action(Action::Select));
    for _ in 0..20 {
        d.update(Msg::Action(Action::Right));
    }
    d.update(Msg::Action(Action::Pause));
    draw_all(&mut d);

    // A replay of a trace that says such times: its timeline bar and go-to dialog.
    use megaflux_replay::player::{Position, Timeline};
    use megaflux_replay::seek::Mark;
    let mut r = Dash::new(Connection::Trace("t.jsonl".into()), None);
    r.update(Msg::Timeline(Timeline {
        start_s: 0.0,
        end_s: 1e300,
        events: u64::MAX,
        marks: vec![
            Mark {
                events_before: u64::MAX,
                at_s: f64::NAN,
                label: "x".into(),
            },
            Mark {
                events_before: 0,
                at_s: f64::INFINITY,
                label: "y".into(),
            },
        ],
    }));
    r.update(Msg::Events(extreme_events()));
    r.update(Msg::Position(Position {
        events: u64::MAX,
        at_s: f64::INFINITY,
        playing: true,
        speed: f64::NAN,
    }));
    assert!((0.0..=MAX_AT_S).contains(&r.now_s), "{}", r.now_s);
    draw_all(&mut r);
    r.update(Msg::Action(Action::GoTo));
    render(&r, 80, 24);
}

/// The header ends with where the job reads and writes, as process 0's hello names them.
#[test]
fn the_header_names_the_input_and_the_output() {
    let mut d = Dash::new(Connection::Trace("a trace".into()), None);
    let hello = |config: serde_json::Value| {
        vec![Stamped {
            at_s: 0.0,
            process: 0,
            event: Event::Hello {
                processes: 1,
                workers: 2,
                peers: 2,
                bins: 16,
                config,
                anchor_unix_s: None,
            },
        }]
    };
    let header = |d: &Dash| render(d, 200, 24).lines().nth(1).unwrap_or_default().to_string();
    d.update(Msg::Events(hello(serde_json::json!({"replicas": 1}))));
    assert!(
        !header(&d).contains('→'),
        "a generated job that writes nothing: {}",
        header(&d)
    );
    let mut d = Dash::new(Connection::Trace("a trace".into()), None);
    d.update(Msg::Events(hello(serde_json::json!({
        "input": {"from": "kafka://127.0.0.1:9092/views?end=now"},
        "output": "postgresql://me:***@db:5432/jobs?table=counts",
    }))));
    let line = header(&d);
    assert!(
        line.contains("kafka://127.0.0.1:9092/views?end=now → postgresql://me:***@db:5432/jobs?table=counts"),
        "{line}"
    );
}

/// A Kafka input's partitions, under the frontiers: how far each is read, and its lag.
#[test]
fn the_frontiers_view_shows_each_partitions_offset_and_lag() {
    let mut d = dash();
    let frontiers = TABS
        .iter()
        .position(|t| t.title() == "Frontiers")
        .expect("a frontiers view");
    d.update(Msg::Action(Action::Tab(frontiers)));
    assert!(
        !render(&d, 160, 48).contains("Input: each partition"),
        "no input, no table"
    );
    let read = |partition: u32, offset: u64, end: u64| Stamped {
        at_s: 1.0,
        process: 0,
        event: Event::InputPartition {
            partition,
            offset,
            end,
        },
    };
    d.update(Msg::Events(vec![
        read(0, 1200, 2000),
        read(1, 2000, 2000),
        read(0, 1500, 2100),
    ]));
    let drawn = render(&d, 160, 48);
    assert!(drawn.contains("Input: each partition"), "{drawn}");
    // Each drawn line is quoted and framed: its words without the frame.
    let words = |l: &str| {
        l.replace(['"', '│'], " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let table: Vec<String> = drawn
        .lines()
        .skip_while(|l| !l.contains("Input: each partition"))
        .map(words)
        .collect();
    let row = |p: &str| {
        table
            .iter()
            .find(|l| l.starts_with(p))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(row("0 "), "0 1500 2100 600", "{drawn}");
    assert_eq!(row("1 "), "1 2000 2000 0", "{drawn}");
}
