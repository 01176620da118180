//! `--input kafka://HOST:PORT/TOPIC` through the real binaries, against a real
//! Kafka-protocol broker (tansu, started by `tui/scripts/services.sh`, or the one
//! `MEGAFLUX_KAFKA` names):
//!
//! - a bounded read (`?end=now`) of a 4-partition topic gives the outputs, digest included,
//!   of the same records read from a file in the order the partitions are read in turn (by
//!   rate, and by the records' event times); its
//!   summary and trace have each partition's offsets, and `replay --rerun` reads those again
//!   after more messages arrived;
//! - a cluster of three processes with `--replicas 2` reads the topic, writes a PostgreSQL
//!   table and loses a process to kill -9: the table holds the outputs of the file run;
//! - a missing topic, an unreachable broker, and messages that do not parse are named, with
//!   a non-zero exit;
//! - a topic read as a stream (no end) whose broker goes away is asked again, and says so,
//!   until the job is stopped.

mod common;

use std::path::Path;
use std::time::Duration;

use megaflux_testkit::{Kafka, Postgres, Proc, run};

use common::{
    Cluster, example, file_values, produce, sorted_lines, summary, survives_one_kill, table_values,
};

/// How long one single-process run may take before the test calls it hung.
const RUN_LIMIT: Duration = Duration::from_secs(180);
const PARTITIONS: i32 = 4;
/// Views in the topic, read at [`RATE`]: 2 s.
const VIEWS: u64 = 8_000;
const RATE: &str = "4000";

