//! A process lost at the very end of a run (`MEGAFLUX_FAILPOINT`): as the drain of a job
//! with scheduled work begins, before the workers' final reports, or once its own part
//! finished. Three loopback processes of the sessions example reading a file, `--replicas
//! 2`, process 2 made to exit there: processes 0 and 1 exit 0 with the outputs, the digest
//! and the records in of the run without the loss, never a panic. Keycount, which does not
//! drain, the same at the report.

mod common;

use std::path::Path;

use common::{CLUSTER_LIMIT, Cluster, REPLICATED_KEYCOUNT, example, survives_failpoints};

fn survives_losses_at_the_end(binary: &Path, cluster: &Cluster, job: &[&str], points: &[&str]) {
    survives_failpoints(binary, cluster, job, 2, points, CLUSTER_LIMIT);
}

#[test]
fn a_process_lost_as_a_draining_job_ends_changes_nothing() {
    let cluster = Cluster::of("end-sessions", 3);
    // 200 users click in bursts for 2 s: sessions close 200 ms after their last click, in
    // the drain for the last ones.
    let mut text = String::new();
    for t in 0..2_000u64 {
        for u in 0..200u64 {
            if (t + u * 37) % 300 < 40 && (t * 7 + u) % 11 == 0 {
                text.push_str(&format!("user{u},{t}\n"));
            }
        }
    }
    let clicks = cluster.dir.join("clicks.csv");
    std::fs::write(&clicks, text).expect("the clicks are written");
    let job = [
        "run",
        "--headless",
        "--input",
        clicks.to_str().expect("a UTF-8 path"),
        "--pace",
        "event-time",
        "--replicas",
        "2",
    ];
    let points = ["end-drain", "end-report", "end-finished"];
    survives_losses_at_the_end(&example("sessions"), &cluster, &job, &points);
}

#[test]
fn a_process_lost_before_the_final_reports_changes_nothing() {
    let cluster = Cluster::of("end-keycount", 3);
    let megaflux = env!("CARGO_BIN_EXE_megaflux").as_ref();
    survives_losses_at_the_end(megaflux, &cluster, REPLICATED_KEYCOUNT, &["end-report"]);
}
