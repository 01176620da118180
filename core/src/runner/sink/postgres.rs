//! `--output postgresql://USER@HOST:PORT/DB?table=NAME`: one row per output (`time BIGINT`,
//! `output JSONB`), each batch written with `COPY` in the same transaction that moves the
//! sink's row in `megaflux_progress` from the time it was at to the batch's.
//!
//! Invariant: a row of the table is committed exactly when the progress row moves past its
//! time. The move is conditional (`WHERE sink = $1 AND incarnation = $2 AND upto = $3`): a
//! writer that another run has taken the sink from (a higher incarnation, or a time it did
//! not commit) moves no row, rolls back and stops. A crash before the commit leaves neither
//! the rows nor the move; a crash after it leaves both, and the next run resumes after them.
//!
//! The transactions run on a thread of their own, so worker 0 never waits for the database
//! unless [`PIPELINE`] batches are already waiting (then it does: back pressure, not loss).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use postgres::{Client, NoTls};

use super::{Batch, PgTarget, RunIdentity, Sink, SinkError};
use crate::Time;

/// Batches handed to the writing thread and not yet committed, at most.
const PIPELINE: usize = 2;
/// The table that keeps each sink's committed time.
pub const PROGRESS_TABLE: &str = "megaflux_progress";

/// A PostgreSQL table as a sink.
pub(crate) struct PgSink {
    target: PgTarget,
    replace: bool,
    background: Option<Background>,
}

/// The writing thread, and what it tells.
struct Background {
    batches: SyncSender<Batch>,
    committed: Arc<AtomicU64>,
    failed: Arc<Mutex<Option<String>>>,
    thread: JoinHandle<()>,
}

/// A time as the database keeps it (`BIGINT`): the end of time is `i64::MAX`.
fn to_db(t: Time) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

fn from_db(t: i64) -> Time {
    if t == i64::MAX {
        Time::MAX
    } else {
        t.max(0) as Time
    }
}

impl PgSink {
    pub(crate) fn new(target: PgTarget, replace: bool) -> Self {
        PgSink {
            target,
            replace,
            background: None,
        }
    }

    fn failed(&self, reason: impl Into<String>) -> SinkError {
        SinkError {
            sink: super::Output::Postgres(self.target.clone()).name(),
            reason: reason.into(),
        }
    }

    /// Takes the sink's progress row for this run, in one transaction with the checks:
    /// (incarnation, committed time).
    fn take_over(&self, client: &mut Client, run: &RunIdentity) -> Result<(i64, i64), SinkError> {
        let db = |what: &str, e: postgres::Error| self.failed(format!("{what}: {}", chain(&e)));
        let (table, sink) = (&self.target.table, &self.target.sink);
        if table == PROGRESS_TABLE {
            return Err(self.failed(format!(
                "{PROGRESS_TABLE} is megaflux's own table: give another ?table="
            )));
        }
        let settings = serde_json::Value::Object(run.settings.clone());
        let mut tx = client
            .transaction()
            .map_err(|e| db("starting a transaction", e))?;
        tx.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} (sink TEXT PRIMARY KEY, upto BIGINT NOT NULL, \
             incarnation BIGINT NOT NULL, run JSONB NOT NULL);
             CREATE TABLE IF NOT EXISTS \"{table}\" (time BIGINT NOT NULL, output JSONB NOT NULL);"
        ))
        .map_err(|e| db("creating the tables", e))?;
        let columns: Vec<(String, String)> = tx
            .query(
                "SELECT column_name::text, data_type::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
                &[table],
            )
            .map_err(|e| db("reading the table's columns", e))?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let want = [("time", "bigint"), ("output", "jsonb")];
        if columns.len() != want.len()
            || columns
                .iter()
                .zip(want)
                .any(|((n, t), (wn, wt))| n != wn || t != wt)
        {
            let has: Vec<String> = columns.iter().map(|(n, t)| format!("{n} {t}")).collect();
            return Err(self.failed(format!(
                "table {table} has columns ({}); megaflux writes (time bigint, output jsonb): give another ?table=",
                has.join(", ")
            )));
        }
        let row = tx
            .query_opt(
                &format!("SELECT upto, incarnation, run FROM {PROGRESS_TABLE} WHERE sink = $1 FOR UPDATE"),
                &[sink],
            )
            .map_err(|e| db("reading the sink's progress", e))?;
        let count = |tx: &mut postgres::Transaction| -> Result<i64, SinkError> {
            tx.query_one(&format!("SELECT count(*) FROM \"{table}\""), &[])
                .map(|r| r.get(0))
                .map_err(|e| db("counting the table's rows", e))
        };
        let empty = |tx: &mut postgres::Transaction| -> Result<(), SinkError> {
            tx.batch_execute(&format!("TRUNCATE \"{table}\""))
                .map_err(|e| db("emptying the table (--force)", e))
        };
        let taken = match row {
            None => {
                let rows = count(&mut tx)?;
                if rows > 0 && !self.replace {
                    return Err(self.failed(format!(
                        "table {table} holds {rows} rows that no run of sink {sink} wrote: \
                         give another ?table=, or --force to empty it"
                    )));
                }
                if rows > 0 {
                    empty(&mut tx)?;
                }
                tx.execute(
                    &format!(
                        "INSERT INTO {PROGRESS_TABLE} (sink, upto, incarnation, run) VALUES ($1, 0, 1, $2)"
                    ),
                    &[sink, &settings],
                )
                .map_err(|e| db("adding the sink's progress", e))?;
                (1, 0)
            }
            Some(row) => {
                let (upto, incarnation, was): (i64, i64, serde_json::Value) =
                    (row.get(0), row.get(1), row.get(2));
                let upto = if self.replace {
                    empty(&mut tx)?;
                    0
                } else if upto == 0 {
                    0
                } else if was != settings {
                    return Err(self.failed(format!(
                        "table {table} holds the outputs of another run of sink {sink} (up to time {upto}): \
                         {}; run it as it was to resume it, give another ?table= or &sink=, or --force to empty it",
                        differences(&was, &settings)
                    )));
                } else if let Some(why) = &run.not_resumable {
                    return Err(self.failed(format!(
                        "table {table} holds this run's outputs up to time {upto}, and it cannot resume: {why}; \
                         give another ?table=, or --force to empty it"
                    )));
                } else {
                    upto
                };
                tx.execute(
                    &format!(
                        "UPDATE {PROGRESS_TABLE} SET upto = $2, incarnation = $3, run = $4 WHERE sink = $1"
                    ),
                    &[sink, &upto, &(incarnation + 1), &settings],
                )
                .map_err(|e| db("taking the sink's progress", e))?;
                (incarnation + 1, upto)
            }
        };
        tx.commit().map_err(|e| db("committing the sink's progress", e))?;
        Ok(taken)
    }
}

