//! Errors of the probe.

use std::io;

/// What can go wrong observing a job.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The cause is in the message, not in the source chain, so that reports of the chain
    /// do not say it twice.
    #[error("{context}: {cause}")]
    Io {
        /// What was being done (`writing trace FILE`, `listening on ADDR`, ...).
        context: String,
        /// The I/O error it met.
        cause: io::Error,
    },
    /// A peer broke the wire protocol (a bad, malformed or oversized frame, a refusal, a
    /// timeout), or a collector or exporter thread panicked.
    #[error("{0}")]
    Protocol(String),
    /// A trace file is not one this version can read: no or a foreign header, an unknown
    /// format version, a line that is not UTF-8, too long or not an event.
    #[error("trace {path}, line {line}: {reason}")]
    Trace {
        /// The trace as it was named to the reader (its path, usually).
        path: String,
        /// The line at fault, counting from 1 (the header).
        line: usize,
        /// What is wrong with the line.
        reason: String,
    },
    /// A setting is refused before anything runs: an empty token, a public address without
    /// one, or a trace file that exists and may not be replaced.
    #[error("{0}")]
    Config(String),
}

impl ProbeError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        ProbeError::Io {
            context: context.into(),
            cause: source,
        }
    }
}
