//! Core's events arrive as typed events through the probe's Layer, from a real job.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use megaflux::Bins;
use megaflux::control::{Command, ControlHandle};
use megaflux::harness::RunConfig;
use megaflux_probe::event::{Event, KINDS, Outcome, Phase, expand};
use megaflux_probe::{ProbeLayer, Stamped};
use tracing_subscriber::prelude::*;

const KEYS: u64 = 20_000;

#[test]
fn a_job_s_events_arrive_typed() {
    // Timely's workers are threads of their own: the layer must be the global subscriber.
    let (layer, mut queue) = ProbeLayer::new(0, 1 << 20);
    tracing_subscriber::registry().with(layer.filtered()).init();

    let config = RunConfig {
        workload: "keycount".into(),
        workers: 2,
        bins: Bins::new(16).unwrap(),
        params: megaflux::job::ParamValues::new().with("keys", KEYS),
        rate: 20_000,
        duration: Duration::from_secs(2),
        migrations: vec!["all-at-once@0.6:pack:1".parse().unwrap()],
        ..RunConfig::default()
    };
    let control = ControlHandle::new();
    // Rejected by the job itself: the answer carries the command's id.
    let bad = control.send(Command::MoveBins {
        bins: vec![99],
        worker: 0,
        standby: false,
    });
    let summary = megaflux_testkit::within("the job", Duration::from_secs(600), move |_| {
        megaflux::workload::run(config, control).unwrap().unwrap()
    });

    let mut events: Vec<Stamped> = Vec::new();
    while let Ok(e) = queue.events.try_recv() {
        events.push(e);
    }
    // Bin sizes leave the workers as one event per sample; the collector expands them.
    assert!(events.iter().any(|e| matches!(e.event, Event::BinSizes { .. })));
    let events = expand(events);
    assert_eq!(queue.dropped.load(std::sync::atomic::Ordering::Relaxed), 0);
    let kinds: BTreeSet<&str> = events.iter().map(|e| e.event.kind()).collect();
    // All that core emits: not the hello and recording (the caller's and the collector's),
    // failures' (tests/replica_events.rs), a crash's restart (tui/tests/crash.rs), a drain's
    // progress (a job with scheduled work past its end: tui/tests/drain.rs), a Kafka
    // input's (tui/tests/kafka.rs), an output sink's (a job with --output:
    // tui/tests/metrics.rs serves its committed time), dropped events (none here), or the
    // collector's summary line.
    let elsewhere = [
        "hello",
        "recording",
        "failure",
        "takeover",
        "rejoin",
        "recovery",
        "restart",
        "lost",
        "draining",
        "input_partition",
        "input_retry",
        "output_committed",
        "dropped",
        "keyframe",
        "summary",
    ];
    for kind in KINDS.iter().filter(|k| !elsewhere.contains(k)) {
        assert!(kinds.contains(kind), "no {kind} event among {kinds:?}");
    }

    // What the bins cost adds up to what the workers applied, worker by worker (the bins'
    // counts are exact; the worker's figures sample the same counters).
    let mut by_bins: BTreeMap<u32, u64> = BTreeMap::new();
    let mut by_workers: BTreeMap<u32, u64> = BTreeMap::new();
    for e in &events {
        match &e.event {
            Event::BinLoads { worker, loads, .. } => {
                let records: u64 = loads
                    .split_whitespace()
                    .map(|t| t.split(':').nth(1).unwrap().parse::<u64>().unwrap())
                    .sum();
                *by_bins.entry(*worker).or_default() += records;
            }
            Event::WorkerStats { worker, applied, .. } => {
                *by_workers.entry(*worker).or_default() += applied.unwrap_or(0)
            }
            _ => {}
        }
    }
    assert!(by_bins.values().sum::<u64>() > 0);
    assert_eq!(
        by_bins, by_workers,
        "per-bin records against the workers' applied"
    );

    // The rejected command, matched by id, with its reason.
    let answer = events.iter().find_map(|e| match &e.event {
        Event::Command {
            id: Some(id),
            outcome,
            reason,
            ..
        } if *id == bad => Some((*outcome, reason.clone())),
        _ => None,
    });
    let (outcome, reason) = answer.expect("an answer to the bad command");
    assert_eq!(outcome, Outcome::Rejected);
    assert!(reason.unwrap_or_default().contains("99"));

    // Every bin of the plan went through every phase, in order.
    let moved = summary.migrations[0].bins_moved;
    assert_eq!(moved, 8);
    let mut phases: BTreeMap<u32, Vec<Phase>> = BTreeMap::new();
    for e in &events {
        if let Event::Migration { phase, bin, .. } = &e.event {
            phases.entry(*bin).or_default().push(*phase);
        }
    }
    assert_eq!(phases.len(), moved);
    for (bin, seen) in &phases {
        assert_eq!(
            seen,
            &vec![
                Phase::Issued,
                Phase::Extracted,
                Phase::Received,
                Phase::Installed,
                Phase::Completed
            ],
            "bin {bin}"
        );
    }

    // A full sample of the operator on both workers covers every key exactly once.
    let mut last_full: BTreeMap<u32, u64> = BTreeMap::new();
    for e in &events {
        if let Event::Sampled {
            worker,
            full: true,
            keys,
            ..
        } = &e.event
        {
            last_full.insert(*worker, *keys);
        }
    }
    assert_eq!(last_full.len(), 2, "a full sample from each worker");
    assert_eq!(last_full.values().sum::<u64>(), KEYS);

    // Latency windows come from worker 0 in order, one per 250 ms.
    let windows: Vec<u64> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Latency { window, .. } => Some(*window),
            _ => None,
        })
        .collect();
    assert_eq!(windows, (0..8).collect::<Vec<_>>());
}
