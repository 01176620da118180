//! The model takes events from the network and from files: any sequence of them, of any
//! kind and with any fields, never makes it panic, and never makes it hold more than the
//! job its first hello describes allows.

use megaflux_probe::event::{Event, Outcome, Phase, Stamped};
use megaflux_probe::model::{JobModel, MAX_BINS, MAX_PEERS};
use proptest::prelude::*;

/// Small numbers mostly, and the ones that break things.
fn number() -> impl Strategy<Value = u32> {
    prop_oneof![
        0u32..20,
        Just(u32::MAX),
        Just(MAX_BINS),
        Just(MAX_PEERS),
        any::<u32>()
    ]
}

fn wide() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..1000, Just(u64::MAX), any::<u64>()]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("count".to_string()),
        Just("output".to_string()),
        "[a-z]{1,12}",
        "x{600}",
    ]
}

fn event() -> BoxedStrategy<Event> {
    let hello =
        (number(), number(), number(), number()).prop_map(|(processes, workers, peers, bins)| Event::Hello {
            processes,
            workers,
            peers,
            bins,
            config: serde_json::json!({"replicas": 2}),
            anchor_unix_s: None,
        });
    let per_worker = prop_oneof![
        (number(), number(), wide()).prop_map(|(worker, peers, base)| Event::JobStarted {
            worker,
            peers,
            base
        }),
        (number(), wide()).prop_map(|(worker, records)| Event::JobFinished { worker, records }),
        (number(), name(), number(), wide(), any::<bool>()).prop_map(
            |(worker, operator, bin, keys, standby)| {
                Event::BinSize {
                    worker,
                    operator,
                    bin,
                    keys,
                    bytes: keys,
                    standby,
                }
            }
        ),
        (number(), name(), proptest::option::of(wide()), wide()).prop_map(
            |(worker, operator, applied, input)| {
                Event::Frontier {
                    worker,
                    operator,
                    applied,
                    control: applied,
                    input,
                }
            }
        ),
        (number(), wide(), wide(), wide()).prop_map(|(worker, records, busy_ns, interval_ns)| {
            Event::WorkerStats {
                worker,
                records,
                applied: Some(records / 2),
                busy_ns,
                interval_ns,
            }
        }),
        (number(), name(), wide()).prop_map(|(worker, operator, keys)| Event::Sampled {
            worker,
            operator,
            full: true,
            bins: keys % 100,
            keys,
            bytes: keys,
        }),
        (number(), name(), "[0-9: ]{0,40}").prop_map(|(worker, operator, sizes)| Event::BinSizes {
            worker,
            operator,
            sizes,
        }),
        (number(), name(), number(), wide()).prop_map(|(worker, operator, bin, time)| Event::Takeover {
            operator,
            worker,
            bin,
            time,
        }),
    ];
    let phase = prop_oneof![
        Just(Phase::Issued),
        Just(Phase::Extracted),
        Just(Phase::Received),
        Just(Phase::Installed),
        Just(Phase::Completed),
    ];
    let moves = (
        phase,
        number(),
        wide(),
        proptest::option::of(number()),
        proptest::option::of(name()),
    )
        .prop_map(|(phase, bin, time, worker, operator)| Event::Migration {
            phase,
            bin,
            time,
            operator,
            worker,
            from: worker,
            to: worker.map(|w| w.wrapping_add(1)),
            bytes: Some(u64::from(bin)),
            chunks: Some(1),
            step: Some(time),
            primary: worker,
            standby: Some(-1),
            copy: None,
        });
    let plane = prop_oneof![
        (name(), name(), wide()).prop_map(|(strategy, target, steps)| Event::PlanStarted {
            strategy,
            target,
            steps,
            bins: steps,
            purpose: None,
            id: Some(steps % 4),
            time: None,
            run_s: Some(steps as f64 / 7.0),
        }),
        (name(), wide()).prop_map(|(strategy, steps)| Event::PlanCompleted {
            strategy,
            steps,
            seconds: 1.0,
            id: Some(steps % 4),
            cancelled: None,
            run_s: Some(steps as f64 / 5.0),
        }),
        (wide(), wide()).prop_map(|(id, max)| Event::PlanLatency {
            id: id % 4,
            p50: max / 2,
            p99: max,
            max,
        }),
        (name(), proptest::option::of(name())).prop_map(|(command, reason)| Event::Command {
            outcome: Outcome::Rejected,
            id: Some(1),
            time: None,
            command,
            request: None,
            source: None,
            reason,
        }),
        (wide(), "[0-9/ -]{0,60}").prop_map(|(time, holders)| Event::Placement { time, holders }),
        (number(), proptest::option::of(name())).prop_map(|(worker, lost)| Event::Failure {
            worker,
            reason: "fail-stop".into(),
            time: Some(1),
            promoted: Some(1),
            degraded: Some(1),
            suspects: None,
            lost,
        }),
        (number(), wide()).prop_map(|(worker, time)| Event::Rejoin { worker, time }),
        (number(), proptest::collection::vec(number(), 0..4))
            .prop_map(|(worker, bins)| Event::Recovery { worker, bins }),
        (wide(), name()).prop_map(|(time, bins)| Event::Lost { time, bins }),
        (wide(), wide()).prop_map(|(window, count)| Event::Latency {
            window,
            t_s: window as f64,
            count,
            p50: count,
            p99: count,
            max: count,
            histogram: String::new(),
        }),
    ];
    let collector = prop_oneof![
        (any::<bool>(), proptest::option::of(name()))
            .prop_map(|(on, failed)| Event::Recording { on, failed }),
        (name(), wide()).prop_map(|(place, count)| Event::Dropped { place, count }),
        Just(Event::Keyframe {
            model: serde_json::json!({"operators": {"count": [{"keys": 1, "bytes": 1}]}}),
        }),
        Just(Event::Keyframe {
            model: serde_json::to_value(JobModel::new()).unwrap(),
        }),
    ];
    // Boxed: the unboxed strategy's type is deep enough to overflow a test thread's stack
    // in a debug build.
    prop_oneof![
        2 => hello.boxed(),
        6 => per_worker.boxed(),
        3 => moves.boxed(),
        3 => plane.boxed(),
        1 => collector.boxed(),
    ]
    .boxed()
}

