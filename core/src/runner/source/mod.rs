//! Where a job's records come from: a [`Generator`] that makes them by index (the built-in
//! workloads), or records read from a file, standard input or a TCP socket and parsed by the
//! job ([`Source::lines`], [`Source::csv`], [`Source::json_lines`]).
//!
//! Every record has a *due time*, the moment it should enter the job, and goes in with the
//! first epoch that closes after it; its latency counts from its due time (DESIGN.md). The
//! due time of record `i` is `i / --rate` for generated records and for a file read by rate;
//! a file read by event time (`--pace event-time`) makes each record due at its event time
//! less the first record's, divided by `--speed`; records from standard input or a socket are
//! due when they arrive.
//!
//! Generated records are made by every worker, each its share of the global indices (`w mod
//! peers`), so the multiset of (time, record) pairs is the same for any number of workers.
//! Records that are read are read once, by worker 0 (on process 0 of a cluster), in input
//! order, and routed from there by the operators' configuration.

mod bounds;
mod feed;
mod input;
pub mod kafka;
mod records;

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::Time;

pub use bounds::{DEFAULT_MAX_LINE_BYTES, READ_AHEAD_BYTES};
pub(crate) use feed::{Feed, Fill, Timing};
pub use input::{FileId, Input, InputError, InputSummary, Location};
pub use records::Records;

/// The first index at or after `lo` that worker `index` of `peers` makes.
#[inline]
pub(crate) fn first_index(lo: u64, index: usize, peers: usize) -> u64 {
    let peers = peers as u64;
    lo + (index as u64 + peers - lo % peers) % peers
}

/// How many of the indices `0..n` worker `index` of `peers` makes (`index, index + peers,
/// ...`): its share of the records a computation before a restart sent.
pub(crate) fn share(n: u64, index: usize, peers: usize) -> u64 {
    let (index, peers) = (index as u64, peers.max(1) as u64);
    if n > index { (n - index - 1) / peers + 1 } else { 0 }
}

/// A maker of records by global index: worker `index` of `peers` is asked for indices
/// `index, index + peers, ...` in order, each with its logical time, so a generator must
/// make the same record for the same index on every worker and in every run (seed it).
pub trait Generator<R>: Send + Sync {
    /// How many records to insert before the measured run, at logical times before it (the
    /// state a migration then moves: every key once, say). None by default.
    fn preload_len(&self) -> u64 {
        0
    }
    /// Worker `index` of `peers`'s maker of preload records (indices below
    /// [`Generator::preload_len`]).
    fn preload(&self, index: usize, peers: usize) -> Box<dyn FnMut(u64, Time) -> R> {
        self.records(index, peers)
    }
    /// Worker `index` of `peers`'s maker of measured records.
    fn records(&self, index: usize, peers: usize) -> Box<dyn FnMut(u64, Time) -> R>;
}

/// Turns an input's bytes into records: a fresh [`Records`] reader per input.
pub(crate) type Format<R> =
    Arc<dyn Fn(Box<dyn std::io::BufRead + Send>, String) -> Box<dyn Records<R>> + Send + Sync>;

/// A record's event time in milliseconds, for `--pace event-time`.
pub(crate) type EventTime<R> = Arc<dyn Fn(&R) -> u64 + Send + Sync>;

/// Where a job's records come from. Cheap to clone.
pub enum Source<R> {
    /// Records made by index on every worker.
    Generated(Arc<dyn Generator<R>>),
    /// Records read from `--input` (a file, `-` for standard input, or `tcp:HOST:PORT`) by
    /// worker 0 and parsed by the job.
    Read(ReadSource<R>),
}

impl<R> Clone for Source<R> {
    fn clone(&self) -> Self {
        match self {
            Source::Generated(g) => Source::Generated(Arc::clone(g)),
            Source::Read(r) => Source::Read(r.clone()),
        }
    }
}

impl<R> fmt::Debug for Source<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Generated(_) => f.write_str("Source::Generated"),
            Source::Read(r) => write!(f, "Source::Read({})", r.format_name),
        }
    }
}

/// Records read from `--input`: how each is parsed, and its event time if it has one.
pub struct ReadSource<R> {
    pub(crate) format: Format<R>,
    pub(crate) format_name: &'static str,
    pub(crate) event_time: Option<EventTime<R>>,
}

impl<R> Clone for ReadSource<R> {
    fn clone(&self) -> Self {
        ReadSource {
            format: Arc::clone(&self.format),
            format_name: self.format_name,
            event_time: self.event_time.clone(),
        }
    }
}

impl<R> ReadSource<R> {
    /// Whether its records have an event time (`--pace event-time` needs one).
    pub fn has_event_time(&self) -> bool {
        self.event_time.is_some()
    }
}

impl<R: 'static> Source<R> {
    /// Records made by `generator`.
    pub fn generated(generator: impl Generator<R> + 'static) -> Self {
        Source::Generated(Arc::new(generator))
    }

    /// One record per line of `--input`, made by `parse` (blank lines are skipped). A line
    /// `parse` rejects stops the job with an error naming the input, the line and `parse`'s
    /// reason.
    pub fn lines<E: fmt::Display>(parse: impl Fn(&str) -> Result<R, E> + Send + Sync + 'static) -> Self {
        let parse: records::Parse<R> = Arc::new(move |line: &str| parse(line).map_err(|e| e.to_string()));
        Source::Read(ReadSource {
            format: Arc::new(move |input, name| {
                Box::new(records::Lines::new(input, name, Arc::clone(&parse)))
            }),
            format_name: "lines",
            event_time: None,
        })
    }

    /// Records that have an event time, in milliseconds: with `--pace event-time` each is due
    /// at its event time less the first record's (divided by `--speed`). Records are read in
    /// input order; one whose event time is earlier than a record before it is due with that
    /// record. Only for records read from a file.
    pub fn event_time(self, time_ms: impl Fn(&R) -> u64 + Send + Sync + 'static) -> Self {
        match self {
            Source::Read(r) => Source::Read(ReadSource {
                event_time: Some(Arc::new(time_ms)),
                ..r
            }),
            generated => generated,
        }
    }
}

impl<R: DeserializeOwned + 'static> Source<R> {
    /// Comma-separated values without a header line, one record per line, its fields in the
    /// order of `R`'s (a struct, a tuple) as serde reads them; quoted fields may hold commas,
    /// spaces around fields are trimmed, blank lines skipped. A line that does not make an
    /// `R` stops the job with an error naming the input, the line and the field.
    pub fn csv() -> Self {
        Source::Read(ReadSource {
            format: Arc::new(|input, name| Box::new(records::Csv::new(input, name))),
            format_name: "csv",
            event_time: None,
        })
    }

    /// JSON Lines: one JSON value per line, as serde reads `R` from it.
    pub fn json_lines() -> Self {
        let mut source = Source::lines(|line: &str| serde_json::from_str::<R>(line));
        if let Source::Read(r) = &mut source {
            r.format_name = "json-lines";
        }
        source
    }
}

#[cfg(test)]
mod tests {
    use super::first_index;

    #[test]
    fn workers_split_indices_by_residue() {
        for peers in 1..5 {
            for lo in 0..10 {
                let mut got: Vec<u64> = (0..peers).map(|w| first_index(lo, w, peers)).collect();
                got.sort_unstable();
                let want: Vec<u64> = (lo..lo + peers as u64).collect();
                assert_eq!(got, want, "lo {lo}, {peers} peers");
            }
        }
    }
}
