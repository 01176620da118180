//! A real crash of a cluster process, through the real binaries (keycount, NEXMark Q4, and
//! the README's own dataflow, which reads a file): three loopback processes, `--replicas 2`,
//! and `kill -9` of process 1 or 2 at a random moment (while the cluster preloads, in the
//! steady state, in the middle of a migration). Nothing is lost or written twice: both
//! survivors exit 0, and the digest and the `--output` file equal those of a run without the
//! crash. A second crash that takes a bin's last copy stops the job with status 3,
//! everywhere.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use megaflux_testkit::{Proc, run, wait_all};
use rustix::process::Signal;

use common::{
    CLUSTER_LIMIT, Cluster, Draws, assert_same_outputs, example, formed, restarted, sorted_lines, summary,
};

/// How long `megaflux report` or `replay` may take before the test calls it hung.
const COMMAND_LIMIT: Duration = Duration::from_secs(120);

/// Kills per workload: `MEGAFLUX_KILLS` for a longer loop.
fn kills(default: usize) -> usize {
    std::env::var("MEGAFLUX_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(default)
}

/// Starts every process of `job` on `cluster` with `--output` into `out`.
fn spawn_all(cluster: &Cluster, job: &[&str], out: &Path) -> Vec<Proc> {
    spawn_all_of(env!("CARGO_BIN_EXE_megaflux").as_ref(), cluster, job, out)
}

/// As [`spawn_all`], with `binary`.
fn spawn_all_of(binary: &Path, cluster: &Cluster, job: &[&str], out: &Path) -> Vec<Proc> {
    cluster.spawn_all(binary, job, out, None)
}

/// Runs `job` on three processes `n` times, killing process 1 or 2 at a random moment
/// between `from` and `to` seconds after every process said the cluster formed, and checks
/// each run against one without the crash.
fn survives_kills(name: &str, job: &[&str], n: usize, (from, to): (f64, f64), seed: u64) {
    let megaflux = env!("CARGO_BIN_EXE_megaflux").as_ref();
    survives_kills_of(megaflux, &Cluster::of(name, 3), job, n, (from, to), seed);
}

/// As [`survives_kills`], with `binary` on `cluster`.
fn survives_kills_of(
    binary: &Path,
    cluster: &Cluster,
    job: &[&str],
    n: usize,
    (from, to): (f64, f64),
    seed: u64,
) {
    let name = &cluster.name;
    let base_out = cluster.dir.join("base.jsonl");
    let outputs = wait_all(spawn_all_of(binary, cluster, job, &base_out), CLUSTER_LIMIT);
    for o in &outputs {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let base = summary(&outputs[0]);
    let base_lines = sorted_lines(&base_out);
    assert!(!base_lines.is_empty(), "the job wrote outputs");
    let mut draws = Draws(seed);
    for round in 0..n {
        let victim = 1 + (draws.next() % 2) as usize;
        let at = from + (to - from) * (draws.next() % 1000) as f64 / 1000.0;
        let out = cluster.dir.join(format!("crash{round}.jsonl"));
        let mut procs = spawn_all_of(binary, cluster, job, &out);
        formed(&mut procs);
        let what = format!(
            "{name}: round {round} (seed {seed}), process {victim} killed {at:.2} s after the cluster formed"
        );
        // The moment drawn, after the formation (the line above orders the kill after it):
        // before the run's end, which comes at least its 4 s of input later.
        std::thread::sleep(Duration::from_secs_f64(at));
        let mut killed = procs.remove(victim);
        assert!(
            killed.running(),
            "{what}: it ended before the kill\n{}",
            killed.printed_tail()
        );
        killed.kill();
        drop(killed);
        let outputs = wait_all(procs, CLUSTER_LIMIT);
        let s = assert_same_outputs(&outputs, &base, (&out, &base_lines), &what);
        let crashes = s["crashes"].as_array().cloned().unwrap_or_default();
        assert_eq!(crashes.len(), 1, "{what}: {s}");
        assert_eq!(crashes[0]["processes"], serde_json::json!([victim]), "{what}");
        assert!(crashes[0]["restart_ms"].as_f64().is_some(), "{what}: {s}");
        if stateful(job) {
            // The bins left with one copy get standbys again under `--recovery` (matched).
            assert_eq!(crashes[0]["recovery"]["strategy"], "matched", "{what}: {s}");
        } else {
            assert_eq!(crashes[0]["recovery"], serde_json::Value::Null, "{what}: {s}");
        }
    }
}

/// Whether `job` keeps state in bins (Q1 and Q2 only map their records).
fn stateful(job: &[&str]) -> bool {
    !job.windows(2)
        .any(|w| w[0] == "--workload" && ["q1", "q2"].contains(&w[1]))
}

/// Kill moments, in seconds after every process said the cluster formed (a process lost
/// before is `a_process_lost_while_the_cluster_forms_stops_the_others_at_once`): from the
/// preload, which follows, to the end of the run (4 s of input after the preload, and its
/// drain).
const FORMED_TO_END: (f64, f64) = (0.0, 3.8);

const KEYCOUNT: &[&str] = &[
    "run",
    "--headless",
    "--keys",
    "20000",
    "--rate",
    "20000",
    "--duration",
    "4",
    "--replicas",
    "2",
    // Every bin onto one worker from 1 s, then back: kills land in migrations too.
    "--migrate",
    "fluid@1:pack:1",
    "--migrate",
    "fluid@2:uniform",
];

#[test]
fn keycount_survives_kill_9_of_a_process_at_any_moment() {
    survives_kills("crash-keycount", KEYCOUNT, kills(8), FORMED_TO_END, 0x5eed_0001);
}

/// The README's own dataflow reads a file on process 0; a restart reads it again from the
/// committed frontier.
#[test]
fn your_own_dataflow_reading_a_file_survives_kill_9_of_a_process() {
    let cluster = Cluster::of("crash-pageviews", 3);
    let views = cluster.dir.join("views.csv");
    // 80,000 views of 5,000 users, read at 20,000 a second: 4 s.
    let mut text = String::new();
    let mut draws = Draws(0x5eed_0005);
    for i in 0..80_000u64 {
        let user = draws.next() % 5_000;
        let page = draws.next() % 40;
        text.push_str(&format!("user{user},/page/{page},{i}\n"));
    }
    std::fs::write(&views, text).expect("the views are written");
    let job = [
        "run",
        "--headless",
        "--input",
        views.to_str().expect("a UTF-8 path"),
        "--rate",
        "20000",
        "--replicas",
        "2",
        "--migrate",
        "fluid@1:pack:1",
    ];
    let binary = example("pageviews");
    survives_kills_of(&binary, &cluster, &job, kills(6), FORMED_TO_END, 0x5eed_0006);
}

#[test]
fn q4_with_open_auctions_survives_kill_9_of_a_process() {
    let job = [
        "run",
        "--headless",
        "--workload",
        "q4",
        "--rate",
        "20000",
        "--duration",
        "4",
        "--replicas",
        "2",
    ];
    survives_kills("crash-q4", &job, kills(6), FORMED_TO_END, 0x5eed_0004);
}

/// A job with no state at all restarts like any other: nothing to restore, its records
/// again from the committed time, every output once.
#[test]
fn q1_without_state_survives_kill_9_of_a_process() {
    let job = [
        "run",
        "--headless",
        "--workload",
        "q1",
        "--rate",
        "20000",
        "--duration",
        "4",
        "--replicas",
        "2",
    ];
    survives_kills("crash-q1", &job, kills(4), FORMED_TO_END, 0x5eed_0007);
}

/// The one line starting `error` in what a stopped process printed, and all of it.
fn the_error(out: &Output) -> (String, String) {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    (errors[0].to_string(), stderr)
}

#[test]
fn losing_process_0_stops_the_others_at_once_naming_it() {
    // Process 0 hosts the control plane and the sink: a job never survives it.
    let cluster = Cluster::of("crash-first", 3);
    let mut job = KEYCOUNT.to_vec();
    job[7] = "30";
    let out = cluster.dir.join("out.jsonl");
    let mut procs = spawn_all(&cluster, &job, &out);
    formed(&mut procs);
    let mut first = procs.remove(0);
    first.kill();
    drop(first);
    let outputs = wait_all(procs, CLUSTER_LIMIT);
    for o in &outputs {
        assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
        let (error, stderr) = the_error(o);
        let named = format!("process 0 ({}) went away", cluster.addresses[0]);
        assert!(error.contains(&named), "{stderr}");
        // At once: its connections closed, rather than `--peer-timeout` of silence.
        assert!(!error.contains("silent for"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn a_second_crash_before_the_first_recovery_finished_stops_with_status_3() {
    // Fluid recovery gives the bins left with one copy their standbys one at a time: half a
    // second after the restart most still have their only copy where the second crash hits.
    let cluster = Cluster::of("crash-recovering", 3);
    let mut job = KEYCOUNT.to_vec();
    job[7] = "30";
    job.extend(["--recovery", "fluid"]);
    let out = cluster.dir.join("out.jsonl");
    let mut procs = spawn_all(&cluster, &job, &out);
    formed(&mut procs);
    let mut second = procs.remove(2);
    second.kill();
    drop(second);
    // The survivors restarted without process 2: the recovery begins, and the second crash
    // comes as soon as the test hears it.
    restarted(&mut procs[0]);
    let mut first = procs.remove(1);
    first.kill();
    drop(first);
    let outputs = wait_all(procs, CLUSTER_LIMIT);
    let (error, stderr) = the_error(&outputs[0]);
    assert_eq!(outputs[0].status.code(), Some(3), "{stderr}");
    assert!(error.contains("lost their last replica"), "{stderr}");
    // Seen as the connections closed, not after a silence (the peer timeout).
    assert!(!stderr.contains("silent for"), "{stderr}");
}

#[test]
fn a_crash_is_in_the_trace_the_report_and_a_rerun() {
    let cluster = Cluster::of("crash-traced", 3);
    let trace = cluster.dir.join("trace.jsonl");
    let trace = trace.to_str().expect("a UTF-8 path");
    let out = cluster.dir.join("out.jsonl");
    let mut job = KEYCOUNT.to_vec();
    job.extend(["--output", out.to_str().unwrap(), "--force"]);
    let mut recorded = job.clone();
    recorded.extend(["--record", trace]);
    let mut procs = vec![cluster.spawn("0", &recorded, "1")];
    procs.extend((1..3).map(|p| cluster.spawn(&p.to_string(), &job, "1")));
    formed(&mut procs);
    let mut killed = procs.remove(2);
    killed.kill();
    drop(killed);
    for done in wait_all(procs, CLUSTER_LIMIT) {
        assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    }
    let text = std::fs::read_to_string(trace).expect("the trace");
    let restart: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == "restart")
        .collect();
    assert_eq!(restart.len(), 1, "one restart in the trace");
    assert_eq!(restart[0]["lost"], "2");
    assert_eq!(restart[0]["survivors"], "0-1");
    assert_eq!(restart[0]["generation"], 1);
    // The report reads it, marks included.
    let svg = cluster.dir.join("trace.svg");
    let perfetto = cluster.dir.join("trace.json");
    let report = run(
        "megaflux report",
        &mut common::megaflux(&[
            "report",
            trace,
            "--svg",
            svg.to_str().unwrap(),
            "--perfetto",
            perfetto.to_str().unwrap(),
        ]),
        COMMAND_LIMIT,
    );
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let drawn = std::fs::read_to_string(&perfetto).expect("the Perfetto trace");
    assert!(drawn.contains("process 2 lost: restart 1"), "the crash is marked");
    // A re-run on one process says it cannot: standbys are placed by process.
    let rerun = run(
        "megaflux replay --rerun",
        &mut common::megaflux(&["replay", trace, "--rerun"]),
        COMMAND_LIMIT,
    );
    let said = String::from_utf8_lossy(&rerun.stderr);
    assert!(!rerun.status.success(), "{said}");
    assert!(said.contains("re-run it on as many"), "{said}");
}

#[test]
fn a_second_crash_that_takes_both_copies_stops_with_status_3() {
    let cluster = Cluster::of("crash-twice", 3);
    let mut job = KEYCOUNT.to_vec();
    job[7] = "30";
    let out = cluster.dir.join("out.jsonl");
    let mut procs = spawn_all(&cluster, &job, &out);
    formed(&mut procs);
    let mut second = procs.remove(2);
    let mut first = procs.remove(1);
    first.kill();
    second.kill();
    drop((first, second));
    let outputs = wait_all(procs, CLUSTER_LIMIT);
    let stderr = String::from_utf8_lossy(&outputs[0].stderr);
    assert_eq!(
        outputs[0].status.code(),
        Some(3),
        "process 0 of crash-twice ended with {}; all it said on stderr:\n{stderr}",
        outputs[0].status
    );
    assert!(stderr.contains("lost their last replica"), "{stderr}");
    // Seen as the connections closed, not after a silence (the peer timeout).
    assert!(!stderr.contains("silent for"), "{stderr}");
}

#[test]
fn a_hung_process_is_left_behind_and_the_job_goes_on() {
    let cluster = Cluster::of("crash-hang", 3);
    let base_out = cluster.dir.join("base.jsonl");
    let base = wait_all(spawn_all(&cluster, KEYCOUNT, &base_out), CLUSTER_LIMIT);
    for o in &base {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let out = cluster.dir.join("out.jsonl");
    let mut procs = spawn_all(&cluster, KEYCOUNT, &out);
    formed(&mut procs);
    let mut hung = procs.remove(2);
    hung.signal(Signal::STOP);
    // The others go on once its silence outlasted `--peer-timeout`.
    let outputs = wait_all(procs, CLUSTER_LIMIT);
    drop(hung);
    for o in &outputs {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let s = summary(&outputs[0]);
    assert_eq!(s["output_digest"], summary(&base[0])["output_digest"]);
    assert_eq!(sorted_lines(&out), sorted_lines(&base_out));
    assert_eq!(s["crashes"][0]["processes"], serde_json::json!([2]));
}

#[test]
fn a_process_lost_while_the_cluster_forms_stops_the_others_at_once() {
    let cluster = Cluster::of("crash-forming", 3);
    let out = cluster.dir.join("out.jsonl");
    // Process 1 exits once process 0 admitted it, before the computation's connections.
    let binary = env!("CARGO_BIN_EXE_megaflux").as_ref();
    let mut procs = cluster.spawn_all(binary, KEYCOUNT, &out, Some((1, "form-connect")));
    let lost = procs.remove(1).wait(CLUSTER_LIMIT);
    assert!(
        String::from_utf8_lossy(&lost.stderr).contains("form-connect"),
        "{}",
        String::from_utf8_lossy(&lost.stderr)
    );
    let outputs = wait_all(procs, CLUSTER_LIMIT);
    for o in &outputs {
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{stderr}");
        // At once: on the loss, not at the end of `--cluster-wait` (60 s).
        assert!(!stderr.contains("did not form within"), "{stderr}");
    }
    let stderr = String::from_utf8_lossy(&outputs[0].stderr);
    assert!(
        stderr.contains("process 1 went away before the cluster formed"),
        "{stderr}"
    );
}
