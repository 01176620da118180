//! A dataflow built by hand on `stateful_unary`, moved by raw control instructions (no
//! control plane, no placement event): the model that watches it knows every bin's owner
//! from the start and sees each move complete, whether it starts from the job's hello or
//! from a trace's header.

use std::collections::BTreeMap;
use std::time::Duration;

use megaflux::bins::hash_key;
use megaflux::config::{single, uniform};
use megaflux::timely::dataflow::operators::Probe;
use megaflux::timely::dataflow::{InputHandleVec, ProbeHandle};
use megaflux::{Bin, Bins, ControlInst, StatefulConfig, Time, stateful_unary};
use megaflux_probe::event::{Event, expand};
use megaflux_probe::model::JobModel;
use megaflux_probe::record::TraceHeader;
use megaflux_probe::{ProbeLayer, Stamped};
use megaflux_testkit::{Watch, within};
use tracing_subscriber::prelude::*;

const BINS: usize = 16;
const PEERS: usize = 2;

/// Runs a count over keys 0..200 at times 1..20, moving bin 3 to worker 0 and bin 4 to
/// worker 1 at time 5 with raw instructions; its events. Each worker's body is guarded by
/// `watch`, and each loop that waits for the other worker checks it.
fn raw_job(watch: &Watch) -> Vec<Stamped> {
    let (layer, mut queue) = ProbeLayer::new(0, 1 << 16);
    tracing_subscriber::registry().with(layer.filtered()).init();
    let watch = watch.clone();
    let guards = megaflux::timely::execute(megaflux::timely::Config::process(PEERS), move |worker| {
        watch.guard(|| {
            let config = StatefulConfig::uniform(Bins::new(BINS).unwrap(), worker.peers());
            let (mut data, mut control) = (InputHandleVec::new(), InputHandleVec::new());
            let probe = ProbeHandle::new();
            worker.dataflow::<Time, _, _>(|scope| {
                let counts = stateful_unary(
                    data.to_stream(scope),
                    control.to_stream(scope),
                    &config,
                    "count",
                    |k: &u64| hash_key(k),
                    |_t, bin: &mut Bin<BTreeMap<u64, u64>>, keys: &mut Vec<u64>, out: &mut Vec<u64>| {
                        for k in keys.drain(..) {
                            let n = bin.state.entry(k).or_insert(0);
                            *n += 1;
                            out.push(*n);
                        }
                    },
                );
                counts.probe_with(&probe);
            });
            for t in 1..20u64 {
                data.advance_to(t);
                control.advance_to(t);
                if worker.index() == 0 {
                    for k in 0..200u64 {
                        data.send(k);
                    }
                    if t == 5 {
                        control.send(ControlInst::Move { bin: 3, worker: 0 });
                        control.send(ControlInst::Move { bin: 4, worker: 1 });
                    }
                }
                while probe.less_than(&t) {
                    watch.check();
                    worker.step();
                }
            }
        })
    })
    .unwrap();
    for g in guards.join() {
        g.unwrap();
    }
    let mut events = Vec::new();
    while let Ok(e) = queue.events.try_recv() {
        events.push(e);
    }
    expand(events)
}

fn hello() -> Stamped {
    Stamped {
        at_s: 0.0,
        process: 0,
        event: Event::Hello {
            processes: 1,
            workers: PEERS as u32,
            peers: PEERS as u32,
            bins: BINS as u32,
            config: serde_json::json!({"workload": "count"}),
            anchor_unix_s: None,
        },
    }
}

#[test]
fn raw_moves_complete_and_every_bin_has_an_owner() {
    let events = within("the raw job", Duration::from_secs(300), raw_job);
    let installed = events
        .iter()
        .filter(|e| matches!(e.event, Event::Migration { .. }))
        .count();
    assert!(
        installed >= 6,
        "extracted, received and installed for both bins: {installed}"
    );
    let map = uniform(BINS, PEERS);
    let mut header = TraceHeader::new(serde_json::json!({}), 1, PEERS as u32, BINS as u32, map.clone());
    header.initial_placement = single(&map).iter().map(ToString::to_string).collect();
    // Live: the hello comes first; a trace: the header seeds the model.
    let mut live = JobModel::new();
    live.apply(&hello());
    let mut traced = JobModel::from_header(&header);
    for model in [&mut live, &mut traced] {
        for bin in 0..BINS {
            assert!(model.placement[bin].primary.is_some(), "bin {bin} has no owner");
        }
        for e in &events {
            model.apply(e);
        }
        assert!(model.moving.is_empty(), "moves left open: {:?}", model.moving);
        assert_eq!(model.placement.len(), BINS);
        assert_eq!(model.placement[3].primary, Some(0));
        assert_eq!(model.placement[4].primary, Some(1));
        // The others stay where they started.
        for bin in (0..BINS).filter(|b| ![3, 4].contains(b)) {
            assert_eq!(model.placement[bin].primary, Some(map[bin]), "bin {bin}");
        }
    }
}
