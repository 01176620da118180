//! A real two-process timely cluster on loopback gives the same output digest as one process
//! (for a workload with scheduled later work too: a cluster drains it, one process drops
//! it, both count the outputs up to the last epoch), and process 0's collector records the
//! events of both. A run whose plans must complete (two migrations, the balancer's) runs
//! until process 0's trace says they did, and is then stopped as `q` stops it; the run of
//! one process it is compared with covers the same epochs.

use std::time::Duration;

use megaflux_probe::event::{Event, Phase};
use megaflux_probe::model::JobModel;
use megaflux_testkit::{run, wait_all};

mod common;

use common::{
    CLUSTER_LIMIT, Cluster, cluster_ports, completed_plans, made_for, megaflux, same_epochs, stop, summary,
    wait_for_trace, with_duration,
};

/// The `--duration` of a cluster run the test stops once what it waits for happened: far
/// past any deadline of these tests.
const UNTIL_STOPPED: &str = "3600";

/// How long a one-process run may take before the test calls it hung.
const LIMIT: Duration = Duration::from_secs(300);

/// The epochs of these runs, in microseconds (`common::CLUSTER_EPOCH_US`).
const EPOCH_US: u64 = 1000;

const JOB: &[&str] = &[
    "run",
    "--headless",
    "--keys",
    "20000",
    "--rate",
    "20000",
    "--duration",
    "2",
    "--migrate",
    "all-at-once@0.5:pack:1",
    "--migrate",
    "matched+pipelined@1.2:uniform",
];

#[test]
fn two_processes_match_one() {
    let cluster = Cluster::new("cluster");
    let trace = cluster.dir.join("trace.jsonl");
    let collector = format!("127.0.0.1:{}", cluster_ports(1)[0]);
    // Both plans of `JOB` (at 0.5 s and 1.2 s of logical time) complete however long the
    // machine makes them take: the run goes on until they did.
    let job = with_duration(JOB, UNTIL_STOPPED);
    let mut p0 = {
        let mut job = job.clone();
        job.extend(["--serve", &collector, "--record", trace.to_str().unwrap()]);
        cluster.spawn("0", &job, "1")
    };
    let p1 = {
        let mut job = job.clone();
        job.extend(["--export", &collector]);
        cluster.spawn("1", &job, "1")
    };
    wait_for_trace(&mut p0, &trace, "both migrations to complete", |events| {
        completed_plans(events).len() >= 2
    });
    stop(&mut p0);
    let [out0, out1]: [_; 2] = wait_all(vec![p0, p1], CLUSTER_LIMIT)
        .try_into()
        .expect("two outputs");
    assert!(out0.status.success(), "{}", String::from_utf8_lossy(&out0.stderr));
    assert!(out1.status.success(), "{}", String::from_utf8_lossy(&out1.stderr));
    // Timely itself may print connection retries; the summary comes from process 0 only.
    let other = String::from_utf8_lossy(&out1.stdout);
    assert!(
        !other.lines().any(|l| l.starts_with('{')),
        "only process 0 reports, but process 1 printed: {other}"
    );
    let cluster = summary(&out0);
    assert_eq!(cluster["workers"], 2);
    assert_eq!(cluster["processes"], 2);
    let migrations = cluster["migrations"].as_array().unwrap();
    assert_eq!(migrations.len(), 2);
    for m in migrations {
        assert_eq!(m["bins_moved"], 128);
        assert!(m["completed_s"].is_number(), "{m}");
        assert!(m["bytes_moved"].as_u64().unwrap() > 0);
    }

    check_trace(&trace);

    // The same epochs on one process.
    let local = on_one_process(&with_duration(JOB, &same_epochs(&cluster, EPOCH_US)), &[]);
    assert_eq!(cluster["duration_s"], local["duration_s"]);
    assert_eq!(cluster["output_digest"], local["output_digest"]);
    assert_eq!(cluster["outputs"], local["outputs"]);
    assert_eq!(cluster["records_in"], local["records_in"]);
}

