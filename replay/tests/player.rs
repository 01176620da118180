//! The time machine's player: whatever a person asks in whatever order, the outputs it sent
//! make the model of the events before its position; jumps land after marks, steps move one
//! event, seeks to a time stop at the last event at or before it, and playing ends at the
//! end.

use std::time::Duration;

use megaflux_probe::event::Stamped;
use megaflux_probe::model::JobModel;
use megaflux_probe::record::{TraceHeader, TraceReader, read};
use megaflux_replay::player::{FIRST_SPEED, Output, Player, Position, Request, SPEEDS};
use megaflux_replay::seek::Clock;
use proptest::prelude::*;

mod common;
use common::sample;

/// What a viewer of the player's outputs sees.
struct Viewer {
    model: JobModel,
    position: Option<Position>,
}

impl Viewer {
    fn new() -> Self {
        Viewer {
            model: JobModel::new(),
            position: None,
        }
    }

    fn take(&mut self, outputs: Vec<Output>) {
        for o in outputs {
            match o {
                Output::Reset(model) => self.model = *model,
                Output::Events(events) => events.iter().for_each(|e| self.model.apply(e)),
                Output::Position(p) => self.position = Some(p),
                Output::Timeline(_) => {}
                Output::Problem(p) => panic!("{p}"),
            }
        }
    }

    fn events(&self) -> u64 {
        self.position.as_ref().expect("a position").events
    }
}

/// The trace's header and then `events` applied: what the view must be.
fn replay_all(header: &TraceHeader, events: &[Stamped]) -> JobModel {
    let mut model = JobModel::from_header(header);
    for e in events {
        model.apply(e);
    }
    model
}

fn player(
    name: &str,
) -> (
    Player<std::io::BufReader<std::fs::File>>,
    Vec<Stamped>,
    TraceHeader,
) {
    let path = sample(name);
    let trace = read(&path).expect("it reads");
    (
        Player::new(TraceReader::open(&path).expect("it opens")).expect("it indexes"),
        trace.events,
        trace.header,
    )
}

#[test]
fn marks_steps_and_speed() {
    let (mut player, events, header) = player("keycount-fluid.jsonl");
    let mut viewer = Viewer::new();
    viewer.take(player.start());
    let marks = player.index().marks.clone();
    assert_eq!(marks.len(), 2, "{marks:?}");
    viewer.take(player.request(Request::NextMark));
    viewer.take(player.request(Request::NextMark));
    // Just after the second plan started.
    assert_eq!(viewer.events(), marks[1].events_before + 1);
    let plan = viewer.model.plan.as_ref().expect("a running plan");
    assert_eq!(
        (plan.strategy.as_str(), plan.target.as_str()),
        ("matched", "uniform")
    );
    assert!(viewer.model == replay_all(&header, &events[..viewer.events() as usize]));
    viewer.take(player.request(Request::Step));
    assert_eq!(viewer.events(), marks[1].events_before + 2);
    assert!(!viewer.position.as_ref().expect("a position").playing);
    viewer.take(player.request(Request::StepBack));
    viewer.take(player.request(Request::StepBack));
    assert_eq!(viewer.events(), marks[1].events_before);
    assert!(viewer.model.plan.as_ref().is_none_or(|p| p.strategy != "matched"));
    viewer.take(player.request(Request::Faster));
    assert_eq!(
        viewer.position.as_ref().expect("a position").speed,
        SPEEDS[FIRST_SPEED + 1]
    );
    for _ in 0..20 {
        viewer.take(player.request(Request::Slower));
    }
    assert_eq!(viewer.position.as_ref().expect("a position").speed, SPEEDS[0]);
    viewer.take(player.request(Request::PrevMark));
    assert_eq!(viewer.events(), marks[0].events_before + 1);
}

#[test]
fn playing_reaches_the_end_and_seeks_stop_at_the_time() {
    let (mut player, events, header) = player("keycount-failover.jsonl");
    let mut viewer = Viewer::new();
    viewer.take(player.start());
    // Half a second of wall clock at 1x plays the first half second of the trace.
    viewer.take(player.advance(Duration::from_millis(500)));
    let start = player.index().start_s;
    let mut clock = Clock::default();
    let due = events.iter().take_while(|e| clock.tick(e) <= start + 0.5).count() as u64;
    assert_eq!(viewer.events(), due);
    viewer.take(player.request(Request::SeekTo(2.0)));
    let mut clock = Clock::default();
    let due = events.iter().take_while(|e| clock.tick(e) <= 2.0).count() as u64;
    assert_eq!(viewer.events(), due);
    assert!(viewer.model == replay_all(&header, &events[..due as usize]));
    viewer.take(player.advance(Duration::from_secs(3600)));
    let end = viewer.position.clone().expect("a position");
    assert_eq!(end.events, events.len() as u64);
    assert!(!end.playing);
    assert!(viewer.model == replay_all(&header, &events));
}

/// Plays 10 s of the trace into `viewer`; the problems the player reported.
fn play<R: std::io::BufRead + std::io::Seek>(player: &mut Player<R>, viewer: &mut Viewer) -> Vec<String> {
    let mut problems = Vec::new();
    for o in player.advance(Duration::from_secs(10)) {
        match o {
            Output::Problem(p) => problems.push(p),
            o => viewer.take(vec![o]),
        }
    }
    problems
}