/// The view `i` as a CSV line: skewed users, so that the order of a user's views matters.
fn view(i: u64) -> String {
    let user = (i * i * 7 + i / 3) % 300 * (i % 3) / 2;
    format!("u{user},/page/{},{i}", i % 40)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn pageviews(args: &[&str], cwd: &Path) -> std::process::Output {
    let mut command = std::process::Command::new(example("pageviews"));
    command.args(args).current_dir(cwd);
    run("pageviews", &mut command, RUN_LIMIT)
}

fn ok(out: std::process::Output) -> std::process::Output {
    assert!(out.status.success(), "{}", stderr(&out));
    out
}

#[test]
fn a_bounded_topic_reads_as_its_file_and_a_rerun_reads_its_offsets_again() {
    let kafka = Kafka::start();
    let dir = tempfile::tempdir().expect("a directory");
    let cwd = dir.path();
    let lines: Vec<String> = (0..VIEWS).map(view).collect();
    std::fs::write(cwd.join("views.csv"), lines.join("\n") + "\n").expect("the file");
    produce(kafka.address(), "views", PARTITIONS, &lines);

    let file = ok(pageviews(
        &[
            "run",
            "--headless",
            "--input",
            "views.csv",
            "--rate",
            RATE,
            "--output",
            "file.jsonl",
        ],
        cwd,
    ));
    let url = format!("kafka://{}/views?end=now", kafka.address());
    let topic = ok(pageviews(
        &[
            "run",
            "--headless",
            "--input",
            &url,
            "--rate",
            RATE,
            "--output",
            "topic.jsonl",
            "--record",
            "trace.jsonl",
            "--migrate",
            "fluid@0.5:pack:1",
        ],
        cwd,
    ));
    let (f, t) = (summary(&file), summary(&topic));
    assert_eq!(
        t["output_digest"], f["output_digest"],
        "the same outputs at the same times"
    );
    assert_eq!(t["records_in"], VIEWS);
    assert_eq!(
        sorted_lines(&cwd.join("topic.jsonl")),
        sorted_lines(&cwd.join("file.jsonl"))
    );
    assert_eq!(t["input"]["kind"], "kafka");
    let each = VIEWS / PARTITIONS as u64;
    for p in 0..PARTITIONS as u64 {
        assert_eq!(
            t["input"]["partitions"][p as usize],
            serde_json::json!({"id": p, "from": 0, "to": each}),
            "{t}"
        );
    }
    assert!(
        stderr(&topic).contains(&format!(
            "(partitions 0:0..{each}, 1:0..{each}, 2:0..{each}, 3:0..{each})"
        )),
        "{}",
        stderr(&topic)
    );

    // The trace says how far each partition was read: to its end, at the end.
    let events = common::trace_events(&cwd.join("trace.jsonl"));
    for p in 0..PARTITIONS as u64 {
        let last = events
            .iter()
            .rfind(|e| e["kind"] == "input_partition" && e["partition"] == p)
            .unwrap_or_else(|| panic!("no input_partition event of partition {p}"));
        assert_eq!(
            (&last["offset"], &last["end"]),
            (&each.into(), &each.into()),
            "{last}"
        );
    }

    // Paced by the views' own times (8 s of them, at 20 times their pace), as a file is.
    let by_time = |input: &str, out: &str| {
        let args = [
            "run",
            "--headless",
            "--input",
            input,
            "--pace",
            "event-time",
            "--speed",
            "20",
        ];
        summary(&ok(pageviews(&[&args[..], &["--output", out]].concat(), cwd)))
    };
    let (file_timed, topic_timed) = (
        by_time("views.csv", "file-time.jsonl"),
        by_time(&url, "topic-time.jsonl"),
    );
    assert_eq!(
        topic_timed["output_digest"], file_timed["output_digest"],
        "paced by event time"
    );
    assert_eq!(topic_timed["records_in"], VIEWS);

    // More messages arrive; the re-run reads the recorded offsets, not the topic's new end.
    produce(kafka.address(), "views", PARTITIONS, &lines[..400]);
    let rerun = ok(pageviews(
        &["replay", "trace.jsonl", "--rerun", "--speed", "max"],
        cwd,
    ));
    assert_eq!(
        summary(&rerun)["output_digest"],
        t["output_digest"],
        "{}",
        stderr(&rerun)
    );
}

/// Three processes, `--replicas 2`, the topic in, a table out, process 2 killed mid-run.
#[test]
fn a_cluster_reading_a_topic_into_a_table_loses_a_process_and_writes_every_output_once() {
    let kafka = Kafka::start();
    let pg = Postgres::start();
    let cluster = Cluster::of("kafka-postgres-crash", 3);
    let lines: Vec<String> = (0..VIEWS).map(view).collect();
    let file = cluster.dir.join("views.csv");
    std::fs::write(&file, lines.join("\n") + "\n").expect("the file");
    produce(kafka.address(), "clustered", PARTITIONS, &lines);
    let base = cluster.dir.join("base.jsonl");
    ok(pageviews(
        &[
            "run",
            "--headless",
            "--input",
            file.to_str().expect("UTF-8"),
            "--rate",
            RATE,
            "--output",
            base.to_str().expect("UTF-8"),
        ],
        &cluster.dir,
    ));
    let want = file_values(&base);

    let url = format!("kafka://{}/clustered?end=now", kafka.address());
    let table = format!("{}?table=clustered", pg.url());
    let job = [
        "run",
        "--headless",
        "--input",
        &url,
        "--rate",
        RATE,
        "--replicas",
        "2",
        "--output",
        &table,
    ];
    let binary = example("pageviews");
    let trace = cluster.dir.join("trace.jsonl");
    let trace = trace.to_str().expect("UTF-8");
    let ran = survives_one_kill(
        &cluster,
        (&binary, &job, &["--record", trace]),
        2,
        Duration::from_millis(800),
    );
    let got = table_values(pg.url(), "clustered");
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want, "every output once");

    // Its trace re-runs on three processes (its standbys are placed by process), reading
    // the recorded offsets again, to the same digest.
    let hosts = cluster.hostfile.to_str().expect("UTF-8");
    let reruns: Vec<Proc> = (0..3)
        .map(|p| {
            let p = p.to_string();
            let mut command = std::process::Command::new(&binary);
            command
                .args([
                    "replay", trace, "--rerun", "--speed", "max", "--", "-n", "3", "-p", &p, "-h", hosts,
                ])
                .env("MEGAFLUX_CLUSTER_TOKEN", common::CLUSTER_TOKEN);
            Proc::spawn(format!("re-run process {p}"), &mut command)
        })
        .collect();
    let reran = megaflux_testkit::wait_all(reruns, common::CLUSTER_LIMIT);
    for o in &reran {
        assert!(o.status.success(), "{}", stderr(o));
    }
    assert_eq!(summary(&reran[0])["output_digest"], ran["output_digest"]);
}

