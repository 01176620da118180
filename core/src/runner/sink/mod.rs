//! Where a job's outputs go (`--output`): a JSON-lines file (`file.rs`) or a PostgreSQL table
//! (`postgres.rs`), both behind one commit protocol ([`Sink`]).
//!
//! Worker 0 of the first process writes every output: the commit operator hands it the
//! outputs of each logical time together, in time order, once all of them arrived, and a
//! `Writer` gathers them into batches and commits each batch up to a logical time. The
//! stateful operators emit each output exactly once, whatever the migrations and failovers,
//! so a sink that commits each batch atomically holds each output exactly once too.
//!
//! Invariant: a sink's committed time `upto` says every output at a time before `upto` is in
//! the sink and none after it. A run that starts on a sink an earlier run of the same job
//! left at `upto` (it crashed) makes the same outputs at the same times again, and writes only
//! those at `upto` or later: so a restart never writes an output twice. The outputs of a run
//! are the same at the same times only if its records are (generated, or read from a file by
//! fixed epochs): a sink refuses to resume any other run.

mod file;
mod output;
mod postgres;

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::Time;

pub use output::{Output, PgTarget};

/// A writer commits what it holds at least this often.
pub const FLUSH_EVERY: Duration = Duration::from_millis(200);
/// What a writer holds before it commits, at most (a longer line is committed alone).
const BUFFER_BYTES: usize = 1 << 20;

/// Outputs to commit: JSON lines, each with its logical time, and the time they reach.
#[derive(Debug, Default)]
pub struct Batch {
    /// The outputs, one JSON value and a newline each, in time order.
    pub lines: Vec<u8>,
    /// How many of `lines` are of each time, in time order.
    pub times: Vec<(Time, u64)>,
    /// Every output at a time before it is in this batch or committed before.
    pub upto: Time,
}

impl Batch {
    /// How many outputs it holds.
    pub fn len(&self) -> u64 {
        self.times.iter().map(|(_, n)| n).sum()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }
}

/// Why a sink could not take a run's outputs. Its message names the sink.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--output {sink}: {reason}")]
pub struct SinkError {
    /// The sink, as `--output` named it (without a password).
    pub sink: String,
    /// What went wrong.
    pub reason: String,
}

/// What a sink learns of the run at its start: the settings its outputs depend on, and
/// whether the run makes the same outputs at the same times again (so can resume).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunIdentity {
    /// The job and every setting its outputs depend on, as a JSON object.
    pub settings: serde_json::Map<String, serde_json::Value>,
    /// Why a run of these settings cannot resume a sink an earlier run left, if it cannot.
    pub not_resumable: Option<String>,
}

/// A destination of outputs with a commit protocol.
///
/// A writer calls [`Sink::recover`] once, then [`Sink::commit`] for each batch, in time
/// order, then [`Sink::finish`]. A sink commits each batch whole or not at all, and an
/// earlier incarnation of the same sink (a run that is still writing after this one
/// started) can no longer commit once this one recovered.
pub trait Sink: Send {
    /// Opens the sink for the run `run`: fences any earlier writer, and returns the committed
    /// time it resumes from (0 for an empty sink; every output before it is in the sink).
    fn recover(&mut self, run: &RunIdentity) -> Result<Time, SinkError>;
    /// Commits `batch`. A sink that commits in the background may say it failed later, from
    /// [`Sink::committed`] or [`Sink::finish`].
    fn commit(&mut self, batch: Batch) -> Result<(), SinkError>;
    /// The committed time known so far, or why committing failed.
    fn committed(&mut self) -> Result<Time, SinkError>;
    /// Waits until every batch is committed (and durable); the committed time.
    fn finish(&mut self) -> Result<Time, SinkError>;
}

/// Opens `output` for writing: creates the file (an existing one is replaced only if
/// `replace`), or connects to the table (whose outputs are emptied only if `replace`).
pub fn open(output: &Output, replace: bool) -> Result<Box<dyn Sink>, SinkError> {
    Ok(match output {
        Output::File(path) => Box::new(file::FileSink::create(path, replace)?),
        Output::Postgres(target) => Box::new(postgres::PgSink::new(target.clone(), replace)),
    })
}

/// What a run's writer did, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OutputSummary {
    /// `file` or `postgresql`.
    pub kind: String,
    /// The sink, as `--output` named it (without a password).
    pub to: String,
    /// Every output before this logical time is in the sink (`u64::MAX`: all of them).
    pub committed_time: Time,
    /// The outputs this run wrote.
    pub rows: u64,
    /// The committed time an earlier run left, which this one resumed from (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resumed_from: Time,
    /// Outputs before `resumed_from` this run made again and did not write.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: u64,
}

fn is_zero(n: &Time) -> bool {
    *n == 0
}

/// Gathers worker 0's outputs into batches and commits them to a [`Sink`]: at least every
/// [`FLUSH_EVERY`], and whenever it holds [`BUFFER_BYTES`] (worker 0 asks on every turn of
/// its loop, outputs or not). Once a commit fails it takes nothing more.
pub(crate) struct Writer {
    sink: Box<dyn Sink>,
    summary: OutputSummary,
    batch: Batch,
    last_commit: Instant,
    failed: Option<String>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Writer({})", self.summary.to)
    }
}

impl Writer {
    /// Opens `output` for the run `run` and recovers it.
    pub(crate) fn open(output: &Output, replace: bool, run: &RunIdentity) -> Result<Writer, SinkError> {
        let mut sink = open(output, replace)?;
        let resumed_from = sink.recover(run)?;
        Ok(Writer {
            sink,
            summary: OutputSummary {
                kind: output.kind().to_string(),
                to: output.name(),
                committed_time: resumed_from,
                resumed_from,
                ..OutputSummary::default()
            },
            batch: Batch::default(),
            last_commit: Instant::now(),
            failed: None,
        })
    }