fn stamped() -> impl Strategy<Value = Stamped> {
    (number(), event(), 0.0f64..100.0).prop_map(|(process, event, at_s)| Stamped { at_s, process, event })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_events_keep_the_model_within_the_job(
        job in (1u32..4, 1u32..4, prop_oneof![1u32..64, Just(MAX_BINS), Just(u32::MAX)]),
        events in proptest::collection::vec(stamped(), 0..200),
    ) {
        let (processes, workers, bins) = job;
        let mut model = JobModel::new();
        model.apply(&Stamped {
            at_s: 0.0,
            process: 0,
            event: Event::Hello {
                processes,
                workers,
                peers: processes * workers,
                bins,
                config: serde_json::json!({}),
                anchor_unix_s: None,
            },
        });
        for e in &events {
            model.apply(e);
        }
        let bound = JobModel::entries_bound(bins, processes * workers);
        prop_assert!(model.entries() <= bound, "{} entries, bound {bound}", model.entries());
        prop_assert!(model.peers <= processes * workers);
        prop_assert!(model.operators.values().all(|b| b.len() <= bins.min(MAX_BINS) as usize));
        prop_assert!(model.workers.keys().all(|w| *w < processes * workers));
    }

    #[test]
    fn any_events_without_a_hello_never_panic(events in proptest::collection::vec(stamped(), 0..200)) {
        let mut model = JobModel::new();
        for e in &events {
            model.apply(e);
        }
        prop_assert!(model.entries() <= JobModel::entries_bound(MAX_BINS, MAX_PEERS));
    }
}

/// One event naming a new operator and the last bin a job can have allocates nothing in a
/// job of 16 bins (the hello holds the job's 16 bins' placement, and nothing else).
#[test]
fn a_far_bin_of_a_new_operator_allocates_nothing() {
    let mut model = JobModel::new();
    model.apply(&Stamped {
        at_s: 0.0,
        process: 0,
        event: Event::Hello {
            processes: 1,
            workers: 1,
            peers: 1,
            bins: 16,
            config: serde_json::json!({}),
            anchor_unix_s: None,
        },
    });
    assert_eq!(model.placement.len(), 16);
    let after_hello = model.entries();
    assert_eq!(after_hello, 1 + 16);
    model.apply(&Stamped {
        at_s: 0.0,
        process: 0,
        event: Event::BinSize {
            worker: 0,
            operator: "new".into(),
            bin: MAX_BINS - 1,
            keys: 1,
            bytes: 1,
            standby: false,
        },
    });
    assert!(model.operators.get("new").is_none_or(Vec::is_empty));
    assert_eq!(model.entries(), after_hello);
}
