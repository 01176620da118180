//! A job with replicas, a failure and a rejoin, then one that loses bins: their high
//! availability events arrive typed through the probe's Layer.

use std::time::Duration;

use megaflux::Bins;
use megaflux::control::ControlHandle;
use megaflux::harness::{self, RunConfig, RunError};
use megaflux_probe::event::{Event, expand};
use megaflux_probe::{ProbeLayer, Stamped};
use tracing_subscriber::prelude::*;

fn drain(queue: &mut megaflux_probe::layer::EventQueue) -> Vec<Stamped> {
    let mut events = Vec::new();
    while let Ok(e) = queue.events.try_recv() {
        events.push(e);
    }
    expand(events)
}

#[test]
fn failures_takeovers_rejoins_recoveries_and_losses_arrive_typed() {
    let (layer, mut queue) = ProbeLayer::new(0, 1 << 20);
    tracing_subscriber::registry().with(layer.filtered()).init();
    let config = RunConfig {
        workers: 3,
        bins: Bins::new(16).unwrap(),
        keys: 20_000,
        rate: 20_000,
        duration: Duration::from_millis(2500),
        replicas: 2,
        failures: vec!["1@0.5".parse().unwrap()],
        rejoins: vec!["1@1.2".parse().unwrap()],
        ..RunConfig::default()
    };
    let summary = harness::run(config.clone(), ControlHandle::new())
        .unwrap()
        .unwrap();
    let events = drain(&mut queue);
    let failure = events.iter().find_map(|e| match &e.event {
        Event::Failure {
            worker: 1,
            promoted,
            degraded,
            ..
        } => Some((*promoted, *degraded)),
        _ => None,
    });
    let f = &summary.failures[0];
    assert_eq!(
        failure,
        Some((Some(f.bins_promoted as u64), Some(f.bins_degraded as u64)))
    );
    let takeovers = events
        .iter()
        .filter(|e| matches!(e.event, Event::Takeover { .. }))
        .count();
    assert!(takeovers >= f.bins_promoted, "{takeovers} takeovers");
    assert!(
        events
            .iter()
            .any(|e| matches!(e.event, Event::Rejoin { worker: 1, .. }))
    );
    let recovered = events.iter().find_map(|e| match &e.event {
        Event::Recovery { worker: 1, bins } => Some(bins.len()),
        _ => None,
    });
    assert_eq!(recovered, f.recovery.as_ref().map(|r| r.bins_copied));
    // The placement at the start, after the failure, after the recovery and the rebalance.
    let placements = events
        .iter()
        .filter(|e| matches!(e.event, Event::Placement { .. }))
        .count();
    assert!(placements >= 4, "{placements} placements");
    assert!(
        events
            .iter()
            .any(|e| matches!(e.event, Event::BinSize { standby: true, .. }))
    );

    // Without replicas, the failure loses worker 1's bins: the run stops, the event says so.
    let lossy = RunConfig {
        replicas: 1,
        rejoins: Vec::new(),
        ..config
    };
    match harness::run(lossy, ControlHandle::new()) {
        Err(RunError::BinsLost { bins, .. }) => assert_eq!(bins, vec![1, 4, 7, 10, 13]),
        other => panic!("expected lost bins, got {other:?}"),
    }
    let events = drain(&mut queue);
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.event, Event::Lost { bins, .. } if bins == "1,4,7,10,13"))
    );
}
