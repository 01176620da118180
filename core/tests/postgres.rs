//! The PostgreSQL sink's commit protocol against a real server (started by
//! `tui/scripts/services.sh`, or the one `MEGAFLUX_PG_URL` names): a second writer fences the
//! first, a run resumes only a table its own settings wrote, and every refusal names the
//! table and what is wrong. Whole runs into a table are in `own_job.rs` (every schedule) and
//! in the tui's `postgres.rs` (crashes at each step of a commit, a cluster's kill -9).

use megaflux::Time;
use megaflux::sink::{Batch, Output, RunIdentity, Sink, open};
use megaflux_testkit::Postgres;
use postgres::{Client, NoTls};

/// A run's identity with `rate` as its one setting.
fn identity(rate: u64) -> RunIdentity {
    let mut settings = serde_json::Map::new();
    settings.insert("rate".into(), rate.into());
    RunIdentity {
        settings,
        not_resumable: None,
    }
}

fn output(pg: &Postgres, table: &str) -> Output {
    format!("{}?table={table}", pg.url())
        .parse()
        .expect("a PostgreSQL URL")
}

fn client(pg: &Postgres) -> Client {
    Client::connect(pg.url(), NoTls).expect("the test connects")
}

/// `n` outputs at each of `times`, reaching `upto`.
fn batch(times: &[Time], n: u64, upto: Time) -> Batch {
    let mut b = Batch {
        upto,
        ..Batch::default()
    };
    for &t in times {
        for i in 0..n {
            b.lines
                .extend_from_slice(format!("{{\"t\":{t},\"i\":{i},\"s\":\"a\\\\b\"}}\n").as_bytes());
        }
        b.times.push((t, n));
    }
    b
}

/// The table's rows: (time, output as JSON text), sorted.
fn rows(pg: &Postgres, table: &str) -> Vec<(i64, String)> {
    let mut rows: Vec<(i64, String)> = client(pg)
        .query(&format!("SELECT time, output FROM {table}"), &[])
        .expect("the table is read")
        .iter()
        .map(|r| (r.get(0), r.get::<_, serde_json::Value>(1).to_string()))
        .collect();
    rows.sort();
    rows
}

fn progress(pg: &Postgres, sink: &str) -> (i64, i64) {
    let row = client(pg)
        .query_one(
            "SELECT upto, incarnation FROM megaflux_progress WHERE sink = $1",
            &[&sink],
        )
        .expect("the sink's progress");
    (row.get(0), row.get(1))
}