    /// Takes `outputs`, all of logical `time` (after every earlier time's), unless writing
    /// already failed; outputs before the time the sink resumed from are already in it.
    pub(crate) fn write<'a, O: Serialize + 'a>(
        &mut self,
        time: Time,
        outputs: impl IntoIterator<Item = &'a O>,
    ) {
        if self.failed.is_some() {
            return;
        }
        let mut count = 0;
        for out in outputs {
            if time < self.summary.resumed_from {
                self.summary.skipped += 1;
                continue;
            }
            let line_start = self.batch.lines.len();
            if let Err(e) = serde_json::to_writer(&mut self.batch.lines, out) {
                self.batch.lines.truncate(line_start);
                self.failed = Some(format!("--output {}: an output: {e}", self.summary.to));
                return;
            }
            self.batch.lines.push(b'\n');
            count += 1;
        }
        if count > 0 {
            self.batch.times.push((time, count));
        }
        self.batch.upto = self.batch.upto.max(time.saturating_add(1));
        if self.batch.lines.len() >= BUFFER_BYTES {
            self.commit();
        } else {
            self.tick();
        }
    }

    /// Commits what it holds if [`FLUSH_EVERY`] has passed since it last did, and then learns
    /// whether the sink failed.
    pub(crate) fn tick(&mut self) {
        // Worker 0 asks on every turn of its loop: the sink is asked only once per commit.
        if self.last_commit.elapsed() < FLUSH_EVERY {
            return;
        }
        self.commit();
        if self.failed.is_none() {
            match self.sink.committed() {
                Ok(t) if t > self.summary.committed_time => {
                    self.summary.committed_time = t;
                    // Observers (a metrics endpoint, the trace) see the sink's progress.
                    tracing::info!(target: "megaflux::output", upto = t, rows = self.summary.rows);
                }
                Ok(_) => {}
                Err(e) => self.failed = Some(e.to_string()),
            }
        }
    }

    fn commit(&mut self) {
        self.last_commit = Instant::now();
        if self.failed.is_some() || self.batch.is_empty() {
            return;
        }
        let upto = self.batch.upto;
        let batch = std::mem::replace(
            &mut self.batch,
            Batch {
                upto,
                ..Batch::default()
            },
        );
        let rows = batch.len();
        match self.sink.commit(batch) {
            Ok(()) => self.summary.rows += rows,
            Err(e) => self.failed = Some(e.to_string()),
        }
    }

    /// Why writing failed, if it did.
    pub(crate) fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Commits every output of the run, and waits until the sink holds them.
    pub(crate) fn finish(&mut self) -> Result<OutputSummary, String> {
        self.batch.upto = Time::MAX;
        if self.batch.is_empty() && self.failed.is_none() {
            // Nothing left to write, but the sink learns the run is complete.
            self.batch.times.clear();
            let batch = std::mem::replace(
                &mut self.batch,
                Batch {
                    upto: Time::MAX,
                    ..Batch::default()
                },
            );
            if let Err(e) = self.sink.commit(batch) {
                self.failed = Some(e.to_string());
            }
        } else {
            self.commit();
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.sink.finish() {
            Ok(t) => {
                self.summary.committed_time = t;
                Ok(self.summary.clone())
            }
            Err(e) => {
                self.failed = Some(e.to_string());
                Err(e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that keeps its batches, resumed from `from`.
    struct Kept {
        from: Time,
        batches: std::sync::Arc<std::sync::Mutex<Vec<Batch>>>,
    }

    impl Sink for Kept {
        fn recover(&mut self, _run: &RunIdentity) -> Result<Time, SinkError> {
            Ok(self.from)
        }
        fn commit(&mut self, batch: Batch) -> Result<(), SinkError> {
            self.batches.lock().unwrap().push(batch);
            Ok(())
        }
        fn committed(&mut self) -> Result<Time, SinkError> {
            Ok(self.batches.lock().unwrap().last().map_or(self.from, |b| b.upto))
        }
        fn finish(&mut self) -> Result<Time, SinkError> {
            self.committed()
        }
    }

    #[test]
    fn a_resumed_writer_writes_only_from_the_committed_time_and_ends_it_at_the_end_of_time() {
        let batches = std::sync::Arc::default();
        let mut sink = Kept {
            from: 20,
            batches: std::sync::Arc::clone(&batches),
        };
        let run = RunIdentity {
            settings: serde_json::Map::new(),
            not_resumable: None,
        };
        let from = sink.recover(&run).unwrap();
        let mut writer = Writer {
            sink: Box::new(sink),
            summary: OutputSummary {
                resumed_from: from,
                ..OutputSummary::default()
            },
            batch: Batch::default(),
            last_commit: Instant::now(),
            failed: None,
        };
        writer.write(10, &[1u64, 2]);
        writer.write(19, &[3u64]);
        writer.write(20, &[4u64]);
        writer.write(30, &[5u64, 6]);
        let summary = writer.finish().unwrap();
        assert_eq!(
            (summary.rows, summary.skipped, summary.committed_time),
            (3, 3, Time::MAX)
        );
        let batches = batches.lock().unwrap();
        let lines: Vec<u8> = batches.iter().flat_map(|b| b.lines.clone()).collect();
        assert_eq!(String::from_utf8(lines).unwrap(), "4\n5\n6\n");
        let times: Vec<(Time, u64)> = batches.iter().flat_map(|b| b.times.clone()).collect();
        assert_eq!(times, [(20, 1), (30, 2)]);
        assert_eq!(batches.last().map(|b| b.upto), Some(Time::MAX));
    }
}
