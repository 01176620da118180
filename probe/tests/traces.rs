//! The sample traces in `traces/` read back with this build, and tell a consistent story:
//! every bin has an owner, every move completed, the state adds up to the job's keys; each
//! has keyframes and ends with its summary.

use std::path::PathBuf;

use megaflux_probe::FORMAT_VERSION;
use megaflux_probe::event::Event;
use megaflux_probe::model::JobModel;
use megaflux_probe::record;

fn sample(name: &str) -> (record::Trace, JobModel) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../traces")
        .join(name);
    let trace = record::read(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(!trace.truncated, "{name} is cut short");
    assert_eq!(trace.skipped, 0, "{name} has kinds this build does not know");
    assert!(trace.unreadable.is_empty(), "{name}: {}", trace.unreadable);
    // Made with this format: a keyframe to seek from, and the summary as the last line.
    assert_eq!(
        trace.header.version, FORMAT_VERSION,
        "{name}: made again in this format"
    );
    assert!(trace.header.build.is_some() && !trace.header.initial_placement.is_empty());
    assert!(
        trace
            .events
            .iter()
            .any(|e| matches!(e.event, Event::Keyframe { .. })),
        "{name}: no keyframe"
    );
    assert!(
        matches!(trace.events.last().map(|e| &e.event), Some(Event::Summary { .. })),
        "{name}: does not end with its summary"
    );
    let mut model = JobModel::new();
    trace.events.iter().for_each(|e| model.apply(e));
    assert_eq!(model.processes.len() as u32, trace.header.processes);
    assert!(
        model.moving.is_empty(),
        "{name}: moves never completed: {:?}",
        model.moving
    );
    assert!(model.plan.is_none(), "{name}: a plan never finished");
    assert_eq!(model.dropped_total(), 0, "{name} dropped events");
    for bins in model.operators.values() {
        assert_eq!(bins.len() as u32, trace.header.bins);
        assert!(
            bins.iter().all(|b| b.owner.is_some()),
            "{name}: a bin without owner"
        );
    }
    (trace, model)
}

/// The job's `--keys`: a flag of its own (`params`), or, in traces from before jobs had
/// flags, a field of the job's settings.
fn keys_of(config: &serde_json::Value) -> u64 {
    match config["params"]["keys"].as_str() {
        Some(keys) => keys.parse().unwrap(),
        None => config["keys"].as_u64().unwrap(),
    }
}

fn total_keys(model: &JobModel) -> u64 {
    model.operators.values().flatten().map(|b| b.keys).sum()
}

#[test]
fn keycount_fluid() {
    let (trace, model) = sample("keycount-fluid.jsonl");
    assert_eq!(trace.header.config["workload"], "keycount");
    assert_eq!(total_keys(&model), keys_of(&trace.header.config));
    assert_eq!(model.finished_plans.len(), 2);
    // After `matched` back to uniform, the owners are the initial map again.
    let owners: Vec<u32> = model
        .operators
        .values()
        .next()
        .unwrap()
        .iter()
        .filter_map(|b| b.owner)
        .collect();
    assert_eq!(owners, trace.header.initial_map);
}

#[test]
fn q4_batched() {
    let (trace, model) = sample("q4-batched.jsonl");
    assert_eq!(trace.header.config["workload"], "q4");
    assert_eq!(model.finished_plans.len(), 1);
    // Packed onto worker 0: every bin of every operator lives there.
    for bins in model.operators.values() {
        assert!(bins.iter().all(|b| b.owner == Some(0)));
    }
    assert!(total_keys(&model) > 0);
    assert!(
        trace
            .events
            .iter()
            .any(|e| matches!(e.event, Event::Latency { .. }))
    );
}

#[test]
fn cluster_keycount() {
    let (trace, model) = sample("cluster-keycount.jsonl");
    assert_eq!(trace.header.processes, 2);
    assert_eq!(total_keys(&model), keys_of(&trace.header.config));
    for process in [0, 1] {
        assert!(
            trace
                .events
                .iter()
                .any(|e| e.process == process && matches!(e.event, Event::BinSize { .. })),
            "bin sizes from process {process}"
        );
    }
}

#[test]
fn keycount_failover() {
    let (trace, model) = sample("keycount-failover.jsonl");
    assert_eq!(trace.header.config["replicas"], 2);
    assert_eq!(total_keys(&model), keys_of(&trace.header.config));
    // Worker 1 failed, its standbys took over, the spare got copies, then it rejoined and
    // the bins spread back: the last placement is the first one.
    let f = &model.failures[0];
    assert_eq!(f.worker, 1);
    assert!(f.takeovers > 0 && f.rejoined_s.is_some());
    assert_eq!(f.recovered, Some(f.degraded));
    assert!(model.failed.is_empty());
    let placements: Vec<&String> = trace
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Placement { holders, .. } => Some(holders),
            _ => None,
        })
        .collect();
    assert!(placements.len() >= 4);
    assert_eq!(placements.first(), placements.last());
    assert!(model.placement.iter().all(|h| h.standby.is_some()));
}

/// The sessions example over `traces/sessions-clicks.csv`: its sessions closed after the
/// input's end, in a drain that completed, and the summary says where its outputs lie.
#[test]
fn sessions_drain() {
    let (trace, model) = sample("sessions-drain.jsonl");
    assert_eq!(trace.header.config["workload"], "sessions");
    assert_eq!(model.finished_plans.len(), 1);
    let Some(Event::Summary { summary }) = trace.events.last().map(|e| &e.event) else {
        panic!("no summary");
    };
    let summary: megaflux::summary::Summary =
        serde_json::from_value(summary.clone()).expect("the summary reads");
    let drain = summary.drain.as_ref().expect("the job drains");
    assert!(!drain.cut && drain.ended_at > drain.input_end + 1, "{drain:?}");
    let spans = summary.output_spans.as_ref().expect("the outputs per span");
    assert_eq!(spans.spans.iter().map(|s| s.2).sum::<u64>(), summary.outputs);
    assert!(
        spans.spans.iter().any(|s| s.0 + spans.width > drain.input_end),
        "sessions closed in the drain: {spans:?}"
    );
}
