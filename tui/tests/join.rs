//! A replacement joins a running job, through the real binary: three loopback processes,
//! `--replicas 2`, `kill -9` of process 2, and the same command started again for its place
//! with `--join`, 1.5 s after the crash (the survivors run on their own by then) or at
//! once (while they restart). The job takes it in with another restart and rebalances bins
//! onto it; every process exits 0 and the outputs equal those of a run without the crash.
//! A process cannot join in a place that is still held.

mod common;

use std::time::Duration;

use common::{Cluster, assert_same_outputs, sorted_lines, summary, wait_all_within};

/// A short keycount; `--recovery all-at-once` so that the rebalance onto the process that
/// joins ends well before the run does on a loaded machine. 10 s, so that the job outlives
/// the twin's refusal with seconds to spare: a place held by a live process is refused only
/// after the coordinator's join wait (3 s) from the twin's start, 2.5 s in, and a job that
/// ended first would refuse it as finishing, or be gone.
const JOB: &[&str] = &[
    "run",
    "--headless",
    "--keys",
    "20000",
    "--rate",
    "20000",
    "--duration",
    "10",
    "--replicas",
    "2",
    "--recovery",
    "all-at-once",
];

/// Every process must be done well within this: the job runs 10 s after its preload.
const LIMIT: Duration = Duration::from_secs(90);

#[test]
fn a_process_started_again_with_join_is_taken_in_and_bins_rebalance_onto_it() {
    let cluster = Cluster::of("join", 3);
    let with_output = |out: &std::path::Path| {
        let mut job = JOB.to_vec();
        job.extend(["--output", out.to_str().expect("a UTF-8 path"), "--force"]);
        job.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let spawn = |p: usize, job: &[String]| {
        let job: Vec<&str> = job.iter().map(String::as_str).collect();
        cluster.spawn(&p.to_string(), &job, "1")
    };
    let base_out = cluster.dir.join("base.jsonl");
    let job = with_output(&base_out);
    let outputs = wait_all_within((0..3).map(|p| spawn(p, &job)).collect(), LIMIT);
    for o in &outputs {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let base = summary(&outputs[0]);
    let base_lines = sorted_lines(&base_out);

    for (round, join_after) in [1.5, 0.0].into_iter().enumerate() {
        let out = cluster.dir.join(format!("joined{round}.jsonl"));
        let job = with_output(&out);
        let mut children: Vec<_> = (0..3).map(|p| spawn(p, &job)).collect();
        std::thread::sleep(Duration::from_millis(2500));
        let mut victim = children.remove(2);
        victim.kill().expect("kill -9");
        let _ = victim.wait();
        std::thread::sleep(Duration::from_secs_f64(join_after));
        let mut joining = job.clone();
        joining.push("--join".into());
        children.push(spawn(2, &joining));
        if round == 1 {
            // Process 1 still runs: its place cannot be taken, and it goes on.
            let twin = wait_all_within(vec![spawn(1, &joining)], LIMIT);
            let said = String::from_utf8_lossy(&twin[0].stderr).to_string();
            assert_eq!(twin[0].status.code(), Some(1), "{said}");
            assert!(said.contains("process 1 still runs in the job"), "{said}");
        }
        let outputs = wait_all_within(children, LIMIT);
        let what = format!("round {round}: joined {join_after} s after the crash");
        let s = assert_same_outputs(&outputs, &base, (&out, &base_lines), &what);
        let joiner = String::from_utf8_lossy(&outputs[2].stderr).to_string();
        assert!(joiner.contains("joining the running job"), "{what}: {joiner}");
        let crashes = s["crashes"].as_array().cloned().unwrap_or_default();
        assert_eq!(crashes.len(), 1, "{what}: {s}");
        assert_eq!(crashes[0]["processes"], serde_json::json!([2]), "{what}");
        if round == 0 {
            // The crash's recovery ran in the computation the join ended: the summary, of
            // the whole run, still has it.
            let recovery = &crashes[0]["recovery"];
            assert_eq!(recovery["cancelled"], false, "{what}: {s}");
            assert!(recovery["bytes"].as_u64().unwrap_or(0) > 0, "{what}: {s}");
        }
        let joins = s["joins"].as_array().cloned().unwrap_or_default();
        assert_eq!(joins.len(), 1, "{what}: {s}");
        assert_eq!(joins[0]["process"], 2, "{what}");
        assert!(joins[0]["restart_ms"].as_f64().is_some(), "{what}: {s}");
        // The job ends on three processes again, with a third of the bins' copies moved
        // onto the one that joined.
        assert_eq!(s["workers"], 3, "{what}: {s}");
        let rebalance = &joins[0]["rebalance"];
        assert_eq!(rebalance["strategy"], "all-at-once", "{what}: {s}");
        assert_eq!(rebalance["cancelled"], false, "{what}: {s}");
        let copied = rebalance["bins_copied"].as_u64().unwrap_or(0);
        assert!(copied >= 256 * 2 / 3, "{what}: {copied} bins copied: {s}");
    }
}