/// The trace holds both processes' state sizes and frontiers, every phase of every moved bin,
/// and bin sizes that add up to the job's state (keycount preloads each of its keys once).
fn check_trace(path: &std::path::Path) {
    let trace = megaflux_probe::record::read(path).unwrap();
    assert_eq!(trace.header.processes, 2);
    assert_eq!(trace.header.version, megaflux_probe::FORMAT_VERSION);
    assert_eq!(trace.header.hosts.len(), 2, "the host list");
    // A clean end: the run's summary is the last line.
    match trace.events.last().map(|e| &e.event) {
        Some(Event::Summary { summary }) => assert_eq!(summary["processes"], 2),
        other => panic!("the trace ends with {other:?}, not the summary"),
    }
    assert!(
        trace.events.iter().all(|e| !matches!(
            &e.event,
            Event::Hello {
                anchor_unix_s: None,
                ..
            }
        )),
        "every hello anchors its clock"
    );
    assert_eq!(trace.header.peers, 2);
    assert_eq!(trace.header.config["params"]["keys"], "20000");
    assert!(!trace.truncated);
    for process in [0, 1] {
        let of = |pred: fn(&Event) -> bool| {
            trace
                .events
                .iter()
                .any(|e| e.process == process && pred(&e.event))
        };
        assert!(
            of(|e| matches!(e, Event::Hello { .. })),
            "hello of process {process}"
        );
        assert!(
            of(|e| matches!(e, Event::BinSize { .. })),
            "bin sizes of process {process}"
        );
        assert!(
            of(|e| matches!(e, Event::Frontier { .. })),
            "frontiers of process {process}"
        );
        assert!(
            of(|e| matches!(e, Event::BinLoads { .. })),
            "bin loads of process {process}"
        );
    }
    // Every issued move went through every phase, at its time.
    let mut phases: std::collections::BTreeMap<(u32, u64), Vec<Phase>> = Default::default();
    for e in &trace.events {
        if let Event::Migration { phase, bin, time, .. } = &e.event {
            phases.entry((*bin, *time)).or_default().push(*phase);
        }
    }
    assert_eq!(phases.len(), 256, "two migrations of 128 bins");
    for (mv, seen) in &phases {
        let mut sorted = seen.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            vec![
                Phase::Issued,
                Phase::Extracted,
                Phase::Received,
                Phase::Installed,
                Phase::Completed
            ],
            "bin {} at time {}",
            mv.0,
            mv.1
        );
    }
    // Every keyframe is the model the events before it make.
    let mut model = JobModel::new();
    let mut keyframes = 0;
    for e in &trace.events {
        if let Event::Keyframe { model: frame } = &e.event {
            let frame: JobModel = serde_json::from_value(frame.clone()).unwrap();
            let mut replayed = model.keyframe();
            replayed.events = frame.events;
            assert_eq!(replayed, frame, "keyframe {keyframes}");
            keyframes += 1;
        }
        model.apply(e);
    }
    assert!(keyframes > 0, "a keyframe in the trace");
    assert_eq!(model.operators.len(), 1);
    let bins = model.operators.values().next().unwrap();
    assert_eq!(bins.len(), 256);
    assert!(bins.iter().all(|b| b.owner.is_some()));
    assert_eq!(bins.iter().map(|b| b.keys).sum::<u64>(), 20000);
    assert_eq!(model.dropped_total(), 0);
}

#[test]
fn scheduled_work_ends_with_the_run_in_a_cluster_too() {
    let job = &[
        "run",
        "--headless",
        "--workload",
        "q4",
        "--rate",
        "20000",
        "--in-flight-auctions",
        "2000",
        "--duration",
        "2",
        "--migrate",
        "fluid@0.7:pack:1",
    ];
    let two = on_two_processes("cluster-q4", job);
    let one = on_one_process(job, &[]);
    assert!(one["outputs"].as_u64().unwrap() > 0);
    assert_eq!(two["outputs"], one["outputs"]);
    assert_eq!(two["output_digest"], one["output_digest"]);
}

/// Process 0's summary of `job` run by a two-process cluster (both must succeed).
fn on_two_processes(name: &str, job: &[&str]) -> serde_json::Value {
    let cluster = Cluster::new(name);
    let [out0, out1] = cluster.run(job, "1");
    assert!(out0.status.success(), "{}", String::from_utf8_lossy(&out0.stderr));
    assert!(out1.status.success(), "{}", String::from_utf8_lossy(&out1.stderr));
    summary(&out0)
}

/// The summary of `job` (with `more` flags) run by one process with the cluster's workers
/// and epochs.
fn on_one_process(job: &[&str], more: &[&str]) -> serde_json::Value {
    let mut single = job.to_vec();
    single.extend(["--workers", "2", "--epoch-us", common::CLUSTER_EPOCH_US]);
    single.extend(more);
    let name = format!("megaflux {}", single.join(" "));
    let one = run(name, &mut megaflux(&single), LIMIT);
    assert!(one.status.success(), "{}", String::from_utf8_lossy(&one.stderr));
    summary(&one)
}

