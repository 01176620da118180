//! The model takes events from the network and from files: any sequence of them, of any
//! kind and with any fields, never makes it panic, and never makes it hold more than the
//! job its first hello describes allows.

use megaflux_probe::event::{Event, Outcome, Phase, Stamped};
use megaflux_probe::metrics::{Format, Snapshot};
use megaflux_probe::model::{DROP_PLACES, JobModel, MAX_AT_S, MAX_BINS, MAX_PEERS};
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
            records: None,
            worker,
            peers,
            base
        }),
        (number(), wide()).prop_map(|(worker, records)| Event::JobFinished {
            outputs: None,
            worker,
            records
        }),
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
                outputs_total: None,
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
        (number(), wide(), name()).prop_map(|(generation, from, lost)| Event::Restart {
            generation,
            from,
            lost: lost.clone(),
            survivors: lost.clone(),
            joined: lost,
        }),
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

/// A model whose first event is process 0's hello for a job of `processes` × `workers`
/// workers and `bins` bins, configured by `config`.
fn seeded(processes: u32, workers: u32, bins: u32, config: serde_json::Value) -> JobModel {
    let mut model = JobModel::new();
    model.apply(&Stamped {
        at_s: 0.0,
        process: 0,
        event: Event::Hello {
            processes,
            workers,
            peers: processes * workers,
            bins,
            config,
            anchor_unix_s: None,
        },
    });
    model
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_events_keep_the_model_within_the_job(
        job in (1u32..4, 1u32..4, prop_oneof![1u32..64, Just(MAX_BINS), Just(u32::MAX)]),
        events in proptest::collection::vec(stamped(), 0..200),
    ) {
        let (processes, workers, bins) = job;
        let mut model = seeded(processes, workers, bins, serde_json::json!({}));
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

/// Numbers that overflow sums and products, and small ones.
fn huge() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(u64::MAX / 2 + 1),
        Just(u64::from(u32::MAX)),
        0u64..3,
    ]
}

/// Workers, bins and processes at and past every bound, and the job's own.
fn far() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(u32::MAX),
        Just(MAX_BINS),
        Just(MAX_BINS - 1),
        Just(MAX_PEERS),
        Just(MAX_PEERS + 1),
        0u32..4,
    ]
}

/// Times no clock should take, and sane ones.
fn time() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(1e300),
        Just(f64::NAN),
        Just(-1.0),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(f64::MAX),
        Just(MAX_AT_S * 2.0),
        0.0f64..100.0,
    ]
}

/// An event of kind `kind` made of the numbers given: every field of every kind that
/// carries a number gets one of them.
fn extreme_event(kind: u8, n: u64, w: u32, t: f64, flag: bool, sum: bool) -> Event {
    let operator = if sum { "sum" } else { "count" }.to_string();
    let phases = [
        Phase::Issued,
        Phase::Extracted,
        Phase::Received,
        Phase::Installed,
        Phase::Completed,
    ];
    match kind {
        0 => Event::BinSize {
            worker: w,
            operator,
            bin: w,
            keys: n,
            bytes: n,
            standby: flag,
        },
        1 => Event::Sampled {
            worker: w,
            operator,
            full: flag,
            bins: n,
            keys: n,
            bytes: n,
        },
        2 => Event::WorkerStats {
            outputs_total: None,
            worker: w,
            records: n,
            applied: Some(n),
            busy_ns: n,
            interval_ns: if flag { 0 } else { n },
        },
        3 => Event::Frontier {
            worker: w,
            operator,
            applied: Some(if flag { 0 } else { n }),
            control: Some(n),
            input: n,
        },
        4 => Event::Latency {
            window: n,
            t_s: t,
            count: n,
            p50: n,
            p99: n,
            max: n,
            histogram: String::new(),
        },
        5 => Event::Migration {
            phase: phases[(n % 5) as usize],
            bin: w,
            time: n,
            operator: Some(operator),
            worker: Some(w),
            from: Some(w),
            to: Some(w),
            bytes: Some(n),
            chunks: Some(n),
            step: Some(n),
            primary: Some(w),
            standby: Some(if flag { -1 } else { i64::MAX }),
            copy: None,
        },
        6 => Event::PlanStarted {
            strategy: "fluid".into(),
            target: "uniform".into(),
            steps: n,
            bins: n,
            purpose: None,
            id: Some(n),
            time: Some(n),
            run_s: flag.then_some(t),
        },
        7 => Event::PlanCompleted {
            strategy: "fluid".into(),
            steps: n,
            seconds: t,
            id: Some(n),
            cancelled: None,
            run_s: flag.then_some(t),
        },
        8 => Event::PlanLatency {
            id: n,
            p50: n,
            p99: n,
            max: n,
        },
        9 => Event::Failure {
            worker: w,
            reason: "fail-stop".into(),
            time: Some(n),
            promoted: Some(n),
            degraded: Some(n),
            suspects: Some(n),
            lost: None,
        },
        10 => Event::Takeover {
            operator,
            worker: w,
            bin: w,
            time: n,
        },
        11 => Event::Rejoin { worker: w, time: n },
        12 => Event::Recovery {
            worker: w,
            bins: vec![w; 3],
        },
        13 => Event::Dropped {
            place: if flag {
                "queue".into()
            } else {
                format!("subscriber {n}")
            },
            count: n,
        },
        14 => Event::JobStarted {
            records: None,
            worker: w,
            peers: w,
            base: n,
        },
        15 => Event::JobFinished {
            outputs: None,
            worker: w,
            records: n,
        },
        16 => Event::Command {
            outcome: Outcome::Applied,
            id: Some(n),
            time: Some(n),
            command: "move".into(),
            request: None,
            source: None,
            reason: None,
        },
        17 => Event::Lost {
            time: n,
            bins: format!("0-{w}"),
        },
        18 => Event::Placement {
            time: n,
            holders: format!("{w}/{w} {w} -"),
        },
        19 => Event::Restart {
            generation: w,
            from: n,
            lost: format!("0-{w}"),
            survivors: format!("{n}"),
            joined: format!("{w}"),
        },
        _ => Event::Hello {
            processes: w,
            workers: w,
            peers: w,
            bins: w,
            config: serde_json::json!({"replicas": n, "epoch_us": n}),
            anchor_unix_s: Some(t),
        },
    }
}