fn error(r: Result<Box<dyn Sink>, megaflux::sink::SinkError>) -> String {
    match r {
        Ok(_) => panic!("the sink opened"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn batches_commit_with_their_times_and_a_second_writer_fences_the_first() {
    let pg = Postgres::start();
    let out = output(&pg, "fenced");
    let mut first = open(&out, false).expect("the sink opens");
    assert_eq!(first.recover(&identity(1)).expect("a new table"), 0);
    first.commit(batch(&[3, 4], 2, 5)).expect("taken");
    // The writer commits in the background: its committed time says when.
    megaflux_testkit::wait_until(
        "the first batch is committed",
        std::time::Duration::from_secs(30),
        || first.committed().expect("no failure") == 5,
    );
    assert_eq!(progress(&pg, "fenced"), (5, 1));
    assert_eq!(rows(&pg, "fenced").len(), 4);
    assert_eq!(
        rows(&pg, "fenced")[0],
        (3, r#"{"i":0,"s":"a\\b","t":3}"#.to_string())
    );

    // A second run of the same job takes the sink over and resumes after the first's commit.
    let mut second = open(&out, false).expect("the sink opens");
    assert_eq!(second.recover(&identity(1)).expect("the same run resumes"), 5);
    assert_eq!(progress(&pg, "fenced"), (5, 2));

    // The first can no longer commit: its rows are rolled back, and it says why.
    let _ = first.commit(batch(&[6], 3, 7));
    let e = first
        .finish()
        .expect_err("the first writer is fenced")
        .to_string();
    assert!(e.contains("another run took sink fenced over"), "{e}");
    assert_eq!(
        rows(&pg, "fenced").len(),
        4,
        "nothing of the fenced writer's is in"
    );

    second.commit(batch(&[6], 1, Time::MAX)).expect("taken");
    assert_eq!(second.finish().expect("committed"), Time::MAX);
    assert_eq!(rows(&pg, "fenced").len(), 5);
    assert_eq!(progress(&pg, "fenced"), (i64::MAX, 2));
}

#[test]
fn another_runs_table_is_refused_naming_what_differs_and_force_empties_it() {
    let pg = Postgres::start();
    let out = output(&pg, "another");
    let mut first = open(&out, false).expect("the sink opens");
    first.recover(&identity(1)).expect("a new table");
    first.commit(batch(&[1], 2, Time::MAX)).expect("taken");
    first.finish().expect("committed");

    let mut other = open(&out, false).expect("the sink opens");
    let e = other
        .recover(&identity(2))
        .expect_err("another run's table")
        .to_string();
    assert!(
        e.contains("table another holds the outputs of another run of sink another")
            && e.contains("rate was 1, is 2")
            && e.contains("--force"),
        "{e}"
    );
    let mut unresumable = open(&out, false).expect("the sink opens");
    let mut piped = identity(1);
    piped.not_resumable = Some("its records come from standard input, which cannot be read again".into());
    let e = unresumable
        .recover(&piped)
        .expect_err("a run that cannot resume")
        .to_string();
    assert!(
        e.contains("it cannot resume: its records come from standard input"),
        "{e}"
    );
    assert_eq!(rows(&pg, "another").len(), 2, "the refusals wrote nothing");

    let mut forced = open(&out, true).expect("the sink opens");
    assert_eq!(forced.recover(&identity(2)).expect("--force empties it"), 0);
    assert!(rows(&pg, "another").is_empty());
    forced.finish().expect("nothing to commit");
}

#[test]
fn tables_of_another_shape_or_with_strangers_rows_are_refused() {
    let pg = Postgres::start();
    let mut c = client(&pg);
    c.batch_execute(
        "CREATE TABLE shaped (a integer, b text);
         CREATE TABLE strangers (time BIGINT NOT NULL, output JSONB NOT NULL);
         INSERT INTO strangers VALUES (1, '1'), (2, '2');",
    )
    .expect("the tables");
    let mut s = open(&output(&pg, "shaped"), false).expect("the sink opens");
    let e = s.recover(&identity(1)).expect_err("another shape").to_string();
    assert!(
        e.contains(
            "table shaped has columns (a integer, b text); megaflux writes (time bigint, output jsonb)"
        ),
        "{e}"
    );
    let mut s = open(&output(&pg, "strangers"), false).expect("the sink opens");
    let e = s
        .recover(&identity(1))
        .expect_err("rows no run wrote")
        .to_string();
    assert!(
        e.contains("table strangers holds 2 rows that no run of sink strangers wrote"),
        "{e}"
    );
    assert_eq!(rows(&pg, "strangers").len(), 2, "kept");
    let mut s = open(&output(&pg, "megaflux_progress"), false).expect("the sink opens");
    let e = s.recover(&identity(1)).expect_err("its own table").to_string();
    assert!(e.contains("megaflux's own table"), "{e}");
}

#[test]
fn an_unreachable_database_is_named() {
    // A port nothing listens on: one the kernel gave a listener, released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let out: Output = format!("postgresql://postgres@127.0.0.1:{port}/postgres?table=t")
        .parse()
        .expect("a URL");
    let mut s = open(&out, false).expect("opening connects only at recovery");
    let e = s.recover(&identity(1)).expect_err("nothing listens").to_string();
    assert!(
        e.starts_with(&format!(
            "--output postgresql://postgres@127.0.0.1:{port}/postgres?table=t: connecting: "
        )),
        "{e}"
    );
    let e = error(open(
        &"/nonexistent-dir/out.jsonl".parse().expect("a path"),
        false,
    ));
    assert!(
        e.starts_with("--output /nonexistent-dir/out.jsonl: creating it: "),
        "{e}"
    );
}
