//! A job with replicas, a failure and a rejoin, then one that loses bins: their high
//! availability events arrive typed through the probe's Layer.

use std::time::Duration;

use megaflux::Bins;
use megaflux::control::ControlHandle;
use megaflux::harness::{RunConfig, RunError};
use megaflux_probe::event::{Event, expand};
use megaflux_probe::{ProbeLayer, Stamped};
use megaflux_testkit::within;
use tracing_subscriber::prelude::*;

/// How long one of the jobs (4 s of records, in a debug build on a loaded machine) may run.
const RUN: Duration = Duration::from_secs(600);

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
        params: megaflux::job::ParamValues::new().with("keys", 20_000),
        rate: 20_000,
        duration: Duration::from_millis(4000),
        replicas: 2,
        failures: vec!["1@0.5".parse().unwrap()],
        rejoins: vec!["1@1.2".parse().unwrap()],
        ..RunConfig::default()
    };
    let replicated = config.clone();
    let summary = within("the job with replicas", RUN, move |_| {
        megaflux::workload::run(replicated, ControlHandle::new())
            .unwrap()
            .unwrap()
    });
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
    // The last plan for the failure is the summary's recovery; a plan that finished says
    // which bins it copied. On a busy machine the last one (after the rejoin) may still run
    // when the run ends: the summary then has it unfinished, and no event speaks for it.
    let recovered = events.iter().rev().find_map(|e| match &e.event {
        Event::Recovery { worker: 1, bins } => Some(bins.len()),
        _ => None,
    });
    let recovery = f.recovery.as_ref().expect("a recovery for the failure");
    let finished = recovery.duration_s.is_some() && !recovery.cancelled;
    if finished {
        assert_eq!(recovered, Some(recovery.bins_copied), "{recovery:?}");
    }
    // The placement at the start, after the failure, and after each recovery or rebalance
    // that finished (the recovery may be superseded by the rebalance after the rejoin).
    let placements = events
        .iter()
        .filter(|e| matches!(e.event, Event::Placement { .. }))
        .count();
    let plans_finished = events
        .iter()
        .filter(|e| matches!(e.event, Event::Recovery { .. }))
        .count();
    assert!(
        placements >= 2 + plans_finished,
        "{placements} placements, {plans_finished} plans finished: {recovery:?}"
    );
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
    let lost = within("the job without replicas", RUN, move |_| {
        megaflux::workload::run(lossy, ControlHandle::new())
    });
    match lost {
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