/// `e` with every cause under it: the client's own message ("error connecting to server")
/// does not say that the connection was refused, its cause does.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// How two runs' settings differ, as a user would compare their flags.
fn differences(was: &serde_json::Value, now: &serde_json::Value) -> String {
    let (Some(was), Some(now)) = (was.as_object(), now.as_object()) else {
        return "its settings differ".to_string();
    };
    let mut keys: Vec<&String> = was.keys().chain(now.keys()).collect();
    keys.sort();
    keys.dedup();
    let differ: Vec<String> = keys
        .into_iter()
        .filter(|k| was.get(*k) != now.get(*k))
        .map(|k| {
            let show = |v: Option<&serde_json::Value>| v.map_or("none".to_string(), |v| v.to_string());
            format!("{k} was {}, is {}", show(was.get(k)), show(now.get(k)))
        })
        .collect();
    if differ.is_empty() {
        "its settings differ".to_string()
    } else {
        differ.join("; ")
    }
}

impl Sink for PgSink {
    fn recover(&mut self, run: &RunIdentity) -> Result<Time, SinkError> {
        let mut client = Client::connect(&self.target.connect, NoTls)
            .map_err(|e| self.failed(format!("connecting: {}", chain(&e))))?;
        let (incarnation, upto) = self.take_over(&mut client, run)?;
        let committed = Arc::new(AtomicU64::new(from_db(upto)));
        let failed: Arc<Mutex<Option<String>>> = Arc::default();
        let (batches, taken) = sync_channel::<Batch>(PIPELINE);
        let mut commits = Commits {
            client,
            table: self.target.table.clone(),
            sink: self.target.sink.clone(),
            incarnation,
            upto,
            rows: Vec::new(),
        };
        let (done, why) = (Arc::clone(&committed), Arc::clone(&failed));
        let thread = std::thread::Builder::new()
            .name("megaflux-postgres".into())
            .spawn(move || {
                for batch in taken {
                    match commits.commit(&batch) {
                        Ok(()) => done.store(from_db(commits.upto), Ordering::Release),
                        Err(e) => {
                            if let Ok(mut slot) = why.lock() {
                                *slot = Some(e);
                            }
                            return;
                        }
                    }
                }
            })
            .map_err(|e| self.failed(format!("starting its writer: {e}")))?;
        self.background = Some(Background {
            batches,
            committed,
            failed,
            thread,
        });
        Ok(from_db(upto))
    }

    fn commit(&mut self, batch: Batch) -> Result<(), SinkError> {
        let Some(b) = &self.background else {
            return Err(self.failed("not recovered"));
        };
        if b.batches.send(batch).is_err() {
            return self.committed().map(|_| ());
        }
        Ok(())
    }

    fn committed(&mut self) -> Result<Time, SinkError> {
        let Some(b) = &self.background else {
            return Err(self.failed("not recovered"));
        };
        let failed = b.failed.lock().ok().and_then(|f| f.clone());
        match failed {
            Some(e) => Err(self.failed(e)),
            // Finished without saying why: it panicked (it ends only by failing or at finish).
            None if b.thread.is_finished() => Err(self.failed("its writer stopped")),
            None => Ok(b.committed.load(Ordering::Acquire)),
        }
    }