#[test]
fn an_unreadable_line_is_reported_and_the_player_stays_before_it() {
    let path = sample("keycount-fluid.jsonl");
    let text = std::fs::read_to_string(&path).expect("it reads");
    // Line 300 keeps its clock and kind (so the index counts it) but loses its fields.
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let at_s = serde_json::from_str::<serde_json::Value>(&lines[299]).expect("JSON")["at_s"].clone();
    lines[299] = format!(r#"{{"at_s":{at_s},"process":0,"kind":"sampled"}}"#);
    let bytes = (lines.join("\n") + "\n").into_bytes();
    let trace = megaflux_probe::record::read_from(text.as_bytes(), "sample").expect("it reads");
    let (events, header) = (trace.events, trace.header);
    let mut player = Player::new(TraceReader::new(std::io::Cursor::new(bytes), "broken").expect("a header"))
        .expect("it indexes");
    let mut viewer = Viewer::new();
    viewer.take(player.start());
    let mut problems = Vec::new();
    for _ in 0..3 {
        problems.extend(play(&mut player, &mut viewer));
        // The events before the bad line (line 300 is event 299, the header being line 1).
        assert_eq!(viewer.events(), 298);
        assert!(!viewer.position.as_ref().expect("a position").playing);
        assert!(viewer.model == replay_all(&header, &events[..298]));
        viewer.take(player.request(Request::PlayPause));
    }
    assert!(problems.iter().all(|p| p.contains("line 300")), "{problems:?}");
    // Stepping back works; seeking past the line meets it, and the player stays.
    viewer.take(player.request(Request::StepBack));
    assert_eq!(viewer.events(), 297);
    let out = player.request(Request::SeekTo(100.0));
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Problem(p) if p.contains("line 300")))
    );
    viewer.take(
        out.into_iter()
            .filter(|o| !matches!(o, Output::Problem(_)))
            .collect(),
    );
    assert_eq!(viewer.events(), 297);
    viewer.take(player.request(Request::Step));
    assert_eq!(viewer.events(), 298);
    assert!(viewer.model == replay_all(&header, &events[..298]));
}

/// A line that is not an event at all (the index cannot even skim it): the player opens
/// the trace anyway, says which line it skipped, and playing stops before that line.
#[test]
fn a_line_that_is_not_json_is_skipped_by_the_index_and_stops_playing() {
    let path = sample("keycount-fluid.jsonl");
    let text = std::fs::read_to_string(&path).expect("it reads");
    let mut lines: Vec<&str> = text.lines().collect();
    lines[299] = "not json";
    let bytes = (lines.join("\n") + "\n").into_bytes();
    let trace =
        megaflux_probe::record::read_from(bytes.as_slice(), "broken").expect("it reads past line 300");
    assert_eq!(trace.unreadable.lines().to_vec(), vec![300]);
    let mut player = Player::new(TraceReader::new(std::io::Cursor::new(bytes), "broken").expect("a header"))
        .expect("it indexes past the bad line");
    assert_eq!(player.index().unreadable.lines().to_vec(), vec![300]);
    assert_eq!(player.index().events, trace.events.len() as u64);
    let start = player.start();
    assert!(
        start
            .iter()
            .any(|o| matches!(o, Output::Problem(p) if p.starts_with("skipped 1 unreadable line: 300"))),
        "{start:?}"
    );
    let mut viewer = Viewer::new();
    viewer.take(
        start
            .into_iter()
            .filter(|o| !matches!(o, Output::Problem(_)))
            .collect(),
    );
    let problems = play(&mut player, &mut viewer);
    // The 298 events before line 300, and a stop there.
    assert_eq!(viewer.events(), 298);
    assert!(!viewer.position.as_ref().expect("a position").playing);
    assert!(viewer.model == replay_all(&trace.header, &trace.events[..298]));
    assert!(problems.iter().any(|p| p.contains("line 300")), "{problems:?}");
}

#[derive(Clone, Debug)]
enum Ask {
    Request(Request),
    Wait(u64),
}

fn ask() -> impl Strategy<Value = Ask> {
    prop_oneof![
        Just(Ask::Request(Request::PlayPause)),
        Just(Ask::Request(Request::Faster)),
        Just(Ask::Request(Request::Slower)),
        (0.0f64..6.0).prop_map(|t| Ask::Request(Request::SeekTo(t))),
        (-3.0f64..3.0).prop_map(|t| Ask::Request(Request::SeekBy(t))),
        Just(Ask::Request(Request::Step)),
        Just(Ask::Request(Request::StepBack)),
        Just(Ask::Request(Request::NextMark)),
        Just(Ask::Request(Request::PrevMark)),
        (0u64..2000).prop_map(Ask::Wait),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn the_view_is_always_the_events_before_the_position(
        sample in 0..5usize,
        asks in proptest::collection::vec(ask(), 1..24),
    ) {
        let name = [
            "keycount-fluid.jsonl",
            "keycount-failover.jsonl",
            "q4-batched.jsonl",
            "cluster-keycount.jsonl",
            "sessions-drain.jsonl",
        ][sample];
        let (mut player, events, header) = player(name);
        let (start, end) = (player.index().start_s, player.index().end_s);
        let mut viewer = Viewer::new();
        viewer.take(player.start());
        for a in asks {
            match a {
                Ask::Request(r) => viewer.take(player.request(r)),
                Ask::Wait(ms) => viewer.take(player.advance(Duration::from_millis(ms))),
            }
            let p = viewer.position.clone().expect("a position");
            prop_assert!(p.events <= events.len() as u64);
            prop_assert!(p.at_s >= start && p.at_s <= end, "{} not in {}..{}", p.at_s, start, end);
            prop_assert!(viewer.model == replay_all(&header, &events[..p.events as usize]), "{:?}", p);
        }
    }
}
