//! A replacement joins a running job, through the real binary: three loopback processes,
//! `--replicas 2`, `kill -9` of process 2, and the same command started again for its place
//! with `--join`, once the survivors run on their own (restarted, the crash's recovery
//! complete) or at once (while they restart). The job takes it in with another restart and
//! rebalances bins onto it; every process exits 0 and the outputs equal those of a run of
//! the same epochs without the crash. A process cannot join in a place that is still held.
//! Each run goes on until process 0's trace says the rebalance completed, and is then
//! stopped as `q` stops it: what must finish within the run does, however slow the machine.

mod common;

use std::path::Path;

use megaflux_testkit::{Proc, wait_all};
use serde_json::Value;

use common::{
    CLUSTER_LIMIT as LIMIT, Cluster, assert_same_outputs, completed_plans, formed, same_epochs, sorted_lines,
    stop, summary, wait_for_trace, with_duration,
};

/// A keycount the test stops (its `--duration` is far past any deadline of the test);
/// `--recovery all-at-once` so that the rebalance onto the process that joins is one step.
const JOB: &[&str] = &[
    "run",
    "--headless",
    "--keys",
    "20000",
    "--rate",
    "20000",
    "--duration",
    "3600",
    "--replicas",
    "2",
    "--recovery",
    "all-at-once",
];

/// The epochs of the cluster's runs, in microseconds (`common::CLUSTER_EPOCH_US`).
const EPOCH_US: u64 = 1000;

/// Whether a plan whose target starts with `target` completed among `events`: after a
/// restart, `standbys lost in a crash` restores the standbys of the bins the lost process
/// held, and `balanced onto process 2 that joined` moves copies onto the one that joined
/// (the last plan of a join).
fn completed(events: &[Value], target: &str) -> bool {
    completed_plans(events)
        .iter()
        .any(|p| p["target"].as_str().is_some_and(|t| t.starts_with(target)))
}

#[test]
fn a_process_started_again_with_join_is_taken_in_and_bins_rebalance_onto_it() {
    let cluster = Cluster::of("join", 3);
    let megaflux: &Path = env!("CARGO_BIN_EXE_megaflux").as_ref();
    // `job` (with `more`) writing its outputs to `out`.
    let with_output = |job: &[&str], out: &Path, more: &[&str]| {
        let mut job: Vec<String> = job.iter().map(|s| s.to_string()).collect();
        job.extend(["--output", out.to_str().expect("a UTF-8 path"), "--force"].map(String::from));
        job.extend(more.iter().map(|s| s.to_string()));
        job
    };
    let spawn = |name: String, p: usize, job: &[String]| {
        let job: Vec<&str> = job.iter().map(String::as_str).collect();
        Proc::spawn(name, &mut cluster.command(megaflux, &p.to_string(), &job, "1"))
    };
    let member = |p: usize, job: &[String]| spawn(cluster.process_name(&p.to_string()), p, job);

    for (round, when) in ["once the survivors recovered", "at once"]
        .into_iter()
        .enumerate()
    {
        let out = cluster.dir.join(format!("joined{round}.jsonl"));
        let trace = cluster.dir.join(format!("trace{round}.jsonl"));
        let job = with_output(JOB, &out, &[]);
        let recorded = with_output(JOB, &out, &["--record", trace.to_str().expect("a UTF-8 path")]);
        let mut procs = vec![member(0, &recorded), member(1, &job), member(2, &job)];
        formed(&mut procs);
        // A crash of the running job: past the preload, once the measured run's first
        // latency window is in process 0's trace.
        wait_for_trace(&mut procs[0], &trace, "the first latency window", |events| {
            events.iter().any(|e| e["kind"] == "latency")
        });
        let mut victim = procs.remove(2);
        victim.kill();
        drop(victim);
        if round == 0 {
            // The survivors run on their own: restarted, every bin with its standby again.
            wait_for_trace(
                &mut procs[0],
                &trace,
                "the crash's recovery to complete",
                |events| completed(events, "standbys lost in a crash"),
            );
        }
        let mut joining = job.clone();
        joining.push("--join".into());
        procs.push(spawn(format!("process 2 of join, joining {when}"), 2, &joining));
        if round == 1 {
            // Process 1 still runs: its place cannot be taken, and it goes on.
            let twin = spawn("a second process 1 of join".into(), 1, &joining).wait(LIMIT);
            let said = String::from_utf8_lossy(&twin.stderr).to_string();
            assert_eq!(twin.status.code(), Some(1), "{said}");
            assert!(said.contains("process 1 still runs in the job"), "{said}");
        }
        wait_for_trace(
            &mut procs[0],
            &trace,
            "the rebalance onto process 2 to complete",
            |events| completed(events, "balanced onto process 2 that joined"),
        );
        stop(&mut procs[0]);
        let outputs = wait_all(procs, LIMIT);
        let what = format!("round {round}: joined {when} after the crash");

        // The same epochs without the crash.
        let base_out = cluster.dir.join(format!("base{round}.jsonl"));
        let epochs = same_epochs(&summary(&outputs[0]), EPOCH_US);
        let base_job = with_duration(JOB, &epochs);
        let base = wait_all(cluster.spawn_all(megaflux, &base_job, &base_out, None), LIMIT);
        for o in &base {
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        let base = summary(&base[0]);
        let base_lines = sorted_lines(&base_out);

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