    fn finish(&mut self) -> Result<Time, SinkError> {
        let Some(b) = self.background.take() else {
            return Err(self.failed("not recovered"));
        };
        let Background {
            batches,
            committed,
            failed,
            thread,
        } = b;
        drop(batches);
        let joined = thread.join();
        if let Some(e) = failed.lock().ok().and_then(|f| f.clone()) {
            return Err(self.failed(e));
        }
        if joined.is_err() {
            return Err(self.failed("its writer panicked"));
        }
        Ok(committed.load(Ordering::Acquire))
    }
}

/// The writing thread's connection and where its sink's progress stands.
struct Commits {
    client: Client,
    table: String,
    sink: String,
    incarnation: i64,
    /// The committed time, as the progress row holds it.
    upto: i64,
    /// A batch's rows in `COPY`'s text format.
    rows: Vec<u8>,
}

impl Commits {
    /// Writes `batch` and moves the progress row to its time, in one transaction.
    fn commit(&mut self, batch: &Batch) -> Result<(), String> {
        let upto = to_db(batch.upto).max(self.upto);
        copy_rows(batch, &mut self.rows);
        let mut tx = self
            .client
            .transaction()
            .map_err(|e| format!("starting a transaction: {}", chain(&e)))?;
        if !batch.is_empty() {
            let mut copy = tx
                .copy_in(&format!("COPY \"{}\" (time, output) FROM STDIN", self.table))
                .map_err(|e| format!("writing outputs: {}", chain(&e)))?;
            copy.write_all(&self.rows)
                .map_err(|e| format!("writing outputs: {}", chain(&e)))?;
            copy.finish()
                .map_err(|e| format!("writing outputs: {}", chain(&e)))?;
        }
        crate::failpoint::hit(crate::failpoint::Point::SinkCopied);
        let moved = tx
            .execute(
                &format!(
                    "UPDATE {PROGRESS_TABLE} SET upto = $4 WHERE sink = $1 AND incarnation = $2 AND upto = $3"
                ),
                &[&self.sink, &self.incarnation, &self.upto, &upto],
            )
            .map_err(|e| format!("moving the sink's progress: {}", chain(&e)))?;
        if moved == 0 {
            // Dropping the transaction rolls the rows back.
            return Err(format!(
                "another run took sink {} over (its progress is no longer this run's, incarnation {} at time {}): \
                 this run stops, and its uncommitted outputs are that run's to write",
                self.sink, self.incarnation, self.upto
            ));
        }
        tx.commit().map_err(|e| format!("committing: {}", chain(&e)))?;
        crate::failpoint::hit(crate::failpoint::Point::SinkCommitted);
        self.upto = upto;
        Ok(())
    }
}

/// `batch`'s rows as `COPY ... FROM STDIN` reads text: `time<TAB>json<NEWLINE>`. JSON as
/// serde writes it has no raw tab or newline; its backslashes are doubled, as COPY unescapes.
fn copy_rows(batch: &Batch, rows: &mut Vec<u8>) {
    rows.clear();
    let mut lines = batch.lines.split(|b| *b == b'\n');
    for &(time, count) in &batch.times {
        let stamp = to_db(time).to_string();
        for line in lines.by_ref().take(count as usize) {
            rows.extend_from_slice(stamp.as_bytes());
            rows.push(b'\t');
            for &b in line {
                if b == b'\\' {
                    rows.push(b'\\');
                }
                rows.push(b);
            }
            rows.push(b'\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_copy_text_with_their_times_and_backslashes_doubled() {
        let batch = Batch {
            lines: b"[\"a\\\"b\",1]\n{\"k\":\"x\\\\y\"}\n3\n".to_vec(),
            times: vec![(7, 2), (9, 1)],
            upto: 10,
        };
        let mut rows = Vec::new();
        copy_rows(&batch, &mut rows);
        assert_eq!(
            String::from_utf8(rows).unwrap(),
            "7\t[\"a\\\\\"b\",1]\n7\t{\"k\":\"x\\\\\\\\y\"}\n9\t3\n"
        );
    }

    #[test]
    fn the_end_of_time_is_kept_as_the_largest_bigint() {
        assert_eq!(to_db(Time::MAX), i64::MAX);
        assert_eq!(from_db(i64::MAX), Time::MAX);
        assert_eq!(from_db(to_db(12_345)), 12_345);
    }

    #[test]
    fn differing_settings_are_named() {
        let was = serde_json::json!({"job": "hashcount", "rate": 1000});
        let now = serde_json::json!({"job": "hashcount", "rate": 2000, "keys": 5});
        assert_eq!(
            differences(&was, &now),
            "keys was none, is 5; rate was 1000, is 2000"
        );
    }
}
