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
            ReplayError::Trace(_) | ReplayError::Rerun(_) => true,
            ReplayError::Write { .. } => false,
        }
    }
}
