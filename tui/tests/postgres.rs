//! `--output postgresql://...` through the real binary, against a real PostgreSQL server
//! (started by `tui/scripts/services.sh`, or the one `MEGAFLUX_PG_URL` names):
//!
//! - a writer killed between its `COPY` and its `COMMIT`, or between the `COMMIT` and its
//!   acknowledgement (`MEGAFLUX_FAILPOINT`), leaves a table that the same command resumes:
//!   the table then holds the outputs of a run to a file, each once;
//! - a cluster of three processes with `--replicas 2` loses a process to kill -9 and the
//!   table still holds every output once;
//! - bad URLs, an unreachable server and a table of another shape are named, with a
//!   non-zero exit, and write nothing.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use megaflux_testkit::{Postgres, run};
use postgres::{Client, NoTls};

use common::{Cluster, file_values, megaflux, summary, survives_one_kill};

/// How long one single-process run may take before the test calls it hung.
const RUN_LIMIT: Duration = Duration::from_secs(180);

/// A key count of 4 s: about twenty commits of 200 ms each.
const JOB: &[&str] = &[
    "run",
    "--headless",
    "--keys",
    "20000",
    "--rate",
    "20000",
    "--duration",
    "4",
];

fn client(pg: &Postgres) -> Client {
    Client::connect(pg.url(), NoTls).expect("the test connects")
}

fn table_values(pg: &Postgres, table: &str) -> Vec<String> {
    common::table_values(pg.url(), table)
}

/// The time the sink `sink` committed up to.
fn committed(pg: &Postgres, sink: &str) -> i64 {
    client(pg)
        .query_one("SELECT upto FROM megaflux_progress WHERE sink = $1", &[&sink])
        .expect("the sink's progress")
        .get(0)
}

