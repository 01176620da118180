//! A second process lost while the job restarts after a first: four loopback processes,
//! `--replicas 2` (each bin on two neighbouring processes), `kill -9` of process 1, and
//! process 3 made to exit in the restart that follows (`MEGAFLUX_FAILPOINT`): before it
//! connects to the other survivors, or once connected, before they agree where the bins are.
//! No bin has both copies on 1 and 3, so the job goes on on processes 0 and 2 with one more
//! restart, from the same bins: both exit 0 with the outputs of a run without crashes.

mod common;

use megaflux_testkit::wait_all;

use common::{CLUSTER_LIMIT, Cluster, assert_same_outputs, formed, sorted_lines, summary};

const JOB: &[&str] = &[
    "run",
    "--headless",
    "--keys",
    "20000",
    "--rate",
    "20000",
    "--duration",
    "5",
    "--replicas",
    "2",
];

#[test]
fn a_process_lost_while_the_job_restarts_is_left_out_of_one_more_restart() {
    let cluster = Cluster::of("crash-in-restart", 4);
    let megaflux = env!("CARGO_BIN_EXE_megaflux").as_ref();
    let run = |out: &std::path::Path, failpoint: Option<&str>| {
        cluster.spawn_all(megaflux, JOB, out, failpoint.map(|point| (3, point)))
    };
    let base_out = cluster.dir.join("base.jsonl");
    let outputs = wait_all(run(&base_out, None), CLUSTER_LIMIT);
    for o in &outputs {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let base = summary(&outputs[0]);
    let base_lines = sorted_lines(&base_out);
    for point in ["restart-connect", "restart-agree"] {
        let out = cluster.dir.join(format!("{point}.jsonl"));
        let mut procs = run(&out, Some(point));
        // Process 3 exits in the restart that follows: a restart of the running job, after
        // the formation.
        formed(&mut procs);
        let mut first = procs.remove(1);
        first.kill();
        drop(first);
        let mut outputs = wait_all(procs, CLUSTER_LIMIT);
        let what = format!("process 1 killed, process 3 lost at {point}");
        let third = outputs.pop().expect("process 3's output");
        let said = String::from_utf8_lossy(&third.stderr).to_string();
        assert!(said.contains(point), "{what}: process 3 exited elsewhere: {said}");
        let s = assert_same_outputs(&outputs, &base, (&out, &base_lines), &what);
        let crashes = s["crashes"].as_array().cloned().unwrap_or_default();
        let lost: Vec<&serde_json::Value> = crashes.iter().map(|c| &c["processes"]).collect();
        assert_eq!(
            lost,
            [&serde_json::json!([1]), &serde_json::json!([3])],
            "{what}: {s}"
        );
        // The first restart never formed; the second did.
        assert!(crashes[0]["restart_ms"].is_null(), "{what}: {s}");
        assert!(crashes[1]["restart_ms"].as_f64().is_some(), "{what}: {s}");
        assert_eq!(s["workers"], 2, "{what}: {s}");
    }
}
