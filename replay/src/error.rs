//! What can go wrong reading a trace back.

use megaflux_probe::error::ProbeError;

/// An error of the replay crate.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The trace could not be opened or read (missing header, unknown version, malformed line: the
    /// message names the file and line).
    #[error(transparent)]
    Trace(#[from] ProbeError),
    /// The trace cannot be run again (what it lacks, or what in it is wrong).
    #[error("cannot re-run: {0}")]
    Rerun(String),
    /// The trace asks more of a re-run than its limits allow, or its numbers overflow.
    #[error("cannot re-run: {0}")]
    Limit(#[from] RerunLimit),
    /// Writing the output failed.
    /// The cause is in the message (as in [`ProbeError`]'s).
    #[error("writing {what}: {cause}")]
    Write {
        /// The output, as the caller named it (a file's path, say).
        what: String,
        /// The I/O error the write met.
        cause: std::io::Error,
    },
}

impl ReplayError {
    pub(crate) fn write(what: &str, source: std::io::Error) -> Self {
        ReplayError::Write {
            what: what.to_string(),
            cause: source,
        }
    }

    /// Whether the input was at fault (exit status 2), rather than the machine.
    pub fn is_bad_input(&self) -> bool {
        match self {
            // A file that cannot be opened was named wrong; one that cannot be parsed is not
            // a trace.
            ReplayError::Trace(_) | ReplayError::Rerun(_) | ReplayError::Limit(_) => true,
            ReplayError::Write { .. } => false,
        }
    }
}

/// What in a trace a re-run refuses to follow (`megaflux replay --rerun` flags lift the limits).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RerunLimit {
    /// The workers per process times the processes do not fit a `usize`.
    #[error("`config.workers` ({workers}) in the trace's header times {processes} processes overflows")]
    WorkersOverflow {
        /// The header's `config.workers`.
        workers: usize,
        /// The processes they are multiplied by.
        processes: usize,
    },
    /// More workers over all processes than the limit.
    #[error("{workers} workers over all processes (the trace's header), more than --max-workers {max}")]
    Workers {
        /// Workers over all the re-run's processes.
        workers: usize,
        /// The limit.
        max: usize,
    },
    /// A longer run than the limit.
    #[error("a run of {secs} s (the trace's summary `duration_s`), longer than --max-duration {max} s")]
    Duration {
        /// The run's length, in seconds.
        secs: f64,
        /// The limit, in seconds.
        max: u64,
    },
    /// A command recorded at a measured epoch past the limit of the run's length (the re-run
    /// would hold its control input open until then).
    #[error(
        "a command at measured epoch {epoch} (its `time` less `job_started`'s `base`), past the last epoch ({last}) within --max-duration {max} s"
    )]
    Epoch {
        /// The command's measured epoch.
        epoch: u64,
        /// The last epoch within the limit.
        last: u64,
        /// The limit, in seconds.
        max: u64,
    },
    /// A `job_started` event's `base` plus a command's measured epoch overflows.
    #[error(
        "`base` {base} of the first `job_started` plus the command's measured epoch {epoch} overflows a logical time"
    )]
    TimeOverflow {
        /// The `base` of the first `job_started`.
        base: u64,
        /// The command's measured epoch (its `time` less `base`, at least 1).
        epoch: u64,
    },
}