fn with<'a>(job: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    job.iter().chain(more).copied().collect()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The job run to a file, as the outputs every table must hold.
fn base(dir: &Path, job: &[&str]) -> Vec<String> {
    let path = dir.join("base.jsonl");
    let out = run(
        "the run to a file",
        &mut megaflux(&with(
            job,
            &["--output", path.to_str().expect("UTF-8"), "--force"],
        )),
        RUN_LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let values = file_values(&path);
    assert!(values.len() > 1000, "the job wrote outputs: {}", values.len());
    values
}

/// Kills the writer at the third time it reaches `point` of a commit, then runs the same
/// command again: it resumes from what was committed, and the table ends with every output
/// once; a third run finds everything committed and writes nothing.
fn crash_and_resume(point: &str, table: &str) {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().expect("a directory");
    let want = base(dir.path(), JOB);
    let url = format!("{}?table={table}", pg.url());
    let job = with(JOB, &["--output", &url]);

    let mut crashing = megaflux(&job);
    crashing.env("MEGAFLUX_FAILPOINT", format!("{point}:3"));
    let out = run("the run killed in a commit", &mut crashing, RUN_LIMIT);
    assert_eq!(
        out.status.signal(),
        Some(9),
        "killed at {point}: {}",
        stderr(&out)
    );
    let upto = committed(&pg, table);
    let rows = table_values(&pg, table).len();
    assert!(
        upto > 0 && upto < i64::MAX,
        "two or three commits in: up to {upto}"
    );
    assert!(rows > 0 && rows < want.len(), "{rows} of {} rows in", want.len());

    let out = run("the run that resumes", &mut megaflux(&job), RUN_LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["output"]["resumed_from"], upto, "{s}");
    assert_eq!(s["output"]["skipped"], rows, "{s}");
    assert_eq!(
        s["output"]["rows"].as_u64(),
        Some((want.len() - rows) as u64),
        "{s}"
    );
    assert!(
        stderr(&out).contains(&format!(
            "resuming from logical time {upto} ({rows} outputs before it were already there)"
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        table_values(&pg, table),
        want,
        "every output once after the resume"
    );
    assert_eq!(committed(&pg, table), i64::MAX);

    let out = run("the run after the end", &mut megaflux(&job), RUN_LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["output"]["rows"], 0);
    assert!(
        stderr(&out).contains("an earlier run had committed all of them"),
        "{}",
        stderr(&out)
    );
    assert_eq!(table_values(&pg, table), want, "nothing written twice");
}

#[test]
fn a_writer_killed_between_copy_and_commit_is_resumed_with_every_output_once() {
    crash_and_resume("sink-copied", "copied");
}

#[test]
fn a_writer_killed_between_commit_and_acknowledgement_is_resumed_with_every_output_once() {
    crash_and_resume("sink-committed", "acknowledged");
}

/// Three processes, `--replicas 2`, process 2 killed mid-run: the survivors restart without
/// it, and process 0's table holds every output once.
#[test]
fn a_cluster_losing_a_process_to_kill_9_writes_every_output_once() {
    let pg = Postgres::start();
    let cluster = Cluster::of("postgres-crash", 3);
    let job = with(JOB, &["--replicas", "2", "--migrate", "fluid@1:pack:1"]);
    let want = base(&cluster.dir, &job);
    let url = format!("{}?table=cluster", pg.url());
    let job = with(&job, &["--output", &url]);
    let binary = Path::new(env!("CARGO_BIN_EXE_megaflux"));
    survives_one_kill(&cluster, (binary, &job, &[]), 2, Duration::from_millis(1500));
    assert_eq!(table_values(&pg, "cluster"), want, "every output once");
    assert_eq!(committed(&pg, "cluster"), i64::MAX);
}

#[test]
fn bad_urls_unreachable_servers_and_tables_of_another_shape_are_named() {
    let pg = Postgres::start();
    let short = ["run", "--headless", "--keys", "1000", "--duration", "1"];
    for (url, says) in [
        ("postgresql://postgres@127.0.0.1/postgres", "add ?table=NAME"),
        (
            "postgresql://postgres@127.0.0.1:port/postgres?table=t",
            "not a PostgreSQL URL",
        ),
        ("mysql://me@db/jobs?table=t", "mysql:// is not an output"),
    ] {
        let out = run(url, &mut megaflux(&with(&short, &["--output", url])), RUN_LIMIT);
        assert_eq!(out.status.code(), Some(2), "{url}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{url}: {}", stderr(&out));
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let nobody = format!("postgresql://postgres@127.0.0.1:{port}/postgres?table=t");
    let out = run(
        "nobody listens",
        &mut megaflux(&with(&short, &["--output", &nobody])),
        RUN_LIMIT,
    );
    assert!(!out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "--output {nobody}: connecting: error connecting to server: Connection refused"
        )),
        "{}",
        stderr(&out)
    );

    client(&pg)
        .batch_execute("CREATE TABLE shaped (a integer, b text)")
        .expect("the table");
    let shaped = format!("{}?table=shaped", pg.url());
    let out = run(
        "another shape",
        &mut megaflux(&with(&short, &["--output", &shaped])),
        RUN_LIMIT,
    );
    assert!(!out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "table shaped has columns (a integer, b text); megaflux writes (time bigint, output jsonb)"
        ),
        "{}",
        stderr(&out)
    );
    // A run of other settings on a table another run wrote is refused, naming the difference.
    let counts = format!("{}?table=counts", pg.url());
    let out = run(
        "the first run",
        &mut megaflux(&with(&short, &["--output", &counts])),
        RUN_LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let rows = table_values(&pg, "counts");
    let other = with(&short, &["--output", &counts, "--rate", "2000"]);
    let out = run("another run", &mut megaflux(&other), RUN_LIMIT);
    assert!(!out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("rate was 200000, is 2000"),
        "{}",
        stderr(&out)
    );
    assert_eq!(table_values(&pg, "counts"), rows, "nothing written");
}
