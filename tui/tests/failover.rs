//! High availability through the real binary: a worker failure with replicas changes no
//! output and is reported; a failure without replicas, a panicking worker and a lost peer
//! each stop the job with a clear message and a non-zero status, in one process and in a
//! two-process cluster; so does a process of a cluster that hangs.

use std::process::Output;
use std::time::Duration;

use megaflux_testkit::Proc;
use rustix::process::Signal;
use serde_json::Value;

mod common;

use common::{CLUSTER_LIMIT, Cluster, REPLICATED_KEYCOUNT as KEYCOUNT, formed, megaflux, summary};

/// How long a one-process run of a debug build may take on a loaded machine before the
/// test calls it hung: a bound against hangs, not a judgement of speed.
const LIMIT: Duration = Duration::from_secs(300);

/// The binary run with `args`, for at most [`LIMIT`].
fn finished(args: &[&str]) -> Output {
    megaflux_testkit::run(format!("megaflux {}", args.join(" ")), &mut megaflux(args), LIMIT)
}

fn run(args: &[&str]) -> Value {
    let out = finished(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    summary(&out)
}

const HASHCOUNT: &[&str] = &[
    "run",
    "--headless",
    "--workload",
    "hashcount",
    "--keys",
    "50000",
    "--rate",
    "50000",
    "--duration",
    "3",
];

#[test]
fn a_failure_with_replicas_changes_no_output_and_is_reported() {
    let plain = run(HASHCOUNT);
    let with = |extra: &[&str]| {
        let mut args = HASHCOUNT.to_vec();
        args.extend(extra);
        run(&args)
    };
    let replicated = with(&["--replicas", "2"]);
    // Two workers: no spare until the failed one rejoins; the rejoin restores the standbys.
    let failed = with(&["--replicas", "2", "--fail", "1@1", "--rejoin", "1@1.8"]);
    // Three workers: the spare takes the standbys at once.
    let three = with(&[
        "--replicas",
        "2",
        "--workers",
        "3",
        "--fail",
        "2@1",
        "--recovery",
        "fluid",
    ]);
    for s in [&replicated, &failed, &three] {
        assert_eq!(s["output_digest"], plain["output_digest"], "{s}");
        assert_eq!(s["outputs"], plain["outputs"]);
        assert_eq!(s["replicas"], 2);
    }
    let f = &failed["failures"][0];
    assert_eq!(
        (f["worker"].as_u64(), f["bins_promoted"].as_u64()),
        (Some(1), Some(128)),
        "{f}"
    );
    assert!(f["takeover_ms"].as_f64().is_some(), "{f}");
    // Every bin gets its standby back on worker 1, unless the run ended first (a loaded
    // machine can make the recovery slower than the second that is left).
    let copied = f["recovery"]["bins_copied"].as_u64().unwrap_or(0);
    assert!(copied > 0 && copied <= 256, "{f}");
    if f["recovery"]["duration_s"].is_number() {
        assert_eq!(copied, 256, "{f}");
    }
    assert!(f["recovery"]["bytes"].as_u64() > Some(0), "{f}");
    assert!(f["rejoined_s"].as_f64().is_some(), "{f}");
    let f = &three["failures"][0];
    assert_eq!(f["recovery"]["strategy"], "fluid", "{f}");
    assert!(f["recovery"]["bins_copied"].as_u64() > Some(0), "{f}");
}

#[test]
fn a_failure_without_replicas_stops_with_status_3_naming_the_bins() {
    let out = finished(&[
        "run",
        "--headless",
        "--bins",
        "16",
        "--keys",
        "20000",
        "--rate",
        "20000",
        "--duration",
        "3",
        "--fail",
        "1@1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("bins 1,3,5,7,9,11,13,15 lost their last replica"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no summary of a broken run");
}

#[test]
fn a_panicking_worker_stops_the_job_with_its_message() {
    // An hour's run: one that did not stop at the panic would outlast the test's deadline.
    let out = finished(&[
        "run",
        "--headless",
        "--duration",
        "3600",
        "--keys",
        "20000",
        "--inject-panic",
        "1@0.5",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("worker 1 panicked: injected panic"), "{stderr}");
    assert!(
        !stderr.contains("RUST_BACKTRACE"),
        "one message, no backtraces: {stderr}"
    );
}

/// A job that would run far longer than any of these tests waits (an hour: one that does
/// not stop on what the test does to it outlasts the deadline, and fails it). Without
/// replicas: a job with replicas goes on without a lost process other than 0
/// (`tests/crash.rs`).
const LONG: &[&str] = &[
    "run",
    "--headless",
    "--keys",
    "20000",
    "--rate",
    "20000",
    "--duration",
    "3600",
];

#[test]
fn a_cluster_survives_a_failure_on_its_second_process() {
    let cluster = Cluster::new("failover");
    let [plain, _] = cluster.run(KEYCOUNT, "2");
    let mut job = KEYCOUNT.to_vec();
    job.extend(["--fail", "3@1"]);
    let [failed, other] = cluster.run(&job, "2");
    assert!(
        failed.status.success(),
        "{}",
        String::from_utf8_lossy(&failed.stderr)
    );
    assert!(
        other.status.success(),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    let (plain, failed) = (summary(&plain), summary(&failed));
    assert_eq!(failed["output_digest"], plain["output_digest"]);
    assert_eq!(failed["failures"][0]["worker"], 3);
    // Standbys live on the other process: every bin of worker 3 had one on process 0.
    assert_eq!(failed["failures"][0]["bins_lost"], serde_json::json!([]));
}

#[test]
fn a_cluster_stops_everywhere_when_a_worker_panics() {
    let cluster = Cluster::new("panic");
    let mut job = LONG.to_vec();
    job.extend(["--inject-panic", "3@0.5"]);
    let [p0, p1] = cluster.run(&job, "2");
    let (e0, e1) = (
        String::from_utf8_lossy(&p0.stderr),
        String::from_utf8_lossy(&p1.stderr),
    );
    assert!(!p0.status.success() && !p1.status.success(), "{e0}\n{e1}");
    assert!(e1.contains("worker 3 panicked: injected panic"), "{e1}");
    assert!(
        e0.contains(&format!("process 1 ({}) went away", cluster.addresses[1])),
        "{e0}"
    );
}

/// The two processes of `cluster` running [`LONG`], once both said the cluster formed:
/// `(chosen, other)`.
fn started_pair(cluster: &Cluster, chosen: usize) -> (Proc, Proc) {
    let mut procs = [cluster.spawn("0", LONG, "2"), cluster.spawn("1", LONG, "2")];
    formed(&mut procs);
    let [p0, p1] = procs;
    if chosen == 1 { (p1, p0) } else { (p0, p1) }
}

/// The one `error` line of a process that stopped with status 1, and all it printed.
fn the_error(out: &Output) -> (String, String) {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    (errors[0].to_string(), stderr)
}

#[test]
fn a_killed_peer_is_one_line_naming_it() {
    for killed in [1, 0] {
        let cluster = Cluster::new(&format!("kill{killed}"));
        let (mut gone, other) = started_pair(&cluster, killed);
        gone.kill();
        drop(gone);
        let (error, stderr) = the_error(&other.wait(CLUSTER_LIMIT));
        let named = format!("process {killed} ({}) went away", cluster.addresses[killed]);
        assert!(error.contains(&named), "{stderr}");
        // At once: its connections closed, rather than `--peer-timeout` of silence.
        assert!(!error.contains("silent for"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn a_hung_process_is_caught_by_its_silence() {
    // A stopped process keeps its connections open: timely alone would wait for it for ever.
    for hung in [1, 0] {
        let cluster = Cluster::new(&format!("hang{hung}"));
        let (mut stopped, other) = started_pair(&cluster, hung);
        stopped.signal(Signal::STOP);
        let out = other.wait(CLUSTER_LIMIT);
        drop(stopped);
        let (error, stderr) = the_error(&out);
        let named = format!(
            "process {hung} ({}) went away (silent for",
            cluster.addresses[hung]
        );
        assert!(error.contains(&named), "{stderr}");
    }
}

#[test]
fn a_cluster_that_loses_bins_stops_everywhere_with_status_3() {
    let cluster = Cluster::new("lost");
    let job = [
        "run",
        "--headless",
        "--keys",
        "20000",
        "--rate",
        "20000",
        "--duration",
        "30",
        "--bins",
        "16",
        "--fail",
        "1@0.5",
    ];
    let [p0, p1] = cluster.run(&job, "2");
    for p in [&p0, &p1] {
        let stderr = String::from_utf8_lossy(&p.stderr);
        assert_eq!(p.status.code(), Some(3), "{stderr}");
        assert!(
            stderr.contains("bins 1,5,9,13 lost their last replica"),
            "{stderr}"
        );
    }
}

#[test]
fn nexmark_queries_with_scheduled_work_and_global_maxima_survive_a_failure() {
    for query in ["q4", "q7"] {
        let base = [
            "run",
            "--headless",
            "--workload",
            query,
            "--rate",
            "20000",
            "--duration",
            "3",
            "--in-flight-auctions",
            "2000",
        ];
        let plain = run(&base);
        let mut args = base.to_vec();
        // Worker 0 hosts the control plane: its partitions fail, its driver goes on.
        args.extend(["--replicas", "2", "--fail", "0@1", "--rejoin", "0@1.8"]);
        let failed = run(&args);
        assert_eq!(
            failed["output_digest"], plain["output_digest"],
            "{query}: {failed}"
        );
        assert_eq!(failed["failures"][0]["worker"], 0, "{query}");
        assert!(
            failed["failures"][0]["recovery"]["bins_copied"].as_u64() > Some(0),
            "{query}: {failed}"
        );
    }
}

#[test]
fn failures_taken_at_the_last_moment_are_issued_not_forgotten() {
    // Both failures come due in the run's last turn: they go out after its last epoch, and
    // the second takes every bin's last replica.
    let out = finished(&[
        "run",
        "--headless",
        "--keys",
        "20000",
        "--rate",
        "20000",
        "--bins",
        "16",
        "--duration",
        "2",
        "--replicas",
        "2",
        "--fail",
        "0@2",
        "--fail",
        "1@2",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("lost their last replica"), "{stderr}");
}