#[test]
fn a_missing_topic_an_unreachable_broker_and_bad_messages_are_named() {
    let kafka = Kafka::start();
    let dir = tempfile::tempdir().expect("a directory");
    let cwd = dir.path();
    let missing = format!("kafka://{}/nope?end=now", kafka.address());
    let out = pageviews(&["run", "--headless", "--input", &missing], cwd);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "topic nope does not exist on the broker at {}",
            kafka.address()
        )),
        "{}",
        stderr(&out)
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let nobody = format!("kafka://127.0.0.1:{port}/views?end=now");
    let out = pageviews(&["run", "--headless", "--input", &nobody], cwd);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("the broker at 127.0.0.1:{port}")),
        "{}",
        stderr(&out)
    );
    let out = pageviews(&["run", "--headless", "--input", "kafka://broker/views"], cwd);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("is not HOST:PORT"), "{}", stderr(&out));

    let mut lines: Vec<String> = (0..100).map(view).collect();
    lines[57] = "u1,/page/1,not-a-time".to_string();
    produce(kafka.address(), "unparsed", 1, &lines);
    let bad = format!("kafka://{}/unparsed?end=now", kafka.address());
    let out = pageviews(
        &["run", "--headless", "--input", &bad, "--output", "bad.jsonl"],
        cwd,
    );
    assert!(!out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("{bad} line 58")),
        "{}",
        stderr(&out)
    );

    produce(kafka.address(), "broken", 1, &["u1,/a,1\nu2,/b,2".to_string()]);
    let broken = format!("kafka://{}/broken?end=now", kafka.address());
    let out = pageviews(&["run", "--headless", "--input", &broken], cwd);
    assert!(!out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("partition 0 offset 0 of topic broken: the message holds a line break"),
        "{}",
        stderr(&out)
    );
}

/// A stream's broker goes away: the read says so, once a try, and goes on trying until the
/// job is stopped (`SIGINT`, as `q` stops a dashboard), which ends it with what it had.
#[test]
fn a_broker_that_goes_away_is_asked_again_and_said() {
    let kafka = Kafka::start_own();
    let dir = tempfile::tempdir().expect("a directory");
    let lines: Vec<String> = (0..500).map(view).collect();
    produce(kafka.address(), "live", 2, &lines);
    let url = format!("kafka://{}/live", kafka.address());
    let mut command = std::process::Command::new(example("pageviews"));
    command
        .args([
            "run",
            "--headless",
            "--input",
            &url,
            "--output",
            "live.jsonl",
            "--record",
            "live-trace.jsonl",
        ])
        .current_dir(dir.path());
    let mut job = Proc::spawn("pageviews reading a stream", &mut command);
    let out = dir.path().join("live.jsonl");
    megaflux_testkit::wait_until(
        "the stream's 500 views are written",
        Duration::from_secs(60),
        || std::fs::read_to_string(&out).is_ok_and(|t| t.lines().count() == 500),
    );
    drop(kafka);
    let said = job.wait_for_stderr(
        "a warning that the broker is away",
        Duration::from_secs(60),
        |l| {
            l.starts_with("megaflux: warning: topic live: partition ") && l.ends_with("trying again every 1s")
        },
    );
    assert!(said.contains("at offset 250"), "{said}");
    job.interrupt();
    let done = job.wait(RUN_LIMIT);
    let err = stderr(&done);
    assert!(err.matches("megaflux: warning: topic live").count() >= 1, "{err}");
    assert_eq!(sorted_lines(&out).len(), 500, "{err}");
    let events = common::trace_events(&dir.path().join("live-trace.jsonl"));
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "input_retry" && e["offset"] == 250),
        "the trace has the retries"
    );
}
