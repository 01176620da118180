//! The bounds a model keeps whatever the events: events come from the network and from
//! files, so none may make it allocate more than the job its first hello describes.

use super::{JobModel, MAX_BINS};

/// Entries the command log keeps.
pub const COMMAND_LOG: usize = 256;
/// The most workers (and processes) a model keeps: events about others are ignored, as
/// are events about workers past the job's `peers` once a hello said it.
pub const MAX_PEERS: u32 = 4096;
/// The most operators a model keeps bins and frontiers of (a job has a handful).
pub const MAX_OPERATORS: usize = 16;
/// Latency windows kept: a little over four hours of 250 ms windows; older ones go first.
pub const LATENCY_WINDOWS: usize = 1 << 16;
/// Failures and finished plans kept: older ones go first.
pub const HISTORY: usize = 1024;
/// Places of dropped events kept besides the processes' own queues (`subscriber N`: slow
/// viewers). Each process's `queue` is kept whatever the viewers do: at most one per
/// process of the job, so at most [`MAX_PEERS`] of them.
pub const DROP_PLACES: usize = 64;
/// The latest `at_s` a model takes as a time (about 31 years of a probe's clock): an event
/// stamped later, before 0 or with no number (NaN, infinite) leaves the model's clock
/// where it is, and counts as happening at it. Times in the measured run (a window's
/// start, a plan's run times and length) are held to the same range, or left out.
pub const MAX_AT_S: f64 = 1e9;
/// The largest Unix time a process's `anchor_unix_s` may say (the year 30,000 or so);
/// another is left out of the hello the model keeps.
const MAX_ANCHOR_S: f64 = 1e12;
/// Longest text (a command, a reason) a model keeps, in characters.
pub const TEXT_CHARS: usize = 512;

impl JobModel {
    /// Whether events about `worker` are kept: one of the job's workers (once a hello said
    /// how many), and never more than [`MAX_PEERS`].
    pub(super) fn known_worker(&self, worker: u32) -> bool {
        worker < if self.peers > 0 { self.peers } else { MAX_PEERS }
    }

    /// Processes whose `queue` drops are kept: the job's (as its first hello said, and no
    /// more than its workers once known), never more than [`MAX_PEERS`].
    pub(super) fn queue_places(&self) -> u32 {
        let processes = self.first_hello_processes().unwrap_or(MAX_PEERS).min(MAX_PEERS);
        if self.peers > 0 {
            processes.min(self.peers)
        } else {
            processes
        }
    }

    /// `at_s` if the model takes it as a time (see [`MAX_AT_S`]).
    pub(super) fn valid_at(at_s: f64) -> Option<f64> {
        (0.0..=MAX_AT_S).contains(&at_s).then_some(at_s)
    }

    /// `anchor` if the model keeps it as a process's Unix time (see [`MAX_ANCHOR_S`]).
    pub(super) fn valid_anchor(anchor: Option<f64>) -> Option<f64> {
        anchor.filter(|a| (0.0..=MAX_ANCHOR_S).contains(a))
    }

    /// Whether a model (a keyframe's) keeps the bounds that events are held to.
    pub(super) fn within_bounds(&self) -> bool {
        let bins = self.bins().unwrap_or(MAX_BINS) as usize;
        self.peers <= MAX_PEERS
            && self.totals.within_bounds()
            && self.processes.len() <= MAX_PEERS as usize
            && self.operators.len() <= MAX_OPERATORS
            && self.operators.values().all(|b| b.len() <= bins)
            && self.workers.len() <= MAX_PEERS as usize
            && self.workers.values().all(|w| w.held.len() <= MAX_OPERATORS)
            && self.frontiers.len() <= MAX_PEERS as usize
            && self.frontiers.values().all(|f| f.len() <= MAX_OPERATORS + 1)
            && self.moving.len() <= bins
            && self.placement.len() <= bins
            && self.finished_plans.len() <= HISTORY
            && self.failures.len() <= HISTORY
            && self.commands.len() <= COMMAND_LOG
            && self.dropped.len() <= DROP_PLACES + MAX_PEERS as usize
            && self.dropped.keys().filter(|k| !is_queue_place(k)).count() <= DROP_PLACES
            && Self::valid_at(self.now_s).is_some()
    }

    /// How many entries the model holds in all: what [`JobModel::apply`] keeps within the
    /// job's bounds whatever the events.
    pub fn entries(&self) -> usize {
        self.processes.len()
            + self.operators.values().map(Vec::len).sum::<usize>()
            + self.workers.values().map(|w| 1 + w.held.len()).sum::<usize>()
            + self.frontiers.values().map(|f| f.len() + 1).sum::<usize>()
            + self.latency.len()
            + self.moving.len()
            + self.finished_plans.len()
            + self.commands.len()
            + self.dropped.len()
            + self.placement.len()
            + self.failed.len()
            + self.failures.len()
            + self.restarts.len()
    }

    /// The most entries a model of a job with `bins` bins and `peers` workers may hold.
    pub fn entries_bound(bins: u32, peers: u32) -> usize {
        let (bins, peers) = (bins.min(MAX_BINS) as usize, peers.min(MAX_PEERS) as usize);
        peers // processes
            + MAX_OPERATORS * bins
            + peers * (1 + MAX_OPERATORS)
            + peers * (MAX_OPERATORS + 2)
            + LATENCY_WINDOWS
            + bins
            + HISTORY
            + COMMAND_LOG
            + DROP_PLACES
            + peers // processes' queues among the dropped
            + bins
            + peers
            + HISTORY
            + HISTORY // restarts
    }
}

/// `s` cut to [`TEXT_CHARS`] characters.
pub(super) fn text(s: &str) -> String {
    megaflux::bins::cut(s, TEXT_CHARS)
}

/// Whether a place of [`JobModel::dropped`] is a process's own queue (`process P queue`):
/// those are kept whatever the viewers' places do.
pub(super) fn is_queue_place(place: &str) -> bool {
    place.ends_with(" queue")
}

/// Pushes onto a history of at most [`HISTORY`] entries, the oldest going first (an
/// eighth of them at once, so that a push costs the same however full the history).
pub(super) fn bounded_push<T>(history: &mut Vec<T>, item: T) {
    if history.len() >= HISTORY {
        let excess = history.len() - HISTORY;
        history.drain(..excess + HISTORY / 8);
    }
    history.push(item);
}