fn extreme_stamped() -> impl Strategy<Value = Stamped> {
    let event = (0u8..21, huge(), far(), time(), any::<bool>(), any::<bool>())
        .prop_map(|(kind, n, w, t, flag, sum)| extreme_event(kind, n, w, t, flag, sum));
    (prop_oneof![0u32..3, Just(u32::MAX)], event, time()).prop_map(|(process, event, at_s)| Stamped {
        at_s,
        process,
        event,
    })
}

fn dropped(process: u32, place: String, count: u64) -> Stamped {
    Stamped {
        at_s: 1.0,
        process,
        event: Event::Dropped { place, count },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Numbers no job sends (`u64::MAX` sizes and counts, workers and bins past every
    /// bound, times of 1e300, NaN, -1 and infinity) never make the model panic or overflow,
    /// never move its clock, and keep it within the job; a snapshot of it reads back; and no
    /// number of viewers' drop places hides the job's own losses.
    #[test]
    fn extreme_numbers_keep_the_model_whole(events in proptest::collection::vec(extreme_stamped(), 0..300)) {
        let (processes, workers, bins) = (2u32, 2u32, 16u32);
        let peers = processes * workers;
        let mut model = seeded(processes, workers, bins, serde_json::json!({"replicas": 2, "epoch_us": 250}));
        for e in &events {
            model.apply(e);
        }
        let bound = JobModel::entries_bound(bins, peers);
        prop_assert!(model.entries() <= bound, "{} entries, bound {bound}", model.entries());
        prop_assert_eq!(model.peers, peers);
        prop_assert!(model.workers.keys().all(|w| *w < peers));

        // Only times moved the clock.
        let latest = events
            .iter()
            .map(|e| e.at_s)
            .filter(|t| (0.0..=MAX_AT_S).contains(t))
            .fold(0.0f64, f64::max);
        prop_assert_eq!(model.now_s, latest);
        // Every time the model keeps is one its clock took, and every other float a number.
        let times: Vec<f64> = model
            .commands
            .iter()
            .map(|c| c.at_s)
            .chain(model.failures.iter().flat_map(|f| std::iter::once(f.at_s).chain(f.rejoined_s)))
            .chain(model.latency.iter().map(|w| w.at_s))
            .chain(model.plan.iter().chain(&model.finished_plans).map(|p| p.started_s))
            .chain(model.processes.values().map(|h| h.at_s))
            .chain(model.restarts.iter().map(|r| r.at_s))
            .collect();
        prop_assert!(times.iter().all(|t| (0.0..=MAX_AT_S).contains(t)), "{times:?}");
        prop_assert!(model.latency.iter().all(|w| w.t_s.is_finite()));
        let plans_finite = model.plan.iter().chain(&model.finished_plans).all(|p| {
            p.seconds.is_none_or(f64::is_finite)
                && p.issued_run_s.is_none_or(f64::is_finite)
                && p.completed_run_s.is_none_or(f64::is_finite)
        });
        prop_assert!(plans_finite);
        let workers_finite = model.workers.values().all(|w| {
            w.records_per_s.is_finite() && w.busy.is_finite() && w.applied_per_s.is_none_or(f64::is_finite)
        });
        prop_assert!(workers_finite);

        // Totals saturate.
        let total = model.dropped_total();
        prop_assert!(model.dropped.values().all(|n| *n <= total));

        // A snapshot of the model (as the collector sends it to a new viewer) reads back.
        let json = serde_json::to_value(&model).unwrap();
        prop_assert!(serde_json::from_value::<JobModel>(json).is_ok());

        // A scrape of it encodes, whatever the events said (no overflow, no panic).
        for format in [Format::Prometheus, Format::OpenMetrics] {
            prop_assert!(Snapshot::of(&model, true).encode(format).is_ok());
        }

        // Viewers' places are capped; the job's processes' queues are kept whatever they do.
        for n in 0..100u64 {
            model.apply(&dropped(0, format!("subscriber {}", 1000 + n), 1));
        }
        model.apply(&dropped(1, "queue".into(), 7));
        prop_assert!(
            model.dropped.get("process 1 queue").is_some_and(|n| *n >= 7),
            "{:?}",
            model.dropped
        );
        let queues = model.dropped.keys().filter(|k| k.ends_with(" queue")).count();
        prop_assert!(queues <= processes as usize, "{:?}", model.dropped);
        prop_assert!(model.dropped.len() - queues <= DROP_PLACES);
        // A process the job does not have, or a viewer's place that reads as a queue, keeps
        // nothing.
        model.apply(&dropped(processes, "queue".into(), 1));
        model.apply(&dropped(0, "subscriber 1 queue".into(), 1));
        let beyond = format!("process {processes} queue");
        prop_assert!(!model.dropped.contains_key(&beyond));
        prop_assert!(!model.dropped.contains_key("process 0 subscriber 1 queue"));
        prop_assert!(model.entries() <= bound);
    }
}

/// A failure line costs what the failed worker held, not every bin of every operator: a
/// job of the most bins a job can have, every operator sized to all of them, takes
/// thousands of failures and rejoins of a worker that holds no standby at once (each of
/// them read every bin of every operator before: a million cells a line).
#[test]
fn failures_cost_what_the_worker_held() {
    let mut model = JobModel::new();
    let at = |event| Stamped {
        at_s: 0.0,
        process: 0,
        event,
    };
    model.apply(&at(Event::Hello {
        processes: 1,
        workers: 2,
        peers: 2,
        bins: MAX_BINS,
        config: serde_json::json!({"replicas": 2}),
        anchor_unix_s: None,
    }));
    for o in 0..16 {
        model.apply(&at(Event::BinSize {
            worker: 0,
            operator: format!("op{o}"),
            bin: MAX_BINS - 1,
            keys: 1,
            bytes: 1,
            standby: true,
        }));
    }
    assert_eq!(model.operators.len(), 16);
    assert!(model.operators.values().all(|b| b.len() == MAX_BINS as usize));
    // Each failure costs what the failed worker held (here nothing): 2,000 of them over 16
    // operators of 2^16 bins were 2 billion cell reads when a failure scanned every bin.
    for _ in 0..2_000 {
        model.apply(&at(fail_stop(1)));
        model.apply(&at(Event::Rejoin { worker: 1, time: 0 }));
    }
    // Worker 0's standbys are where they were; its failure clears them.
    assert!(
        model
            .operators
            .values()
            .all(|b| b[MAX_BINS as usize - 1].standby == Some(0))
    );
    model.apply(&at(fail_stop(0)));
    assert!(
        model
            .operators
            .values()
            .all(|b| b[MAX_BINS as usize - 1].standby.is_none())
    );
}

/// A fail-stop of `worker` with nothing else known.
fn fail_stop(worker: u32) -> Event {
    Event::Failure {
        worker,
        reason: "fail-stop".into(),
        time: None,
        promoted: None,
        degraded: None,
        suspects: None,
        lost: None,
    }
}