/// The balancer of a skewed cluster moves bins between the processes by itself, and the
/// output is one process's without a balancer. The cluster runs until a plan of the
/// balancer completed, however many judgements it takes on a loaded machine.
#[test]
fn the_balancer_moves_bins_across_processes_exactly_once() {
    let cluster = Cluster::new("cluster-balance");
    let trace = cluster.dir.join("trace.jsonl");
    let job = with_duration(common::SKEWED_BALANCED, UNTIL_STOPPED);
    let mut p0 = {
        let mut job = job.clone();
        job.extend(["--record", trace.to_str().unwrap()]);
        cluster.spawn("0", &job, "1")
    };
    let p1 = cluster.spawn("1", &job, "1");
    wait_for_trace(&mut p0, &trace, "a plan of the balancer to complete", |events| {
        completed_plans(events).iter().any(|p| balancers(p))
    });
    stop(&mut p0);
    let outputs = wait_all(vec![p0, p1], CLUSTER_LIMIT);
    for o in &outputs {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let two = summary(&outputs[0]);
    let by_balancer: Vec<_> = two["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["by"] == "balancer")
        .collect();
    let completed: Vec<_> = by_balancer
        .iter()
        .filter(|m| m["completed_s"].is_number())
        .collect();
    assert!(!completed.is_empty(), "{}", two["balance"]);
    assert!(
        completed.iter().all(|m| m["bytes_moved"].as_u64().unwrap() > 0),
        "{}",
        two["migrations"]
    );
    // The same epochs and job without the balancer's flags (its last six).
    let epochs = same_epochs(&two, EPOCH_US);
    let job = with_duration(common::SKEWED_BALANCED, &epochs);
    let job = &job[..job.len() - 6];
    let one = on_one_process(job, &["--balance", "off"]);
    assert_eq!(two["duration_s"], one["duration_s"]);
    assert_eq!(two["outputs"], one["outputs"]);
    assert_eq!(two["output_digest"], one["output_digest"]);
}

/// Whether `plan` (a `plan_started` event) is one of the balancer's.
fn balancers(plan: &serde_json::Value) -> bool {
    made_for(plan, "migration") && plan["target"].as_str().is_some_and(|t| t.starts_with("balance"))
}

/// A process whose peer never comes (it was never started, or its exporter was kept out and
/// it exited) stops waiting after `--cluster-wait`, with one line naming the peer.
#[test]
fn a_missing_peer_is_named_after_the_wait() {
    let cluster = Cluster::new("missing-peer");
    let mut job = JOB.to_vec();
    job.extend(["--cluster-wait", "2"]);
    let out = cluster.spawn("0", &job, "1").wait(CLUSTER_LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // It ended (without the wait it would wait for ever), failing, with one line.
    assert!(!out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("did not form") && lines[0].contains("process 1"),
        "{stderr}"
    );
}

/// A process started with other settings than process 0 (here another `--output`, which
/// changes the dataflow: timely alone would hang on the two) is refused, and says why.
#[test]
fn a_process_with_other_settings_is_refused() {
    let cluster = Cluster::new("refused");
    let output = cluster.dir.join("out.jsonl");
    let mut job = JOB.to_vec();
    // Process 0 waits for a process it refused as for one that never came, and says why.
    job.extend(["--cluster-wait", "5"]);
    let p0 = cluster.spawn("0", &job, "1");
    job.extend(["--output", output.to_str().unwrap()]);
    let p1 = cluster.spawn("1", &job, "1");
    // Were process 1 not refused, timely would wait for ever on the two dataflows: the
    // deadline ends that, naming both.
    let [out0, out1]: [_; 2] = wait_all(vec![p0, p1], CLUSTER_LIMIT)
        .try_into()
        .expect("two outputs");
    let (e0, e1) = (
        String::from_utf8_lossy(&out0.stderr),
        String::from_utf8_lossy(&out1.stderr),
    );
    assert_eq!(out1.status.code(), Some(1), "{e1}");
    assert!(
        e1.contains(
            "process 0 refused this process: process 1 runs another job than process 0: --output is given on process 1, not given on process 0"
        ),
        "{e1}"
    );
    assert!(!out0.status.success(), "{e0}");
    assert!(e0.contains("process 1"), "{e0}");
    assert!(e0.contains("it was refused: process 1 runs another job"), "{e0}");
}
