//! Each NEXMark query, on migrateable operators under a migration schedule (single moves and
//! whole maps, or pipelined plans with bins split into small chunks) and as its native twin,
//! gives at every time the outputs of a plain sequential implementation; the migrating runs
//! really move bins.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use megaflux::config::uniform;
use megaflux::epoch::EpochLen;
use megaflux::harness::RunConfig;
use megaflux::job::{Job, Operators};
use megaflux::nexmark::events::Source;
use megaflux::nexmark::{Event, NexmarkJob, NexmarkParams, Output, Query, reference};
use megaflux::plan::Strategy;
use megaflux::{Bins, ControlInst, StatefulConfig, Time};
use timely::dataflow::operators::{Inspect, Probe};
use timely::dataflow::{InputHandleVec, ProbeHandle};

mod common;

const RATE: u64 = 4_000;
const EVENTS: u64 = 6_000;
const BINS: usize = 16;

fn params() -> NexmarkParams {
    NexmarkParams {
        window_ms: 200,
        slide_ms: 50,
        in_flight_auctions: 40,
    }
}

/// The events with their logical times (as the harness schedules them: event `i` in the
/// millisecond `i * 1000 / RATE`, at time that plus one).
fn events() -> Vec<(Time, Event)> {
    let mut source = Source::new(RATE, params(), EpochLen::MS, 0, 0, 1);
    (0..EVENTS)
        .map(|i| {
            let t = i * 1000 / RATE + 1;
            (t, source.next_at(t))
        })
        .collect()
}

/// Pipelined plans, one step per millisecond: `fluid` onto worker 0 from time 100, then
/// `batched:3` back to every worker from time 600.
fn pipelined(workers: u32) -> Vec<(Time, ControlInst)> {
    let plans = [
        (Strategy::Fluid, vec![0; BINS], 100),
        (Strategy::Batched(3), uniform(BINS, workers as usize), 600),
    ];
    common::plan_control(&plans, BINS, workers as usize)
}

/// Moves every few milliseconds: single bins, back and forth, and whole maps.
fn schedule(workers: u32) -> Vec<(Time, ControlInst)> {
    let mut control = Vec::new();
    for (k, t) in (5..1500).step_by(37).enumerate() {
        let k = k as u32;
        if k % 5 == 4 {
            let map = (0..BINS as u32).map(|b| (b + k) % workers).collect();
            control.push((t, ControlInst::Map(map)));
        } else {
            control.push((
                t,
                ControlInst::Move {
                    bin: (k * 7) % BINS as u32,
                    worker: k % workers,
                },
            ));
            control.push((
                t,
                ControlInst::Move {
                    bin: (k * 3) % BINS as u32,
                    worker: (k + 1) % workers,
                },
            ));
        }
    }
    control
}

/// How a run migrates.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Native,
    /// Moves handed between the workers as they are (one process).
    Moves,
    /// Pipelined plans, state in chunks of this many bytes.
    Pipelined(usize),
}

/// Runs `query`; returns its outputs by time and the bins its operators shipped.
fn run(
    query: Query,
    workers: usize,
    mode: Mode,
    events: Arc<Vec<(Time, Event)>>,
) -> (BTreeMap<Time, Vec<Output>>, u64) {
    let results: Arc<Mutex<Vec<(Time, Output)>>> = Arc::default();
    let shipped: Arc<Mutex<u64>> = Arc::default();
    let sink = Arc::clone(&results);
    let shipped_sink = Arc::clone(&shipped);
    let native = mode == Mode::Native;
    let handoffs = (mode == Mode::Moves).then(|| Arc::new(megaflux::operator::Handoffs::new(workers)));
    let what = format!("{query} {mode:?} on {workers} workers");
    common::execute(&what, workers, move |worker, watch| {
        let (index, peers) = (worker.index(), worker.peers());
        let mut data = InputHandleVec::<Time, Event>::new();
        let mut control = InputHandleVec::<Time, ControlInst>::new();
        let mut config = StatefulConfig::uniform(Bins::new(BINS).unwrap(), peers);
        if let Mode::Pipelined(chunk_bytes) = mode {
            config.chunk_bytes = chunk_bytes;
        }
        config.handoffs = handoffs.clone();
        let transfers = std::rc::Rc::clone(&config.transfers);
        let job = NexmarkJob::new(query);
        let run = Arc::new(RunConfig {
            rate: RATE,
            params: params().values(),
            epoch: EpochLen::MS,
            ..RunConfig::default()
        });
        let sink = Arc::clone(&sink);
        let probe = ProbeHandle::new();
        let (d, c) = (&mut data, &mut control);
        worker.dataflow::<Time, _, _>(|scope| {
            let ops = if native {
                Operators::native(config.clone(), run)
            } else {
                Operators::migrating(c.to_stream(scope), config.clone(), run)
            };
            let out = job.dataflow(d.to_stream(scope), &ops);
            out.inspect_core(move |event| {
                if let Ok((stamp, batch)) = event {
                    let t = *stamp.least().expect("outputs carry a time");
                    sink.lock().unwrap().extend(batch.iter().map(|o| (t, o.clone())));
                }
            })
            .probe_with(&probe);
        });
        let control_plan = match mode {
            Mode::Pipelined(_) => pipelined(peers as u32),
            _ => schedule(peers as u32),
        };
        let end = events.last().map_or(0, |(t, _)| *t) + 1;
        let mut next = 0;
        for t in 1..end {
            data.advance_to(t);
            control.advance_to(t);
            while next < events.len() && events[next].0 == t {
                if next % peers == index {
                    data.send(events[next].1.clone());
                }
                next += 1;
            }
            if index == 0 && !native {
                for (_, inst) in control_plan.iter().filter(|(ct, _)| *ct == t) {
                    control.send(inst.clone());
                }
            }
            worker.step();
        }
        drop((data, control));
        common::step_until(worker, watch, || probe.done());
        *shipped_sink.lock().unwrap() += transfers.borrow().values().map(|t| t.bins).sum::<u64>();
    });
    let mut by_time: BTreeMap<Time, Vec<Output>> = BTreeMap::new();
    for (t, o) in results.lock().unwrap().drain(..) {
        by_time.entry(t).or_default().push(o);
    }
    for v in by_time.values_mut() {
        v.sort_unstable();
    }
    let shipped = *shipped.lock().unwrap();
    (by_time, shipped)
}

#[test]
fn every_query_matches_its_sequential_reference() {
    let events = Arc::new(events());
    let kinds = |k: fn(&Event) -> bool| events.iter().filter(|(_, e)| k(e)).count();
    assert!(kinds(|e| matches!(e, Event::Person(_))) > 50);
    assert!(kinds(|e| matches!(e, Event::Auction(_))) > 200);
    for q in 1..=8 {
        let query = Query::new(q).expect("q1 to q8 exist");
        let expected = reference::outputs(query, params().windows(EpochLen::MS), &events);
        assert!(
            !expected.is_empty(),
            "{query}: the reference produces nothing on this stream"
        );
        for workers in [1, 2, 3] {
            for mode in [Mode::Native, Mode::Moves, Mode::Pipelined(7)] {
                let (outputs, shipped) = run(query, workers, mode, Arc::clone(&events));
                assert_eq!(outputs, expected, "{query} {mode:?}, {workers} workers");
                // Each stateful operator ships each bin that changes owner (Q1 and Q2 keep
                // no state).
                if mode != Mode::Native && workers > 1 && q >= 3 {
                    assert!(shipped > 0, "{query} {mode:?}, {workers} workers: nothing moved");
                }
            }
        }
    }
}
